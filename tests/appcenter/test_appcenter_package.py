"""Loading packages: folders, zip and tar.gz archives (safe: no traversal, no links, capped sizes),
an OSS/S3 object through boto3 against moto on loopback, and the file-level problems."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from appcenter_support import NAMES, files_of, make_tar, make_zip, package_dir
from handlers.appcenter.package import MAX_FILE_BYTES, load_package
from handlers.appcenter.problems import InvalidPackage, PackageUnreadable


@pytest.mark.parametrize("name", NAMES)
def test_every_shared_package_loads_from_its_folder(name: str) -> None:
    package = load_package(package_dir(name))
    assert package.config["type"] == "array"
    assert "{{cluster.name}}" in package.template
    assert "zh-cn" in package.locales


def test_the_optional_files_are_read() -> None:
    package = load_package(package_dir("zookeeper"))
    assert package.replace_policy["pek3a"]["instance_class"][0] == {"src": "101", "dst": 0}
    assert package.locales["en"]["Participant Node"] == "ZooKeeper Node"
    assert "err_code210" in package.locales["zh-cn"]


@pytest.mark.parametrize("prefix", ["", "zookeeper-1.0/"])
def test_a_zip_loads_with_or_without_a_top_folder(tmp_path: Path, prefix: str) -> None:
    files = {**files_of("zookeeper"), "scripts/ctl.sh": b"#!/bin/sh\n"}
    path = make_zip(tmp_path / "zk.zip", files, prefix)
    if prefix:  # what macOS's Finder adds beside the folder
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr(f"__MACOSX/{prefix}._config.json", b"\x00\x05")
    package = load_package(path)
    assert package.template == (package_dir("zookeeper") / "cluster.json.mustache").read_text()
    assert set(package.locales) == {"en", "zh-cn"}


@pytest.mark.parametrize("prefix", ["", "etcd/"])
def test_a_tar_gz_loads_with_or_without_a_top_folder(tmp_path: Path, prefix: str) -> None:
    package = load_package(make_tar(tmp_path / "etcd.tar.gz", files_of("etcd"), prefix))
    assert package.config == load_package(package_dir("etcd")).config


def test_the_archive_kind_comes_from_its_content_not_its_name(tmp_path: Path) -> None:
    package = load_package(make_zip(tmp_path / "etcd.tar.gz", files_of("etcd")))
    assert "etcd_node" in package.template


@pytest.mark.parametrize("member", ["../evil.json", "a/../../evil.json", "/etc/evil.json", "C:/evil.json"])
def test_a_zip_with_a_member_outside_the_package_is_refused(tmp_path: Path, member: str) -> None:
    path = make_zip(tmp_path / "bad.zip", {**files_of("etcd"), member: b"{}"})
    with pytest.raises(PackageUnreadable, match="unsafe archive member"):
        load_package(path)


def test_a_tar_with_a_link_or_traversal_is_refused(tmp_path: Path) -> None:
    for kind, name in ((tarfile.SYMTYPE, "config.json"), (tarfile.REGTYPE, "../../x")):
        path = tmp_path / f"bad{kind!r}.tar.gz"
        with tarfile.open(path, "w:gz") as archive:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            archive.addfile(info, io.BytesIO(b""))
        with pytest.raises(PackageUnreadable, match="unsafe archive member"):
            load_package(path)


def test_an_oversized_member_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in files_of("etcd").items():
            archive.writestr(name, body)
        archive.writestr("locale/xx.json", b" " * (MAX_FILE_BYTES + 1))
    assert path.stat().st_size < 100_000
    with pytest.raises(PackageUnreadable, match="per file"):
        load_package(path)


def test_unreadable_sources_say_why(tmp_path: Path) -> None:
    (tmp_path / "not-an-archive.zip").write_bytes(b"hello")
    with pytest.raises(PackageUnreadable, match="no such package"):
        load_package(tmp_path / "missing")
    with pytest.raises(PackageUnreadable, match="neither a folder nor"):
        load_package(tmp_path / "not-an-archive.zip")
    with pytest.raises(PackageUnreadable, match="unknown package scheme"):
        load_package("ftp://host/pkg.zip")


def test_file_problems_are_all_reported_at_once(tmp_path: Path) -> None:
    files = files_of("zookeeper")
    files["config.json"] = b"\xef\xbb\xbf" + files["config.json"]
    files["locale/en.json"] = b'{"a": "caf\xe9"}'
    files["replace_policy.json"] = b'{"pek3a": {"instance_class": [{"src": 101, "dst": 0}]}}'
    files["locale/zh-cn.json"] = b'{"a": 1,}'
    del files["cluster.json.mustache"]
    with pytest.raises(InvalidPackage) as caught:
        load_package(make_zip(tmp_path / "bad.zip", files))
    texts = [str(problem) for problem in caught.value.problems]
    assert "cluster.json.mustache: required file missing" in texts
    assert any(t.startswith("config.json: starts with a UTF-8 byte order mark") for t in texts)
    assert any(t.startswith("locale/en.json line 1: not UTF-8") for t in texts)
    assert any(t.startswith("locale/zh-cn.json line 1 column 9: not JSON") for t in texts)
    assert "replace_policy.json pek3a.instance_class[0]: src must be a string (the old value as text)" in texts


def test_a_folder_without_config_json_is_invalid_not_unreadable(tmp_path: Path) -> None:
    (tmp_path / "cluster.json.mustache").write_text("{}")
    with pytest.raises(InvalidPackage, match="config.json: required file missing"):
        load_package(tmp_path)


def test_a_utf16_file_is_named(tmp_path: Path) -> None:
    files = files_of("etcd")
    files["cluster.json.mustache"] = files["cluster.json.mustache"].decode().encode("utf-16")
    with pytest.raises(InvalidPackage, match="cluster.json.mustache: is UTF-16"):
        load_package(make_zip(tmp_path / "p.zip", files))


# --- OSS / S3 through boto3, against moto's S3 server on loopback ----------------------------------

#: What a deployed function has: Alibaba Cloud credentials in the environment (moto accepts any).
S3_ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "testing", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "testing"}


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    boto3 = pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket="apps")
    try:
        yield client, endpoint
    finally:
        server.stop()


@pytest.mark.slow
def test_a_package_loads_from_an_s3_archive_and_an_s3_prefix(s3: Any, tmp_path: Path) -> None:
    client, endpoint = s3
    archive = make_zip(tmp_path / "etcd.zip", files_of("etcd")).read_bytes()
    client.put_object(Bucket="apps", Key="releases/etcd-3.4.zip", Body=archive)
    for name, body in files_of("zookeeper").items():
        client.put_object(Bucket="apps", Key=f"unpacked/zookeeper/{name}", Body=body)
    query = f"?endpoint={endpoint}&addressing=path&region=us-east-1"
    from_archive = load_package(f"s3://apps/releases/etcd-3.4.zip{query}", S3_ENV)
    assert from_archive.source == "s3://apps/releases/etcd-3.4.zip"  # never the query
    assert from_archive.config == load_package(package_dir("etcd")).config
    from_prefix = load_package(f"oss://apps/unpacked/zookeeper/{query}", S3_ENV)
    assert set(from_prefix.locales) == {"en", "zh-cn"} and from_prefix.replace_policy


@pytest.mark.slow
def test_a_missing_s3_object_is_unreadable_and_names_no_endpoint(s3: Any) -> None:
    _, endpoint = s3
    with pytest.raises(PackageUnreadable) as caught:
        load_package(f"s3://apps/nope.zip?endpoint={endpoint}&addressing=path&region=us-east-1", S3_ENV)
    assert "s3://apps/nope.zip" in str(caught.value) and endpoint not in str(caught.value)
    with pytest.raises(PackageUnreadable, match="unknown: colour"):
        load_package("s3://apps/x.zip?colour=blue")

