"""User values: defaults, presets, Inputs (strings converted), replace_policy, then every check
(spec test cases 4-8)."""

from __future__ import annotations

from typing import Any

import pytest

from appcenter_support import config_of, load, minimal_config
from handlers.appcenter.config import parse_config
from handlers.appcenter.problems import WARNING
from handlers.appcenter.values import Values, resolve_values, service_params_for, zone_rules


def _values(name: str, inputs: dict[str, Any] | None = None, **kw: Any) -> Values:
    package = load(name)
    return resolve_values(config_of(name), inputs, replace_policy=package.replace_policy, **kw)


def _texts(values: Values) -> list[str]:
    return [str(problem) for problem in values.problems]


def test_defaults_fill_every_item() -> None:
    values = _values("zookeeper")
    assert values.ok
    assert values["env.web.console.enabled"] is True and values["env.tickTime"] == 2000
    assert values["env.4lw.commands.whitelist"].startswith("conf,cons")


def test_strings_are_converted_to_the_item_type() -> None:
    values = _values("zookeeper", {"env.tickTime": "3000", "env.admin_enabled": "TRUE", "cluster.zk_node.count": 5,
                                   "env.web.console.username": "admin2"})
    assert values.ok, _texts(values)
    assert values["env.tickTime"] == 3000 and values["env.admin_enabled"] is True
    assert values["cluster.zk_node.count"] == 5
    pg = _values("postgresql-simplecluster", {"env.bgwriter_lru_multiplier": "2.5"})
    assert pg["env.bgwriter_lru_multiplier"] == 2.5


def test_a_value_that_does_not_convert_names_the_item_and_never_the_value() -> None:
    values = _values("zookeeper", {"env.tickTime": "soon", "env.admin_enabled": "perhaps", "env.admin_password": ["x"]})
    texts = _texts(values)
    assert "Inputs.env.tickTime: must be an integer (type integer)" in texts
    assert "Inputs.env.admin_enabled: must be true or false (type boolean)" in texts
    assert all("soon" not in text and "perhaps" not in text for text in texts)


def test_unknown_paths_and_roles_are_refused_with_a_hint() -> None:
    texts = _texts(_values("zookeeper", {"env.tickTim": "1", "cluster.zk_node": "3", "env": {"tickTime": 1}}))
    assert "Inputs.env: is a section; set its entries by dotted path (env.<key>)" in texts
    assert "Inputs.env.tickTim: no such item in config.json; did you mean env.tickTime?" in texts
    assert "Inputs.cluster.zk_node: is a role; set its entries (cluster.zk_node.<key>)" in texts


def test_case_4_validation_rejects() -> None:
    texts = _texts(_values("etcd", {"cluster.etcd_node.count": "2", "env.etcd_node.quotabytes": "2147483647",
                                    "env.etcd_node.enable_TLS": "true", "env.etcd_node.cluster_DNS": "nodots"}))
    assert "cluster.etcd_node.count: must be one of 1, 3, 5, 7, 9" in texts
    assert "env.etcd_node.quotabytes: must be at least 2147483648" in texts
    assert any(t.startswith("env.etcd_node.cluster_DNS: does not match the pattern ^(?=^.{3,255}$)") for t in texts)
    zk = _texts(_values("zookeeper", {"env.admin_username": "Ab-9", "env.4lw.commands.whitelist": "conf,nope"}))
    assert "env.admin_username: does not match the pattern [a-z][a-z0-9]{3,12}" in zk
    assert any(t.startswith("env.4lw.commands.whitelist: every choice (separated by ',') must be one of") for t in zk)


def test_patterns_use_search_semantics_and_look_ahead() -> None:
    assert _values("zookeeper", {"env.admin_username": "ADMINxuser1"}).ok  # unanchored: a match inside is enough
    assert _values("etcd", {"env.etcd_node.enable_TLS": "true", "env.etcd_node.cluster_DNS": ".svc.local"}).ok
    redis = _values("redis-standalone", {"env.sentinel.requirepass": "short"})
    assert any(t.startswith("env.sentinel.requirepass: does not match") for t in _texts(redis))
    assert _values("redis-standalone", {"env.sentinel.requirepass": "longenough"}).ok


