"""ServiceToken parsing: every documented form, and clear errors for the rest."""

from __future__ import annotations

import pytest

from crhelper.servicetoken import (
    FcFunctionToken,
    MnsQueueToken,
    MnsTopicToken,
    ServiceTokenError,
    WebToken,
    format_service_token,
    parse_service_token,
)

VALID = [
    ("acs:fc:cn-hangzhou:123456789:services/test-service/functions/test-function",
     FcFunctionToken("cn-hangzhou", "123456789", "test-function", "test-service"), None),
    ("acs:fc:cn-hangzhou:123456789:functions/my_func",
     FcFunctionToken("cn-hangzhou", "123456789", "my_func"), None),
    ("acs:fc:ap-southeast-1:1:services/_s/functions/_f", FcFunctionToken("ap-southeast-1", "1", "_f", "_s"), None),
    ("acs:mns:cn-hangzhou:123456789:queues/test-queue", MnsQueueToken("cn-hangzhou", "123456789", "test-queue"), None),
    ("acs:mns:cn-hangzhou:123456789:/queues/test-queue", MnsQueueToken("cn-hangzhou", "123456789", "test-queue"),
     "acs:mns:cn-hangzhou:123456789:queues/test-queue"),
    ("acs:mns:cn-shanghai:42:topics/t1", MnsTopicToken("cn-shanghai", "42", "t1"), None),
    ("acs:mns:cn-shanghai:42:/topics/t1", MnsTopicToken("cn-shanghai", "42", "t1"), "acs:mns:cn-shanghai:42:topics/t1"),
    ("web:https://example.com", WebToken("https://example.com"), None),
    ("web[sync]:http://example.com", WebToken("http://example.com", sync=True), None),
    ("web[idempotent]:https://example.com/a?b=c:d", WebToken("https://example.com/a?b=c:d", idempotent=True), None),
    ("web[sync,idempotent]:https://example.com", WebToken("https://example.com", True, True), None),
    ("web[idempotent,sync]:https://example.com:8443/x", WebToken("https://example.com:8443/x", True, True),
     "web[sync,idempotent]:https://example.com:8443/x"),
    ("web[sync, idempotent]:http://127.0.0.1:8080/", WebToken("http://127.0.0.1:8080/", True, True),
     "web[sync,idempotent]:http://127.0.0.1:8080/"),
]


@pytest.mark.parametrize("text, expected, canonical", VALID)
def test_valid_tokens_parse_and_format(text: str, expected: object, canonical: str | None) -> None:
    token = parse_service_token(text)
    assert token == expected
    assert format_service_token(token) == (canonical or text)
    assert parse_service_token(token.format()) == token


def test_fc_versions() -> None:
    assert parse_service_token(VALID[0][0]).fc_version == 2  # type: ignore[union-attr]
    assert parse_service_token(VALID[1][0]).fc_version == 3  # type: ignore[union-attr]


INVALID = [
    ("", "empty"),
    (" web:https://example.com", "whitespace"),
    ("https://example.com", "must start with"),
    ("acs:oss:cn-hangzhou:1:buckets/b", "product 'oss'"),
    ("acs:fc:cn-hangzhou:1", "five ':'-separated parts"),
    ("acs:fc:Hangzhou:1:functions/f", "region 'Hangzhou'"),
    ("acs:fc:cn-hangzhou:abc:functions/f", "account id 'abc'"),
    ("acs:fc:cn-hangzhou:1:services/s/functions", "FC path"),
    ("acs:fc:cn-hangzhou:1:services/s.LATEST/functions/f", "qualifier"),
    ("acs:fc:cn-hangzhou:1:/functions/f", "leading '/'"),
    ("acs:fc:cn-hangzhou:1:functions/9bad", "function name '9bad'"),
    ("acs:fc:cn-hangzhou:1:services/bad name/functions/f", "service name 'bad name'"),
    ("acs:mns:cn-hangzhou:1:queue/q", "MNS path"),
    ("acs:mns:cn-hangzhou:1://queues/q", "MNS path"),
    ("acs:mns:cn-hangzhou:1:queues/-q", "queue name '-q'"),
    ("acs:mns:cn-hangzhou:1:topics/t_1", "topic name 't_1'"),
    ("acs:mns:cn-hangzhou:1:queues/q/extra", "MNS path"),
    ("web:", "no URL"),
    ("web:ftp://example.com", "scheme must be"),
    ("web:https://", "no host"),
    ("web:example.com", "scheme must be"),
    ("web[async]:https://example.com", "option 'async' is unknown"),
    ("web[]:https://example.com", "options are empty"),
    ("web[sync,]:https://example.com", "options are empty"),
    ("web[sync,sync]:https://example.com", "repeated"),
    ("web[sync:https://example.com", "closed with ']'"),
    ("web[sync]https://example.com", "closed with ']'"),
    ("web:https://exa mple.com", "whitespace"),
    ("web:http://example.com:99999", "cannot be parsed"),
    ("web:" + "https://e.com/" + "a" * 500, "at most 512"),
]


@pytest.mark.parametrize("text, fragment", INVALID)
def test_invalid_tokens_name_the_problem_and_the_valid_forms(text: str, fragment: str) -> None:
    with pytest.raises(ServiceTokenError) as info:
        parse_service_token(text)
    assert fragment in info.value.problem
    assert "Valid forms" in str(info.value) and "web[sync,idempotent]" in str(info.value)


def test_non_string_is_rejected() -> None:
    with pytest.raises(ServiceTokenError, match="expected a string"):
        parse_service_token(None)  # type: ignore[arg-type]
