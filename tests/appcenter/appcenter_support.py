"""Helpers for the AppCenter package tests: the shared packages, edited copies, archives."""

from __future__ import annotations

import copy
import io
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from handlers.appcenter.check import Checked, check_package
from handlers.appcenter.cluster import Cluster
from handlers.appcenter.config import Config, parse_config
from handlers.appcenter.package import Package, load_package
from handlers.appcenter.problems import InvalidPackage, Problem

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO.parent / "shared" / "appcenter"
NAMES = ("zookeeper", "etcd", "redis-standalone", "tomcat", "postgresql-simplecluster")


def package_dir(name: str) -> Path:
    path = PACKAGES / name
    if not path.is_dir():
        pytest.fail(f"shared package {name} not found at {path}; CI keeps shared/ beside the checkout")
    return path


def load(name: str) -> Package:
    return load_package(package_dir(name))


def config_of(name: str) -> Config:
    return parse_config(load(name).config)


def checked(name: str, inputs: Mapping[str, Any] | None = None, **options: Any) -> Checked:
    return check_package(load(name), inputs, **options)


def cluster_of(name: str, inputs: Mapping[str, Any] | None = None, **options: Any) -> Cluster:
    result = checked(name, inputs, **options)
    assert result.ok, [str(p) for p in result.problems]
    assert result.cluster is not None
    return result.cluster


def edited(name: str, config: Callable[[Any], None] | None = None,
           template: Callable[[str], str] | None = None) -> Package:
    """A shared package with its parsed config.json and/or template changed in memory."""
    package = load(name)
    raw = copy.deepcopy(package.config)
    if config is not None:
        config(raw)
    text = template(package.template) if template is not None else package.template
    return Package(source=package.source, config=raw, template=text, replace_policy=package.replace_policy,
                   locales=package.locales)


def minimal_config(*env_items: dict[str, Any], roles: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """A small valid config.json: name/description/vxnet, one role `node` with a count, env items."""
    node_items = [{"key": "count", "type": "integer", "default": 1, "required": "yes"},
                  {"key": "cpu", "type": "integer", "default": 1, "required": "no"}]
    role_arrays = [{"key": role, "type": "array", "properties": items}
                   for role, items in (roles or {"node": node_items}).items()]
    return {"type": "array", "properties": [
        {"key": "cluster", "type": "array", "properties": [
            {"key": "name", "type": "string", "default": "app", "required": "no"},
            {"key": "description", "type": "string", "default": "", "required": "no"},
            {"key": "vxnet", "type": "string", "default": "", "required": "yes"},
            *role_arrays]},
        {"key": "env", "type": "array", "properties": list(env_items)},
    ]}


def rules_of(exc: pytest.ExceptionInfo[InvalidPackage]) -> list[str]:
    return [str(problem) for problem in exc.value.problems]


def problem_texts(problems: Any) -> list[str]:
    return [str(problem) for problem in problems if isinstance(problem, Problem)]


def files_of(name: str) -> dict[str, bytes]:
    """The package's files as an archive would hold them."""
    root = package_dir(name)
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def make_zip(path: Path, files: Mapping[str, bytes], prefix: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in files.items():
            archive.writestr(prefix + name, body)
    return path


def make_tar(path: Path, files: Mapping[str, bytes], prefix: str = "", mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as archive:  # type: ignore[call-overload]
        for name, body in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    return path

