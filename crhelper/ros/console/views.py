"""The console's JSON endpoints under /console/api/, each a thin view over `LocalStacks`.

Pure apart from the calls into the facade: a route is a method, a path pattern and a function of
(stacks, path arguments, query, body) to a JSON-serialisable answer. Errors are ROS's (`RosError`: code,
message, HTTP status), the console's own refusals too; bad input names the field and the rule.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote

from ..stacks import RosError

if TYPE_CHECKING:
    from ..stacks import LocalStacks

API_PREFIX = "/console/api/"
#: How long a long poll waits for a change before answering anyway.
LONG_POLL_SECONDS = 1.0
#: The parts of a stack's view a tab may ask for.
VIEW_PARTS = ("resources", "events", "dependencies")


View = Callable[["LocalStacks", "dict[str, str]", "dict[str, list[str]]", "dict[str, Any]"], Any]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    view: View
    mutates: bool = False


def invalid(field: str, rule: str) -> RosError:
    return RosError("InvalidParameter", f"{field}: {rule}", 400)


def parse_body(body: bytes) -> dict[str, Any]:
    """A POST body: one JSON object (an empty body is an empty object)."""
    if not body.strip():
        return {}
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RosError("InvalidParameter", f"request body: not valid JSON ({error})", 400) from None
    if not isinstance(data, dict):
        raise RosError("InvalidParameter", "request body: must be a JSON object", 400)
    return data


def _string(data: dict[str, Any], field: str, *, required: bool = False) -> str | None:
    value = data.get(field)
    if value is None or value == "":
        if required:
            raise invalid(field, "required, a non-empty string")
        return None
    if not isinstance(value, str):
        raise invalid(field, "must be a string")
    return value


def _flag(data: dict[str, Any], field: str) -> bool:
    value = data.get(field, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise invalid(field, "must be true or false")


def _minutes(data: dict[str, Any]) -> int | None:
    value = data.get("TimeoutInMinutes")
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 10 <= value <= 1440:
        raise invalid("TimeoutInMinutes", "must be a whole number of minutes from 10 to 1440")
    return value


def _parameters(data: dict[str, Any]) -> dict[str, str]:
    """`Parameters` as {key: value}; a list of {ParameterKey, ParameterValue} (the API's shape) too."""
    value = data.get("Parameters") or {}
    if isinstance(value, list):
        pairs: dict[str, Any] = {}
        for index, item in enumerate(value, start=1):
            if not isinstance(item, dict) or not isinstance(item.get("ParameterKey"), str):
                raise invalid(f"Parameters.{index}", "must be an object with ParameterKey and ParameterValue")
            pairs[item["ParameterKey"]] = item.get("ParameterValue", "")
        value = pairs
    if not isinstance(value, dict):
        raise invalid("Parameters", "must be an object of parameter names to values")
    out: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            item = "true" if item else "false"
        elif isinstance(item, (int, float)):
            item = str(item)
        elif isinstance(item, (list, dict)):
            item = json.dumps(item)
        if not isinstance(item, str):
            raise invalid(f"Parameters.{key}", "must be a string")
        out[key] = item
    return out


def _retained(data: dict[str, Any]) -> list[str] | None:
    value = data.get("RetainResources")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise invalid("RetainResources", "must be a list of logical resource ids")
    return list(value)


def _wait_for_change(stacks: LocalStacks, query: dict[str, list[str]]) -> int | None:
    """A long poll: with `?since=V`, hold the answer until the facade's change counter passes V
    (an event or a finished operation in this server) or LONG_POLL_SECONDS went by (changes made
    by another process, `crhelper stack`, show within that). The counter to send next time."""
    version = getattr(stacks, "version", None)
    if not isinstance(version, int):
        return None
    raw = (query.get("since") or [""])[-1]
    if raw:
        if not raw.isdigit():
            raise invalid("since", "must be the Version of the previous answer (0 or more)")
        if int(raw) >= version:
            version = stacks.wait_for_change(int(raw), LONG_POLL_SECONDS)
    return version


def _events_after(query: dict[str, list[str]]) -> int:
    raw = (query.get("events") or ["0"])[-1]
    if not raw.isdigit():
        raise invalid("events", "must be the number of events already shown (0 or more)")
    return int(raw)


# ---- views ---------------------------------------------------------------------------------

def list_stacks(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    version = _wait_for_change(stacks, query)
    return {"Stacks": stacks.list(), "Version": version}


def create_stack(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    name = _string(data, "StackName", required=True)
    body = _string(data, "TemplateBody", required=True)
    assert name is not None and body is not None
    stack_id = stacks.create(name, body, _parameters(data), disable_rollback=_flag(data, "DisableRollback"),
                             timeout_minutes=_minutes(data), client_token=_string(data, "ClientToken"))
    return {"StackId": stack_id}


def validate_template(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    body = _string(data, "TemplateBody", required=True)
    assert body is not None
    return stacks.validate(body)


def get_stack(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    return {"Stack": stacks.get(args["stack"])}


def _parts(query: dict[str, list[str]]) -> set[str]:
    raw = (query.get("include") or [",".join(VIEW_PARTS)])[-1]
    parts = {part for part in raw.split(",") if part} - {"stack"}  # the stack itself is always there
    unknown = parts - set(VIEW_PARTS)
    if unknown:
        raise invalid("include", f"unknown part {sorted(unknown)[0]!r} (choose from stack, {', '.join(VIEW_PARTS)})")
    return parts


def stack_view(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    """What one stack's page shows, in one poll: the stack, and of its resources, the events it
    has not shown yet (`?events=N` = how many it has) and the dependency graph those the tab
    draws (`?include=events,resources`; all by default): each part costs a read of the stack."""
    stack_id = args["stack"]
    after = _events_after(query)
    parts = _parts(query)
    version = _wait_for_change(stacks, query)
    answer: dict[str, Any] = {"Stack": stacks.get(stack_id), "Version": version}
    if "resources" in parts:
        answer["Resources"] = stacks.resources(stack_id)
    if "events" in parts:
        events = stacks.events(stack_id)
        answer.update(Events=events[after:] if after <= len(events) else events, EventCount=len(events),
                      EventsReset=after > len(events))
    if "dependencies" in parts:
        answer["Dependencies"] = stacks.dependencies(stack_id)
    return answer


def stack_events(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    return {"Events": stacks.events(args["stack"])}


def stack_resources(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    return {"Resources": stacks.resources(args["stack"])}


def stack_template(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    return {"TemplateBody": stacks.template(args["stack"])}


def stack_dependencies(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    return {"Dependencies": stacks.dependencies(args["stack"])}


def resource_logs(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    return {"LogicalResourceId": args["resource"], "Lines": stacks.provider_logs(args["stack"], args["resource"])}


def update_stack(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    stack_id = stacks.update(args["stack"], _string(data, "TemplateBody"), _parameters(data),
                             use_previous_parameters=_flag(data, "UsePreviousParameters"),
                             disable_rollback=_flag(data, "DisableRollback"), timeout_minutes=_minutes(data),
                             client_token=_string(data, "ClientToken"))
    return {"StackId": stack_id}


def delete_stack(stacks: LocalStacks, args: dict[str, str], query: dict[str, list[str]], data: dict[str, Any]) -> Any:
    stacks.delete(args["stack"], retain_resources=_retained(data), retain_all=_flag(data, "RetainAllResources"),
                  client_token=_string(data, "ClientToken"))
    return {"StackId": args["stack"]}


_SEGMENT = r"[^/]+"


def _route(method: str, path: str, view: View) -> Route:
    pattern = re.escape(API_PREFIX) + path.replace("{stack}", f"(?P<stack>{_SEGMENT})").replace(
        "{resource}", f"(?P<resource>{_SEGMENT})")
    return Route(method, re.compile(pattern + r"\Z"), view, mutates=method == "POST")


ROUTES: tuple[Route, ...] = (
    _route("GET", "stacks", list_stacks),
    _route("POST", "stacks", create_stack),
    _route("POST", "validate", validate_template),
    _route("GET", "stacks/{stack}", get_stack),
    _route("GET", "stacks/{stack}/view", stack_view),
    _route("GET", "stacks/{stack}/events", stack_events),
    _route("GET", "stacks/{stack}/resources", stack_resources),
    _route("GET", "stacks/{stack}/template", stack_template),
    _route("GET", "stacks/{stack}/dependencies", stack_dependencies),
    _route("GET", "stacks/{stack}/resources/{resource}/logs", resource_logs),
    _route("POST", "stacks/{stack}/update", update_stack),
    _route("POST", "stacks/{stack}/delete", delete_stack),
)


def find_route(method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route for (method, path); ROS-shaped 404 or 405 (naming the allowed method) otherwise."""
    allowed = []
    for route in ROUTES:
        match = route.pattern.match(path)
        if match is None:
            continue
        if route.method == method or (method == "HEAD" and route.method == "GET"):
            return route, {key: unquote(value) for key, value in match.groupdict().items()}
        allowed.append(route.method)
    if allowed:
        raise RosError("MethodNotAllowed", f"{path} accepts {' or '.join(sorted(set(allowed)))} only", 405)
    raise RosError("NotFound", f"{path}: no such console endpoint", 404)
