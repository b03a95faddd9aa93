"""The example provider from the README: one resource type, typed properties, return values only."""

from pydantic import BaseModel, Field

from crhelper import Failure, Provider, Request, Result

provider = Provider()


class Greeting(BaseModel):
    Name: str = Field(min_length=1, max_length=64)
    Times: int = Field(default=1, ge=1, le=10)


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
