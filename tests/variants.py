"""Variants of the shipped problem files for bad-input tests: copy, edit one key, write."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "search_spaces"
DELETE = object()


def edit(document: dict, path: str, value: object) -> None:
    """Set ``service.operators[0].family``-style ``path`` in ``document`` (DELETE removes it)."""
    parts = [int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\[\d+\]|[^.\[\]]+", path)]
    node = document
    for part in parts[:-1]:
        node = node[part]
    if value is DELETE:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value


def write(tmp_path: Path, document: dict, name: str = "problem.yaml") -> Path:
    """Dump ``document`` next to a link to the shipped traces, so relative trace paths work."""
    traces = tmp_path / "traces"
    if not traces.exists():
        traces.symlink_to(SPACES / "traces")
    target = tmp_path / name
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target


def variant(tmp_path: Path, base: str, *edits: tuple[str, object], name: str = "problem.yaml") -> Path:
    """A shipped problem (``base``, without .yaml) with ``edits`` applied, written under tmp_path."""
    document = yaml.safe_load((SPACES / f"{base}.yaml").read_text())
    for path, value in edits:
        edit(document, path, value)
    return write(tmp_path, document, name)
