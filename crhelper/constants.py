"""Protocol constants of ROS custom resources, named once so every module agrees."""

from __future__ import annotations

#: ROS rejects a response body larger than this, measured as UTF-8 bytes.
MAX_RESPONSE_BYTES = 4096
#: ROS rejects a PhysicalResourceId longer than this, measured as UTF-8 bytes.
MAX_PHYSICAL_ID_BYTES = 255
#: The longest Reason we send; the size fitter cuts it further when Data needs the room.
MAX_REASON_CHARS = 1024

SUCCESS = "SUCCESS"
FAILED = "FAILED"

CREATE = "Create"
UPDATE = "Update"
DELETE = "Delete"
REQUEST_TYPES = (CREATE, UPDATE, DELETE)

#: The generic ROS type; dispatched to the provider's configured default type.
GENERIC_TYPE = "ALIYUN::ROS::CustomResource"

#: Physical id sent with a FAILED Create, so the Delete that follows is recognised as a no-op.
CREATE_FAILED_MARKER = "crhelper:CREATE_FAILED"
#: Ids that mean "nothing was ever created" when a Delete carries them.
NOTHING_CREATED_IDS = frozenset({"", "-", CREATE_FAILED_MARKER})

#: Fields ROS puts in every request (Create has no PhysicalResourceId).
REQUIRED_FIELDS = ("RequestType", "RequestId", "StackId", "LogicalResourceId", "ResourceType")
#: The two names ROS documents for the internal-network callback URL.
INTRANET_URL_FIELDS = ("IntranetResponseURL", "InnerResponseURL")

#: The deepest nesting (levels of objects and arrays) accepted in one request field or one Data value.
#: Deeper input is refused with an error naming the field, before anything walks it recursively
#: (json, pydantic, deepcopy all recurse; Python's limit is about 1,000 frames).
MAX_NESTING_DEPTH = 100

#: ROS's longest resource Timeout (12 h): the bound of a custom resource's Timeout and of a long
#: operation's deadline.
MAX_ROS_TIMEOUT = 43_200.0

#: The framework's INFO log message for each step of a long operation that returned InProgress (one
#: per poll): `crhelper invoke`, the contract and the emulator's heartbeat count polls by it.
IN_PROGRESS_LOG_MESSAGE = "operation in progress"

#: The folder of the template a local stack operation runs (`crhelper stack` sets it for the providers
#: it runs, in process and in emulated FC functions): a provider resolves a template's relative paths
#: against it (an AppCluster's `Package`). ROS itself has no such folder.
TEMPLATE_DIR_ENV = "CRHELPER_TEMPLATE_DIR"
