"""The Greeting provider written for AWS crhelper 2.0.12, as its README shows (runs in bench/.venvs/aws-crhelper).

Same content as samples/greeting.py: physical id `greeting-<Name>` and Data.Text. The CA is trusted
through SSL_CERT_FILE (set by the bench), so the code is what a user would deploy unchanged.
"""

from crhelper import CfnResource

helper = CfnResource(json_logging=False, log_level="DEBUG", boto_level="CRITICAL", sleep_on_delete=120)


@helper.create
def create(event, context):  # type: ignore[no-untyped-def]
    props = event["ResourceProperties"]
    helper.Data["Text"] = " ".join(["hi " + props["Name"]] * int(props.get("Times", 1)))
    return "greeting-" + props["Name"]


@helper.update
def update(event, context):  # type: ignore[no-untyped-def]
    props = event["ResourceProperties"]
    helper.Data["Text"] = " ".join(["hi " + props["Name"]] * int(props.get("Times", 1)))


@helper.delete
def delete(event, context):  # type: ignore[no-untyped-def]
    return None


def handler(event, context):  # type: ignore[no-untyped-def]
    helper(event, context)
