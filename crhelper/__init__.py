"""crhelper for ROS: write Alibaba Cloud ROS custom-resource providers as small typed functions.

Imports only the standard library: pydantic and cloud SDKs load when something uses them.
"""

from .errors import Failure, PropertiesError, RequestError
from .logs import get_logger
from .provider import Provider
from .request import Request
from .response import InProgress, Result

__all__ = ["Failure", "InProgress", "PropertiesError", "Provider", "Request", "RequestError", "Result", "get_logger"]
__version__ = "0.1.0"
