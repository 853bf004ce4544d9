"""Read a project JSON export for serving: the document checked before its rows are.

Apart from :mod:`tuner.runtime.served` because a JSON file fails in ways a SQLite one
cannot: a ``schema_version`` that is not a number at all (``"1"``: a malformed export,
not another version), and nesting deeper than Python's JSON parser reads, which fails
the whole file with a bare ``RecursionError`` that names nothing. For that one, the text
is scanned again (on the failure path only) to name the row and field that nest deepest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..store.version import check_export
from .rows import describe

__all__ = ["json_records"]

#: The tokens that open, close or separate JSON values (strings whole, so that brackets
#: and commas inside them are skipped).
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[][{},:]')


def json_records(path: Path) -> list[Any]:
    """The row records of the JSON export at ``path``.

    Raises:
        StorageError: not JSON, nested too deep, not a tuner export, a ``schema_version``
            that is not an integer, no list of rows.
        SchemaMismatchError: an export of another schema version.
    """
    try:
        data = path.read_bytes()
        document = json.loads(data)
    except OSError as exc:
        raise StorageError(f"{path}: cannot read the table file ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StorageError(f"{path}: neither a SQLite database nor JSON ({exc})") from None
    except RecursionError:
        where, depth = _deepest(data)
        raise StorageError(f"{path}: {where} nests {depth} levels deep, deeper than Python's JSON parser "
                           "reads") from None
    if isinstance(document, dict) and type(document.get("schema_version", 0)) is not int:
        raise StorageError(f"{path}: schema_version must be an integer, found {describe(document['schema_version'])}")
    check_export(document, path)
    records = document.get("rows")
    if not isinstance(records, list):
        raise StorageError(f"{path}: the exported table has no list of rows")
    return records


def _deepest(data: bytes) -> tuple[str, int]:
    """Where the JSON text ``data`` nests deepest, in words (``row 3, field 'params',``;
    ``the value of 'problem'`` outside the rows), and how many levels deep."""
    text = data.decode(json.detect_encoding(data), "surrogatepass")
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
    if len(deepest) >= 2 and deepest[0] == ("{", "rows"):
        where = f"row {keys[1]}" + (f", field {keys[2]!r}," if len(deepest) == 3 and deepest[2][0] == "{" else "")
    else:
        where = f"the value of {keys[0]!r}" if deepest and deepest[0][0] == "{" else "the document"
    return where, depth
