"""The improved mustache (spec §4, test cases 1-3 and cloud-apis §5 case 10): whole-path lookup,
JSON literals, unknown paths listed, unsupported constructs named by file, line and tag."""

from __future__ import annotations

import json

import pytest

from appcenter_support import NAMES, checked, edited, load
from handlers.appcenter.check import check_package
from handlers.appcenter.mustache import render, render_text, tags_of
from handlers.appcenter.problems import InvalidPackage


@pytest.mark.parametrize("name", NAMES)
def test_case_1_every_shared_package_renders_with_its_defaults(name: str) -> None:
    result = checked(name)
    assert result.ok, [str(p) for p in result.problems]
    assert isinstance(result.rendered, dict) and result.rendered["nodes"]
    assert "{{" not in json.dumps(result.rendered)


def test_case_1_the_expected_roles_and_services() -> None:
    etcd = checked("etcd").rendered
    node, proxy = etcd["nodes"]
    assert (node["role"], proxy["role"]) == ("etcd_node", "etcd_proxy")
    assert {"compact", "repairMajorityNode", "repairMinorityNode"} <= set(node["services"])
    assert "redeploy WAR for QingStor" in checked("tomcat").rendered["nodes"][0]["services"]
    assert len(tags_of(load("redis-standalone").template)) == 95


def test_case_2_dotted_and_hyphenated_paths_resolve() -> None:
    zk = checked("zookeeper", {"env.web.console.enabled": "false", "env.4lw.commands.whitelist": "ruok"}).rendered
    assert zk["env"]["web.console.enabled"] is False and zk["env"]["4lw.commands.whitelist"] == "ruok"
    redis = checked("redis-standalone", {"env.tls-replication": "yes", "env.sentinel.down-after-milliseconds": "5000"})
    assert redis.ok
    rendered_env = redis.rendered["env"]
    assert rendered_env["tls-replication"] == "yes" and rendered_env["sentinel.down-after-milliseconds"] == 5000
    etcd = checked("etcd").rendered
    assert etcd["nodes"][0]["services"]["repairMajorityNode"]["service_params"] == {"node.ip": None}


def test_unknown_paths_are_all_listed_with_their_lines() -> None:
    template = '{\n  "a": {{env.nope}},\n  "b": {{cluster.name}},\n  "c": {{env.also.missing}}\n}'
    with pytest.raises(InvalidPackage) as caught:
        render(template, {"cluster.name": "x"})
    assert [str(p) for p in caught.value.problems] == [
        "cluster.json.mustache line 2: {{env.nope}}: unknown path; config.json has no such entry (paths are section[.role].key)",
        "cluster.json.mustache line 4: {{env.also.missing}}: unknown path; config.json has no such entry (paths are section[.role].key)"]


def test_case_3_literals() -> None:
    values = {"s": 'say "hi"\n<&>\u00e9', "t": True, "f": False, "empty": [], "big": 2147483648, "none": None,
              "n": 2.5, "list": ["lb-1"]}
    text = "{" + ", ".join(f'"{key}": {{{{{key}}}}}' for key in values) + "}"
    assert render(text, values) == values
    assert '"s": "say \\"hi\\"\\n<&>\u00e9"' in render_text(text, values)
    assert render('{"links": {"db": {{db}}}}', {"db": "cl-1"}) == {"links": {"db": "cl-1"}}
    assert checked("etcd").rendered["nodes"][0]["env"]["etcd.quota.backend.bytes"] == 2147483648


def test_a_tag_inside_a_json_string_gets_the_text_escaped() -> None:
    text = '{"cmd": "run --name {{cluster.name}} --n {{n}}", "q": "a \\" {{cluster.name}}"}'
    assert render(text, {"cluster.name": 'x"y', "n": 3}) == {"cmd": 'run --name x"y --n 3', "q": 'a " x"y'}


@pytest.mark.parametrize("tag, rule", [
    ("{{#env.on}}", "a section is not supported"),
    ("{{^env.on}}", "an inverted section is not supported"),
    ("{{/env.on}}", "a section end is not supported"),
    ("{{> partial}}", "a partial is not supported"),
    ("{{! a comment }}", "a comment is not supported"),
    ("{{=<% %>=}}", "a delimiter change is not supported"),
    ("{{&cluster.name}}", "an unescaped tag is not supported"),
    ("{{{cluster.name}}}", "triple mustache tags are not supported"),
])
def test_unsupported_constructs_name_the_file_line_and_tag(tag: str, rule: str) -> None:
    package = edited("zookeeper", template=lambda text: text.replace('"multi_zone_policy"', f'"x": {tag},\n  "multi_zone_policy"'))
    result = check_package(package)
    assert not result.ok
    assert [str(p) for p in result.errors] == [f"cluster.json.mustache line 5: {tag}: {rule}" + (
        "; write {{path}}" if "triple" in rule else "; AppCenter templates use plain {{path}} tags only")]


def test_an_unclosed_tag_and_output_that_is_not_json() -> None:
    with pytest.raises(InvalidPackage, match=r"line 2: \{\{ without a closing"):
        render_text('{\n"a": {{cluster.name\n}', {"cluster.name": "x"})
    with pytest.raises(InvalidPackage, match="cluster.json.mustache line 4 column 1: not JSON once rendered"):
        render('{\n"a": {{cluster.name}}\n\n', {"cluster.name": "x"})


def test_unknown_paths_come_with_the_value_problems() -> None:
    package = edited("zookeeper", template=lambda text: text.replace("{{env.tickTime}}", "{{env.tick.time}}"))
    result = check_package(package, {"env.tickTime": "0"})
    texts = [str(p) for p in result.problems]
    assert "env.tickTime: must be at least 1" in texts
    assert any("{{env.tick.time}}: unknown path" in text for text in texts)
