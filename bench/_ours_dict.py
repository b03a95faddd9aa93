"""The Greeting provider for crhelper-for-ROS with a dict-typed handler: no pydantic on the import path."""

from crhelper import Provider, Request, Result

provider = Provider()


@provider.create("Custom::Greeting")
def create(props: dict, request: Request) -> Result:
    text = " ".join(["hi " + props["Name"]] * int(props.get("Times", 1)))
    return Result(physical_id=f"greeting-{props['Name']}", data={"Text": text})


@provider.delete("Custom::Greeting")
def delete(props: dict, request: Request) -> None:
    return None


handler = provider.fc_handler
