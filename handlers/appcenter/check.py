"""The whole package pipeline: files -> form -> values -> rendered JSON -> typed cluster.

`check_package` runs every stage it can and gathers every problem on the way (a broken value
does not hide an unknown template path), stopping only where a stage has nothing to work on
(config.json unusable, the template not rendering). `Checked.ok` says whether it is deployable.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Any, Mapping

from .cluster import Cluster, parse_cluster
from .config import Config, parse_config
from .mustache import parse_rendered, render_text
from .package import ByDigest, Package, load_package
from .problems import ERROR, InvalidPackage, Problem, Severity, errors_in
from .values import INPUTS, Values, resolve_values


@dataclass(frozen=True)
class Checked:
    """What each stage produced (None where it could not run) and every problem found."""

    package: Package | None
    config: Config | None = None
    values: Values | None = None
    rendered: Any = None
    cluster: Cluster | None = None
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return self.cluster is not None and not errors_in(self.problems)

    @property
    def errors(self) -> list[Problem]:
        return errors_in(self.problems)


def check_package(package: Package, inputs: Mapping[str, Any] | None = None, *, resource_group: str | None = None,
                  zone: str | None = None, previous: Mapping[str, Any] | None = None, creating: bool = True,
                  where: str = INPUTS, missing_required: Severity = ERROR) -> Checked:
    """Check a loaded package with the user's values (arguments as `values.resolve_values`)."""
    try:
        config = parse_config(package.config, package.config_digest or None)
    except InvalidPackage as exc:
        return Checked(package, problems=tuple(exc.problems))
    problems = list(config.problems)
    values = resolve_values(config, inputs, resource_group=resource_group, zone=zone,
                            replace_policy=package.replace_policy, previous=previous, creating=creating, where=where,
                            missing_required=missing_required)
    problems += values.problems
    try:
        text = render_text(package.template, values.values)
        rendered = parse_rendered(text)
    except InvalidPackage as exc:
        return Checked(package, config, values, problems=tuple(problems + exc.problems))
    try:
        if package.config_digest:  # the same form rendered to the same text: the cluster typed before
            key = hashlib.sha256(f"{package.config_digest}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
            cluster, warnings = _typed(ByDigest(key, (rendered, config)))
        else:
            cluster, found = parse_cluster(rendered, config)
            warnings = tuple(found)
    except InvalidPackage as exc:
        return Checked(package, config, values, rendered, problems=tuple(problems + exc.problems))
    return Checked(package, config, values, rendered, cluster, tuple(problems) + warnings)


@functools.lru_cache(maxsize=32)
def _typed(rendered: ByDigest[tuple[Any, Config]]) -> tuple[Cluster, tuple[Problem, ...]]:
    """`parse_cluster`, kept for the texts rendered lately (a Cluster is read-only once parsed)."""
    cluster, warnings = parse_cluster(*rendered.value)
    return cluster, tuple(warnings)


def load_and_check(source: str | os.PathLike[str], inputs: Mapping[str, Any] | None = None, *,
                   env: Mapping[str, str] | None = None, **options: Any) -> Checked:
    """Load (`PackageUnreadable` propagates: nothing could be checked) and check a package."""
    try:
        package = load_package(source, env)
    except InvalidPackage as exc:
        return Checked(None, problems=tuple(exc.problems))
    return check_package(package, inputs, **options)
