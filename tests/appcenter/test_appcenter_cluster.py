"""The typed rendered cluster (spec §3): defaults, bounds (test case 11), roles, endpoints."""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from appcenter_support import checked, cluster_of, config_of
from handlers.appcenter.cluster import parse_cluster, role_counts
from handlers.appcenter.problems import InvalidPackage


def _rendered(name: str) -> Any:
    return copy.deepcopy(checked(name).rendered)


def _problems(name: str, change: Callable[[Any], None]) -> list[str]:
    data = _rendered(name)
    change(data)
    with pytest.raises(InvalidPackage) as caught:
        parse_cluster(data, config_of(name))
    return [str(problem) for problem in caught.value.problems]


def test_defaults_of_services_health_check_monitor_and_tabs() -> None:
    etcd = cluster_of("etcd")
    node = etcd.node("etcd_node")
    assert node.services["stop"].timeout == 600 and node.services["start"].timeout == 86400
    assert node.services["stop"].order == 2 and node.services["init"].order == 0
    assert node.services["init"].post_start_service and node.services["init"].nodes_to_execute_on == 1
    assert node.services["destroy"].allow_force is False and node.services["start"].allow_force is True
    assert set(node.custom_services()) == {"repairMajorityNode", "repairMinorityNode", "compact"}
    assert node.monitor is not None and node.monitor.items["etcd_server_is_leader"].value_type == "int"
    assert etcd.display_tabs["TLSConnectionGuide-column"].timeout == 10
    assert etcd.upgrading_policy == "sequential" and etcd.vxnet == ""
    zk = cluster_of("zookeeper")
    assert zk.monitor is not None
    assert zk.monitor.items["mode"].statistics_type == "latest" and zk.monitor.items["min"].statistics_type == "min"
    volume = zk.node("zk_node").volume
    assert volume is not None and volume.mount_points == ["/data"] and volume.filesystem == "ext4"
    assert zk.model_extra == {"multi_zone_policy": "round_robin"}  # unknown keys kept
    assert cluster_of("tomcat").upgrading_policy == "parallel"


def test_a_single_unnamed_role_takes_the_config_role() -> None:
    assert list(cluster_of("zookeeper").roles) == ["zk_node"]
    assert role_counts(cluster_of("redis-standalone")) == {"node": 1}
    assert role_counts(cluster_of("tomcat")) == {"tomcat_nodes": 2, "log_node": 1}


def test_health_check_merges_the_nodes_fields_over_the_clusters() -> None:
    data = _rendered("etcd")
    data["nodes"][0]["health_check"] = {"interval_sec": 120}
    cluster, _ = parse_cluster(data, config_of("etcd"))
    merged = cluster.health_check_for("etcd_node")
    assert merged is not None and merged.interval_sec == 120 and merged.check_cmd == "/opt/app/bin/ctl.sh check"
    assert cluster.health_check_for("etcd_proxy") == cluster.health_check
    assert cluster_of("tomcat").health_check_for("log_node") is None


def test_case_11_health_check_bounds() -> None:
    found = _problems("zookeeper", lambda d: d["health_check"].update(interval_sec=30))
    assert "cluster.json.mustache health_check.interval_sec: Input should be greater than or equal to 60" in found
    found = _problems("zookeeper", lambda d: d["health_check"].update(timeout_sec=61))
    assert "cluster.json.mustache health_check: timeout_sec must not exceed interval_sec" in found
    found = _problems("tomcat", lambda d: d["nodes"][0]["health_check"].update(healthy_threshold=1))
    assert "cluster.json.mustache nodes[0].health_check.healthy_threshold: Input should be greater than or equal to 2" in found


