import json

import pytest

from crhelper.errors import RequestError
from crhelper.request import decode_event, parse_request, response_urls_of
from crhelper.testing import make_event


def test_decodes_bytes_str_and_dict_alike():
    event = make_event("Create", "Custom::X", {"A": 1})
    as_bytes = json.dumps(event).encode()
    parsed = [parse_request(decode_event(form)) for form in (as_bytes, as_bytes.decode(), event)]
    assert parsed[0] == parsed[1] == parsed[2]
    assert parsed[0].properties == {"A": 1}
    assert parsed[0].request_type == "Create"


@pytest.mark.parametrize("name", ["IntranetResponseURL", "InnerResponseURL"])
def test_reads_the_intranet_url_under_both_names(name):
    event = make_event("Create", "Custom::X")
    del event["IntranetResponseURL"]
    event[name] = "http://inner.example/cb?sig=1"
    assert parse_request(event).intranet_response_url == "http://inner.example/cb?sig=1"
    assert response_urls_of(event)[1] == "http://inner.example/cb?sig=1"


def test_unknown_fields_are_kept_and_service_token_is_stripped():
    event = make_event("Create", "Custom::X", {"ServiceToken": "acs:fc:x", "B": "2"}, Future="yes")
    request = parse_request(event)
    assert request.extra == {"Future": "yes"}
    assert request.properties == {"B": "2"}


def test_repr_hides_response_urls():
    event = make_event("Create", "Custom::X", response_url="http://h/cb?Signature=SECRET")
    assert "SECRET" not in repr(parse_request(event))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda e: e.pop("RequestType"), "RequestType: required field is missing"),
        (lambda e: e.update(RequestType="Replace"), "RequestType: must be one of Create, Update, Delete, got 'Replace'"),
        (lambda e: e.update(StackId=""), "StackId: must not be empty"),
        (lambda e: e.update(LogicalResourceId=["x"]), "LogicalResourceId: must be a string, got list"),
        (lambda e: e.update(ResourceProperties=[1]), "ResourceProperties: must be a JSON object, got list"),
        (lambda e: (e.pop("ResponseURL"), e.pop("IntranetResponseURL")), "ResponseURL: required field is missing"),
    ],
)
def test_invalid_fields_are_named_with_the_rule(mutate, message):
    event = make_event("Create", "Custom::X")
    mutate(event)
    with pytest.raises(RequestError) as info:
        parse_request(event)
    assert message in str(info.value)


def test_all_problems_are_reported_together():
    with pytest.raises(RequestError) as info:
        parse_request({"ResponseURL": "http://x/"})
    text = str(info.value)
    for name in ("RequestType", "RequestId", "StackId", "LogicalResourceId", "ResourceType"):
        assert f"{name}: required field is missing" in text


def test_update_needs_a_physical_id():
    event = make_event("Update", "Custom::X", physical_resource_id="")
    with pytest.raises(RequestError, match="PhysicalResourceId: required on Update"):
        parse_request(event)


@pytest.mark.parametrize(
    "body, message",
    [
        (b"", "request body is empty"),
        (b"\xff\xfe", "not UTF-8"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (42, "must be JSON text or an object, got int"),
    ],
)
def test_undecodable_events_say_why(body, message):
    with pytest.raises(RequestError, match=message):
        decode_event(body)


def test_properties_given_as_a_json_string_are_decoded():
    event = make_event("Create", "Custom::X")
    event["ResourceProperties"] = '{"A": 1}'
    assert parse_request(event).properties == {"A": 1}


def test_update_without_old_properties_gets_an_empty_map():
    event = make_event("Update", "Custom::X", physical_resource_id="p-1")
    del event["OldResourceProperties"]
    assert parse_request(event).old_properties == {}


def test_lone_surrogates_and_deep_nesting_are_named_by_field():
    event = make_event("Create", "Custom::X", {"Deep": json.loads("[" * 150 + "]" * 150)})
    event["RequestId"] = "\ud800"
    with pytest.raises(RequestError) as caught:
        parse_request(event)
    assert str(caught.value) == ("ResourceProperties: nested too deeply (limit 100 levels); "
                                 "RequestId: contains a lone surrogate U+D800, not valid Unicode")
