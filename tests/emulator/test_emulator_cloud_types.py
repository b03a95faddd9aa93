"""The ALIYUN:: types the emulator runs as local resources: validation (precise errors naming the
property and the rule), defaults, replacement and Fn::GetAtt attributes (deploy.md §1). Pure: no I/O."""

from __future__ import annotations

import base64
import io
import json
import zipfile
from typing import Any

import pytest

from crhelper.emulator.cloud_registry import cloud_type, supported_types
from crhelper.emulator.cloud_session import code_location, source_zip
from crhelper.emulator.cloud_fc import lower_first
from crhelper.emulator.errors import TemplateValidationError
from crhelper.emulator.plan import StackIdentity, build_plan, resource_settings
from crhelper.emulator.template import load_template
from crhelper.servicetoken import FcFunctionToken, parse_service_token

IDENTITY = StackIdentity("s", "stack-id", "cn-hangzhou", "123456789")
TRUST = {"Version": "1", "Statement": [{"Action": "sts:AssumeRole", "Effect": "Allow",
                                        "Principal": {"Service": ["fc.aliyuncs.com"]}}]}
POLICY = {"Version": "1", "Statement": [{"Action": ["oss:GetObject"], "Effect": "Allow", "Resource": ["*"]}]}

#: A minimal valid resource of every type.
MINIMAL: dict[str, dict[str, Any]] = {
    "ALIYUN::FC::Service": {"ServiceName": "svc"},
    "ALIYUN::FC::Function": {"ServiceName": "svc", "FunctionName": "fn", "Handler": "index.handler",
                             "Runtime": "python3.10", "Code": {"SourceCode": "def handler(e, c): return 1"}},
    "ALIYUN::FC::Trigger": {"ServiceName": "svc", "FunctionName": "fn", "TriggerName": "tick", "TriggerType": "timer",
                            "TriggerConfig": {"CronExpression": "@every 1m", "Enable": True}},
    "ALIYUN::FC3::Function": {"FunctionName": "fn3", "Handler": "index.handler", "Runtime": "python3.12",
                              "Code": {"ZipFile": "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA=="}},
    "ALIYUN::FC3::Trigger": {"FunctionName": "fn3", "TriggerName": "tick", "TriggerType": "timer",
                             "TriggerConfig": {"cronExpression": "@every 1m"}},
    "ALIYUN::FC3::AsyncInvokeConfig": {"FunctionName": "fn3", "MaxAsyncRetryAttempts": 0},
    "ALIYUN::MNS::Queue": {"QueueName": "q"},
    "ALIYUN::MNS::Topic": {"TopicName": "t"},
    "ALIYUN::MNS::Subscription": {"TopicName": "t", "SubscriptionName": "sub", "Endpoint": "acs:mns:cn-hangzhou:1:queues/q",
                                  "PushType": "queue"},
    "ALIYUN::OSS::Bucket": {"BucketName": "state-bucket-1"},
    "ALIYUN::RAM::Role": {"RoleName": "fc-role", "AssumeRolePolicyDocument": TRUST,
                          "Policies": [{"PolicyName": "state", "PolicyDocument": POLICY}]},
    "ALIYUN::RAM::ManagedPolicy": {"PolicyName": "p", "PolicyDocument": POLICY, "Roles": ["fc-role"]},
    "ALIYUN::RAM::AttachPolicyToRole": {"PolicyName": "AliyunMNSFullAccess", "PolicyType": "System", "RoleName": "fc-role"},
}

#: (type, property change, expected attributes given MINIMAL plus the change)
ATTRIBUTES = {
    "ALIYUN::FC::Function": {"ARN": "acs:fc:cn-hangzhou:123456789:services/svc/functions/fn", "FunctionName": "fn",
                             "ServiceName": "svc"},
    "ALIYUN::FC3::Function": {"ARN": "acs:fc:cn-hangzhou:123456789:functions/fn3", "FunctionName": "fn3"},
    "ALIYUN::FC::Trigger": {"TriggerName": "tick", "FunctionName": "fn", "ServiceName": "svc", "UrlInternet": ""},
    "ALIYUN::FC3::Trigger": {"TriggerName": "tick", "FunctionName": "fn3", "UrlIntranet": ""},
    "ALIYUN::FC3::AsyncInvokeConfig": {},
    "ALIYUN::FC::Service": {"ServiceName": "svc", "Role": "", "VpcId": ""},
    "ALIYUN::MNS::Queue": {"QueueName": "q", "QueueUrl": "https://123456789.mns.cn-hangzhou.aliyuncs.com/queues/q",
                           "ARN": "acs:mns:cn-hangzhou:123456789:queues/q",
                           "ARN.WithSlash": "acs:mns:cn-hangzhou:123456789:/queues/q"},
    "ALIYUN::MNS::Topic": {"TopicName": "t", "ARN.WithSlash": "acs:mns:cn-hangzhou:123456789:/topics/t"},
    "ALIYUN::MNS::Subscription": {"SubscriptionName": "sub", "TopicName": "t"},
    "ALIYUN::OSS::Bucket": {"Name": "state-bucket-1", "Arn": "acs:oss:*:123456789:state-bucket-1",
                            "DomainName": "state-bucket-1.oss-cn-hangzhou.aliyuncs.com",
                            "InternalDomainName": "state-bucket-1.oss-cn-hangzhou-internal.aliyuncs.com"},
    "ALIYUN::RAM::Role": {"Arn": "acs:ram::123456789:role/fc-role", "RoleName": "fc-role"},
    "ALIYUN::RAM::ManagedPolicy": {"PolicyName": "p"},
    "ALIYUN::RAM::AttachPolicyToRole": {},
}


