"""A step function over typed state, turned into an ordinary handler whose InProgress steps the
lifecycle stores, re-enters and bounds by the type's deadline (nothing of that is done again here)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, Callable, Generic, TypeVar

from ..constants import CREATE, DELETE, UPDATE
from ..dispatch import MAX_POLL_DELAY
from ..errors import Failure
from ..registry import MAX_DEADLINE
from ..request import Request
from ..response import InProgress, Result
from .budget import SYSTEM_CLOCK, Budget, Clock, Memory, NotYet
from .codec import StateError, check_state_type, dump, load, required_fields

if TYPE_CHECKING:
    from ..provider import Provider

S = TypeVar("S")
StepFunction = Callable[..., Any]

#: The key that marks an InProgress state as written by this module.
ENVELOPE = "crhelper:operation"
#: Default time one step may spend before the operation continues in a later call (s).
DEFAULT_STEP_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Continue(Generic[S]):
    """Returned by a step whose work is not done: call it again in `delay` seconds with `state`
    (None: the state object the step received, as it changed it)."""

    state: S | None = None
    delay: float = 30.0


@dataclasses.dataclass(frozen=True)
class LongOperation:
    """How one (type, operation) runs as steps: its state type and version, its worst-case plan."""

    resource_type: str
    operation: str
    step: StepFunction
    state: type
    version: int = 1
    start: Callable[..., Any] | None = None
    plan: Callable[[Any], float] | None = None
    plan_advice: str = "lower the timeouts in its properties"
    migrate: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None
    step_seconds: float = DEFAULT_STEP_SECONDS
    clock: Clock = SYSTEM_CLOCK


def plan_problem(resource_type: str, planned: float, deadline: float, advice: str) -> str | None:
    """Why a plan of `planned` seconds cannot run within `deadline`, naming both (pure)."""
    if planned <= deadline:
        return None
    if planned > MAX_DEADLINE:
        return (f"the plan may take {planned:,.0f} s but {resource_type}'s deadline is {deadline:,.0f} s and no "
                f"deadline may exceed {MAX_DEADLINE:,.0f} s (ROS's longest Timeout): {advice}")
    return (f"the plan may take {planned:,.0f} s but {resource_type}'s deadline is {deadline:,.0f} s: {advice} or "
            f"raise the deadline with provider.set_deadline({resource_type!r}, {planned:.0f})")


class _Stored:
    """The envelope of a state between calls: the user's state, the operation's memory, its origin."""

    def __init__(self, state: Any, memory: Memory, origin: float) -> None:
        self.state, self.memory, self.origin = state, memory, origin

    def to_json(self, spec: LongOperation) -> dict[str, Any]:
        return {
            ENVELOPE: {"version": spec.version, "state": spec.state.__name__},
            "origin": self.origin,
            "state": dump(self.state),
            "memory": dump(self.memory),
        }

    @classmethod
    def from_json(cls, spec: LongOperation, raw: Any) -> "_Stored":
        """The stored state rebuilt, or Failure with a Reason that says what does not fit."""
        what = f"{spec.resource_type} {spec.operation}"
        mark = raw.get(ENVELOPE) if isinstance(raw, dict) else None
        if not isinstance(mark, dict) or not isinstance(mark.get("version"), int):
            raise Failure(f"the stored state of this {what} was not written by a crhelper long operation (an earlier "
                          "provider version returned InProgress itself?); it cannot be continued: delete and "
                          "recreate the resource, or finish the operation with that earlier version")
        version, name = mark["version"], mark.get("state", "?")
        state = raw.get("state")
        if version != spec.version:
            if spec.migrate is None or version > spec.version:
                raise Failure(f"the stored state of this {what} is version {version} ({name}) but this provider "
                              f"reads version {spec.version} ({spec.state.__name__}); it cannot be continued: "
                              "finish the operation with the provider version that started it, or delete and recreate the resource")
            try:
                state = spec.migrate(version, state)
            except Exception as exc:
                raise Failure(f"the stored state of this {what} (version {version}) could not be migrated to "
                              f"version {spec.version}: {type(exc).__name__}: {exc}") from None
        try:
            return cls(load(spec.state, state), load(Memory, raw.get("memory") or {}), float(raw.get("origin") or 0.0))
        except StateError as exc:
            raise Failure(f"the stored state of this {what} (version {version}) does not fit {spec.state.__name__}: "
                          f"{exc}; bump version= (and give migrate=) when the state's fields change") from None


def _initial_state(spec: LongOperation, props: Any, request: Request) -> Any:
    state = spec.start(props, request) if spec.start is not None else spec.state()
    if not isinstance(state, spec.state):
        raise Failure(f"{spec.resource_type} {spec.operation}: start() returned {type(state).__name__}; "
                      f"expected {spec.state.__name__}")
    return state


def _check_plan(spec: LongOperation, props: Any, deadline: float) -> None:
    if spec.plan is None or spec.operation == DELETE:
        return  # a Delete refused up front would block the stack's deletion: it runs and times out instead
    planned = spec.plan(props)
    if isinstance(planned, bool) or not isinstance(planned, (int, float)):
        raise Failure(f"the plan of {spec.resource_type} {spec.operation} returned {planned!r}; expected seconds")
    problem = plan_problem(spec.resource_type, float(planned), deadline, spec.plan_advice)
    if problem:
        raise Failure(problem)


def run_step(spec: LongOperation, deadline_of: Callable[[], float], props: Any, old: Any, request: Request) -> Any:
    """One handler call: rebuild the state, run the step (again, while its waits fit this call's
    budget), and turn what it returns into a Result or an InProgress carrying the state."""
    clock = spec.clock
    started = clock.now()
    deadline = deadline_of()
    if request.state is None:
        _check_plan(spec, props, deadline)
        origin = request.started_at if clock is SYSTEM_CLOCK and request.started_at else started
        stored = _Stored(_initial_state(spec, props, request), Memory(), origin)
    else:
        stored = _Stored.from_json(spec, request.state)
    budget = Budget(clock=clock, step_started=started, step_seconds=spec.step_seconds,
                    deadline=stored.origin + deadline, memory=stored.memory)
    args = (props, old) if spec.operation == UPDATE else (props,)
    while True:
        try:
            returned = spec.step(*args, stored.state, request, budget)
        except NotYet as waiting:
            if 0 < waiting.delay <= budget.left():
                clock.sleep(waiting.delay)
                continue
            return _continuation(spec, stored, waiting.delay)
        break
    if isinstance(returned, Continue):
        if returned.state is not None:
            if not isinstance(returned.state, spec.state):
                raise Failure(f"{spec.resource_type} {spec.operation} returned Continue(state=...) of type "
                              f"{type(returned.state).__name__}; expected {spec.state.__name__}")
            stored.state = returned.state
        return _continuation(spec, stored, returned.delay)
    if isinstance(returned, InProgress):
        raise Failure(f"{spec.resource_type} {spec.operation}: a step returns crhelper.operations.Continue(...) "
                      "to go on later, not InProgress")
    return returned if returned is not None else Result()


def _continuation(spec: LongOperation, stored: _Stored, delay: float) -> InProgress:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0:
        raise Failure(f"{spec.resource_type} {spec.operation}: the delay must be a number of seconds ≥ 0, got {delay!r}")
    try:
        state = stored.to_json(spec)
    except StateError as exc:
        raise Failure(f"{spec.resource_type} {spec.operation}: {exc}") from None
    return InProgress(state=state, delay=min(MAX_POLL_DELAY, spec.clock.defer(min(float(delay), MAX_POLL_DELAY))))


def as_handler(spec: LongOperation, deadline_of: Callable[[], float]) -> Callable[..., Any]:
    """An ordinary handler for `spec`, whose first parameter carries the step's properties type (so
    the framework validates them as for any handler) and which takes (props[, old], request)."""
    signature = inspect.signature(spec.step)
    params = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    wanted = 5 if spec.operation == UPDATE else 4
    if len(params) != wanted:
        shape = "(props, old, state, request, budget)" if spec.operation == UPDATE else "(props, state, request, budget)"
        raise TypeError(f"the {spec.operation} step {spec.step.__qualname__} must take {shape}")

    def handler(props: Any, *rest: Any) -> Any:
        old, request = (rest[0], rest[1]) if spec.operation == UPDATE else (None, rest[0])
        return run_step(spec, deadline_of, props, old, request)

    first = params[0]
    handler.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        first.replace(kind=first.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("rest", inspect.Parameter.VAR_POSITIONAL),
    ])
    handler.__annotations__ = {first.name: spec.step.__annotations__[first.name]} if first.name in spec.step.__annotations__ else {}
    handler.__wrapped__ = spec.step  # type: ignore[attr-defined]  # annotations resolve in the step's module
    handler.__name__ = getattr(spec.step, "__name__", "step")
    handler.__qualname__ = getattr(spec.step, "__qualname__", "step")
    handler.__doc__ = spec.step.__doc__
    return handler


def _register(provider: "Provider", operation: str, resource_type: str, **options: Any) -> Callable[[StepFunction], StepFunction]:
    def decorator(step: StepFunction) -> StepFunction:
        state = options["state"]
        check_state_type(state)
        if options.get("start") is None and required_fields(state):
            raise TypeError(f"state {state.__name__} has fields without defaults ({', '.join(required_fields(state))}): "
                            "give them defaults or pass start=(props, request) -> state")
        step_seconds = options.get("step_seconds", DEFAULT_STEP_SECONDS)
        if isinstance(step_seconds, bool) or not isinstance(step_seconds, (int, float)) or step_seconds <= 0:
            raise ValueError(f"step_seconds must be a positive number of seconds, got {step_seconds!r}")
        spec = LongOperation(resource_type, operation, step, **options)
        handler = as_handler(spec, lambda: provider.registry.options(resource_type).deadline)
        register = {CREATE: provider.create, UPDATE: provider.update, DELETE: provider.delete}[operation]
        register(resource_type)(handler)
        return step

    return decorator


def create(provider: "Provider", resource_type: str, *, state: type, **options: Any) -> Callable[[StepFunction], StepFunction]:
    """`@operations.create(provider, "Custom::X", state=MyState, plan=...)` on
    `def step(props, state, request, budget) -> Result | Continue | None`. Options: version, start,
    plan, plan_advice, migrate, step_seconds, clock (see LongOperation)."""
    return _register(provider, CREATE, resource_type, state=state, **options)


def update(provider: "Provider", resource_type: str, *, state: type, **options: Any) -> Callable[[StepFunction], StepFunction]:
    """`@operations.update(provider, "Custom::X", state=MyState, ...)` on
    `def step(props, old, state, request, budget) -> Result | Continue | None`."""
    return _register(provider, UPDATE, resource_type, state=state, **options)


def delete(provider: "Provider", resource_type: str, *, state: type, **options: Any) -> Callable[[StepFunction], StepFunction]:
    """`@operations.delete(provider, "Custom::X", state=MyState, ...)` on
    `def step(props, state, request, budget) -> Result | Continue | None` (no plan check: a refused
    Delete would block the stack's deletion)."""
    return _register(provider, DELETE, resource_type, state=state, **options)