def test_case_11_monitor_groups_and_display_tabs() -> None:
    found = _problems("zookeeper", lambda d: d["monitor"]["groups"].update(empty=[], big=["min", "avg", "max", "mode", "sent", "active"]))
    assert ("cluster.json.mustache monitor: groups.empty must hold 1 to 5 items; groups.big must hold 1 to 5 items"
            in found)

    def six_tabs(d: Any) -> None:
        d["display_tabs"] = {f"tab{i}": {"cmd": "x"} for i in range(6)}
    assert any(p.startswith("cluster.json.mustache display_tabs: Dictionary should have at most 5 items")
               for p in _problems("etcd", six_tabs))
    found = _problems("etcd", lambda d: d["display_tabs"]["TLSConnectionGuide-column"].update(timeout=11))
    assert "cluster.json.mustache display_tabs.TLSConnectionGuide-column.timeout: Input should be less than or equal to 10" in found
    found = _problems("etcd", lambda d: d["display_tabs"]["TLSConnectionGuide-column"].update(roles_to_execute_on=["ghost"]))
    assert "cluster.json.mustache display_tabs.TLSConnectionGuide-column.roles_to_execute_on: no node role ghost" in found


def test_monitor_items_rules() -> None:
    found = _problems("zookeeper", lambda d: d["monitor"]["items"]["mode"].update(statistics_type="avg"))
    assert any("statistics_type of a str item must be one of mode, latest" in p for p in found)
    found = _problems("zookeeper", lambda d: d["monitor"]["items"]["min"].update(enums=["a"]))
    assert any("enums apply to str items only" in p for p in found)
    found = _problems("zookeeper", lambda d: d["monitor"].update(alarm=["nope"]))
    assert any("alarm: no item nope" in p for p in found)
    warnings = [str(p) for p in checked("redis-standalone").problems]
    assert warnings == ["warning: cluster.json.mustache monitor.items: 158 items, more than the 50 the spec allows"]


def test_service_bounds_and_required_cmd() -> None:
    def change(d: Any) -> None:
        services = d["nodes"][0]["services"]
        services["start"]["timeout"] = 86401
        services["stop"]["order"] = -1
        services["init"]["nodes_to_execute_on"] = 0
        del services["restore"]["cmd"]
        services["compact"]["type"] = "other"
        services["stop"]["post_start_service"] = True
    found = _problems("etcd", change)
    assert "cluster.json.mustache nodes[0].services.start.timeout: Input should be less than or equal to 86400" in found
    assert "cluster.json.mustache nodes[0].services.stop.order: Input should be greater than or equal to 0" in found
    assert "cluster.json.mustache nodes[0].services.init.nodes_to_execute_on: Input should be greater than or equal to 1" in found
    data = _rendered("etcd")
    change_only_semantics = data["nodes"][0]["services"]
    change_only_semantics["compact"]["type"] = "other"
    change_only_semantics["stop"]["post_start_service"] = True
    data["backup_policy"] = "custom"
    del change_only_semantics["restore"]["cmd"]
    with pytest.raises(InvalidPackage) as caught:
        parse_cluster(data, config_of("etcd"))
    found = [str(p) for p in caught.value.problems]
    assert 'cluster.json.mustache nodes[0].services.compact.type: the only service type is "custom"' in found
    assert "cluster.json.mustache nodes[0].services.restore.cmd: cmd is required" in found
    assert "warning: cluster.json.mustache nodes[0].services.stop.post_start_service: applies to init, upgrade only; ignored" in found


def test_roles_counts_and_volumes() -> None:
    found = _problems("etcd", lambda d: d["nodes"][1].update(role="ghost"))
    assert ("cluster.json.mustache nodes[1].role: must equal a role of config.json's cluster section "
            "(etcd_node, etcd_proxy)") in found
    found = _problems("etcd", lambda d: d["nodes"][1].pop("role"))
    assert "cluster.json.mustache nodes[1].role: role is required when there is more than one role (etcd_node, etcd_proxy)" in found
    found = _problems("etcd", lambda d: d["nodes"][0].update(count=0))
    assert "cluster.json.mustache nodes: the cluster needs at least one node (the counts add up to 0)" in found
    found = _problems("zookeeper", lambda d: d["nodes"][0]["volume"].update(size=30, mount_point=["/a", "/b"]))
    assert "cluster.json.mustache nodes[0].volume.size: split over 2 disk(s), each must be a multiple of 10 GiB" in found
    found = _problems("postgresql-simplecluster", lambda d: d["nodes"][0]["volume"].update(size=2000, **{"class": 0}))
    assert "cluster.json.mustache nodes[0].volume.size: at most 1000 GiB per disk of class 0" in found
    found = _problems("zookeeper", lambda d: d["nodes"][0]["volume"].update(mount_point=["/a", "/b", "/c", "/d"]))
    assert any("mount_point is a string or a list of 1 to 3" in p for p in found)


