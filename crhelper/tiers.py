"""Ordered tiers: items grouped by an order key, equal keys run side by side under a concurrency
bound, tiers one after another (ascending or descending), halting at the first failure or going on
and reporting every one. Boot groups start and stop by BootOrder; AppCenter runs lifecycle services
by `order`.

The plan and its progress are typed state (`TierProgress`) kept in a long operation's state, so a
tier that outlasts one invocation resumes at the right tier and item, and a finished item never
runs again. `plan`, `worst_case` and `report` are pure; `run` calls the items' action:

```python
@dataclass
class Start:
    progress: TierProgress | None = None

@operations.create(provider, "Custom::BootGroup", state=Start, plan=lambda p: tiers.worst_case(orders(p), 1880))
def create(props, state, request, budget):
    if state.progress is None:
        state.progress = tiers.plan({m.Id: m.BootOrder for m in props.Members})
    members = {m.Id: m for m in props.Members}
    outcome = tiers.run(state.progress, members, start_member, budget, concurrency=10, tier_timeout=1880)
    if not outcome.ok:
        raise Failure(outcome.reason)
    return Result(physical_id=props.Name)

def start_member(member, run: tiers.ItemRun) -> None:
    run.once("start", lambda: backend.start(member.Id))              # never twice, even after re-entry
    run.wait_until(lambda: backend.ready(member.Id), every=10, name="ready")   # up to the tier's timeout
```
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from typing import Any, Callable, Mapping, TypeVar

from .errors import Failure
from .logs import get_logger
from .operations.budget import Budget, Memory, NotYet, json_value
from .response import exception_reason

T = TypeVar("T")

ASCENDING, DESCENDING = "ascending", "descending"
#: Policies: stop at the first failed item (later tiers not started), or run every tier and report all.
HALT, CONTINUE = "halt", "continue"
#: Item and tier statuses.
PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, SKIPPED = "pending", "running", "succeeded", "failed", "cancelled", "skipped"
_OPEN = (PENDING, RUNNING)

_log = get_logger("tiers")


@dataclasses.dataclass
class ItemOutcome:
    """One item: its status, when it started and ended (on the operation's clock), why it failed,
    what its action returned, and the memory of its waits and one-off calls."""

    status: str = PENDING
    started: float | None = None
    ended: float | None = None
    reason: str | None = None
    value: Any = None
    memory: Memory = dataclasses.field(default_factory=Memory)


@dataclasses.dataclass
class Tier:
    """One tier of the plan and its timeline."""

    order: int
    items: list[str]
    status: str = PENDING
    started: float | None = None
    ended: float | None = None


@dataclasses.dataclass
class TierProgress:
    """A plan of tiers and how far it got; store it in a long operation's state."""

    policy: str = HALT
    direction: str = ASCENDING
    tiers: list[Tier] = dataclasses.field(default_factory=list)
    items: dict[str, ItemOutcome] = dataclasses.field(default_factory=dict)
    #: Index of the tier running now (len(tiers) once all ran).
    current: int = 0
    #: Why the run stopped early (HALT policy), or None.
    halted: str | None = None

    @property
    def finished(self) -> bool:
        return self.halted is not None or self.current >= len(self.tiers)


@dataclasses.dataclass(frozen=True)
class ItemFailure:
    item: str
    order: int
    reason: str


@dataclasses.dataclass(frozen=True)
class TierReport:
    """The end of a run: ok, every failed item, and one Reason naming them."""

    ok: bool
    failures: tuple[ItemFailure, ...]
    reason: str | None


class ItemRun(Budget):
    """The budget handed to one item's action: the step's time, the item's own memory; waits
    without `up_to` end at the tier's timeout."""

    def __init__(self, parent: Budget, outcome: ItemOutcome, *, item: str, tier: Tier,
                 limit: float | None, limit_reason: str) -> None:
        super().__init__(
            clock=parent.clock, step_started=parent.step_started, step_seconds=parent.step_seconds,
            deadline=parent.deadline, memory=outcome.memory, limit=limit, limit_reason=limit_reason,
            invocation_left=parent.invocation_left,
        )
        self.item = item
        self.order = tier.order
        #: When the item's tier began (on the operation's clock).
        self.tier_started = tier.started


def _check_order(item: str, order: object) -> int:
    if isinstance(order, bool) or not isinstance(order, int):
        raise ValueError(f"tiers: the order of {item!r} must be an integer, got {order!r}")
    return order


def plan(orders: Mapping[str, int], *, descending: bool = False, policy: str = HALT) -> TierProgress:
    """Group items (id → order key) into tiers, ascending or descending; items keep their given
    order inside a tier."""
    if policy not in (HALT, CONTINUE):
        raise ValueError(f"tiers: policy must be {HALT!r} or {CONTINUE!r}, got {policy!r}")
    grouped: dict[int, list[str]] = {}
    for item, order in orders.items():
        grouped.setdefault(_check_order(item, order), []).append(item)
    keys = sorted(grouped, reverse=descending)
    return TierProgress(
        policy=policy, direction=DESCENDING if descending else ASCENDING,
        tiers=[Tier(order=key, items=grouped[key]) for key in keys],
        items={item: ItemOutcome() for item in orders},
    )


def _seconds_of(tier_timeout: "float | Callable[[int], float] | None", order: int) -> float | None:
    if tier_timeout is None:
        return None
    return float(tier_timeout(order) if callable(tier_timeout) else tier_timeout)


def worst_case(orders: Mapping[str, int], tier_timeout: "float | Callable[[int], float]") -> float:
    """The longest a plan may take: the sum of its tiers' timeouts (one per distinct order)."""
    distinct = {_check_order(item, order) for item, order in orders.items()}
    return sum(_seconds_of(tier_timeout, order) or 0.0 for order in distinct)


def report(progress: TierProgress) -> TierReport:
    """What the run amounts to so far (pure)."""
    failures = tuple(
        ItemFailure(item, tier.order, progress.items[item].reason or "failed")
        for tier in progress.tiers for item in tier.items if progress.items[item].status == FAILED
    )
    if progress.halted is not None:
        return TierReport(False, failures, progress.halted)
    if not failures:
        return TierReport(True, (), None)
    total = sum(len(tier.items) for tier in progress.tiers)
    listed = "; ".join(f"{f.item} (order {f.order}): {f.reason}" for f in failures)
    return TierReport(False, failures, f"{len(failures)} of {total} item(s) failed: {listed}")


def _halt_reason(progress: TierProgress, index: int) -> str:
    tier = progress.tiers[index]
    failed = [item for item in tier.items if progress.items[item].status == FAILED]
    first = progress.items[failed[0]]
    reason = f"tier {index + 1} of {len(progress.tiers)} (order {tier.order}) failed: {failed[0]}: {first.reason}"
    if len(failed) > 1:
        reason += f"; {len(failed) - 1} more item(s) of it failed ({', '.join(failed[1:])})"
    if index + 1 < len(progress.tiers):
        reason += "; later tiers were not started"
    return reason


def _end(outcome: ItemOutcome, status: str, now: float, reason: str | None = None) -> None:
    """A final status; a skipped item never ran, so it has no end either."""
    outcome.status, outcome.ended = status, (None if status == SKIPPED else now)
    if reason is not None:
        outcome.reason = reason


def _call_item(
    item: str, target: Any, action: Callable[[Any, ItemRun], Any], run: ItemRun, outcome: ItemOutcome,
) -> float | None:
    """One call of an item's action; the delay of its next check when it is not done yet."""
    if outcome.started is None:
        outcome.status, outcome.started = RUNNING, run.now()
    try:
        value = json_value(action(target, run), f"the action of {item!r}")
    except NotYet as waiting:
        return waiting.delay
    except Failure as exc:
        _end(outcome, FAILED, run.now(), exc.reason)
    except Exception as exc:  # a bug or a backend error of one item: recorded, the others go on
        _log.warning("a tier item failed", extra={"fields": {"item": item, "error": exception_reason(exc)}})
        _end(outcome, FAILED, run.now(), exception_reason(exc))
    else:
        outcome.value = value
        _end(outcome, SUCCEEDED, run.now())
    return None


def _round(
    progress: TierProgress, tier: Tier, items: Mapping[str, T], action: Callable[[T, ItemRun], Any],
    budget: Budget, concurrency: int, limit: float | None, limit_reason: str,
) -> list[float]:
    """Call every open item of the tier once (at most `concurrency` at a time); the delays of
    those still waiting. Under HALT, items not started when one fails are not started."""
    halted = threading.Event()
    delays: list[float] = []
    lock = threading.Lock()

    def one(item: str) -> None:
        outcome = progress.items[item]
        if halted.is_set():
            return
        if item not in items:
            _end(outcome, FAILED, budget.now(), "not among the items of this run")
        else:
            run = ItemRun(budget, outcome, item=item, tier=tier, limit=limit, limit_reason=limit_reason)
            delay = _call_item(item, items[item], action, run, outcome)
            if delay is not None:
                with lock:
                    delays.append(delay)
        if outcome.status == FAILED and progress.policy == HALT:
            halted.set()

    open_items = [item for item in tier.items if progress.items[item].status in _OPEN]
    if concurrency == 1 or len(open_items) <= 1:
        for item in open_items:
            one(item)
        return delays
    from concurrent.futures import ThreadPoolExecutor  # only parallel tiers pay for it

    with ThreadPoolExecutor(max_workers=min(concurrency, len(open_items)), thread_name_prefix="crhelper-tier") as pool:
        futures = [pool.submit(contextvars.copy_context().run, one, item) for item in open_items]
    for future in futures:
        future.result()  # a BaseException of an item (KeyboardInterrupt) is not swallowed
    return delays


def run(
    progress: TierProgress,
    items: Mapping[str, T],
    action: Callable[[T, ItemRun], Any],
    budget: Budget,
    *,
    concurrency: int = 10,
    tier_timeout: "float | Callable[[int], float] | None" = None,
) -> TierReport:
    """Run the plan from where `progress` says, calling `action(items[id], run)` for each open item
    of the current tier. An action returns when its item is done (its JSON result is kept), raises
    Failure when it failed, or waits (`run.wait_until`), which ends this call of the step: the step
    runs again after the wait's delay and this picks up where it stopped (NotYet). Returns the
    report once every tier ran, or the HALT policy stopped the run."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"tiers: concurrency must be a whole number ≥ 1, got {concurrency!r}")
    while not progress.finished:
        index = progress.current
        tier = progress.tiers[index]
        started = tier.started if tier.started is not None else budget.now()
        tier.status, tier.started = RUNNING, started
        seconds = _seconds_of(tier_timeout, tier.order)
        limit = started + seconds if seconds is not None else None
        late = f"tier {index + 1} (order {tier.order}) did not finish within {seconds:,.0f} s" if seconds is not None else ""
        # At or past the tier's end the items still get this last call: their waits check once more
        # and time out naming themselves; what is still open after it failed for the tier.
        delays = _round(progress, tier, items, action, budget, concurrency, limit, late)
        if limit is not None and budget.now() >= limit:
            for item in tier.items:
                if progress.items[item].status in _OPEN:
                    _end(progress.items[item], FAILED, budget.now(), late)
        failed = any(progress.items[item].status == FAILED for item in tier.items)
        if failed and progress.policy == HALT:
            _halt(progress, index, budget.now())
            break
        if any(progress.items[item].status in _OPEN for item in tier.items):
            delay = min(delays) if delays else 0.0
            if limit is not None:
                delay = min(delay, max(0.0, limit - budget.now()))
            raise NotYet(delay, f"tier {index + 1} (order {tier.order})")
        tier.status, tier.ended = (FAILED if failed else SUCCEEDED), budget.now()
        progress.current += 1
    return report(progress)


def _halt(progress: TierProgress, index: int, now: float) -> None:
    """Stop after tier `index` failed: its open items are cancelled (started) or skipped, later tiers skipped."""
    tier = progress.tiers[index]
    for item in tier.items:
        outcome = progress.items[item]
        if outcome.status in _OPEN:
            _end(outcome, CANCELLED if outcome.started is not None else SKIPPED, now,
                 "stopped: another item of its tier failed")
    tier.status, tier.ended = FAILED, now
    for later in progress.tiers[index + 1:]:
        later.status = SKIPPED
        for item in later.items:
            _end(progress.items[item], SKIPPED, now, f"not started: tier {index + 1} (order {tier.order}) failed")
    progress.halted = _halt_reason(progress, index)