def test_multichoice_uses_the_separator_and_accepts_a_list() -> None:
    assert _values("redis-standalone", {"env.enable-commands": "CONFIG,SAVE"}).ok
    values = _values("zookeeper", {"env.4lw.commands.whitelist": ["ruok", "stat"]})
    assert values.ok and values["env.4lw.commands.whitelist"] == "ruok,stat"


def test_min_max_step_and_booleans_kept_apart_from_numbers() -> None:
    texts = _texts(_values("redis-standalone", {"cluster.node.volume_size": "15", "env.port": "0"}))
    assert "cluster.node.volume_size: must be 10 plus a multiple of the step 10" in texts
    assert "env.port: must be at least 1" in texts
    config = parse_config(minimal_config({"key": "flag", "type": "integer", "default": 1, "range": [0, 1],
                                          "required": "no"}))
    assert not resolve_values(config, {"env.flag": True}).ok


def test_required_means_a_value_and_no_empty_value_given() -> None:
    config = parse_config(minimal_config({"key": "ip", "type": "string", "required": "yes"},
                                         {"key": "name", "type": "string", "default": "", "required": "yes"}))
    texts = _texts(resolve_values(config))
    assert texts == ["env.ip: is required and has no default: give it a value (Inputs.env.ip)"]
    author = resolve_values(config, missing_required=WARNING)  # checking the package alone: a warning
    assert author.ok and [str(p) for p in author.problems] == [
        "warning: env.ip: is required and has no default: give it a value (Inputs.env.ip)"]
    texts = _texts(resolve_values(config, {"env.ip": "10.0.0.1", "env.name": ""}))
    assert texts == ["env.name: is required: an empty value was given"]


def test_case_5_changeable() -> None:
    deployed = _values("postgresql-simplecluster").values
    refused = _values("postgresql-simplecluster", {"env.DBname": "other"}, previous=deployed, creating=False)
    assert _texts(refused) == ["env.DBname: cannot change after creation (changeable: false)"]
    zk = _values("zookeeper").values
    assert _values("zookeeper", {"env.tickTime": "4000"}, previous=zk, creating=False).ok
    assert _values("postgresql-simplecluster", {"env.DBname": "other"}).ok  # at create it may be set


def test_changeable_when_create_false_keeps_the_default_at_deploy() -> None:
    config = parse_config(minimal_config({"key": "mode", "type": "string", "default": "a", "range": ["a", "b"],
                                          "required": "no", "changeable_when_create": False}))
    assert _texts(resolve_values(config, {"env.mode": "b"})) == [
        "env.mode: is fixed at deploy (changeable_when_create: false): it keeps its default"]
    assert resolve_values(config, {"env.mode": "b"}, previous={"env.mode": "a"}, creating=False).ok


def test_case_6_dependencies() -> None:
    hidden = _values("etcd", {"env.etcd_node.cluster_DNS": "bad"})
    assert hidden.ok and "env.etcd_node.cluster_DNS" in hidden.hidden
    shown = _values("etcd", {"env.etcd_node.cluster_DNS": "bad", "env.etcd_node.enable_TLS": "true"})
    assert not shown.ok and "env.etcd_node.cluster_DNS" not in shown.hidden


def test_case_7_resource_group() -> None:
    test = _values("etcd", resource_group="Test")
    assert test.preset == "Test"
    assert (test["cluster.etcd_node.cpu"], test["cluster.etcd_node.memory"], test["cluster.etcd_node.count"]) == (1, 1024, 1)
    assert _values("etcd")["cluster.etcd_node.count"] == 3  # the default preset, Prod
    custom = _values("etcd", {"cluster.etcd_node.cpu": "4"}, resource_group="Test")
    assert custom.ok and custom["cluster.etcd_node.cpu"] == 4  # customizable defaults to true
    assert _values("etcd", {"cluster.resource_group": "Test"})["cluster.etcd_node.count"] == 1
    assert _texts(_values("etcd", resource_group="Huge")) == ["ResourceGroup: must be one of the presets Test, Prod"]
    assert _texts(_values("zookeeper", resource_group="Test")) == [
        "ResourceGroup: this package has no cluster.resource_group presets"]


