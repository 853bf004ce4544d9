"""The compiled simulator core (``setup.py``, :mod:`tuner.sim.native`): both builds are one
model, the pure-Python switch and stale-build detection work, ``--version`` says which.

The suite itself runs on whichever build is installed (CI: compiled, and
``TUNER_REQUIRE_COMPILED=1`` makes a missing or stale build a failure, not a skip); the
simulator's own tests run a second time here on the pure-Python build, and every bundled
regime is simulated on both and compared to the last digit.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner import bundled
from tuner.cli import main
from tuner.sim import BUILD, native

ROOT = Path(__file__).resolve().parents[1]
REQUIRE_COMPILED = os.environ.get("TUNER_REQUIRE_COMPILED") == "1"
compiled_only = pytest.mark.skipif(not BUILD.compiled, reason=f"the simulator core runs {BUILD}")

#: The simulator's own tests (closed-form queues, hand-worked schedules), rerun on pure Python.
SIMULATOR_TESTS = ("tests/test_gpu.py", "tests/test_queueing.py", "tests/test_service.py", "tests/test_program_memo.py",
                   "tests/test_waves.py", "tests/test_two_batch.py", "tests/test_engine_scheduler.py")
HORIZON_S = 2.0


def _pure_env() -> dict[str, str]:
    return {**os.environ, native.PURE_ENV: "1"}


def every_regime_metrics() -> str:
    """JSON of the metrics of every bundled problem's regimes (default assignment, seed 0,
    a short horizon): what the two builds must agree on, digit for digit."""
    from tuner.problem import load_problem
    from tuner.problem.assignment import Assignment
    from tuner.sim import simulate

    out = {}
    for name in bundled.problem_names():
        problem = load_problem(bundled.problem_file(name))
        for regime in problem.regimes:
            metrics = simulate(problem, Assignment.default(problem), regime, seed=0, horizon_s=HORIZON_S).metrics
            out[f"{name}:{regime}"] = asdict(metrics)
    return json.dumps(out, sort_keys=True)


def test_setup_compiles_exactly_the_core() -> None:
    """setup.py cannot import tuner, so it repeats the list: the two must not drift."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    listed = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "CORE")
    assert tuple(listed) == tuple(f"tuner/{native.source_of(name)}" for name in native.CORE)


def test_the_installed_build_is_current() -> None:
    if not native.extensions():
        if REQUIRE_COMPILED:
            pytest.fail(f"TUNER_REQUIRE_COMPILED=1 but the simulator core runs {BUILD}")
        pytest.skip(f"no compiled build: {BUILD}")
    assert BUILD.compiled, f"{BUILD}"  # a stale build means the suite silently ran pure Python
    from tuner.engine import scheduler
    from tuner.sim import gpu, service

    assert Path(gpu.__file__).suffix == Path(service.__file__).suffix == Path(scheduler.__file__).suffix == ".so"


def _package_copy(tmp_path: Path) -> Path:
    """The core's sources in a package directory of their own (``tuner/sim``, ``tuner/engine``)."""
    here = tmp_path / "tuner"
    for name in native.CORE:
        target = here / native.source_of(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(native.ROOT / native.source_of(name), target)
    return here


def _stamp(here: Path, **changes: str) -> None:
    sources = {f"tuner/{native.source_of(name)}": hashlib.sha256((here / native.source_of(name)).read_bytes()).hexdigest()
               for name in native.CORE}
    (here / native.STAMP).write_text(json.dumps({"compiler": "mypyc 9.9", "sources": sources | changes}))


def test_which_build_a_directory_gets(tmp_path: Path) -> None:
    here = _package_copy(tmp_path)
    assert "no compiled build installed" in native.choose(here).reason
    for name in native.CORE:  # only the files' presence matters to the choice
        (here / native.source_of(name).replace(".py", ".cpython-311-x86_64-linux-gnu.so")).touch()
    assert len(native.extensions(here)) == len(native.CORE)
    assert "no readable sim/_compiled.json" in native.choose(here).reason
    _stamp(here)
    assert native.choose(here) == native.Build(True, "mypyc 9.9", "")
    assert str(native.choose(here)) == "compiled with mypyc 9.9"
    assert str(native.choose(here, pure=True)) == "pure Python (TUNER_PURE_PYTHON=1)"
    with (here / "engine" / "scheduler.py").open("a") as source:
        source.write("# edited after the build\n")
    stale = native.choose(here)
    assert not stale.compiled and "stale: tuner/engine/scheduler.py changed" in stale.reason
    (here / native.STAMP).write_text("{not json")
    assert "no readable" in native.choose(here).reason


def test_version_says_which_build_runs() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.stdout.endswith(f", simulator core {BUILD}\n")
    done = subprocess.run([sys.executable, "-m", "tuner", "--version"], env=_pure_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.endswith("simulator core pure Python (TUNER_PURE_PYTHON=1)\n")


def test_pure_python_loads_every_core_module_from_its_source() -> None:
    code = ("import tuner.sim, tuner.sim.gpu, tuner.sim.batching, tuner.sim.service as s, tuner.engine, sys;"
            "print([sys.modules[f'tuner.{n}'].__file__ for n in tuner.sim.native.CORE])")
    done = subprocess.run([sys.executable, "-c", code], env=_pure_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    files = ast.literal_eval(done.stdout)
    assert [f"{Path(f).parent.name}.{Path(f).name}" for f in files] == [f"{name}.py" for name in native.CORE]


@compiled_only
def test_both_builds_simulate_every_bundled_regime_identically() -> None:
    code = "from tests.test_native import every_regime_metrics; print(every_regime_metrics())"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_pure_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    pure, compiled = json.loads(done.stdout), json.loads(every_regime_metrics())
    assert len(compiled) >= 15
    differing = [key for key in compiled if json.dumps(compiled[key]) != json.dumps(pure[key])]
    assert not differing, f"the builds differ on {differing}"


@compiled_only
def test_the_simulator_tests_pass_on_pure_python_too() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SIMULATOR_TESTS],
                          cwd=ROOT, env=_pure_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:]
    assert " passed" in done.stdout.splitlines()[-1]
