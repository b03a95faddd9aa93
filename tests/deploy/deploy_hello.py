"""A provider with no dependency beyond crhelper, so a deployed copy runs under any FC runtime's Python."""
from typing import Any

from crhelper import Provider, Result

provider = Provider()


@provider.create("Custom::Hello")
def create(props: dict, request: Any) -> Result:
    return Result(physical_id=f"hello-{props['Name']}", data={"Text": f"hi {props['Name']}"})


@provider.delete("Custom::Hello")
def delete(props: dict, request: Any) -> None:
    return None
