"""What ships inside the package: the bundled problems, their traces and the example database.

``tuner/search_spaces`` and ``tuner/results.db.example`` link to the checkout's top-level
``search_spaces/`` and ``results.db.example``; a wheel carries copies (package data), so
``pip install`` followed by ``tuner tune`` works from any directory: the default problem
is found here, and the example database's compile cache means nothing compiles.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent
#: The bundled problem files (``<name>.yaml``) and their ``traces/``.
PROBLEMS_DIR = ROOT / "search_spaces"
#: The committed database: its compile cache lets a fresh install run without compiling,
#: and the dashboard shows it when there is no ``results.db``.
EXAMPLE_DATABASE = (ROOT / "results.db.example").resolve()
#: The problem every command uses when none is named.
DEFAULT_PROBLEM_NAME = "llm_decode"


def problem_names() -> list[str]:
    """The bundled problems' names, sorted."""
    return sorted(path.stem for path in PROBLEMS_DIR.glob("*.yaml"))


def problem_file(name: str) -> Path:
    """The bundled problem ``name``'s file (which may not exist: see :func:`resolve`)."""
    return PROBLEMS_DIR / f"{name.removesuffix('.yaml')}.yaml"


def default_problem() -> Path:
    """The file of the problem every command uses when given none (llm_decode)."""
    return problem_file(DEFAULT_PROBLEM_NAME)


def resolve(problem: str | Path | None) -> Path:
    """A problem argument as a file: a path that exists is itself; otherwise a bundled
    problem's name (``llm_decode`` or ``llm_decode.yaml``) is that problem's file; None
    is the default problem. Anything else is returned unchanged, for the loader to
    report as missing."""
    if problem is None:
        return default_problem()
    path = Path(problem)
    if path.exists() or len(path.parts) != 1:
        return path
    bundled = problem_file(path.name)
    return bundled if bundled.is_file() else path


def missing_hint() -> str:
    """What to say when a problem file does not exist."""
    names = problem_names()
    shown = ", ".join(names[:8]) + (f", … and {len(names) - 8} more" if len(names) > 8 else "")
    return f"no such file, and no bundled problem of that name (bundled: {shown}; `tuner problems` lists them)"
