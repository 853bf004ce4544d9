"""Ctrl-C at many moments of a real ``tuner tune`` keeps the contract (issue 39, item 5).

Each case starts ``python -m tuner tune`` in its own process group, sends the group a
SIGINT (what Ctrl-C on a terminal does) after a delay, and reads the database afterwards.
The delays span the run (imports, loading, trials, the baselines, the ``--fresh`` swap),
and whatever moment each hits on a given machine, the outcome must be one the contract
allows:

- exit 130 with one ``tuner: interrupted`` line, or exit 0 (the run had finished);
  never a traceback, never another code;
- the database passes SQLite's ``integrity_check`` and holds no RUNNING trial that a
  worker had started;
- ``--fresh``: interrupted, the file is byte-identical (nothing was swapped in); finished,
  the new study is in place. A plain tune, interrupted, is finished by a rerun.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.search import study_name

#: A tune of seed_example's light regime that takes a few seconds.
TUNE = ("tune", "seed_example", "--regimes", "light", "--horizon", "2", "--trials", "3", "-q")
#: Seconds after the start at which the SIGINT comes: from the imports to the end.
MOMENTS = (0.4, 1.5, 2.5, 3.5)


def _tune(url: str, *extra: str, interrupt_after: float | None = None, env: dict[str, str],
          cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tuner tune`` in ``cwd`` (a temporary directory: nothing is written elsewhere)."""
    command = subprocess.Popen([sys.executable, "-m", "tuner", *TUNE, "--storage", url, *extra], cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if interrupt_after is not None:
            try:
                command.wait(timeout=interrupt_after)
            except subprocess.TimeoutExpired:
                os.killpg(command.pid, signal.SIGINT)
        out, err = command.communicate(timeout=120)
    finally:
        command.kill()
    return subprocess.CompletedProcess(command.args, command.returncode, out, err)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_database(path: Path) -> list[TrialState]:
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    study = optuna.load_study(study_name=study_name("seed_example", "light"), storage=f"sqlite:///{path}")
    assert not [t for t in study.trials if t.state == TrialState.RUNNING and "worker" in t.user_attrs]
    return [t.state for t in study.trials]


def _check_exit(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 130), (result.returncode, result.stderr)
    if result.returncode == 130:  # (multiprocessing's resource tracker may warn after it, in its own process)
        assert [line for line in result.stderr.splitlines() if line.startswith("tuner: interrupted")], result.stderr


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> dict[str, str]:
    return {**os.environ, "TUNER_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, environment) -> Path:
    path = tmp_path_factory.mktemp("tuned") / "r.db"
    result = _tune(f"sqlite:///{path}", "--seeds", "2", env=environment, cwd=path.parent)
    assert result.returncode == 0, result.stderr
    return path


@pytest.mark.parametrize("after", MOMENTS)
def test_ctrl_c_in_a_fresh_tune_leaves_the_file_as_it_was_or_swapped_whole(tuned, tmp_path, environment, after):
    path = tmp_path / "r.db"
    path.write_bytes(tuned.read_bytes())
    before = _sha256(path)
    result = _tune(f"sqlite:///{path}", "--seeds", "3", "--fresh", interrupt_after=after, env=environment,
                   cwd=tmp_path)
    _check_exit(result)
    if result.returncode == 130:
        assert _sha256(path) == before, f"interrupted at {after} s, yet the database changed: {result.stderr}"
        return
    _check_database(path)
    study = optuna.load_study(study_name=study_name("seed_example", "light"), storage=f"sqlite:///{path}")
    assert study.user_attrs["seeds"] == [0, 1, 2]


@pytest.mark.parametrize("after", MOMENTS[1:3])
def test_ctrl_c_in_a_tune_keeps_a_sound_database_that_a_rerun_finishes(tuned, tmp_path, environment, after):
    path = tmp_path / "r.db"
    url = f"sqlite:///{path}"
    result = _tune(url, "--seeds", "2", interrupt_after=after, env=environment, cwd=tmp_path)
    _check_exit(result)
    if path.exists() and result.returncode == 130:
        try:
            _check_database(path)
        except KeyError:  # interrupted before the study was created
            pass
    rerun = _tune(url, "--seeds", "2", env=environment, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    finished = (TrialState.COMPLETE, TrialState.PRUNED)
    assert sum(s in finished for s in _check_database(path)) == sum(s in finished for s in _check_database(tuned))


class _InterruptedImport:
    """A finder that, asked for the command group, does what a Ctrl-C during its import does."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "tuner.cli.group":
            raise KeyboardInterrupt
        return None


def test_ctrl_c_while_the_commands_are_imported_is_one_line_and_130(monkeypatch, capsys):
    """The moment the 0.4 s case above hits on a slow machine, made certain: no traceback."""
    from tuner.__main__ import main

    monkeypatch.delitem(sys.modules, "tuner.cli.group", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport(), *sys.meta_path])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 130
    assert capsys.readouterr().err == "tuner: interrupted\n"
