"""Build tuner's simulator core with mypyc when a C compiler is present; otherwise install
the same modules as pure Python.

Everything else about the package is declared in ``pyproject.toml``; this file exists
only because an extension build needs code. The compiled modules are the ones every
simulated event passes through (``tuner.sim.native.CORE``): mypyc compiles them
unchanged, type-checked against their own annotations, imports from the rest of tuner
treated as untyped. A build that cannot compile (no compiler, no Python headers, mypy
missing, ``TUNER_PURE_PYTHON=1`` set while installing) prints one line and installs the
pure-Python package, which computes the same numbers, only slower. ``tuner --version``
says which build runs; ``tuner.sim.native`` explains how a stale build is detected.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
#: Kept equal to tuner.sim.native.CORE (a test checks): setup.py cannot import tuner.
CORE = ("tuner/sim/gpu.py", "tuner/sim/batching.py", "tuner/sim/vllm_batching.py", "tuner/sim/service.py",
        "tuner/sim/admission.py", "tuner/sim/host_thread.py", "tuner/sim/lanes.py", "tuner/sim/usage.py",
        "tuner/sim/requests.py",
        "tuner/sim/program.py", "tuner/engine/block_pool.py", "tuner/engine/scheduler.py")
STAMP = "tuner/sim/_compiled.json"
MYPY_FLAGS = ["--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}", "--follow-imports=skip",
              "--ignore-missing-imports", "--no-warn-unused-configs", "--config-file=/dev/null"]


def say(message: str) -> None:
    print(f"tuner setup: {message}", file=sys.stderr, flush=True)


def core_extensions() -> list:
    """mypyc's extensions of the core, or [] (and one line why) when they cannot be built."""
    if os.environ.get("TUNER_PURE_PYTHON") == "1":
        say("TUNER_PURE_PYTHON=1: installing the simulator core as pure Python")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        say("mypyc is not installed: installing the simulator core as pure Python")
        return []
    try:
        return mypycify([*MYPY_FLAGS, *CORE], opt_level="3", group_name="tuner_sim_core")
    except (SystemExit, Exception) as exc:  # mypy exits on type errors; nothing may stop the install
        say(f"mypyc could not translate the simulator core ({exc!r}): installing it as pure Python")
        return []


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when compiling fails, and stamps what it
    compiled so that ``tuner.sim.native`` can tell a build from edited sources."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: the pure-Python package still works
            say(f"compiling the simulator core failed ({exc}): installing it as pure Python")
            self._remove_partial()
            return
        if self.extensions:
            self._stamp()

    def _remove_partial(self) -> None:
        for ext in self.extensions:
            for path in (Path(self.get_ext_fullpath(ext.name)), HERE / self.get_ext_filename(ext.name)):
                path.unlink(missing_ok=True)

    def _stamp(self) -> None:
        import mypy.version

        stamp = {"compiler": f"mypyc {mypy.version.__version__}",
                 "sources": {path: hashlib.sha256((HERE / path).read_bytes()).hexdigest() for path in CORE}}
        text = json.dumps(stamp, indent=1, sort_keys=True) + "\n"
        # beside the extensions: the source tree for an editable install, else the wheel's
        target = HERE / STAMP if self.inplace else Path(self.build_lib) / STAMP
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


setup(ext_modules=core_extensions(), cmdclass={"build_ext": OptionalBuildExt})
