"""The one request every contender answers, in the ROS shape (ours, bare) and the CloudFormation shape (AWS crhelper).

Same content in both: a Create of Custom::Greeting with Name and Times, a fresh RequestId each time,
and a presigned-looking ResponseURL on the bench's local server whose last path segment is a token.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

STACK_UUID = "8acc3dcd-cf48-4fa1-863e-7c767b61fe42"
PROPERTIES = {"Name": "ros", "Times": 2}
EXPECTED_PHYSICAL_ID = "greeting-ros"
EXPECTED_TEXT = "hi ros hi ros"


def _signed(base_url: str, kind: str, token: str) -> str:
    expires = int(time.time()) + 3600
    return f"{base_url}/{kind}/{token}?Expires={expires}&Signature=bench{token[:8]}"


def ros_create(base_url: str) -> dict[str, Any]:
    """A ROS Create request as Function Compute delivers it (see samples/events/create.json)."""
    request_id = str(uuid.uuid4()).upper()
    return {
        "RequestType": "Create",
        "RequestId": request_id,
        "ResponseURL": _signed(base_url, "ros/public", request_id),
        "IntranetResponseURL": _signed(base_url, "ros/intranet", request_id),
        "StackId": STACK_UUID,
        "StackName": "demo",
        "ResourceOwnerId": "123456789",
        "CallerId": "123456789",
        "RegionId": "cn-hangzhou",
        "ResourceType": "Custom::Greeting",
        "LogicalResourceId": "Hello",
        "ResourceProperties": dict(PROPERTIES),
    }


def cfn_create(base_url: str) -> dict[str, Any]:
    """The same request in CloudFormation's shape, which AWS crhelper expects."""
    request_id = str(uuid.uuid4())
    return {
        "RequestType": "Create",
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:bench-greeting",
        "ResponseURL": _signed(base_url, "cfn", request_id),
        "StackId": f"arn:aws:cloudformation:us-east-1:123456789012:stack/demo/{STACK_UUID}",
        "RequestId": request_id,
        "LogicalResourceId": "Hello",
        "ResourceType": "Custom::Greeting",
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:bench-greeting", **PROPERTIES},
    }


def delivery_problem(method: str, body: dict[str, Any] | None) -> str | None:
    """Why a delivered body is not the expected SUCCESS for the Greeting Create, or None if it is."""
    if method not in ("POST", "PUT"):
        return f"method {method}"
    if not body:
        return "body is not JSON"
    if body.get("Status") != "SUCCESS":
        return f"Status {body.get('Status')!r}, Reason {body.get('Reason')!r}"
    if body.get("PhysicalResourceId") != EXPECTED_PHYSICAL_ID:
        return f"PhysicalResourceId {body.get('PhysicalResourceId')!r}"
    if (body.get("Data") or {}).get("Text") != EXPECTED_TEXT:
        return f"Data {body.get('Data')!r}"
    return None