def text_of(resources: dict[str, Any], **sections: Any) -> str:
    return json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": resources, **sections})


def plan_errors(resources: dict[str, Any], parameters: dict[str, Any] | None = None, **sections: Any) -> list[str]:
    try:
        build_plan(load_template(text_of(resources, **sections)), parameters or {}, IDENTITY)
    except TemplateValidationError as exc:
        return exc.errors
    return []


def one(type_name: str, **changes: Any) -> dict[str, Any]:
    properties = {**MINIMAL[type_name], **changes}
    return {"R": {"Type": type_name, "Properties": {k: v for k, v in properties.items() if v is not None}}}


def test_every_type_of_the_issue_is_local() -> None:
    assert set(supported_types()) == set(MINIMAL)


@pytest.mark.parametrize("type_name", sorted(MINIMAL))
def test_minimal_resource_plans_and_answers_its_attributes(type_name: str) -> None:
    plan = build_plan(load_template(text_of(one(type_name))), {}, IDENTITY)
    token, _, properties = resource_settings(plan, plan.resources["R"], lambda name: None)
    local = cloud_type(type_name)
    assert local is not None and token == f"local-cloud:{type_name}"
    attributes = local.attributes(IDENTITY.region, IDENTITY.account_id, local.physical_id(properties), properties)
    assert set(attributes) == set(local.attribute_names)
    assert ATTRIBUTES[type_name].items() <= attributes.items()


