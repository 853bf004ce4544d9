"""Turn a pydantic validation error into one ``KEY: REASON`` line a user can act on.

Pydantic locates an error by a path through its *schema*: union members and
discriminator tags appear in it (``arrivals.poisson.rate``, ``sizes.n.fixed.value``),
list indices look like keys, and messages speak of "Input". Users think in the path
through their *file*, so the path is rebuilt by walking the document itself: a part the
document does not hold is a schema detail and is dropped (except the last part of a
"missing" error, which names the key to add), and list indices print as ``[i]``.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from . import schema as s


def explain(exc: ValidationError, document: object) -> str:
    """``KEY: REASON`` for the first error of ``exc``, keyed by the path in ``document``."""
    errors = exc.errors(include_url=False)
    error = errors[0]
    if error["type"] == "missing":  # a misspelt key shows as missing + unknown: name the typo
        error = next((e for e in errors if e["type"] == "extra_forbidden"), error)
    loc = tuple(error["loc"])
    kind = error["type"]
    key = _key(document, loc, keep_last=kind in ("missing", "extra_forbidden"))
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        key = _join(key, error["ctx"]["discriminator"].strip("'\""))
    return f"{key or 'top level'}: {_reason(error, loc)}"


def _key(document: object, loc: tuple[Any, ...], keep_last: bool) -> str:
    key, node = "", document
    for i, part in enumerate(loc):
        if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            key, node = f"{key}[{part}]", node[part]
        elif isinstance(node, dict) and part in node:
            key, node = _join(key, str(part)), node[part]
        elif keep_last and i == len(loc) - 1:
            key = _join(key, str(part))
    return key


def _join(key: str, part: str) -> str:
    return f"{key}.{part}" if key else part


def _reason(error: dict[str, Any], loc: tuple[Any, ...]) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    got = f" but got {s.show(error.get('input'))}"
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        return _unknown_key(loc)
    if kind == "union_tag_invalid":
        return f"unknown {ctx['discriminator'].strip(chr(39))} {s.show(ctx['tag'])} (one of: {_tags(ctx['expected_tags'])})"
    if kind == "union_tag_not_found":
        name = ctx["discriminator"].strip("'\"")
        return f"required key is missing (one of: {', '.join(_TAGS.get(name, ()))})"
    if kind == "value_error":
        return error["msg"].removeprefix("Value error, ")
    if "[key]" in loc:
        return f"keys must be strings{got}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of keys{got}"
    if kind == "too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    simple = {
        "int_type": "must be an integer", "int_from_float": "must be an integer",
        "float_type": "must be a number", "bool_type": "must be true or false",
        "string_type": "must be a string", "list_type": "must be a list",
        "finite_number": "must be a finite number",
    }
    if kind in simple:
        return simple[kind] + got
    message = re.sub(r", unable to .*$", "", error["msg"]).replace("Input should be", "must be")
    message = re.sub(r"^(List|Dictionary|Value) should", "must", message)
    return message + got


def _tags(expected: str) -> str:
    return ", ".join(tag.strip(" '") for tag in expected.split(","))


def _unknown_key(loc: tuple[Any, ...]) -> str:
    allowed = _fields_at(loc[:-1])
    if not allowed:
        return "unknown key"
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key ({hint}allowed: {', '.join(allowed)})"


def _fields_at(loc: tuple[Any, ...]) -> list[str] | None:
    """The keys the schema allows at ``loc``, found by walking the pydantic models."""
    node: Any = s.ProblemSpec
    for part in loc:
        node = _step(node, part)
        if node is None:
            return None
    options = [m for m in _members(node) if isinstance(m, type) and issubclass(m, BaseModel)]
    return list(options[0].model_fields) if len(options) == 1 else None


def _step(node: Any, part: Any) -> Any:
    for member in _members(node):
        if isinstance(member, type) and issubclass(member, BaseModel):
            if part in member.model_fields:
                return member.model_fields[part].annotation
            if part in _literal_tags(member):
                return member
        elif get_origin(member) is list and isinstance(part, int):
            return get_args(member)[0]
        elif get_origin(member) is dict:
            return get_args(member)[1]
    return None


def _members(node: Any) -> list[Any]:
    """The alternatives a type stands for, with Annotated and Optional unwrapped."""
    if get_origin(node) is Annotated:
        return _members(get_args(node)[0])
    if get_origin(node) in (Union, types.UnionType):
        return [m for arg in get_args(node) for m in _members(arg)]
    return [node]


def _literal_tags(model: type[BaseModel]) -> tuple[str, ...]:
    for name in ("process", "dist"):
        field = model.model_fields.get(name)
        if field is not None and get_origin(field.annotation) is Literal:
            return get_args(field.annotation)
    return ()


_TAGS = {
    "process": [t for m in _members(s.ArrivalSpecs) for t in _literal_tags(m)],
    "dist": [t for m in _members(s.SizeSpecs) for t in _literal_tags(m)],
}


class Invalid(Exception):
    """A semantic error at ``key`` (``service.max_batch``); the loader adds the file name."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key, self.reason = key, reason


T = TypeVar("T")


def checked(key: str, build: Callable[[], T]) -> T:
    """Run a constructor that validates, turning its ValueError into a keyed error."""
    try:
        return build()
    except ValueError as exc:
        raise Invalid(key, str(exc)) from None
