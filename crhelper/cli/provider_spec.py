"""The provider a command line names: a spec, or the name of an installed provider's manifest."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..loading import SPEC_FORMS, ProviderSpecError, load_provider
from ..manifest import ManifestError, ProviderManifest, find_manifest, looks_like_name

if TYPE_CHECKING:
    from ..provider import Provider


def resolve(text: str) -> tuple[str, ProviderManifest | None]:
    """(spec, manifest): a name stands for its manifest's handler spec; a spec stands for itself."""
    if not looks_like_name(text):
        return text, None
    try:
        manifest = find_manifest(text)
    except ManifestError as exc:
        installed = ", ".join(exc.installed) or "none"
        raise ProviderSpecError(f"{text!r} is neither a provider spec ({SPEC_FORMS}) nor an installed provider's "
                                f"name (installed: {installed})",
                                "see `crhelper providers`, or give a spec such as samples/greeting.py:provider") from None
    return manifest.handler, manifest


def load(text: str) -> "Provider":
    """Load the named provider; the current directory is importable, as users expect from a CLI."""
    spec, _ = resolve(text)
    return load_provider(spec, cwd_importable=True)
