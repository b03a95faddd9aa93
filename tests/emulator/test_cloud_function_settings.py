"""What a deployed function of the stack gets besides its code: its async configuration (FC 3.0's
ALIYUN::FC3::AsyncInvokeConfig, FC 2.0's AsyncConfiguration property), put through the management
API, and store URLs of the stack's local buckets pointed at the local OSS endpoint."""

from __future__ import annotations

from typing import Any

import pytest
from alibabacloud_fc20230330.models import GetAsyncInvokeConfigRequest, GetFunctionRequest

from crhelper.emulator.cloud_registry import cloud_type
from crhelper.emulator.cloud_session import CloudSession

pytestmark = pytest.mark.slow  # each test starts a local Function Compute endpoint

SOURCE = "def handler(event, context):\n    return 1\n"


def props(type_name: str, **given: Any) -> dict[str, Any]:
    local = cloud_type(type_name)
    assert local is not None
    return local.with_defaults(given)


def test_fc3_async_configuration_and_local_store_urls_reach_the_deployed_function() -> None:
    cloud = "endpoint=https://s3.oss-cn-hangzhou-internal.aliyuncs.com&region=cn-hangzhou"
    function = props("ALIYUN::FC3::Function", FunctionName="p", Handler="index.handler", Runtime="python3.10",
                     Code={"SourceCode": SOURCE},
                     EnvironmentVariables={"CRHELPER_STORE": f"s3://local-state/crhelper/?{cloud}",
                                           "OTHER_STORE": f"s3://someone-elses/x/?{cloud}", "PLAIN": "s3"})
    async_config = props("ALIYUN::FC3::AsyncInvokeConfig", FunctionName="p", MaxAsyncRetryAttempts=1)
    session = CloudSession("cn-hangzhou", "123456789")
    try:
        assert session.apply("Create", "ALIYUN::OSS::Bucket", props("ALIYUN::OSS::Bucket", BucketName="local-state")).ok
        assert session.apply("Create", "ALIYUN::FC3::Function", function).ok
        assert session.apply("Create", "ALIYUN::FC3::AsyncInvokeConfig", async_config).ok
        client = session.fc.client3()
        held = client.get_async_invoke_config("p", GetAsyncInvokeConfigRequest()).body
        assert (held.max_async_retry_attempts, held.max_async_event_age_in_seconds) == (1, 86400)
        env = client.get_function("p", GetFunctionRequest()).body.environment_variables
        assert env["CRHELPER_STORE"] == (f"s3://local-state/crhelper/?region=cn-hangzhou&endpoint={session.oss.endpoint}"
                                         "&addressing=path")
        assert (env["OTHER_STORE"], env["PLAIN"]) == (f"s3://someone-elses/x/?{cloud}", "s3")
        assert session.apply("Delete", "ALIYUN::FC3::AsyncInvokeConfig", async_config, "p").ok
        with pytest.raises(Exception, match="AsyncConfig"):
            client.get_async_invoke_config("p", GetAsyncInvokeConfigRequest())
    finally:
        session.close()


def test_fc2_async_configuration_property_is_put_with_the_function() -> None:
    service = props("ALIYUN::FC::Service", ServiceName="svc")
    function = props("ALIYUN::FC::Function", ServiceName="svc", FunctionName="p", Handler="index.handler",
                     Runtime="python3.10", Code={"SourceCode": SOURCE},
                     AsyncConfiguration={"MaxAsyncRetryAttempts": 0, "MaxAsyncEventAgeInSeconds": 600})
    session = CloudSession("cn-hangzhou", "123456789")
    try:
        assert session.apply("Create", "ALIYUN::FC::Service", service).ok
        created = session.apply("Create", "ALIYUN::FC::Function", function)
        assert created.ok, created.reason
        held = session.fc.client().get_function_async_invoke_config("svc", "LATEST", "p").data
        assert (held["maxAsyncRetryAttempts"], held["maxAsyncEventAgeInSeconds"]) == (0, 600)
    finally:
        session.close()


def test_a_trigger_updated_in_a_later_operation_is_made_in_that_operations_endpoint() -> None:
    from crhelper.emulator.cloud_registry import cloud_token
    from crhelper.emulator.model import ResourceRecord

    function = props("ALIYUN::FC3::Function", FunctionName="p", Handler="index.handler", Runtime="python3.10",
                     Code={"SourceCode": SOURCE})
    old = props("ALIYUN::FC3::Trigger", FunctionName="p", TriggerName="crhelper-resume", TriggerType="timer",
                TriggerConfig={"CronExpression": "@every 5m", "Enable": True})
    new = {**old, "TriggerConfig": {"CronExpression": "@every 10m", "Enable": True}}
    records = [ResourceRecord(logical, type_name, cloud_token(type_name), 60, physical_id=physical, properties=properties,
                              status="CREATE_COMPLETE")
               for logical, type_name, physical, properties in (("Fn", "ALIYUN::FC3::Function", "p", function),
                                                                ("Tick", "ALIYUN::FC3::Trigger", "p|crhelper-resume", old))]
    session = CloudSession("cn-hangzhou", "123456789")
    try:
        session.attach(records)
        # The function is updated first (deployed afresh here, without its triggers), then the trigger.
        assert session.apply("Update", "ALIYUN::FC3::Function", {**function, "Timeout": 9}, "p", function).ok
        updated = session.apply("Update", "ALIYUN::FC3::Trigger", new, "p|crhelper-resume", old)
        assert updated.ok, updated.reason
        held = session.fc.client3().get_trigger("p", "crhelper-resume").body.trigger_config
        assert '"@every 10m"' in held
    finally:
        session.close()