@pytest.mark.parametrize(
    ("type_name", "change", "error"),
    [
        ("ALIYUN::FC3::Function", {"MemorySize": 100},
         "Resources.R.Properties.MemorySize: must be from 128 to 65536, got 100"),
        ("ALIYUN::FC3::Function", {"MemorySize": 200}, "Resources.R.Properties.MemorySize: must be a multiple of 64, got 200"),
        ("ALIYUN::FC3::Function", {"FunctionName": "9lives"},
         "Resources.R.Properties.FunctionName: must be 1-64 letters, digits, '_' or '-', not starting with a digit or '-', "
         "got '9lives'"),
        ("ALIYUN::FC3::Function", {"Runtime": "python3.13"}, "Resources.R.Properties.Runtime: must be one of"),
        ("ALIYUN::FC3::Function", {"Code": None}, "Resources.R.Properties: give exactly one of Code and CustomContainerConfig"),
        ("ALIYUN::FC3::Function", {"Code": {"SourceCode": "x"}, "Handler": "main.handler"},
         "Resources.R.Properties.Handler: with Code.SourceCode the code is the file 'index', so the handler must start "
         "with 'index.', got 'main.handler'"),
        ("ALIYUN::FC3::Function", {"Code": {"SourceCode": "x" * 4097}},
         "Resources.R.Properties.Code.SourceCode: at most 4096 characters, got 4097"),
        ("ALIYUN::FC3::Function", {"Code": {"OssBucketName": "b"}},
         "Resources.R.Properties.Code: give ZipFile (base64 zip), SourceCode, or both OssBucketName and OssObjectName"),
        ("ALIYUN::FC3::Function", {"Cpu": 1, "MemorySize": 8192},
         "Resources.R.Properties.Cpu: Cpu to MemorySize (GB) must be between 1:1 and 1:4, got 1 vCPU for 8192 MB"),
        ("ALIYUN::FC::Function", {"Timeout": 0}, "Resources.R.Properties.Timeout: must be from 1 to 86400, got 0"),
        ("ALIYUN::FC::Function", {"MemorySize": 65536}, "Resources.R.Properties.MemorySize: must be from 128 to 32768"),
        ("ALIYUN::FC::Trigger", {"TriggerType": "oss"},
         "Resources.R.Properties.InvocationRole: required for TriggerType 'oss' (optional only for timer and http)"),
        ("ALIYUN::FC::Trigger", {"TriggerName": "1st"}, "Resources.R.Properties.TriggerName: must start with a letter"),
        ("ALIYUN::FC3::Trigger", {"TriggerType": "smtp"}, "Resources.R.Properties.TriggerType: must be one of"),
        ("ALIYUN::FC3::AsyncInvokeConfig", {"MaxAsyncRetryAttempts": 9},
         "Resources.R.Properties.MaxAsyncRetryAttempts: must be from 0 to 8, got 9"),
        ("ALIYUN::MNS::Queue", {"VisibilityTimeout": 0}, "Resources.R.Properties.VisibilityTimeout: must be from 1 to 43200"),
        ("ALIYUN::MNS::Queue", {"DlqPolicy": {"Enabled": True}},
         "Resources.R.Properties.DlqPolicy.DeadLetterTargetQueue: required"),
        ("ALIYUN::MNS::Topic", {"MaximumMessageSize": 70000},
         "Resources.R.Properties.MaximumMessageSize: must be from 1024 to 65536, got 70000"),
        ("ALIYUN::MNS::Subscription", {"NotifyContentFormat": "YAML"},
         "Resources.R.Properties.NotifyContentFormat: must be one of XML, JSON, SIMPLIFIED, got 'YAML'"),
        ("ALIYUN::OSS::Bucket", {"BucketName": "State_Bucket"},
         "Resources.R.Properties.BucketName: must use only lowercase letters, digits and '-'"),
        ("ALIYUN::OSS::Bucket", {"BucketName": "ab"}, "Resources.R.Properties.BucketName: must have 3 to 63 characters, got 2"),
        ("ALIYUN::OSS::Bucket", {"AccessControl": "public"}, "Resources.R.Properties.AccessControl: must be one of private"),
        ("ALIYUN::RAM::Role", {"AssumeRolePolicyDocument": {"Version": "1", "Statement": [
            {"Action": "sts:AssumeRole", "Effect": "Allow"}]}},
         "Resources.R.Properties.AssumeRolePolicyDocument.Statement[0].Principal: required, a map with Service, RAM or "
         "Federated"),
        ("ALIYUN::RAM::Role", {"Policies": [{"PolicyName": "p", "PolicyDocument": {"Version": "1", "Statement": [
            {"Action": ["oss:*"], "Effect": "Allow"}]}}]},
         "Resources.R.Properties.Policies[0].PolicyDocument.Statement[0].Resource: required"),
        ("ALIYUN::RAM::Role", {"MaxSessionDuration": 60}, "Resources.R.Properties.MaxSessionDuration: must be from 3600"),
        ("ALIYUN::RAM::ManagedPolicy", {"PolicyDocument": {"Version": "2", "Statement": []}},
         "Resources.R.Properties.PolicyDocument.Version: must be '1', got '2'"),
        ("ALIYUN::RAM::AttachPolicyToRole", {"PolicyType": "Managed"},
         "Resources.R.Properties.PolicyType: must be one of System, Custom, got 'Managed'"),
    ],
)
def test_bad_values_name_the_property_and_the_rule(type_name: str, change: dict[str, Any], error: str) -> None:
    errors = plan_errors(one(type_name, **change))
    assert any(e.startswith(error) for e in errors), errors


def test_values_from_parameters_are_checked_after_resolution() -> None:
    resources = one("ALIYUN::MNS::Queue", DelaySeconds={"Ref": "Delay"})
    parameters = {"Delay": {"Type": "Number", "Default": 10}}
    assert plan_errors(resources, Parameters=parameters) == []
    assert plan_errors(resources, {"Delay": 700000}, Parameters=parameters) == [
        "Resources.R.Properties.DelaySeconds: must be from 0 to 604800, got 700000"
    ]


def test_unknown_and_missing_properties_are_template_errors() -> None:
    resources = {"F": {"Type": "ALIYUN::FC3::Function", "Properties": {"FunctionName": "f", "Colour": "red"}}}
    errors = plan_errors(resources)
    assert "Resources.F.Properties.Handler: required" in errors
    assert "Resources.F.Properties.Runtime: required" in errors
    assert any(e.startswith("Resources.F.Properties.Colour: unknown property of ALIYUN::FC3::Function (allowed: ") for e in errors)