def test_endpoints_follow_env_bound_ports() -> None:
    redis = cluster_of("redis-standalone", {"env.port": "6380"})
    assert redis.endpoint_port("client") == 6380 and redis.endpoint_port("sentinel") == 26379
    data = _rendered("redis-standalone")
    data["endpoints"]["client"]["port"] = "env.port"
    data["endpoints"]["node-port"] = {"port": "node.env.port"}
    data["nodes"][0]["env"] = {"port": 7000}
    cluster, _ = parse_cluster(data, config_of("redis-standalone"))
    assert cluster.endpoint_port("client") == 6379 and cluster.endpoint_port("node-port") == 7000
    data["nodes"][0]["env"] = {"port": "7001"}  # a string-typed env item holding a port
    cluster, _ = parse_cluster(data, config_of("redis-standalone"))
    assert cluster.endpoint_port("node-port") == 7001
    found = _problems("redis-standalone", lambda d: d["endpoints"]["client"].update(port="env.nope"))
    assert any(p.startswith("cluster.json.mustache endpoints.client.port: must be a number") for p in found)
    pg = cluster_of("postgresql-simplecluster")
    assert set(pg.reserved_ips) == {"vip"} and set(pg.endpoints) == {"client"}


def test_the_cluster_level_fields() -> None:
    found = _problems("tomcat", lambda d: d.update(upgrading_policy="random", exclude_node_columns=["ip"],
                                                   advanced_actions=["fly"], backup_policy="tape"))
    assert any(p.startswith("cluster.json.mustache upgrading_policy: Input should be 'parallel'") for p in found)
    # values the spec does not list are kept with a warning (QKE hides instance_class, adds attach_keypairs)
    data = _rendered("tomcat")
    data.update(exclude_node_columns=["ip"], advanced_actions=["fly"])
    data["nodes"][0]["advanced_actions"] = ["scale_horizontal", "attach_keypairs"]
    cluster, warnings = parse_cluster(data, config_of("tomcat"))
    texts = [str(problem) for problem in warnings]
    assert "warning: cluster.json.mustache exclude_node_columns[0]: ip is not one the spec lists (private_ip); kept" \
        in texts
    assert "warning: cluster.json.mustache advanced_actions[0]: fly is not one the spec lists (change_vxnet, " \
        "scale_horizontal, associate_eip); kept" in texts
    assert any(t.startswith("warning: cluster.json.mustache nodes[0].advanced_actions[1]: attach_keypairs is not")
               for t in texts)
    assert not any("advanced_actions[0]: scale_horizontal" in t for t in texts)
    assert cluster.exclude_node_columns == ["ip"] and cluster.has_advanced_action("fly")
    assert any(p.startswith("cluster.json.mustache backup_policy: Input should be 'device' or 'custom'") for p in found)
    found = _problems("tomcat", lambda d: d.pop("vxnet"))
    assert "cluster.json.mustache vxnet: Field required" in found
    tomcat = cluster_of("tomcat")
    assert tomcat.links == {"redis_service": "", "mysql_service": ""}
    assert tomcat.node("log_node").user_access is True and tomcat.has_advanced_action("scale_horizontal", "tomcat_nodes")
    assert not tomcat.has_advanced_action("scale_horizontal", "log_node")


def test_an_endpoint_port_range_is_kept_with_a_warning() -> None:
    data = _rendered("redis-standalone")
    data["endpoints"]["nodeport"] = {"port": "30000-32767", "protocol": "tcp"}  # QKE's NodePort range
    cluster, warnings = parse_cluster(data, config_of("redis-standalone"))
    assert cluster.endpoint_port("nodeport") is None
    assert "warning: cluster.json.mustache endpoints.nodeport.port: 30000-32767 is a port range, which the spec does " \
        "not list (a number or an env binding); kept, with no single port" in [str(p) for p in warnings]
    for bad in ("30000-99999", "3000-", "ports"):
        found = _problems("redis-standalone", lambda d: d["endpoints"].update(nodeport={"port": bad}))
        assert any(p.startswith("cluster.json.mustache endpoints.nodeport.port: must be a number") for p in found), bad
