"""Reading ECS API parameters as the SDKs send them (`cloud-apis.md` §1.3), with ECS's errors.

Lists repeat the name (`InstanceId.1`, `InstanceId.2`), structs use dotted names (`Tag.1.Key`),
booleans are Python's `str()` (`True`) or the CLI's `true` (read case-insensitively), and some
parameters are JSON strings (`InstanceIds`, `Parameters`). Every error names the parameter and the
rule; none echoes more than a short prefix of what was sent.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Mapping, Sequence

from crhelper.local.ecs_state import EcsError

_TRUE, _FALSE = "true", "false"


def invalid(name: str, rule: str, code: str = "InvalidParameter") -> EcsError:
    return EcsError(400, code, f"The specified parameter {name} is not valid: {rule}.")


def missing(name: str) -> EcsError:
    return EcsError(400, "MissingParameter",
                    f'The input parameter "{name}" that is mandatory for processing this request is not supplied.')


def _shown(value: str) -> str:
    return repr(value[:40] + ("..." if len(value) > 40 else ""))


class Params:
    """One request's decoded parameters (query and form body), read by type."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = dict(values)

    def has(self, name: str) -> bool:
        return self.values.get(name, "") != ""

    def text(self, name: str, default: str = "", *, max_length: int = 1024) -> str:
        value = self.values.get(name, "")
        if value == "":
            return default
        if len(value) > max_length:
            raise invalid(name, f"at most {max_length} characters, got {len(value)}")
        return value

    def required(self, name: str, *, max_length: int = 1024) -> str:
        value = self.text(name, max_length=max_length)
        if not value:
            raise missing(name)
        return value

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.values.get(name, "")
        if value == "":
            return default
        if value.lower() == _TRUE:
            return True
        if value.lower() == _FALSE:
            return False
        raise invalid(name, f"must be true or false, got {_shown(value)}")

    def integer(self, name: str, default: int, minimum: int, maximum: int) -> int:
        value = self.values.get(name, "")
        if value == "":
            return default
        try:
            number = int(value)
        except ValueError:
            raise invalid(name, f"must be an integer, got {_shown(value)}") from None
        if not minimum <= number <= maximum:
            raise invalid(name, f"must be between {minimum} and {maximum}, got {number}")
        return number

    def choice(self, name: str, default: str, choices: Sequence[str]) -> str:
        value = self.values.get(name, "")
        if value == "":
            return default
        if value not in choices:
            raise invalid(name, f"must be one of {', '.join(choices)}, got {_shown(value)}")
        return value

    def _indexed(self, name: str, suffix: str, limit: int) -> list[tuple[int, re.Match[str], str]]:
        """(N, match, value) of every `name.N<suffix>` parameter, N checked against `limit`."""
        pattern = re.compile(rf"^{re.escape(name)}\.(\d+){suffix}$")
        found = []
        for key, value in self.values.items():
            match = pattern.match(key)
            if match:
                index = int(match.group(1))
                if not 1 <= index <= limit:
                    raise invalid(f"{name}.N", f"N must be between 1 and {limit}, got {index}")
                found.append((index, match, value))
        return sorted(found, key=lambda item: item[0])

    def listed(self, name: str, limit: int) -> list[str]:
        """`name.1`, `name.2`... in numeric order, duplicates dropped; at most `limit` (N from 1 to `limit`)."""
        found: list[str] = []
        for _, match, value in self._indexed(name, "", limit):
            if value == "":
                raise invalid(match.group(0), "must not be empty")
            if value not in found:
                found.append(value)
        return found

    def required_list(self, name: str, limit: int) -> list[str]:
        found = self.listed(name, limit)
        if not found:
            raise missing(f"{name}.1")
        return found

    def structs(self, name: str, limit: int) -> list[dict[str, str]]:
        """`name.N.Field` groups, in numeric order of N."""
        groups: dict[int, dict[str, str]] = {}
        for index, match, value in self._indexed(name, r"\.([A-Za-z0-9]+)", limit):
            groups.setdefault(index, {})[match.group(2)] = value
        return list(groups.values())

    def json_strings(self, name: str, limit: int) -> list[str] | None:
        """A JSON array of strings (`InstanceIds=["i-1","i-2"]`); None when absent."""
        value = self.values.get(name, "")
        if value == "":
            return None
        try:
            parsed = json.loads(value)
        except ValueError:
            raise invalid(name, 'must be a JSON array of strings such as ["i-1"]', f"Invalid{name}.Malformed") from None
        if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
            raise invalid(name, 'must be a JSON array of strings such as ["i-1"]', f"Invalid{name}.Malformed")
        if len(parsed) > limit:
            raise invalid(name, f"at most {limit} items, got {len(parsed)}", f"Invalid{name}.Malformed")
        return list(dict.fromkeys(parsed))

    def json_object(self, name: str) -> dict[str, str]:
        """A JSON object of string values (`Parameters={"name":"x y"}`); {} when absent."""
        value = self.values.get(name, "")
        if value == "":
            return {}
        try:
            parsed = json.loads(value)
        except ValueError:
            raise invalid(name, 'must be a JSON object such as {"name": "value"}') from None
        if not isinstance(parsed, dict):
            raise invalid(name, 'must be a JSON object such as {"name": "value"}')
        bad = [key for key, item in parsed.items() if not isinstance(item, str)]
        if bad:
            raise invalid(name, f"values must be strings; {bad[0][:40]!r} is not")
        return parsed

    def base64(self, name: str, *, max_length: int) -> bytes | None:
        """A base64 value (`UserData`, `CommandContent`), decoded; None when absent."""
        value = self.values.get(name, "")
        if value == "":
            return None
        if len(value) > max_length:
            raise invalid(name, f"at most {max_length} characters of base64, got {len(value)}", f"Invalid{name}.SizeExceeded")
        try:
            return base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise invalid(name, "must be base64", f"Invalid{name}.Base64FormatInvalid") from None


class Paging:
    """NextToken/MaxResults paging (opaque tokens that carry the offset of the next page)."""

    @staticmethod
    def token(offset: int) -> str:
        return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode().rstrip("=")

    @staticmethod
    def offset(token: str) -> int:
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            offset = data["offset"]
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise invalid("NextToken", "must be a NextToken this endpoint returned", "InvalidNextToken") from None
        if not isinstance(offset, int) or offset < 0:
            raise invalid("NextToken", "must be a NextToken this endpoint returned", "InvalidNextToken")
        return offset


def page(params: Params, items: list[object], *, max_results: int, default_size: int = 10,
         max_page_size: int | None = None) -> tuple[list[object], dict[str, object]]:
    """One page of `items` and the paging fields of the answer.

    With `NextToken` or `MaxResults`, token paging (`PageNumber`/`PageSize` ignored; a last page has
    an empty NextToken); otherwise `PageNumber`/`PageSize`."""
    if params.has("NextToken") or params.has("MaxResults"):
        size = params.integer("MaxResults", default_size, 1, max_results)
        start = Paging.offset(params.text("NextToken")) if params.has("NextToken") else 0
        chunk = items[start:start + size]
        more = start + size < len(items)
        return chunk, {"TotalCount": len(items), "NextToken": Paging.token(start + size) if more else "",
                       "MaxResults": size}
    number = params.integer("PageNumber", 1, 1, 10**9)
    size = params.integer("PageSize", default_size, 1, max_page_size or max_results)
    start = (number - 1) * size
    return items[start:start + size], {"TotalCount": len(items), "PageNumber": number, "PageSize": size}
