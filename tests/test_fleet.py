"""Workers sharing studies: three ``tuner worker`` processes on PostgreSQL and
``tuner tune --jobs 2`` on SQLite, one worker killed with SIGKILL in the middle of a trial.

What a user relies on: each study ends with exactly its budget of finished trials, the
killed trial is FAIL and was run again (Optuna's heartbeat and retry callback), every
warm start ran once, every regime's rows were written once, and the table holds what a
single process computes with the same seeds. The trials a fleet runs depend on timing
(the sampler proposes from whatever trials have finished), so only what does not depend
on that is compared exactly: the baselines' figures in every regime; the tuned config
and figures of the regime whose optimum is a warm start (``light``: every assignment
serves its load, and the fastest, THE baseline, wins the latency tie-break); in the
other regime, the tuned figures are recomputed in this process from the tuned configs.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from sqlalchemy import create_engine, text

from tuner.problem.scenario import Scenario
from tuner.problem import load_problem
from tuner.problem.assignment import Assignment
from tuner.search import TuneSettings, evaluate, study_name, tune_problem
from tuner.store import SCHEMA_VERSION, Store
from tuner.store.store import resolve_url

sys.path.insert(0, str(Path(__file__).parent))
from test_search import tradeoff_problem  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

BUDGET = 12
SETTINGS = TuneSettings(trials=BUDGET, seeds=2)
OPTIONS = ("--trials", BUDGET, "--seeds", 2, "--heartbeat", 1, "-q")
#: Figures of a regime's rows that do not depend on which trials the fleet ran.
BASELINE_FIELDS = ("baseline_config", "baseline_goodput_rps", "baseline_capacity_rps", "one_config_goodput_rps",
                   "one_config_capacity_rps", "regime_rate_rps", "realized_rates_rps", "seeds", "horizon_s")
#: Fields that name the run rather than the result.
RUN_FIELDS = ("created_at", "trial_number", "study_name")


@pytest.fixture(scope="module")
def problem_file(tmp_path_factory) -> Path:
    """The 216-point tradeoff problem, with 6 s windows: a trial takes about a second."""
    path = tmp_path_factory.mktemp("fleet") / "tradeoff.yaml"
    path.write_text(yaml.safe_dump(tradeoff_problem(horizon="6 s"), sort_keys=False))
    return path


@pytest.fixture(scope="module")
def single_process_rows(problem_file, tmp_path_factory):
    """The table one process writes with the same seeds and budget."""
    url = f"sqlite:///{tmp_path_factory.mktemp('single') / 'one.db'}"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    tune_problem(load_problem(problem_file), url, SETTINGS)
    with Store(url) as store:
        return {(r.regime, r.op): r for r in store.rows()}


def tuner(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tuner", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def kill_one_mid_trial(url: str, chosen: Callable[[int], bool], timeout_s: float = 120.0) -> tuple[str, int, int]:
    """SIGKILL the first worker whose pid is ``chosen`` seen in the middle of a trial (its
    objective has suggested a parameter); returns (study, trial number, pid)."""
    engine = create_engine(resolve_url(url))
    query = text(
        "SELECT s.study_name, t.number, a.value_json FROM trials t "
        "JOIN studies s ON s.study_id = t.study_id "
        "JOIN trial_user_attributes a ON a.trial_id = t.trial_id AND a.key = 'worker' "
        "WHERE t.state = 'RUNNING' AND EXISTS (SELECT 1 FROM trial_params p WHERE p.trial_id = t.trial_id)"
    )
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                with engine.connect() as connection:
                    running = connection.execute(query).all()
            except Exception:  # noqa: BLE001 - the tables may not exist yet
                running = []
            for name, number, worker in running:
                pid = int(worker.strip('"').rsplit(":", 1)[1])
                if chosen(pid):
                    os.kill(pid, signal.SIGKILL)
                    return name, number, pid
            time.sleep(0.02)
    finally:
        engine.dispose()
    raise AssertionError("no worker was seen running a trial")


def check_fleet_result(url: str, problem_file: Path, killed: tuple[str, int, int], single_rows: dict) -> None:
    problem = load_problem(problem_file)
    killed_study, killed_number, _ = killed
    for regime in problem.regimes:
        study = optuna.load_study(study_name=study_name(problem.name, regime), storage=url)
        finished = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        assert len(finished) == BUDGET, (regime, [(t.number, t.state) for t in study.trials])
        assert not [t for t in study.trials if t.state == TrialState.RUNNING]
        enqueued = [t for t in study.trials if "fixed_params" in t.system_attrs
                    and RetryHeartbeatStaleTrialCallback.retried_trial_number(t) is None]
        params = [tuple(sorted(t.params.items())) for t in enqueued]
        assert len(params) == len(set(params)) >= 5, "a warm start was enqueued or run twice"
        if study.study_name == killed_study:
            by_number = {t.number: t for t in study.trials}
            assert by_number[killed_number].state == TrialState.FAIL
            retries = [t for t in study.trials if RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == killed_number]
            assert [t.state for t in retries] in ([TrialState.COMPLETE], [TrialState.PRUNED])
            # the same point: the params the killed trial had suggested, the rest fixed by its warm start or
            # proposed anew (it may die before suggesting them all)
            assert by_number[killed_number].params.items() <= retries[0].params.items()
    with Store(url) as store:
        rows = {(r.regime, r.op): r for r in store.rows()}
        written = store.engine.connect().execute(text("SELECT study_name FROM tuner_regimes_written")).scalars().all()
    assert sorted(written) == sorted(study_name(problem.name, r) for r in problem.regimes)
    assert rows.keys() == single_rows.keys()
    for key, row in rows.items():
        alone = single_rows[key]
        for field in BASELINE_FIELDS:
            assert getattr(row, field) == getattr(alone, field), (key, field)
    light = {key: dataclasses.replace(row, **{f: None for f in RUN_FIELDS}) for key, row in rows.items()
             if key[0] == "light"}
    assert light == {key: dataclasses.replace(row, **{f: None for f in RUN_FIELDS})
                     for key, row in single_rows.items() if key[0] == "light"}
    heavy = [row for key, row in rows.items() if key[0] == "heavy"]
    tuned = Assignment.from_rows(problem, heavy, "the fleet's heavy rows")
    again = evaluate(Scenario.of(problem, "heavy", SETTINGS.seed_list, heavy[0].horizon_s), tuned)
    assert again.mean == pytest.approx(heavy[0].goodput_rps, rel=1e-12)
    assert heavy[0].goodput_rps >= heavy[0].baseline_goodput_rps


def test_three_workers_on_postgresql_survive_a_sigkill(problem_file, postgres_url, single_process_rows):
    workers = [tuner("worker", problem_file, "--storage", postgres_url, *OPTIONS) for _ in range(3)]
    try:
        pids = {w.pid for w in workers}
        killed = kill_one_mid_trial(postgres_url, pids.__contains__)
        for worker in workers:
            out, err = worker.communicate(timeout=300)
            if worker.pid != killed[2]:
                assert worker.returncode == 0, err
                assert "Traceback" not in err, err
    finally:
        for worker in workers:
            worker.kill()
    check_fleet_result(postgres_url, problem_file, killed, single_process_rows)


def test_jobs_2_on_sqlite_survives_a_sigkilled_helper(problem_file, tmp_path, single_process_rows):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    parent = tuner("tune", problem_file, "--storage", url, "--jobs", 2, *OPTIONS)
    try:
        killed = kill_one_mid_trial(url, lambda pid: pid != parent.pid)
        out, err = parent.communicate(timeout=300)
    finally:
        parent.kill()
    assert parent.returncode == 0, err
    assert f"worker 1 (pid {killed[2]}) stopped early with status -9" in err
    assert "database is locked" not in err and "Traceback" not in err, err
    check_fleet_result(url, problem_file, killed, single_process_rows)


# --- bad databases: one line naming the URL and why, exit 2, nothing written -------------


def one_line(result) -> str:
    assert result.exit_code == 2, (result.output, result.exception)
    (line,) = result.stderr.splitlines()
    assert line.startswith("tuner: error: ") and "Traceback" not in result.output
    return line


def worker_cli(problem_file: Path, url: str, *extra: object):
    from click.testing import CliRunner

    from tuner.cli import main

    return CliRunner().invoke(main, ["worker", str(problem_file), "--storage", url, "--trials", 1, "--seeds", 1,
                                     *map(str, extra)])


def tables(url: str) -> set[str]:
    from sqlalchemy import inspect

    engine = create_engine(resolve_url(url))
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_unknown_role_and_unreachable_server_are_one_line(problem_file, postgres_url):
    unknown_role = postgres_url.replace("postgres@", "no_such_role@", 1)
    line = one_line(worker_cli(problem_file, unknown_role))
    assert "no_such_role@127.0.0.1:5432" in line and 'role "no_such_role" does not exist' in line
    line = one_line(worker_cli(problem_file, "postgresql://postgres@127.0.0.1:1/tuner"))
    assert "127.0.0.1:1/tuner: cannot open the database" in line and "refused" in line
    assert tables(postgres_url) == set()


def test_a_database_of_another_schema_version_is_refused_untouched(problem_file, postgres_url):
    engine = create_engine(resolve_url(postgres_url))
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE tuner_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)"))
        connection.execute(text("INSERT INTO tuner_schema VALUES (1, 2)"))
    engine.dispose()
    line = one_line(worker_cli(problem_file, postgres_url))
    assert f"tuner schema version 2 found, this tuner reads and writes version {SCHEMA_VERSION}" in line
    assert tables(postgres_url) == {"tuner_schema"}  # no Optuna table, no other tuner table


def test_bad_worker_options_are_one_line(problem_file, tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert "--jobs: '0' is below the minimum 1" in one_line(worker_cli(problem_file, url, "--jobs", 0))
    assert "--heartbeat: '0' is below the minimum 1" in one_line(worker_cli(problem_file, url, "--heartbeat", 0))
    assert not (tmp_path / "r.db").exists()


def test_ctrl_c_stops_every_worker_cleanly_and_a_rerun_finishes(problem_file, tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    args = ("tune", problem_file, "--storage", url, "--jobs", 2, "--regimes", "heavy", *OPTIONS)
    command = subprocess.Popen([sys.executable, "-m", "tuner", *map(str, args)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and finished_trials(url) < 3:
            time.sleep(0.1)
        os.killpg(command.pid, signal.SIGINT)  # what Ctrl-C on a terminal does: the whole process group
        out, err = command.communicate(timeout=120)
    finally:
        command.kill()
    assert command.returncode == 130, err
    assert err.splitlines()[-1].startswith("tuner: interrupted; finished trials are kept in sqlite:///")
    assert "Traceback" not in err, err
    study = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=url)
    # every trial whose objective had started is FAIL; a Ctrl-C inside Optuna's ask() can
    # leave a trial RUNNING that never started (no worker recorded): it counts for nothing
    assert not [t for t in study.trials if t.state == TrialState.RUNNING and "worker" in t.user_attrs]
    rerun = subprocess.run([sys.executable, "-m", "tuner", *map(str, args)], capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    study = optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=url)
    assert sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.trials) == BUDGET
    with Store(url) as store:
        assert {r.regime for r in store.rows()} == {"heavy"}


def tell_on_third_trial(monkeypatch, action: Callable[[], None]) -> None:
    """Run ``action`` while Optuna writes the third trial's result (its objective ran) to
    the database (the first trial's rehearsal in memory does not count)."""
    from optuna.study import _optimize

    tell, told = _optimize._tell_with_warning, []

    def third_tell(study, *args, **kwargs):
        if isinstance(study._storage, optuna.storages.InMemoryStorage):
            return tell(study, *args, **kwargs)
        told.append(1)
        if len(told) == 3:
            action()
        return tell(study, *args, **kwargs)

    monkeypatch.setattr(_optimize, "_tell_with_warning", third_tell)


def heavy_states(url: str) -> list[TrialState]:
    return [t.state for t in optuna.load_study(study_name=study_name("tradeoff", "heavy"), storage=url).trials]


def test_a_ctrl_c_in_optunas_bookkeeping_waits_for_it(problem_file, tmp_path, monkeypatch):
    """Ctrl-C while Optuna writes a trial's result (optuna 5.0 would leave the trial
    RUNNING and raise UnboundLocalError): the result is written, then the run stops."""
    tell_on_third_trial(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGINT))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with pytest.raises(KeyboardInterrupt):
        tune_problem(load_problem(problem_file), url, SETTINGS, ["heavy"])
    states = heavy_states(url)
    assert TrialState.RUNNING not in states and TrialState.FAIL not in states
    assert sum(s in (TrialState.COMPLETE, TrialState.PRUNED) for s in states) == 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is given back


def test_a_run_stopped_by_an_error_in_optuna_leaves_no_trial_running(problem_file, tmp_path, monkeypatch):
    """An error in Optuna's bookkeeping (not the objective) would leave the trial RUNNING
    until its heartbeat went stale: the run marks it FAIL as it stops."""
    def database_gone() -> None:
        raise ConnectionError("the database went away")

    tell_on_third_trial(monkeypatch, database_gone)
    url = f"sqlite:///{tmp_path / 'r.db'}"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with pytest.raises(Exception):  # noqa: B017 - optuna 5.0 turns it into its own AssertionError
        tune_problem(load_problem(problem_file), url, SETTINGS, ["heavy"])
    states = heavy_states(url)
    assert TrialState.RUNNING not in states
    assert states[2] == TrialState.FAIL


def finished_trials(url: str) -> int:
    engine = create_engine(resolve_url(url))
    try:
        with engine.connect() as connection:
            return connection.execute(text("SELECT count(*) FROM trials WHERE state = 'COMPLETE'")).scalar()
    except Exception:  # noqa: BLE001 - the tables may not exist yet
        return 0
    finally:
        engine.dispose()
