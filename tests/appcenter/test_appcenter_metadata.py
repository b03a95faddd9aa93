"""The metadata tree of spec §8 from the real packages, and the metad-style endpoint's answers: hosts
without a role directly under /hosts (review B7), reserved IPs, links, cluster_tag, the role's gpu and
volume class, the fields only a backend knows, JSON and metad's text form, /<cluster_id>/ paths."""

from __future__ import annotations

import json
from typing import Any

from appcenter_support import cluster_of
from handlers.appcenter import metadata
from handlers.appcenter.cluster import Cluster

CLUSTER_ID = "cl-meta1"


def host(role: str, sid: int, **extra: Any) -> dict[str, Any]:
    """A node as the executor keeps it (and hands it to `self_tree`)."""
    return {"node_id": f"cln-{role}{sid}", "instance_id": f"i-{role}{sid}", "ip": f"10.0.0.{sid}", "role": role,
            "sid": sid, "gid": sid, "gsid": "123456789", "cpu": 1, "memory": 1024, "volume_size": 10,
            "instance_class": 101, **extra}


def tree_of(cluster: Cluster, nodes: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return metadata.self_tree(nodes[0], nodes, {"cluster_id": CLUSTER_ID, "endpoints": {}}, {"k": "v"},
                              definition=cluster, **options)


def test_a_package_whose_node_omits_role_lists_its_hosts_directly_under_hosts() -> None:
    zookeeper = cluster_of("zookeeper")  # its template's one node has no "role"; confd reads /hosts/*/ip
    assert zookeeper.hosts_by_role is False and zookeeper.nodes[0].name == "zk_node"
    again = Cluster.model_validate(zookeeper.model_dump(mode="json", by_alias=True))  # as the record keeps it
    assert again.hosts_by_role is False
    nodes = [host("zk_node", 1), host("zk_node", 2), host("zk_node", 3)]
    tree = tree_of(zookeeper, nodes[:2], adding=[nodes[2]])
    assert sorted(tree["hosts"]) == ["i-zk_node1", "i-zk_node2"]
    assert metadata.lookup(tree, "/self/hosts/i-zk_node2/ip") == "10.0.0.2"
    assert metadata.lookup(tree, "/self/adding-hosts/i-zk_node3/sid") == "3"
    assert metadata.lookup(tree, "/self/host/role") == "zk_node"

    etcd = cluster_of("etcd")  # two named roles: by role, then instance id
    assert etcd.hosts_by_role is True
    tree = tree_of(etcd, [host("etcd_node", 1), host("etcd_proxy", 1)])
    assert sorted(tree["hosts"]) == ["etcd_node", "etcd_proxy"]
    assert metadata.lookup(tree, "/self/hosts/etcd_proxy/i-etcd_proxy1/instance_id") == "i-etcd_proxy1"
    assert metadata.self_tree(host("a", 1), [host("a", 1)], {}, {})["hosts"] == {  # no definition: by role
        "a": {"i-a1": metadata.host_entry(host("a", 1))}}


def test_every_host_field_of_section_8_is_there_with_what_the_role_defines() -> None:
    postgres = cluster_of("postgresql-simplecluster")  # volume class 3, and endpoints.reserved_ips.vip
    tree = tree_of(postgres, [host("pg", 1), host("pg", 2)])
    entry = tree["hosts"]["pg"]["i-pg1"]
    assert set(metadata.HOST_FIELDS) <= set(entry) and entry["volume_class"] == "3"
    assert entry["eip"] == "" and entry["pub_key"] == "" and entry["gpu"] == "" and entry["memory"] == "1024"
    assert tree["host"] == entry
    vip = metadata.lookup(tree, "/self/cluster/endpoints/reserved_ips/vip/value")
    assert vip.startswith("127.") and vip == metadata.reserved_ip(CLUSTER_ID, "vip")
    assert metadata.reserved_ip("cl-other", "vip") != vip
    assert tree["cluster"]["cluster_tag"] == ""  # need_tag is false
    assert tree["cluster"]["resource_limits"] == {"valid_volume_classes": "0,2,3,5,6,100,200",
                                                  "valid_instance_classes": "0,1,101,201,202,301"}
    assert tree["cluster"]["api_server"] == {"host": "", "port": "", "protocol": ""}
    given = metadata.self_tree(host("pg", 1), [host("pg", 1)], {"cluster_id": CLUSTER_ID, "api_server": {
        "host": "api.example", "port": "443", "protocol": "https"}}, {}, definition=postgres)
    assert given["cluster"]["api_server"]["host"] == "api.example"  # what the executor's keys say wins

    tagged = postgres.model_copy(update={"need_tag": True})
    assert tree_of(tagged, [host("pg", 1)])["cluster"]["cluster_tag"].startswith("tag-")
    role = postgres.nodes[0].model_copy(update={"gpu": 1, "gpu_class": 0,
                                                "reserved_ips": {"own": {"value": ""}, "fixed": {"value": "10.9.9.9"}}})
    with_gpu = postgres.model_copy(update={"nodes": [role]})
    entry = tree_of(with_gpu, [host("pg", 1)])["host"]
    assert (entry["gpu"], entry["gpu_class"]) == ("1", "0")
    assert entry["reserved_ips"]["fixed"] == {"value": "10.9.9.9"}  # a value the package gives is kept
    assert entry["reserved_ips"]["own"]["value"] == metadata.reserved_ip(CLUSTER_ID, "own", "cln-pg1")
    token = tree_of(postgres, [host("pg", 1, custom={"token": "tok-1"})])["host"]["token"]
    assert token == "tok-1"  # what custom_metadata printed

    tomcat = cluster_of("tomcat")  # links to a redis and a mysql service (no cluster chosen by default)
    tree = tree_of(tomcat, [host("tomcat_nodes", 1)])
    assert tree["links"] == {"redis_service": "", "mysql_service": ""}
    linked = tomcat.model_copy(update={"links": {"redis_service": "cl-redis1"}})
    assert metadata.lookup(tree_of(linked, [host("tomcat_nodes", 1)]), "/self/links/redis_service") == "cl-redis1"


def test_a_backend_fills_the_fields_only_it_knows_where_they_are_empty() -> None:
    nodes = [host("zk_node", 1), host("zk_node", 2, mac="02:00:00:00:00:99")]
    tree = tree_of(cluster_of("zookeeper"), nodes, deleting=[nodes[1]])
    machines = {"i-zk_node1": {"mac": "02:aa:bb:cc:dd:01", "physical_machine": "host-a", "ip": "6.6.6.6"},
                "i-zk_node2": {"mac": "02:aa:bb:cc:dd:02", "physical_machine": "host-a"}}
    shown = metadata.with_platform_fields(tree, machines)
    assert shown["hosts"]["i-zk_node1"]["mac"] == "02:aa:bb:cc:dd:01" == shown["host"]["mac"]
    assert shown["hosts"]["i-zk_node1"]["ip"] == "10.0.0.1"  # only mac and physical_machine
    assert shown["hosts"]["i-zk_node2"]["mac"] == "02:00:00:00:00:99"  # what the executor knew is kept
    assert shown["deleting-hosts"]["i-zk_node2"]["physical_machine"] == "host-a"
    assert tree["host"]["mac"] == ""  # a copy: the tree given is left alone
    by_role = metadata.with_platform_fields(tree_of(cluster_of("etcd"), [host("etcd_node", 1)]),
                                            {"i-etcd_node1": {"mac": "02:01:02:03:04:05"}})
    assert by_role["hosts"]["etcd_node"]["i-etcd_node1"]["mac"] == "02:01:02:03:04:05"


def test_the_endpoint_answers_as_metad_does_in_json_and_in_text() -> None:
    tree = tree_of(cluster_of("zookeeper"), [host("zk_node", 1)])
    tree["cluster"]["cluster_id"] = CLUSTER_ID
    status, kind, body = metadata.answer_for(tree, "/self/host")  # a directory, no Accept: JSON
    assert (status, kind) == (200, "application/json") and json.loads(body)["ip"] == "10.0.0.1"
    status, kind, body = metadata.answer_for(tree, "/self/hosts", "text/plain")  # metad's text form
    lines = body.splitlines()
    assert (status, kind) == (200, "text/plain") and lines == sorted(lines)
    assert "/i-zk_node1/ip\t10.0.0.1" in lines and "/i-zk_node1/memory\t1024" in lines
    assert metadata.answer_for(tree, "/self/host/ip") == (200, "text/plain", "10.0.0.1")
    assert metadata.answer_for(tree, "/self/host/ip", "application/json, text/plain;q=0.5") == (
        200, "application/json", '"10.0.0.1"')
    assert metadata.answer_for(tree, f"/{CLUSTER_ID}/host/ip") == (200, "text/plain", "10.0.0.1")  # the same tree
    assert metadata.answer_for(tree, "/cl-someone-else/host/ip")[0] == 404  # no metadata_root_access
    assert metadata.answer_for(tree, "/self/host/nothing") == (404, "text/plain", "Not found\n")
    status, kind, body = metadata.answer_for(tree, "/self/nothing", "application/json")
    assert (status, kind, json.loads(body)["code"]) == (404, "application/json", 404)
    assert metadata.flatten({"b": {"c": 1, "a": True}, "a": None}) == [("/a", ""), ("/b/a", "true"), ("/b/c", "1")]
