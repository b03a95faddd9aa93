"""The bare stdlib handler plus what a pydantic-typed provider cannot avoid: importing pydantic,
building the same model as samples/greeting.py and validating the properties with it.

The limit for our pydantic-typed provider (issue 18: at most 1.1x of this, measured in the same run).
"""

from pydantic import BaseModel, Field

from _bare import respond


class Greeting(BaseModel):
    Name: str = Field(min_length=1, max_length=64)
    Times: int = Field(default=1, ge=1, le=10)


def handler(event, context):  # type: ignore[no-untyped-def]
    props = Greeting.model_validate(event["ResourceProperties"])
    respond(event, "greeting-" + props.Name, {"Text": " ".join(["hi " + props.Name] * props.Times)})
