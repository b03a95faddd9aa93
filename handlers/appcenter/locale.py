"""Translations from ``locale/<lang>.json`` (spec §6): labels, descriptions, custom-service keys,
monitor names and ``err_code<N>`` messages in the requested language.

A language is matched loosely (``zh_CN``, ``zh-CN`` and ``zh`` find ``zh-cn.json``; ``en-US``
finds ``en.json``). A label without a translation shows its source string. An ``err_code<N>``
has no source string, so it falls back to English, then to any locale that defines it, else None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .config import Config

ENGLISH = "en"
NOTICE_WHEN_UPGRADE = "notice_when_upgrade"


def language_key(language: str | None, available: Mapping[str, object]) -> str | None:
    """The locale file name (``zh-cn``) for a requested language, or None."""
    if not language:
        return None
    wanted = language.strip().lower().replace("_", "-")
    if wanted in available:
        return wanted
    base = wanted.split("-", 1)[0]
    if base in available:
        return base
    same_base = sorted(name for name in available if name.split("-", 1)[0] == base)
    return same_base[0] if same_base else None


@dataclass(frozen=True)
class Translator:
    """One package's translations for one language."""

    locales: Mapping[str, Mapping[str, str]]
    language: str | None = None

    @property
    def table(self) -> Mapping[str, str]:
        key = language_key(self.language, self.locales)
        return self.locales.get(key, {}) if key else {}

    def text(self, source: str) -> str:
        """The translation of a source string, else the source string itself."""
        return self.table.get(source, source) if source else source

    def error_message(self, exit_code: int) -> str | None:
        """The ``err_code<N>`` message for a non-zero exit, in the best language there is."""
        return self.keyed(f"err_code{exit_code}")

    def upgrade_notice(self) -> str | None:
        return self.keyed(NOTICE_WHEN_UPGRADE)

    def keyed(self, key: str) -> str | None:
        """A message that exists only in the locales: this language, English, then any other."""
        for table in (self.table, self.locales.get(ENGLISH, {}), *(self.locales[name] for name in sorted(self.locales))):
            if key in table:
                return table[key]
        return None

    def labels(self, config: Config) -> dict[str, dict[str, str]]:
        """Item path -> its translated label and description (the form as the user sees it)."""
        return {path: {"label": self.text(item.label), "description": self.text(item.description)}
                for path, item in config.items.items()}
