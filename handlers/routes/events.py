"""Listing and following ``route`` / ``route_deletion`` (and app) events of the local store."""

from __future__ import annotations

import json
import time
from typing import Callable, Iterator, Sequence

from .model import Event
from .repository import RouteRepository

ROUTE_EVENT_TYPES = ("route", "route_deletion")


def format_event(event: Event) -> str:
    """One line per event: id, time, type, object id, and the route's essentials."""
    data = event.data
    if event.object_type in ROUTE_EVENT_TYPES:
        target = f"{data.get('domain', '')}{data.get('path', '')}" if data.get("type") == "http" else f":{data.get('port', '')}"
        what = f"{data.get('type', '')}/{event.object_id} {target} -> {data.get('service', '')}"
    else:
        what = event.object_id
    return f"{event.id:>6} {event.created_at} {event.object_type:<15} {what}"


def event_json(event: Event) -> str:
    return json.dumps(event.to_json(), sort_keys=True)


def follow(
    repo: RouteRepository,
    *,
    object_types: Sequence[str] = ROUTE_EVENT_TYPES,
    since_id: int = 0,
    poll_interval: float = 0.5,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[Event]:
    """Yield events after ``since_id`` in ascending order, polling until ``should_stop()``."""
    last = since_id
    while True:
        for event in repo.list_events(object_types=object_types, since_id=last, ascending=True):
            last = event.id
            yield event
        if should_stop():
            return
        time.sleep(poll_interval)
