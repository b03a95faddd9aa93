"""The example provider typed with msgspec instead of pydantic: the same validation rules and error
style, a fifth of the import cost on a Function Compute cold start (see bench/RESULTS.md)."""

from typing import Annotated

import msgspec

from crhelper import Failure, Provider, Request, Result

provider = Provider()


class Greeting(msgspec.Struct, forbid_unknown_fields=True):
    Name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    Times: Annotated[int, msgspec.Meta(ge=1, le=10)] = 1


@provider.create("Custom::Greeting")
def create(props: Greeting, request: Request) -> Result:
    return Result(physical_id=f"greeting-{props.Name}", data={"Text": " ".join(["hi " + props.Name] * props.Times)})


@provider.update("Custom::Greeting")
def update(props: Greeting, old: Greeting, request: Request) -> Result:
    # A Name change is refused: the Name is part of the physical id. After that failure ROS rolls
    # back with an Update whose properties are swapped (old: the refused ones), asking for the Name
    # the resource still has (its physical id): that one must succeed, or the stack ends ROLLBACK_FAILED.
    if props.Name != old.Name and request.physical_resource_id != f"greeting-{props.Name}":
        raise Failure("Name cannot change: it is part of the physical id; create a new resource instead")
    return Result(data={"Text": " ".join(["hi " + props.Name] * props.Times)})


@provider.delete("Custom::Greeting")
def delete(props: Greeting, request: Request) -> None:
    return None


handler = provider.fc_handler
