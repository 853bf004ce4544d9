"""Read a project JSON export for serving: the served rows at load, their details when asked.

Why this module and not a JSON library (issue 42 asked; measured 2026-12-05 on the 2-core
AMD EPYC development machine, bench_runtime's 10,000-row export, 12.6 MB, medians of 9):
decoding the whole document takes 161 ms with :func:`json.loads`, 117 ms with msgspec
0.23 and 119 ms with orjson, all over the 100 ms a start-up load may take, because three
quarters of the bytes are ``details`` (9.4 of 12.6 MB), which lookups never read; this
module's load, which leaves them as text until asked, took 100 ms there (87 ms in
bench_runtime's record, on the Intel Xeon) and adds no dependency to the runtime. A faster
library would not remove the need to skip ``details``; the scanner below is what skips
it.

A runtime loads its table at start-up, and most of an export is what lookups never read
(each row's provenance and requirements, in ``details``: :mod:`tuner.store.export`). So
the document is read one top-level value at a time with the JSON module's own scanner,
and ``details`` (when it follows ``schema_version`` and ``rows``, as the exporter writes
it) is left as text, parsed when the full rows are first asked for. The text is kept,
not the file reread: the details joined later are those of the rows served. A document
whose top-level object the scanner does not read as expected (a syntax error, a file
that does not end as an export ends; another key order is read value by value too) is
parsed whole by :func:`json.loads`, which names what is wrong.

Apart from :mod:`tuner.runtime.served` because a JSON file fails in ways a SQLite one
cannot: a ``schema_version`` that is not a number at all (``"1"``: a malformed export,
not another version), and nesting deeper than Python's JSON parser reads, which fails
the whole file with a bare ``RecursionError`` that names nothing. For that one, the text
is scanned again (on the failure path only) to name the row and field that nest deepest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..store.export import join_details
from ..store.version import check_export
from .rows import describe, label

__all__ = ["json_records"]

#: The tokens that open, close or separate JSON values (strings whole, so that brackets
#: and commas inside them are skipped).
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[][{},:]')
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODE = json.JSONDecoder().raw_decode
#: How an export ends: its last list closed, then the document. A file cut short ends
#: otherwise (unless cut just after a row's details whose last value is a list: found
#: when the details are read), and is parsed whole, to be refused at load.
_END = re.compile(r"\][ \t\n\r]*\}[ \t\n\r]*\Z")
#: The top-level keys read before ``details`` is left for later.
_FIRST = frozenset({"schema_version", "rows"})


def json_records(path: Path) -> tuple[list[Any], Callable[[], list[Any]]]:
    """The row records of the JSON export at ``path`` (what lookups read), and a function
    returning every record whole (joined with its details, :func:`join_details`).

    Raises:
        StorageError: not JSON, nested too deep, not a tuner export, a ``schema_version``
            that is not an integer, no list of rows. The function: details that are not
            JSON or do not match the rows.
        SchemaMismatchError: an export of another schema version.
    """
    try:
        data = path.read_bytes()
        text = data.decode(json.detect_encoding(data), "surrogatepass")
    except OSError as exc:
        raise StorageError(f"{path}: cannot read the table file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise StorageError(f"{path}: neither a SQLite database nor JSON ({exc})") from None
    spans: dict[str, tuple[int, int]] = {}
    try:
        document, rest = _head(text, spans)
    except DuplicateKey as exc:
        raise StorageError(f"{path}: {exc}") from None
    except ValueError as exc:  # (JSONDecodeError, and an integer past Python's digit limit)
        raise StorageError(f"{path}: neither a SQLite database nor JSON ({exc})") from None
    except RecursionError:
        raise _too_deep(path, text) from None
    if isinstance(document, dict) and type(document.get("schema_version", 0)) is not int:
        raise StorageError(f"{path}: schema_version must be an integer, found {describe(document['schema_version'])}")
    check_export(document, path)
    records = document.get("rows")
    if not isinstance(records, list):
        raise StorageError(f"{path}: the exported table has no list of rows")
    if "rows" in spans:  # (a document parsed whole had every object checked)
        twice = _rows_twice(text, spans["rows"], records)
        if twice is not None:
            raise StorageError(f"{path}: {twice}")

    def whole() -> list[Any]:
        if rest is None:
            return join_details(document, path)
        try:
            tail = _tail(text, rest, document.keys())
        except DuplicateKey as exc:
            raise StorageError(f"{path}: {exc}") from None
        except ValueError as exc:  # (JSONDecodeError too)
            raise StorageError(f"{path}: cannot read what follows the rows ({exc})") from None
        except RecursionError:
            raise _too_deep(path, text) from None
        return join_details({**document, **tail}, path)

    return records, whole


def _head(text: str, spans: dict[str, tuple[int, int]]) -> tuple[Any, int | None]:
    """The document's top-level values up to ``details``, and where that value starts
    (None: the document parsed whole, ``details`` and all, with every object's keys
    checked). ``spans`` gets where each value read one by one lies in ``text``."""
    at = _SPACE.match(text).end()  # type: ignore[union-attr]
    if text[at:at + 1] != "{" or not _END.search(text[-64:]):
        return _strict(text), None  # (not an object, or cut short: json.loads names it)
    document: dict[str, Any] = {}
    try:
        return document, _members(text, at + 1, document, defer=True, spans=spans)
    except json.JSONDecodeError:
        return _strict(text), None  # (json.loads names what is wrong, as it would have)


def _tail(text: str, at: int, seen: Any) -> dict[str, Any]:
    """The top-level values from ``details`` (its value at ``at``) to the document's end.

    Raises:
        json.JSONDecodeError: text that is not JSON.
        DuplicateKey: a key already read (the rows served would not be the document's),
            or an object in the details that holds a key twice.
    """
    tail: dict[str, Any] = {}
    _members(text, at, tail, key="details", seen=seen, decode=_STRICT_RAW)  # parsed once, every object checked
    for key, value in tail.items():
        twice = _first_twice({key: value})
        if twice is not None:
            raise DuplicateKey(twice)
    return tail


def _members(text: str, at: int, into: dict[str, Any], *, key: str | None = None, defer: bool = False,
             seen: Any = None, spans: dict[str, tuple[int, int]] | None = None,
             decode: Callable[[str, int], tuple[Any, int]] = _DECODE) -> int | None:
    """Read the top-level object's members into ``into``, from its first key at ``at``
    (or, given ``key``, from that key's value at ``at``) to the document's end.

    Args:
        defer: stop at ``details`` once ``schema_version`` and ``rows`` are read.
        seen: keys read before (a key read again is refused: the rows served would not
            be the document's).
        spans: gets where each value lies in ``text``.
        decode: how each value is parsed (the details: marking objects with a key twice).

    Returns:
        Where the deferred ``details`` value starts, or None at the document's end.

    Raises:
        json.JSONDecodeError: text that is not JSON.
        DuplicateKey: a key of ``seen`` or ``into`` read again.
    """
    space = _SPACE.match
    while True:
        if key is None:
            key, at = _DECODE(text, space(text, at).end())  # type: ignore[union-attr]
            at = space(text, at).end()  # type: ignore[union-attr]
            if type(key) is not str or text[at:at + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, at)
            at = space(text, at + 1).end()  # type: ignore[union-attr]
            if defer and key == "details" and _FIRST <= into.keys():
                return at
            if key in into or (seen is not None and key in seen):
                raise DuplicateKey(f"the document's key {key!r} appears twice")
        start = at
        into[key], at = decode(text, at)
        if spans is not None:
            spans[key] = (start, at)
        key = None
        at = space(text, at).end()  # type: ignore[union-attr]
        if text[at:at + 1] == "}" and space(text, at + 1).end() == len(text):  # type: ignore[union-attr]
            return None
        if text[at:at + 1] != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, at)
        at += 1


class DuplicateKey(ValueError):
    """A JSON object holds a key twice: ``json`` keeps the last silently, so the row (or
    the value) served would be one of two the file gives, chosen by position."""


class _Twice(dict):  # type: ignore[type-arg]
    """An object decoded by :func:`_strict` that held ``key`` twice."""

    key: str


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    seen: set[str] = set()
    twice = _Twice(found)
    twice.key = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
    return twice


_CHECKING = json.JSONDecoder(object_pairs_hook=_pairs)
_STRICT, _STRICT_RAW = _CHECKING.decode, _CHECKING.raw_decode


def _strict(text: str) -> Any:
    """``json.loads(text)``, refusing an object anywhere in it that holds a key twice.

    Raises:
        DuplicateKey: naming the key (and the row, inside ``rows``).
    """
    value = _STRICT(text)
    twice = _first_twice(value)
    if twice is not None:
        raise DuplicateKey(twice)
    return value


def _rows_twice(text: str, span: tuple[int, int], records: list[Any]) -> str | None:
    """Which row of ``records`` (parsed from ``text[span]``) holds a key twice, in words,
    or None. Every key in the text is followed by a colon, and colons inside strings only
    add to the count: so when the colons of the span number no more than the keys of the
    objects parsed from it (rows, their params and bucket bounds), no key was dropped, and
    the rows need not be parsed again (~3 ms for 10,000 rows where a parse that checks
    every object costs ~15 ms). Otherwise they are, checking each object."""
    keys = 0
    for record in records:
        if type(record) is dict:
            keys += len(record)
            for name in ("params", "bucket_bounds"):
                value = record.get(name)
                if type(value) is dict:
                    keys += len(value)
    if text.count(":", *span) <= keys:
        return None
    return _first_twice({"rows": _STRICT(text[span[0]:span[1]])})


def _first_twice(value: Any, where: str = "") -> str | None:
    """Where the first object holding a key twice is (``row 3 (light/qkv), field 'params'``)."""
    if isinstance(value, _Twice):
        return f"{where or 'the document'}: key {value.key!r} appears twice (JSON keeps the last, silently)"
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _first_twice(item, _place(where, key, item))
        if found is not None:
            return found
    return None


def _place(where: str, key: Any, item: Any) -> str:
    """``rows`` → ``row 3 (light/qkv)`` → ``row 3 (light/qkv), field 'params'`` (``the
    details of row 3``…); deeper places keep the field's."""
    if not where:
        return str(key)
    if where in ("rows", "details") and isinstance(key, int):
        return label(key, item) if where == "rows" else f"the details of row {key}"
    if where.startswith("row ") and ", field " not in where:
        return f"{where}, field {key!r}"
    return where


def _too_deep(path: Path, text: str) -> StorageError:
    where, depth = _deepest(text)
    return StorageError(f"{path}: {where} nests {depth} levels deep, deeper than Python's JSON parser reads")


def _deepest(text: str) -> tuple[str, int]:
    """Where the JSON ``text`` nests deepest, in words (``row 3, field 'params',``;
    ``the value of 'problem'`` outside the rows), and how many levels deep."""
    stack: list[list[Any]] = []  # per open container: [its bracket, the current key or index]
    deepest: tuple[Any, ...] = ()
    depth = 0
    string = '""'
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("{", "["):
            stack.append([token, 0])
            if len(stack) > depth:
                depth, deepest = len(stack), tuple(tuple(entry) for entry in stack[:3])
        elif token in ("}", "]"):
            if stack:
                stack.pop()
        elif token == ",":
            if stack and stack[-1][0] == "[":
                stack[-1][1] += 1
        elif token == ":":
            if stack:
                stack[-1][1] = string[1:-1]  # the key as written (escapes and all)
        else:
            string = token
    keys = [key for _, key in deepest]
    if len(deepest) >= 2 and deepest[0] in (("{", "rows"), ("{", "details")):
        where = f"row {keys[1]}" + (f", field {keys[2]!r}," if len(deepest) == 3 and deepest[2][0] == "{" else "")
    else:
        where = f"the value of {keys[0]!r}" if deepest and deepest[0][0] == "{" else "the document"
    return where, depth
