"""config.json: every attribute of spec §2.2, the eleven types of §2.4, reserved keys, role arrays,
flattened paths; all problems at once, each naming the item path and the rule."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from appcenter_support import NAMES, config_of, minimal_config, rules_of
from handlers.appcenter.config import TYPES, Dependency, js_pattern, parse_config
from handlers.appcenter.problems import InvalidPackage


@pytest.mark.parametrize("name", NAMES)
def test_every_shared_config_parses_without_problems(name: str) -> None:
    config = config_of(name)
    assert config.problems == ()
    assert {"cluster.name", "cluster.description", "cluster.vxnet"} <= set(config.items)


def test_sections_roles_and_paths_follow_the_form() -> None:
    etcd = config_of("etcd")
    assert etcd.sections == ("cluster", "env", "service_params")
    assert etcd.cluster_roles == ("etcd_node", "etcd_proxy")
    assert etcd.presets == ("Test", "Prod")
    item = etcd.items["service_params.etcd_node.node.ip"]
    assert (item.section, item.role, item.key, item.has_default, item.required) == (
        "service_params", "etcd_node", "node.ip", False, True)
    assert etcd.items["env.etcd_node.cluster_DNS"].dependencies == (Dependency("enable_TLS", ("true",), "in"),)
    assert etcd.items["cluster.etcd_node.count"].resource_group == (1, 3)
    assert config_of("redis-standalone").sections == ("cluster", "service_params", "env")  # any order


def test_every_documented_attribute_is_read() -> None:
    zk, redis, tomcat, pg = (config_of(n) for n in ("zookeeper", "redis-standalone", "tomcat", "postgresql-simplecluster"))
    whitelist = zk.items["env.4lw.commands.whitelist"]
    assert whitelist.multichoice and whitelist.separator == "," and len(whitelist.range or ()) == 15
    assert zk.items["env.admin_username"].pattern is not None
    assert zk.items["env.tickTime"].min == 1 and zk.items["env.tickTime"].max == 1000000
    assert redis.items["cluster.node.volume_size"].step == 10
    assert redis.items["env.tls-cert"].extra == {"multiline": True}  # unknown keys kept
    assert tomcat.items["cluster.tomcat_nodes.loadbalancer"].port == (8080,)
    assert tomcat.items["cluster.redis_service"].extra["tag"] == ["Redis", "redis"]
    assert pg.items["env.DBname"].changeable is False
    assert pg.items["env.bgwriter_lru_multiplier"].type == "number"
    assert config_of("etcd").items["env.etcd_node.enable_TLS"].expanded is False


def test_the_rest_of_the_attribute_table() -> None:
    config = parse_config(minimal_config(
        {"key": "eip", "type": "eip", "default": "", "required": "no", "associate_mode": 1},
        {"key": "net", "type": "vxnet", "default": "", "required": "no"},
        {"key": "ak", "type": "accesskey", "default": "", "required": "no", "system": True},
        {"key": "db", "type": "service", "default": "", "required": "no", "limits": {"app-x": ["appv-1"]},
         "allowed_operations": ["add", "delete"]},
        {"key": "lb", "type": "loadbalancer", "default": [], "required": "no", "port": [80, 443]},
        {"key": "size", "type": "integer", "default": 10, "required": "no", "auto_scale_step": 10,
         "changeable_when_create": False},
        {"key": "ratio", "type": "number", "default": 0.5, "required": "no"},
        {"key": "on", "type": "boolean", "default": True, "required": "no"},
        {"key": "pw", "type": "password", "default": "", "required": "no"},
    ))
    items = config.items
    assert items["env.eip"].associate_mode == 1
    assert items["env.ak"].system and items["env.ak"].secret
    assert items["env.db"].limits == {"app-x": ("appv-1",)} and items["env.db"].allowed_operations == ("add", "delete")
    assert items["env.lb"].port == (80, 443)
    assert items["env.size"].auto_scale_step == 10 and items["env.size"].changeable_when_create is False
    assert {item.type for item in items.values()} | {"array"} == set(TYPES)


def _problems(*items: dict[str, Any], **kw: Any) -> list[str]:
    with pytest.raises(InvalidPackage) as caught:
        parse_config(minimal_config(*items, **kw))
    return rules_of(caught)


def test_broken_entries_are_all_reported_with_their_paths() -> None:
    found = _problems(
        {"key": "a", "type": "integer", "required": "no"},
        {"key": "b", "type": "float", "default": 1},
        {"key": "c", "type": "integer", "default": "many", "required": "no"},
        {"key": "d", "type": "string", "default": "x", "required": "maybe"},
        {"key": "e", "type": "string", "default": "x", "pattern": "(", "required": "no"},
        {"key": "f", "type": "integer", "default": 5, "min": 10, "max": 1, "required": "no"},
        {"key": "g", "type": "string", "default": "x", "multichoice": True, "required": "no"},
        {"key": "h", "type": "loadbalancer", "default": [], "required": "no"},
        {"key": "i j", "type": "string", "default": "", "required": "no"},
        {"key": "k", "type": "string", "default": "", "required": "no", "dependencies": [{"refkey": "zz", "values": ["1"]}]},
        {"key": "l", "type": "string", "default": "", "required": "no", "min": 1},
        {"key": "m", "type": "eip", "default": "", "required": "no", "associate_mode": 2},
        {"key": "n", "type": "string", "default": "", "required": "no", "limits": {"x": ["1"]}},
        {"key": "o", "type": "integer", "default": 1, "required": "no", "range": [1, "two"]},
        {"key": "p", "type": "string", "default": "", "required": "no", "changeable": "sometimes"},
        {"key": "q", "type": "integer", "default": 1, "required": "no", "step": 0},
    )
    expected = [
        'config.json env.a: default is required when required is "no"',
        "config.json env.b: type is required, one of integer, number, boolean, string, array, service, "
        "loadbalancer, password, accesskey, vxnet, eip",
        "config.json env.c: default must be an integer",
        'config.json env.d: required must be "yes" or "no"',
        "config.json env.f: min must not be greater than max",
        "config.json env.g: multichoice needs a range to choose from",
        "config.json env.h: a loadbalancer item needs port (the backend port, or a list of them)",
        "config.json env.i j: env keys must not contain spaces",
        "config.json env.k: dependencies: refkey zz is not a sibling entry",
        "config.json env.l: min and max apply to integer and number items, not string",
        "config.json env.m: associate_mode must be 0 (external bind) or 1 (internal bind)",
        "config.json env.n: limits and allowed_operations apply to service items only",
        "config.json env.o: range values must be an integer",
        "config.json env.p: changeable must be true or false",
        "config.json env.q: step must be greater than 0",
    ]
    for line in expected:
        assert line in found, (line, found)
    assert any(line.startswith("config.json env.e: pattern is not a valid regular expression") for line in found)


def test_a_string_default_for_a_number_is_tolerated_with_a_warning() -> None:
    config = parse_config(minimal_config({"key": "n", "type": "integer", "default": "3", "required": "no"}))
    assert config.items["env.n"].default == 3
    assert [str(p) for p in config.problems] == ["warning: config.json env.n: default should be an integer, not a string"]


def test_entries_without_a_default_are_allowed_when_required() -> None:
    config = parse_config(minimal_config({"key": "ip", "type": "string", "required": "yes"}))
    assert config.items["env.ip"].has_default is False and config.items["env.ip"].default is None


def test_two_entries_that_flatten_to_one_path_are_refused() -> None:
    found = _problems({"key": "node.cpu", "type": "integer", "default": 1, "required": "no"},
                      {"key": "node", "type": "array", "properties": [
                          {"key": "cpu", "type": "integer", "default": 1, "required": "no"}]})
    assert "config.json env.node.cpu: two entries flatten to this path; a template tag could not tell them apart" in found


def _broken(change: Callable[[Any, list[Any]], None], *env_items: dict[str, Any]) -> list[str]:
    """The problems of the minimal config after `change(config, its cluster entries)`."""
    config = minimal_config(*env_items)
    change(config, config["properties"][0]["properties"])
    with pytest.raises(InvalidPackage) as caught:
        parse_config(config)
    return rules_of(caught)


def test_duplicate_keys_reserved_keys_and_nesting() -> None:
    def change(config: Any, cluster: list[Any]) -> None:
        cluster[2] = {"key": "vxnet", "type": "array", "properties": []}
        cluster.append({"key": "deep", "type": "array", "properties": [{"key": "inner", "type": "array", "properties": []}]})
        cluster.append({"key": "db-replica", "type": "array", "properties": []})
    twice = {"key": "x", "type": "string", "default": "", "required": "no"}
    found = _broken(change, twice, twice)
    assert "config.json env.x: key appears twice in the same array" in found
    assert "config.json cluster.vxnet: cluster.vxnet is reserved and cannot be a role" in found
    assert "config.json cluster.deep.inner: arrays nest at most two deep (section, then role)" in found
    assert "config.json cluster.db-replica: the suffix -replica is reserved for replica roles" in found


def test_type_placement_roles_and_presets() -> None:
    def change(config: Any, cluster: list[Any]) -> None:
        cluster.append({"key": "secret", "type": "password", "default": "", "required": "no"})
        cluster.append({"key": "resource_group", "type": "string", "default": "A"})
        cluster[3]["properties"][0]["resource_group"] = [1, 2]
        config["properties"][1]["properties"].append({"key": "ghost", "type": "array", "properties": []})
    found = _broken(change)
    assert "config.json cluster.secret: type password is allowed only in env and service_params" in found
    assert "config.json cluster.resource_group: cluster.resource_group needs a range of preset names" in found
    assert "config.json cluster.node.count: resource_group values need cluster.resource_group presets" in found
    # an env array named after no role is a group (OpenSearch's env.global): a warning, not an error
    assert "warning: config.json env.ghost: names no cluster role (roles: node): read as a group of entries every " \
        "role shares" in found


def test_preset_lists_must_align_with_the_presets() -> None:
    def change(config: Any, cluster: list[Any]) -> None:
        cluster.append({"key": "resource_group", "type": "string", "default": "A", "range": ["A", "B"]})
        cluster[3]["properties"][0]["resource_group"] = [1, 2, 3]
    assert "config.json cluster.node.count: resource_group has 3 values for 2 presets" in _broken(change)


def test_the_root_shape_is_checked() -> None:
    with pytest.raises(InvalidPackage, match=r'the root must be \{"type": "array"'):
        parse_config([])
    with pytest.raises(InvalidPackage, match="the cluster section is required"):
        parse_config({"type": "array", "properties": []})
    with pytest.raises(InvalidPackage, match="a top-level entry must be a section"):
        parse_config({"type": "array", "properties": [{"key": "x", "type": "string", "default": ""}]})


def _parsed(config: dict[str, Any]) -> tuple[Any, list[str]]:
    parsed = parse_config(config)
    return parsed, [str(problem) for problem in parsed.problems]


def test_required_true_and_false_strings_are_read_as_yes_and_no_with_a_warning() -> None:
    config, texts = _parsed(minimal_config({"key": "a", "type": "string", "required": "true"},
                                           {"key": "b", "type": "string", "default": "", "required": "false"}))
    assert config.items["env.a"].required and not config.items["env.b"].required
    assert 'warning: config.json env.a: required should be "yes" or "no", not "true"; read as "yes"' in texts
    assert 'warning: config.json env.b: required should be "yes" or "no", not "false"; read as "no"' in texts
    with pytest.raises(InvalidPackage) as caught:  # anything else stays an error
        parse_config(minimal_config({"key": "c", "type": "string", "default": "", "required": "maybe"}))
    assert 'config.json env.c: required must be "yes" or "no"' in rules_of(caught)


def test_an_env_or_service_params_array_named_after_no_role_is_a_group() -> None:
    raw = minimal_config({"key": "global", "type": "array", "properties": [
        {"key": "cert.os.user_ca", "type": "string", "default": "", "required": "no"}]})
    raw["properties"].insert(0, {"key": "service_params", "type": "array", "properties": [  # before cluster
        {"key": "controller_sp", "type": "array", "properties": [
            {"key": "user_name", "type": "string", "default": "admin", "required": "no"}]},
        {"key": "node", "type": "array", "properties": [
            {"key": "level", "type": "integer", "default": 1, "required": "no"}]}]})
    config, texts = _parsed(raw)
    assert config.items["env.global.cert.os.user_ca"].role == "global"
    assert config.roles["env.global"].group and config.roles["service_params.controller_sp"].group
    assert not config.roles["service_params.node"].group and not config.roles["cluster.node"].group
    assert config.cluster_roles == ("node",)
    assert config.in_group(config.items["service_params.controller_sp.user_name"])
    assert not config.in_group(config.items["service_params.node.level"])
    assert "warning: config.json service_params.controller_sp: names no cluster role (roles: node): read as a group " \
        "of entries every role shares" in texts
    with pytest.raises(InvalidPackage) as caught:  # a group still nests at most two deep
        parse_config(minimal_config({"key": "global", "type": "array", "properties": [
            {"key": "inner", "type": "array", "properties": []}]}))
    assert "config.json env.global.inner: arrays nest at most two deep (section, then role)" in rules_of(caught)


@pytest.mark.parametrize("pattern, value, matches", [
    ("^([a-z0-9]{6,}|)$", "secret123\n", False),   # $ is the very end, not before a final newline
    ("^([a-z0-9]{6,}|)$", "secret123", True),
    ("^\\w{0,24}$", "пароль", False),              # \w is ASCII
    ("^\\w{0,24}$", "pass_word1", True),
    ("^\\d+[kmg]?$", "١٢m", False),                # \d is ASCII
    ("^\\d+[kmg]?$", "12m", True),
    ("^a.b$", "a\rb", False),                      # . stops at every line terminator
    ("^\\s$", "\u00a0", True),                     # \s is JavaScript's (Unicode spaces)
    ("^[\\s,]+$", "\u3000,", True),
    ("^[$]$", "$", True),                          # $ in a class is a dollar
    ("^(?<w>a)\\k<w>$", "aa", True),               # named groups, JavaScript spelling
    ("[a-z][a-z0-9]{3,12}", "x-admin1", True),     # search semantics, like RegExp.test
])
def test_patterns_follow_javascript_regexp_semantics(pattern: str, value: str, matches: bool) -> None:
    compiled = js_pattern(pattern)
    assert (compiled.search(value) is not None) is matches


@pytest.mark.parametrize("pattern, construct", [
    ("(?P<name>a)", "(?P...) groups"), ("(?i)abc", "inline flags"), ("\\Aabc", "\\A"), ("abc\\Z", "\\Z"),
    ("a(?#note)", "(?#...) comments"),
])
def test_python_only_pattern_constructs_are_refused_naming_them(pattern: str, construct: str) -> None:
    with pytest.raises(InvalidPackage) as caught:
        parse_config(minimal_config({"key": "p", "type": "string", "default": "", "required": "no",
                                     "pattern": pattern}))
    [rule] = rules_of(caught)
    assert rule.startswith("config.json env.p: pattern is not a valid regular expression (a JavaScript RegExp): "
                           f"{construct} (at offset ") and rule.endswith("Python syntax, not JavaScript")