def test_presets_that_are_not_customizable_are_enforced() -> None:
    config = minimal_config()
    cluster = config["properties"][0]["properties"]
    cluster.append({"key": "resource_group", "type": "string", "default": "S", "range": ["S", "L"], "customizable": False})
    cluster[3]["properties"][1]["resource_group"] = [1, 4]
    parsed = parse_config(config)
    assert resolve_values(parsed, {"cluster.node.cpu": "4"}, resource_group="L").ok
    assert [str(p) for p in resolve_values(parsed, {"cluster.node.cpu": "2"}, resource_group="L").problems] == [
        "cluster.node.cpu: must be 4 under preset L: the presets are not customizable (customizable: false)"]


def test_case_8_replace_policy() -> None:
    pek3a = _values("zookeeper", zone="pek3a")
    assert pek3a.ok and pek3a["cluster.zk_node.instance_class"] == 0
    gd2b = _values("zookeeper", {"cluster.zk_node.instance_class": "202"}, zone="gd2b")
    assert gd2b.ok and gd2b["cluster.zk_node.instance_class"] == 201
    assert _values("zookeeper", {"cluster.zk_node.instance_class": "202"}, zone="sh1a")["cluster.zk_node.instance_class"] == 202
    assert _values("zookeeper", zone="pek3b")["cluster.zk_node.instance_class"] == 101


def test_replace_policy_falls_back_to_the_region_prefix() -> None:
    policy = load("redis-standalone").replace_policy
    assert zone_rules(policy, "pek3z")["instance_class"]["0"] == 101  # pek3 region entry
    assert zone_rules(policy, "pek3a")["instance_class"]["101"] == 0  # the zone's own entry wins
    assert zone_rules(policy, "nowhere1a") == {}


def test_role_value_sets_of_the_spec() -> None:
    config = parse_config(minimal_config())
    texts = [str(p) for p in resolve_values(config, {"cluster.node.cpu": "3", "cluster.node.count": "-1"}).problems]
    assert any(t.startswith("cluster.node.cpu: is not a cpu QingCloud offers (1, 2, 4, 8, 12, 16") for t in texts)
    assert "cluster.node.count: count must not be negative" in texts


def test_service_params_are_checked_when_the_service_runs() -> None:
    etcd = config_of("etcd")
    assert _values("etcd").ok  # no defaults, required, but not needed at deploy
    values, problems = service_params_for(etcd, "etcd_node", {"node.ip": "10.0.0.5"})
    assert values["service_params.etcd_node.node.ip"] == "10.0.0.5"
    assert [str(p) for p in problems] == [
        "service_params.etcd_node.healthnode.ip: is required and has no default: give it a value",
        "service_params.etcd_node.unhealthnode.ip: is required and has no default: give it a value"]
    _, problems = service_params_for(etcd, "etcd_node", {"node.ip": "nope", "other": 1})
    texts = [str(p) for p in problems]
    assert "Params.other: no such service parameter for this role" in texts
    assert "service_params.etcd_node.node.ip: does not match the pattern (\\d+\\.){3}\\d+" in texts
    redis, problems = service_params_for(config_of("redis-standalone"), None, {"cmd": "FLUSHALL"})
    assert problems == [] and redis["service_params.cmd"] == "FLUSHALL" and redis["service_params.db"] == 0


def test_loadbalancer_values_become_lists() -> None:
    values = _values("tomcat", {"cluster.tomcat_nodes.loadbalancer": "lb-1 lb-2"})
    assert values["cluster.tomcat_nodes.loadbalancer"] == ["lb-1", "lb-2"]
    assert _values("tomcat", {"cluster.tomcat_nodes.loadbalancer": '["lb-3"]'})["cluster.tomcat_nodes.loadbalancer"] == ["lb-3"]


