"""Which build of the simulator core runs: mypyc-compiled or pure Python.

``setup.py`` compiles the modules every simulated event passes through (:data:`CORE`:
the service simulator's, and the vLLM scheduler and KV cache of :mod:`tuner.engine` that
a ``batching: vllm`` service runs every step) with mypyc when it can, and writes a stamp
beside them: the compiler and the SHA-256 of each source it compiled. Python would import a compiled module in preference to its
source, so two cases must not load it:

* ``TUNER_PURE_PYTHON=1`` asks for the pure-Python build (to compare, or to debug with
  breakpoints and tracebacks into the source);
* a stale build: a source edited since it was compiled (an editable install during
  development). Running the old machine code would silently simulate the old model.

In both, a finder placed first on ``sys.meta_path`` loads the sources instead.
The compiled modules are all or nothing: compiled code calls its siblings' compiled
classes directly. Both builds compute the same numbers to the last digit
(``tests/test_native.py``); only the speed differs. ``tuner --version`` prints
:data:`BUILD`.

This module must be imported before any core module (``tuner/sim/__init__.py`` and
``tuner/engine/__init__.py`` do).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

#: The compiled modules, named within the ``tuner`` package, as setup.py's CORE lists their files.
CORE = ("sim.gpu", "sim.batching", "sim.vllm_batching", "sim.service", "sim.admission", "sim.host_thread",
        "sim.lanes", "sim.usage", "sim.requests", "sim.program", "engine.block_pool", "engine.scheduler")
PURE_ENV = "TUNER_PURE_PYTHON"
#: The stamp setup.py writes, within the ``tuner`` package.
STAMP = "sim/_compiled.json"
#: The ``tuner`` package's directory.
ROOT = Path(__file__).resolve().parent.parent
PACKAGE = __package__.rpartition(".")[0]  # "tuner"


def source_of(name: str) -> str:
    """A core module's source file within the package: ``engine.scheduler`` -> ``engine/scheduler.py``."""
    return name.replace(".", "/") + ".py"


@dataclass(frozen=True)
class Build:
    """The build that runs, and why."""

    compiled: bool
    compiler: str | None  # e.g. "mypyc 2.4.1", when compiled
    reason: str  # why pure Python, when not compiled

    def __str__(self) -> str:
        return f"compiled with {self.compiler}" if self.compiled else f"pure Python ({self.reason})"


class _SourcesFirst(importlib.abc.MetaPathFinder):
    """Loads the core modules from their ``.py`` files even where an extension exists."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):  # noqa: ANN201 (importlib's)
        package, _, name = fullname.partition(".")
        if package != PACKAGE or name not in CORE:
            return None
        return importlib.util.spec_from_file_location(fullname, ROOT / source_of(name))


def extensions(root: Path = ROOT) -> list[Path]:
    """The compiled modules' files present under ``root`` (the package's directory)."""
    stems = [root / source_of(name).removesuffix(".py") for name in CORE]
    return [stem.with_name(stem.name + suffix) for stem in stems for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if stem.with_name(stem.name + suffix).exists()]


def choose(root: Path = ROOT, pure: bool = False) -> Build:
    """Which build ``root`` (the package's directory) should load."""
    if pure:
        return Build(False, None, f"{PURE_ENV}=1")
    if not extensions(root):
        return Build(False, None, "no compiled build installed: no C compiler or mypyc when it was installed")
    try:
        stamp = json.loads((root / STAMP).read_text())
        built = stamp["sources"]
        compiler = str(stamp["compiler"])
    except (OSError, ValueError, KeyError, TypeError):
        return Build(False, None, f"the compiled build has no readable {STAMP}: reinstall tuner")
    for name in CORE:
        source = f"{PACKAGE}/{source_of(name)}"
        if built.get(source) != hashlib.sha256((root / source_of(name)).read_bytes()).hexdigest():
            return Build(False, None, f"the compiled build is stale: {source} changed since it was compiled; "
                                      "reinstall tuner (pip install -e .) to recompile")
    return Build(True, compiler, "")


def _install() -> Build:
    build = choose(pure=os.environ.get(PURE_ENV) == "1")
    if not build.compiled and extensions():
        already = [f"{PACKAGE}.{name}" for name in CORE if f"{PACKAGE}.{name}" in sys.modules]
        if already:  # imported before this module: too late to choose (a bug in the import order)
            raise ImportError(f"{', '.join(already)} imported before tuner.sim.native")
        sys.meta_path.insert(0, _SourcesFirst())
    return build


#: The build of the simulator core this process runs.
BUILD = _install()
