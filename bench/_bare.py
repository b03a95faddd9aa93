"""The floor: the leanest reasonable stdlib handler. json, http.client, one POST, no checks, no retries, no logs.

TLS is verified against the system CAs with `ssl.create_default_context()`, built once per process,
exactly as a hand-written production handler would (the bench puts its CA into the system trust).
"""

import http.client
import json
import ssl
from urllib.parse import urlsplit

_TLS = ssl.create_default_context()


def respond(event, physical_id, data):  # type: ignore[no-untyped-def]
    """POST one SUCCESS with `physical_id` and `data` to the event's ResponseURL."""
    body = json.dumps({
        "Status": "SUCCESS",
        "PhysicalResourceId": physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": data,
    })
    url = urlsplit(event["ResponseURL"])
    connection = http.client.HTTPSConnection(url.netloc, timeout=10, context=_TLS)
    try:
        connection.request("POST", f"{url.path}?{url.query}", body, {"Content-Type": "application/json"})
        connection.getresponse().read()
    finally:
        connection.close()


def handler(event, context):  # type: ignore[no-untyped-def]
    props = event["ResourceProperties"]
    respond(event, "greeting-" + props["Name"], {"Text": " ".join(["hi " + props["Name"]] * int(props.get("Times", 1)))})
