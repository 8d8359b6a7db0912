"""Validate worker-tool arguments against the catalog's JSON Schemas, stdlib only.

Covers exactly the schema keywords the catalog uses, with pydantic's lax coercions for them
(a number may arrive as a numeric string or a bool and is stored as a float) and its wording,
so an engine sees the same `invalid FIELD: message` answers as before.
"""

from typing import Any


class InvalidArgument(Exception):
    def __init__(self, loc: list[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message

    def __str__(self) -> str:
        return f"invalid {'.'.join(map(str, self.loc))}: {self.message}"


def validate(schema: dict[str, Any], value: Any) -> dict[str, Any]:
    """The validated, coerced arguments, or InvalidArgument naming the first bad field."""
    return _check(schema, schema, value, [])


def _check(root: dict[str, Any], schema: dict[str, Any], value: Any, loc: list[str | int]) -> Any:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return _check(root, root["$defs"][name], value, loc)
    kind = schema["type"]
    if kind == "object":
        return _object(root, schema, value, loc)
    if kind == "array":
        return _array(root, schema, value, loc)
    if kind == "number":
        return _number(schema, value, loc)
    return _string(schema, value, loc)


def _object(
    root: dict[str, Any], schema: dict[str, Any], value: Any, loc: list[str | int]
) -> dict[str, Any]:
    if not isinstance(value, dict):
        what = (
            f"a valid dictionary or instance of {schema['title']}" if loc else "a valid dictionary"
        )
        raise InvalidArgument(loc, f"Input should be {what}")
    out: dict[str, Any] = {}
    for name, field in schema["properties"].items():
        if name not in value:
            if name in schema["required"]:
                raise InvalidArgument([*loc, name], "Field required")
            continue
        out[name] = _check(root, field, value[name], [*loc, name])
    for name in value:
        if name not in schema["properties"]:
            raise InvalidArgument([*loc, name], "Extra inputs are not permitted")
    return out


def _array(
    root: dict[str, Any], schema: dict[str, Any], value: Any, loc: list[str | int]
) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgument(loc, "Input should be a valid list")
    items = [_check(root, schema["items"], item, [*loc, i]) for i, item in enumerate(value)]
    if len(items) < schema["minItems"]:
        raise InvalidArgument(
            loc,
            f"List should have at least {schema['minItems']} item after validation, "
            f"not {len(items)}",
        )
    if len(items) > schema["maxItems"]:
        raise InvalidArgument(
            loc,
            f"List should have at most {schema['maxItems']} items after validation, "
            f"not {len(items)}",
        )
    return items


def _number(schema: dict[str, Any], value: Any, loc: list[str | int]) -> float:
    if isinstance(value, (bool, int, float)):
        number = float(value) if abs(value) < 1e300 else float("inf") * (1 if value > 0 else -1)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise InvalidArgument(
                loc, "Input should be a valid number, unable to parse string as a number"
            ) from None
    else:
        raise InvalidArgument(loc, "Input should be a valid number")
    if not number >= schema["minimum"]:
        raise InvalidArgument(loc, f"Input should be greater than or equal to {schema['minimum']}")
    if not number <= schema["maximum"]:
        raise InvalidArgument(loc, f"Input should be less than or equal to {schema['maximum']}")
    return number


def _string(schema: dict[str, Any], value: Any, loc: list[str | int]) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(loc, "Input should be a valid string")
    if "enum" in schema and value not in schema["enum"]:
        *head, last = [repr(v) for v in schema["enum"]]
        raise InvalidArgument(loc, f"Input should be {', '.join(head)} or {last}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        raise InvalidArgument(loc, f"String should have at least {schema['minLength']} character")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise InvalidArgument(loc, f"String should have at most {schema['maxLength']} characters")
    return value
