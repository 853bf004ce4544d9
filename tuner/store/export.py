"""Exports of the config table: project JSON (what the runtime loads) and vLLM-style files.

Neither needs SQLAlchemy to read. Files are written whole: each to a temporary file in
the same directory, then renamed over the target, so an interrupted export never
leaves a half-written file.

Project JSON::

    {"schema_version": 1, "problem": "toy_llm", "rows": [TableRow.to_dict(), ...]}

vLLM-style: one file per (regime, operator), ``{problem}_{regime}_{op}.json``, holding
``{"<M>": {"BLOCK_SIZE_M": …, "BLOCK_SIZE_N": …, "BLOCK_SIZE_K": …, "GROUP_SIZE_M": …,
"num_warps": …, "num_stages": …}}`` as vLLM's tuned Triton configs do. ``<M>`` is the
operator's M at the largest batch (the table has one config per regime, and vLLM picks
the key nearest the runtime M, so that one entry serves every M). Parameters spelled
``BLOCK_M``/``GROUP_M`` are renamed; parameters vLLM has no key for (``SPLIT_K`` …)
are kept as they are, and a config without the six tile parameters is exported with
its own parameters: both are reported in the returned notes.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import StorageError
from .table import TableRow
from .version import SCHEMA_VERSION, check_export

VLLM_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_ALIASES = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K",
            "GROUP_M": "GROUP_SIZE_M"}


def json_document(problem: str, rows: Sequence[TableRow]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "problem": problem, "rows": [row.to_dict() for row in rows]}


def export_json(problem: str, rows: Sequence[TableRow], path: str | Path) -> Path:
    """Write the project JSON of ``problem``'s rows to ``path`` (atomically)."""
    path = Path(path)
    _write_atomic(path, json.dumps(json_document(problem, rows), indent=2) + "\n")
    return path


def read_json(path: str | Path) -> tuple[str, list[TableRow]]:
    """Read a project JSON export: ``(problem, rows)``.

    Raises:
        StorageError: unreadable or malformed file.
        SchemaMismatchError: written by a tuner with another schema version.
    """
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StorageError(f"{path}: cannot read the exported table ({exc})") from None
    check_export(document, path)
    try:
        return str(document["problem"]), [TableRow.from_dict(row) for row in document["rows"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageError(f"{path}: malformed row in the exported table ({exc!r})") from None


def vllm_config(row: TableRow) -> tuple[dict[str, Any], str | None]:
    """The vLLM-style entry of a row, and a note when it is not plain vLLM."""
    renamed = {_ALIASES.get(k, k): v for k, v in row.params.items()}
    missing = [k for k in VLLM_KEYS if k not in renamed]
    if missing:
        return dict(row.params), (f"{row.regime}/{row.op}: config {row.config!r} has no vLLM tile parameters "
                                  f"(missing {', '.join(missing)}); exported its own parameters as they are")
    entry = {k: renamed[k] for k in VLLM_KEYS}
    extra = {k: v for k, v in renamed.items() if k not in VLLM_KEYS}
    entry.update(extra)
    note = None
    if extra:
        note = (f"{row.regime}/{row.op}: parameters {', '.join(extra)} have no vLLM key; "
                "kept in the file as they are")
    return entry, note


def vllm_filename(row: TableRow) -> str:
    return _safe(f"{row.problem}_{row.regime}_{row.op}") + ".json"


def export_vllm(rows: Sequence[TableRow], out_dir: str | Path) -> tuple[list[Path], list[str]]:
    """Write one vLLM-style file per row under ``out_dir`` (created if missing).

    Returns the files written and the notes (configs that are not plain vLLM tiles).
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise StorageError(f"{out}: exists and is not a directory")
    entries = []
    notes = []
    for row in rows:
        entry, note = vllm_config(row)
        m = (row.shape or {}).get("M", 1)
        entries.append((out / vllm_filename(row), {str(int(m)): entry}))
        if note:
            notes.append(note)
    out.mkdir(parents=True, exist_ok=True)
    for path, content in entries:
        _write_atomic(path, json.dumps(content, indent=4) + "\n")
    return [path for path, _ in entries], notes


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "-", name)


def _write_atomic(path: Path, text: str) -> None:
    if not path.parent.is_dir():
        raise StorageError(f"{path}: no directory {path.parent}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