def test_other_aliyun_types_stay_a_validation_error() -> None:
    errors = plan_errors({"Vm": {"Type": "ALIYUN::ECS::Instance", "Properties": {"ImageId": "x"}}})
    assert errors[0].startswith("Resources.Vm.Type: unsupported resource type 'ALIYUN::ECS::Instance'")


def test_defaults_of_ros_are_filled_in() -> None:
    plan = build_plan(load_template(text_of(one("ALIYUN::MNS::Queue"))), {}, IDENTITY)
    _, _, properties = resource_settings(plan, plan.resources["R"], lambda name: None)
    assert properties == {"QueueName": "q", "DelaySeconds": 0, "MaximumMessageSize": 65536, "MessageRetentionPeriod": 345600,
                          "VisibilityTimeout": 30, "PollingWaitSeconds": 0, "LoggingEnabled": False}


def test_non_editable_properties_replace_the_resource() -> None:
    queue, function = cloud_type("ALIYUN::MNS::Queue"), cloud_type("ALIYUN::FC3::Function")
    assert queue is not None and function is not None
    assert queue.replaced_by({"QueueName": "a", "DelaySeconds": 0}, {"QueueName": "a", "DelaySeconds": 5}) == []
    assert queue.replaced_by({"QueueName": "a"}, {"QueueName": "b"}) == ["QueueName"]
    assert function.replaced_by(MINIMAL["ALIYUN::FC3::Function"], {**MINIMAL["ALIYUN::FC3::Function"], "Timeout": 9}) == []


def test_custom_resource_token_from_a_function_arn_plans_without_bindings() -> None:
    resources = {
        **one("ALIYUN::FC3::Function"),
        "Echo": {"Type": "Custom::Echo", "Properties": {"ServiceToken": {"Fn::GetAtt": ["R", "ARN"]}, "Timeout": 30}},
    }
    plan = build_plan(load_template(text_of(resources)), {}, IDENTITY)
    assert plan.graph.dependencies("Echo") == {"R"}
    arn = ATTRIBUTES["ALIYUN::FC3::Function"]["ARN"]
    token = parse_service_token(arn)
    assert isinstance(token, FcFunctionToken) and token.fc_version == 3 and token.function == "fn3"
    fc2 = parse_service_token(ATTRIBUTES["ALIYUN::FC::Function"]["ARN"])
    assert isinstance(fc2, FcFunctionToken) and (fc2.service, fc2.function) == ("svc", "fn")


def test_source_code_becomes_a_deterministic_index_zip() -> None:
    location = code_location({"SourceCode": "def handler(e, c):\n    return 1\n"})
    data = base64.b64decode(location["zipFile"])
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == ["index.py"]
        assert archive.read("index.py").startswith(b"def handler")
    assert source_zip("x") == source_zip("x")
    assert code_location({"ZipFile": "QUJD", "SourceCode": "ignored"}) == {"zipFile": "QUJD"}
    assert code_location({"OssBucketName": "b", "OssObjectName": "k.zip"}) == {"ossBucketName": "b", "ossObjectName": "k.zip"}


def test_trigger_config_keys_reach_fc_in_camel_case() -> None:
    given = {"CronExpression": "@every 1m", "Enable": True, "Filter": {"Key": {"Prefix": "in/"}}, "Events": ["oss:Put"]}
    assert lower_first(given) == {"cronExpression": "@every 1m", "enable": True, "filter": {"key": {"prefix": "in/"}},
                                  "events": ["oss:Put"]}


def test_get_att_of_a_local_resource_must_name_one_of_its_attributes() -> None:
    resources = {
        **one("ALIYUN::MNS::Queue"),
        "Echo": {"Type": "Custom::Echo", "Properties": {"ServiceToken": "acs:fc:cn-hangzhou:123456789:functions/f",
                                                        "Parameters": {"Q": {"Fn::GetAtt": ["R", "Url"]},
                                                                       "S": {"Fn::GetAtt": "R.ARN.WithSlash"}}}},
    }
    errors = plan_errors(resources, Outputs={"O": {"Value": {"Fn::GetAtt": ["R", "Arn"]}}})
    assert errors == [
        "Resources.Echo.Properties.Parameters.Q: Fn::GetAtt: ALIYUN::MNS::Queue resource 'R' has no attribute 'Url' "
        "(attributes: QueueName, QueueUrl, ARN, ARN.WithSlash)",
        "Outputs.O.Value: Fn::GetAtt: ALIYUN::MNS::Queue resource 'R' has no attribute 'Arn' "
        "(attributes: QueueName, QueueUrl, ARN, ARN.WithSlash)",
    ]
