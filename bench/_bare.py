"""The floor: a hand-written handler with json and urllib.request only, no checks, no retries, no logs."""

import json
import os
import ssl
import urllib.request

_TLS = ssl.create_default_context(cafile=os.environ["BENCH_CA_FILE"])


def handler(event, context):  # type: ignore[no-untyped-def]
    props = event["ResourceProperties"]
    body = json.dumps(
        {
            "Status": "SUCCESS",
            "PhysicalResourceId": "greeting-" + props["Name"],
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": {"Text": " ".join(["hi " + props["Name"]] * int(props.get("Times", 1)))},
        }
    ).encode()
    request = urllib.request.Request(event["ResponseURL"], data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10, context=_TLS) as reply:
        reply.read()
