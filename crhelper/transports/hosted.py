"""What a transport needs from the provider it hosts: the seam between `transports/` and `Provider`.

Transports (FC, HTTP, the MNS queue worker) are written against this Protocol, not against
`Provider` itself, so they never import the facade and tests can host any conforming object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..config import Settings
    from ..reentry import Reentry
    from ..runtime import Outcome


class HostedProvider(Protocol):
    """The entry points of `crhelper.Provider` that transports call."""

    @property
    def types(self) -> list[str]: ...

    def settings(self) -> "Settings": ...

    def handle(self, event: Any, context: object | None = None, *, started: float | None = None) -> dict[str, Any] | None: ...

    def process(
        self, event: Any, context: object | None = None, *, started: float | None = None,
        reentry: "Reentry | None" = None, accepted: str | None = None,
    ) -> "Outcome": ...

    def accept(self, event: Any) -> str | None: ...

    def discard(self, accepted: str) -> None: ...

    def give_up(self, event: Any, reason: str) -> "Outcome": ...

    def respond(self, event: Any, *, within: float | None = None) -> dict[str, Any] | None: ...

    def recover(
        self, reentry: "Reentry | None" = None, limit: int = 5, context: object | None = None,
        started: float | None = None,
    ) -> int: ...

    def close(self) -> None: ...

    # Optional: the time trigger runs `timer_hooks` ((name, hook) pairs) when the object has them.
    # Not part of the Protocol, so every conforming object stays conforming; see Provider.on_timer.
