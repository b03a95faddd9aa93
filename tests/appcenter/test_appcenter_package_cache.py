"""A warm process parses a package only when its bytes change (issue 13's 5 ms per validate + render):
the files by content digest, config.json by its digest, the template's scan by its text, the typed
cluster by the rendered text. What is found must be what a fresh parse finds: a changed file is
parsed again, problems keep their lines, an invalid cluster is reported every time."""

from __future__ import annotations

import json

import pytest

from appcenter_support import files_of, load, package_dir, rules_of
from handlers.appcenter.check import check_package, load_and_check
from handlers.appcenter.config import parse_config
from handlers.appcenter.mustache import render, render_text
from handlers.appcenter.package import files_digest, parse_files
from handlers.appcenter.problems import InvalidPackage


def test_unchanged_files_are_not_parsed_again_and_a_changed_one_is() -> None:
    files = files_of("zookeeper")
    first = parse_files(files, "one")
    again = parse_files(dict(files), "two")
    assert again.config is first.config and again.locales is first.locales  # the parse was kept
    assert (first.source, again.source) == ("one", "two")
    changed = dict(files)
    changed["locale/en.json"] = json.dumps({"Node Count": "Nodes"}).encode()
    other = parse_files(changed, "one")
    assert other.locales["en"] == {"Node Count": "Nodes"} and other.config is not first.config
    assert parse_files(files, "one").locales["en"] == first.locales["en"] != other.locales["en"]
    assert files_digest({"ab": b"c"}) != files_digest({"a": b"bc"})  # names and bytes cannot run together
    broken = dict(files)
    broken["config.json"] = b"{"
    for _ in range(2):  # a broken package is reported every time, never served from the cache
        with pytest.raises(InvalidPackage):
            parse_files(broken, "x")


def test_a_config_parsed_once_by_digest_and_checks_still_see_their_values() -> None:
    package = load("etcd")
    assert package.config_digest and parse_config(package.config, package.config_digest) is parse_config(
        package.config, package.config_digest)
    assert parse_config(package.config) is not parse_config(package.config)  # no digest, no cache
    small = check_package(package, {"cluster.etcd_node.count": 5})
    default = load_and_check(package_dir("etcd"))
    assert small.ok and default.ok and small.config is default.config
    assert small.cluster is not None and default.cluster is not None
    assert small.cluster.node("etcd_node").count == 5 != default.cluster.node("etcd_node").count
    same = check_package(package, {"cluster.etcd_node.count": 5})  # the same text rendered: typed once
    assert same.cluster is small.cluster and same.rendered == small.rendered and same.rendered is not small.rendered
    bad = {"cluster.etcd_node.count": 5, "cluster.etcd_node.volume_size": 15}  # not a multiple of 10
    for _ in range(2):  # an invalid cluster is found every time
        found = check_package(package, bad)
        assert not found.ok and any("volume.size" in str(problem) for problem in found.errors)


def test_a_kept_template_scan_renders_new_values_and_reports_problems_with_their_lines() -> None:
    template = '{\n  "a": {{env.a}},\n  "b": "x{{env.b}}y",\n  "c": {{env.c}}\n}'
    assert render(template, {"env.a": 1, "env.b": "q\"", "env.c": [1]}) == {"a": 1, "b": "xq\"y", "c": [1]}
    assert render(template, {"env.a": "s", "env.b": 2, "env.c": None}) == {"a": "s", "b": "x2y", "c": None}
    for _ in range(2):
        with pytest.raises(InvalidPackage) as caught:
            render_text(template, {"env.b": 1})
        assert rules_of(caught) == [
            "cluster.json.mustache line 2: {{env.a}}: unknown path; config.json has no such entry (paths are "
            "section[.role].key)",
            "cluster.json.mustache line 4: {{env.c}}: unknown path; config.json has no such entry (paths are "
            "section[.role].key)"]
    with pytest.raises(InvalidPackage) as caught:
        render_text("{\n{{#s}}\n}", {}, file="other.mustache")
    assert rules_of(caught)[0].startswith("other.mustache line 2: {{#s}}: a section is not supported")