@pytest.mark.parametrize("raw, expected", [("true", True), ("False", False), (True, True)])
def test_booleans_from_ros_strings(raw: Any, expected: bool) -> None:
    assert _values("zookeeper", {"env.tcpKeepAlive": raw})["env.tcpKeepAlive"] is expected


def _storage_config() -> Any:
    """Harbor's storage_node and OpenSearch's es_node, reduced: a default outside its own range,
    and an instance class the package offers that §2.5 does not list."""
    return parse_config(minimal_config(roles={"node": [
        {"key": "count", "type": "integer", "default": 1, "required": "yes"},
        {"key": "volume_class", "type": "integer", "default": 2, "range": [100, 200, 5, 6], "required": "no"},
        {"key": "instance_class", "type": "integer", "default": 203, "range": [101, 202, 203], "required": "no"},
    ]}))


def test_a_default_outside_its_own_range_is_a_warning_a_chosen_value_an_error() -> None:
    config = _storage_config()
    values = resolve_values(config)
    assert values.ok and values["cluster.node.volume_class"] == 2
    assert [str(p) for p in values.problems if "volume_class" in p.where] == [
        "warning: cluster.node.volume_class: must be one of 100, 200, 5, 6 (the package's default is not in its range)"]
    chosen = resolve_values(config, {"cluster.node.volume_class": "2"})
    assert not chosen.ok and "cluster.node.volume_class: must be one of 100, 200, 5, 6" in _texts(chosen)
    assert resolve_values(config, {"cluster.node.volume_class": "200"}).ok


def test_a_role_value_the_package_offers_outside_the_spec_sets_is_a_warning() -> None:
    config = _storage_config()
    values = resolve_values(config)
    assert values.ok and values["cluster.node.instance_class"] == 203
    assert any(t.startswith("warning: cluster.node.instance_class: is not a instance_class QingCloud offers (0, 1, "
                            "101") and t.endswith("; the package offers it, kept") for t in _texts(values))
    assert not any("instance_class" in p.where for p in resolve_values(config, {"cluster.node.instance_class": "101"}).problems)
    # a value neither the package nor the spec offers stays an error (and breaks the range)
    texts = _texts(resolve_values(config, {"cluster.node.instance_class": "7"}))
    assert "cluster.node.instance_class: must be one of 101, 202, 203" in texts
    assert any(t.startswith("cluster.node.instance_class: is not a instance_class QingCloud offers") for t in texts)


def test_service_params_groups_reach_every_role() -> None:
    raw = minimal_config()
    raw["properties"].append({"key": "service_params", "type": "array", "properties": [
        {"key": "controller_sp", "type": "array", "properties": [
            {"key": "user_name", "type": "string", "default": "admin", "required": "no", "pattern": "^[a-z]+$"}]}]})
    config = parse_config(raw)
    values, problems = service_params_for(config, "node", {"user_name": "root"})
    assert problems == [] and values == {"service_params.controller_sp.user_name": "root"}
    _, problems = service_params_for(config, None, {"service_params.controller_sp.user_name": "Root"})
    assert [str(p) for p in problems] == ["service_params.controller_sp.user_name: does not match the pattern ^[a-z]+$"]


def test_patterns_reject_a_trailing_newline_and_non_ascii_digits_and_letters() -> None:
    texts = _texts(_values("redis-standalone", {"env.requirepass": "secret123\n", "env.web.console.password": "пароль",
                                                "env.repl-backlog-size": "١٢m"}))
    for path in ("env.requirepass", "env.web.console.password", "env.repl-backlog-size"):
        assert any(t.startswith(f"{path}: does not match the pattern ^") for t in texts), (path, texts)
    assert _values("redis-standalone", {"env.requirepass": "secret123", "env.web.console.password": "passw0rd",
                                        "env.repl-backlog-size": "12m"}).ok
