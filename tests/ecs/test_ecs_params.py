"""Parameters as the SDKs encode them: `X.N` lists in numeric order, `X.N.Key` structs, JSON
strings, booleans in any case, token paging; each error names the parameter and the rule."""

from __future__ import annotations

import pytest

from crhelper.local.ecs_params import Params, page
from crhelper.local.ecs_state import EcsError


def _error(call: object) -> EcsError:
    with pytest.raises(EcsError) as caught:
        call()  # type: ignore[operator]
    return caught.value


@pytest.mark.parametrize("sent, expected", [("True", True), ("true", True), ("FALSE", False), ("False", False)])
def test_booleans_are_case_insensitive(sent: str, expected: bool) -> None:
    assert Params({"ForceStop": sent}).boolean("ForceStop") is expected


def test_a_bad_boolean_names_the_parameter() -> None:
    error = _error(lambda: Params({"ForceStop": "yes"}).boolean("ForceStop"))
    assert (error.status, error.code) == (400, "InvalidParameter")
    assert "ForceStop" in error.message and "true or false" in error.message


def test_lists_are_in_numeric_order_not_string_order() -> None:
    values = {f"InstanceId.{n}": f"i-{n}" for n in (10, 2, 1)}
    assert Params(values).listed("InstanceId", 100) == ["i-1", "i-2", "i-10"]
    assert "between 1 and 100" in _error(lambda: Params({"InstanceId.101": "x"}).listed("InstanceId", 100)).message
    assert _error(lambda: Params({}).required_list("InstanceId", 100)).code == "MissingParameter"


def test_structs_group_by_index() -> None:
    params = Params({"Tag.2.Key": "b", "Tag.1.Key": "a", "Tag.1.Value": "x"})
    assert params.structs("Tag", 20) == [{"Key": "a", "Value": "x"}, {"Key": "b"}]


def test_json_string_parameters() -> None:
    assert Params({"InstanceIds": '["i-1", "i-2", "i-1"]'}).json_strings("InstanceIds", 100) == ["i-1", "i-2"]
    assert Params({"Parameters": '{"name": "x y"}'}).json_object("Parameters") == {"name": "x y"}
    assert _error(lambda: Params({"InstanceIds": "i-1"}).json_strings("InstanceIds", 100)).code == \
        "InvalidInstanceIds.Malformed"
    assert "values must be strings" in _error(lambda: Params({"Parameters": '{"n": 1}'}).json_object("Parameters")).message


def test_token_paging_walks_every_item_once_and_ends_with_an_empty_token() -> None:
    items: list[object] = list(range(23))
    seen, token = [], ""
    while True:
        chunk, fields = page(Params({"MaxResults": "10", "NextToken": token}), items, max_results=100)
        seen += chunk
        token = str(fields["NextToken"])
        if not token:
            break
    assert seen == items
    assert _error(lambda: page(Params({"NextToken": "garbage"}), items, max_results=100)).code == "InvalidNextToken"


def test_page_number_paging_bounds_the_page_size() -> None:
    chunk, fields = page(Params({"PageNumber": "3", "PageSize": "10"}), list(range(23)), max_results=50)
    assert chunk == [20, 21, 22] and fields["TotalCount"] == 23
    assert "between 1 and 50" in _error(lambda: page(Params({"PageSize": "51"}), [], max_results=50)).message
