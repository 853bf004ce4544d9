"""No function of ``tuner/`` is longer than 80 lines (STYLE: a function a reader holds in
one screen; issue 42, item 4). Counted from its ``def`` to its last line, docstring and
comments included, with :mod:`ast` (nothing is imported). The message names each
function over the limit, longest first, so the one to split is plain."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tuner"
LIMIT = 80


def long_functions(package: Path = PACKAGE, limit: int = LIMIT) -> list[tuple[int, str]]:
    """``(lines, "path:line name")`` of each function over ``limit`` lines, longest first."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append((lines, f"{path.relative_to(package.parent)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def test_no_function_is_longer_than_80_lines() -> None:
    assert long_functions() == []


def test_the_count_sees_a_long_function(tmp_path) -> None:
    package = tmp_path / "tuner"
    package.mkdir()
    (package / "long.py").write_text("def f():\n" + "    x = 1\n" * 80 + "\n\ndef g():\n    pass\n")
    assert long_functions(package) == [(81, "tuner/long.py:1 f")]
