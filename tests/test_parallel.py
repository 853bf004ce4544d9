"""Seeds simulated in worker processes (:mod:`tuner.search.parallel`) give what the same
evaluation gives in one process: every value, rate, overload flag and visited cell, a
prune at the same seed, an illegal config refused the same way. (The whole-run check,
the same table and trials with and without a pool, is ``test_same_seed_same_table``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.problem.scenario import Scenario
from tuner.problem import load_problem, resolve_assignment
from tuner.problem.assignment import Assignment
from tuner.search import evaluate
from tuner.search import parallel

ROOT = Path(__file__).resolve().parents[1]
SEED_EXAMPLE = ROOT / "search_spaces" / "seed_example.yaml"
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def problem():
    return load_problem(SEED_EXAMPLE)


@pytest.fixture(scope="module")
def pool(problem, tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('pool') / 'results.db'}"
    with parallel.seed_pool(problem, url, 2) as made:
        yield made


@pytest.mark.parametrize("metric,horizon", [("goodput", 5.0), ("capacity", 2.0)])
def test_a_pool_evaluates_exactly_as_one_process(problem, pool, metric, horizon) -> None:
    assert isinstance(pool, parallel.SeedPool)
    for config in ("lean", "fast"):
        assignment = resolve_assignment(problem, [f"stage={config}"])
        seen: list[tuple[int, float, int]] = []
        pooled = evaluate(Scenario.of(problem, "heavy", SEEDS, horizon), assignment, on_seed=lambda *a: seen.append(a),
                          metric=metric, seed_runner=pool)
        alone: list[tuple[int, float, int]] = []  # the same call, serially
        serial = evaluate(Scenario.of(problem, "heavy", SEEDS, horizon), assignment, on_seed=lambda *a: alone.append(a),
                          metric=metric)
        assert pooled == serial and seen == alone
        assert len(pooled.values) == 3 and (config != "lean" or min(pooled.values) > 0)
    assert len(pool._executor._processes) == 1  # it did run in the worker (and here)


def test_a_prune_stops_at_the_same_seed(problem, pool) -> None:
    class Pruned(Exception):
        pass

    steps: list[int] = []

    def prune_second(step: int, value: float, simulations: int) -> None:
        steps.append(step)
        if step == 1:
            raise Pruned

    with pytest.raises(Pruned):
        evaluate(Scenario.of(problem, "heavy", SEEDS, 2.0), Assignment.default(problem), on_seed=prune_second, seed_runner=pool)
    assert steps == [0, 1]


def test_an_illegal_config_comes_back_as_a_result_and_is_refused_as_in_one_process(problem) -> None:
    from tests.test_search import ShapeLimited, with_profile
    from tuner.search import JointSpace

    limited = with_profile(problem, "stage", "fast", lambda p: ShapeLimited(p, limit=0))
    fast = JointSpace.of(limited).assignment(("fast",))
    found = parallel.run_seed(limited, fast, "light", 0, 5.0, "goodput")  # what a worker sends back
    assert found.illegal is not None and found.illegal.startswith("batch") and found.simulations == 0
    refused = evaluate(Scenario.of(limited, "light", [0], 5.0), fast).constraints
    assert (refused.legality, refused.reason) == (1.0, f"illegal: {found.illegal}")


def test_only_the_pools_own_problem_file_goes_to_the_workers(problem, pool) -> None:
    other = load_problem(SEED_EXAMPLE)  # the same file, another object: maybe edited in memory
    assert pool.serves(problem) and not pool.serves(other)
    submitted = []
    original = pool._executor.submit
    pool._executor.submit = lambda *a, **k: submitted.append(a) or original(*a, **k)
    try:
        found = list(pool.run(Scenario.of(other, "heavy", SEEDS, 2.0), Assignment.default(other), "goodput"))
    finally:
        pool._executor.submit = original
    assert submitted == [] and len(found) == len(SEEDS)  # all simulated here
    with parallel.seed_pool(problem, "sqlite://", 1) as one:
        assert one is parallel.IN_PROCESS


def test_default_processes_share_the_cores_and_never_exceed_the_seeds(monkeypatch) -> None:
    monkeypatch.setattr(parallel, "usable_cores", lambda: 8)
    assert parallel.default_processes(3) == 3
    assert parallel.default_processes(16) == 9  # the cores, and the worker keeping the books
    assert parallel.default_processes(3, jobs=4) == 3
    assert parallel.default_processes(3, jobs=16) == 1
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    assert parallel.default_processes(3) == 3
    monkeypatch.setattr(parallel, "usable_cores", lambda: 1)
    assert parallel.default_processes(3) == 1


def test_ctrl_c_with_seed_processes_exits_at_once_and_leaves_none_behind(tmp_path) -> None:
    """Ctrl-C on a terminal reaches the whole process group: the workers ignore it, the
    command stops them and exits 130 in one line; no process of the group survives."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from tests.test_fleet import finished_trials
    from tests.test_search import tradeoff_problem

    problem = tmp_path / "tradeoff.yaml"
    problem.write_text(yaml.safe_dump(tradeoff_problem(horizon="6 s"), sort_keys=False))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    command = subprocess.Popen([sys.executable, "-m", "tuner", "tune", str(problem), "--storage", url, "--regimes",
                                "heavy", "--trials", "12", "--sim-jobs", "3", "--force", "-q"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and finished_trials(url) < 2:
            time.sleep(0.1)
        os.killpg(command.pid, signal.SIGINT)
        start = time.monotonic()
        _, err = command.communicate(timeout=60)
        took = time.monotonic() - start
    finally:
        command.kill()
    assert command.returncode == 130 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("tuner: interrupted; finished trials are kept in sqlite:///")
    assert took < 15
    time.sleep(1.5)  # a worker's parent watch polls every second
    ps = subprocess.run(["ps", "-o", "stat=,pid=,args=", "-g", str(command.pid)], capture_output=True, text=True)
    alive = [line for line in ps.stdout.splitlines() if line.strip() and not line.lstrip().startswith("Z")]
    assert not alive, alive  # (a zombie is an exited child this sandbox's init has not reaped)


def test_a_problem_file_edited_during_the_run_is_simulated_here_as_loaded(tmp_path) -> None:
    import shutil

    path = tmp_path / "seed_example.yaml"
    shutil.copy(SEED_EXAMPLE, path)
    loaded = load_problem(path)
    path.write_text(path.read_text() + "\n# edited after tuner loaded it\n")
    assignment = resolve_assignment(loaded, ["stage=lean"])
    serial = evaluate(Scenario.of(loaded, "heavy", SEEDS, 2.0), assignment)
    with parallel.seed_pool(loaded, f"sqlite:///{tmp_path / 'r.db'}", 2) as pool:
        pooled = evaluate(Scenario.of(loaded, "heavy", SEEDS, 2.0), assignment, seed_runner=pool)
        assert pooled == serial  # not an error, not the new file
