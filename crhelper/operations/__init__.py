"""Long operations written once, as a step function over typed state; the kit turns them into
InProgress steps (stored, re-entered and bounded by the type's deadline by the lifecycle).

```python
from dataclasses import dataclass
from crhelper import Provider, Request, Result, operations

provider = Provider()

@dataclass
class Boot:
    started: bool = False

@operations.create(provider, "Custom::Cluster", state=Boot, plan=lambda props: props.Timeout)
def create(props: ClusterProps, state: Boot, request: Request, budget: operations.Budget) -> Result:
    if not state.started:
        start_cluster(props)
        state.started = True                      # kept: the state is stored between calls
    budget.wait_until(lambda: cluster_ready(props), every=10, up_to=props.Timeout, name="cluster ready")
    return Result(physical_id=props.Name)
```

- The state is a dataclass (or a pydantic model, or a msgspec Struct) with defaults, or built by
  `start=(props, request) -> state`; the step may change it in place. It travels as JSON with a
  `version=`; a state of another version fails with a Reason saying so (unless `migrate=` upgrades it).
- A step returns a `Result` (done), `Continue(state, delay)` (call again later) or raises `Failure`.
- A wait not yet met ends the call of the step (`NotYet`); the step runs again from the top after
  `every` seconds: in the same invocation while `budget.left()` allows, else in a later one. So code
  before a wait must be safe to repeat: guard side effects with the state or `budget.once(name, call)`.
  What a step changed is stored when it ends; a step whose process dies runs again from the state
  the step before it left (the lifecycle's crash recovery).
- `plan=(props) -> seconds` is the worst case; over the type's deadline, Create and Update answer
  FAILED at once naming both numbers.
- `clock=ManualClock()` lets tests drive time: sleeps and waits between calls pass at once.
"""

from .budget import SYSTEM_CLOCK, Budget, Clock, ManualClock, Memory, NotYet, SystemClock, WaitRecord, WaitTimeout
from .codec import StateError
from .operation import DEFAULT_STEP_SECONDS, Continue, LongOperation, create, delete, plan_problem, update

__all__ = [
    "DEFAULT_STEP_SECONDS", "SYSTEM_CLOCK", "Budget", "Clock", "Continue", "LongOperation", "ManualClock", "Memory",
    "NotYet", "StateError", "SystemClock", "WaitRecord", "WaitTimeout", "create", "delete", "plan_problem", "update",
]
