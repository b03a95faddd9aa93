"""`Custom::AppCluster`'s properties as a typed model (pydantic: every type problem at once, ROS's
strings for numbers and booleans accepted). Type checks only; what a value means is checked
against the package (`values.resolve_values`) by the provider."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

APP_CLUSTER_TYPE = "Custom::AppCluster"
RUNNING, STOPPED = "Running", "Stopped"
BOOLEAN_RULE = 'must be true or false (a boolean, or the string "true" or "false")'


def ros_boolean(value: Any) -> bool:
    """A boolean as ROS passes it: true/false, or the strings "true"/"false" (any case) that a
    String parameter gives. Anything else raises ValueError: pydantic's own lax parse would take
    "yes", "on" or "1", and `bool("false")` is True."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(BOOLEAN_RULE)


#: A boolean property in the model: `ros_boolean`'s rule, named by the field in the error.
RosBoolean = Annotated[bool, BeforeValidator(ros_boolean)]


class _Props(BaseModel):
    """Template properties: unknown keys are refused, so a typo names itself."""

    model_config = ConfigDict(extra="forbid")


class RunServiceProps(_Props):
    """A custom service (or backup, restore) to run once each time `Token` changes."""

    Name: str = Field(min_length=1, max_length=128)
    Role: Optional[str] = None
    Params: dict[str, Any] = Field(default_factory=dict)
    Token: str = Field(min_length=1, max_length=128)


class AppClusterProps(_Props):
    Package: str = Field(min_length=1, max_length=2048)
    Version: Optional[str] = Field(None, max_length=128)
    Inputs: dict[str, Any] = Field(default_factory=dict)
    ResourceGroup: Optional[str] = Field(None, max_length=128)
    Zone: Optional[str] = Field(None, max_length=64)
    Language: Optional[str] = Field(None, max_length=32)
    Backend: Optional[Literal["local", "ecs"]] = None
    DesiredState: Literal["Running", "Stopped"] = "Running"
    RunService: Optional[RunServiceProps] = None
    Force: RosBoolean = False
