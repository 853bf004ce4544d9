"""Capacity on any problem (issue 28 item 3): a capacity search that reaches its ceiling
(:data:`tuner.search.capacity.MAX_PROBE_ARRIVALS` arrivals per window) reports a flagged
lower bound with the reason, progress lines show the capacity phase, and the goodput rows
are written whatever capacity does.

The problem is the issue's: one GEMM on an H100 (``tests/problems/one_gemm.yaml``), whose
service meets its SLO far above any rate a window of the ceiling's size holds. The tests
lower the ceiling to 2^12 arrivals so that rising to it costs milliseconds (the search's
path depends only on the ceiling's rate, ``MAX_PROBE_ARRIVALS / horizon``), and simulate
in this process (``--sim-jobs 1``) so the lowered ceiling is the one used.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.errors import ProblemError
from tuner.search import capacity

ONE_GEMM = Path(__file__).resolve().parent / "problems" / "one_gemm.yaml"
#: The test's ceiling: 2^12 arrivals in a 2 s window is 2048 req/s. The search starts at the
#: regime's 100 req/s and doubles: 100, 200, …, 1600, then stops at 2048 (not 3200).
ARRIVALS, HORIZON = 2**12, 2.0
CEILING_RPS = ARRIVALS / HORIZON


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def low_ceiling(monkeypatch):
    from tuner.cli.progress import TerminalProgress

    monkeypatch.setattr(capacity, "MAX_PROBE_ARRIVALS", ARRIVALS)
    monkeypatch.setattr(TerminalProgress, "INTERVAL_S", 0.0)  # every progress line, as in a log


def rows(url_path: Path) -> list[tuple]:
    with sqlite3.connect(url_path) as db:
        return db.execute("SELECT bucket, goodput_rps, baseline_goodput_rps, capacity_rps, baseline_capacity_rps, "
                          "capacity_ci_rps, capacity_delta_ci_rps FROM tuner_configs WHERE problem = 'one_gemm' "
                          "AND regime = 'light' ORDER BY bucket").fetchall()


def test_one_gemm_tunes_to_completion_with_its_capacity_a_flagged_lower_bound(low_ceiling, tmp_path):
    db = tmp_path / "r.db"
    result = run("tune", ONE_GEMM, "--storage", f"sqlite:///{db}", "--trials", 4, "--seeds", 2,
                 "--horizon", HORIZON, "--sim-jobs", 1)
    assert result.exit_code == 0, (result.output, result.exception)
    out = result.stdout
    bound = f"≥ {CEILING_RPS:.3g} (lower bound)"
    assert f"capacity at the SLO: tuned {bound}, per-bucket isolated-fastest {bound}: not compared, " in out, out
    assert f"the SLO still held at {CEILING_RPS:.3g} req/s, where a 2 s window holds 4,096 arrivals" in out
    assert "a shorter horizon (--horizon)" in out and "rows written to" in out
    # every bucket of the one operator has its row, with goodput and no capacity figure
    # (a lower bound would read as a measured capacity)
    written = rows(db)
    assert [row[0] for row in written] == list(range(14))
    assert all(row[1] > 0 and row[2] > 0 and row[3:] == (None,) * 4 for row in written), written
    # progress while the capacities are searched, seed by seed, as in a log
    lines = [line for line in result.stderr.splitlines() if line.startswith("tuner tune: regime light (1/1): ")]
    assert any("capacity of tuned: seed 2/2 done (6 simulations); " in line for line in lines), lines


def test_simulate_capacity_json_flags_the_lower_bound(low_ceiling):
    """Each seed probes 100, 200, 400, 800, 1600 and 2048 req/s (6 simulations), all met."""
    result = run("simulate", ONE_GEMM, "--capacity", "--seeds", 2, "--horizon", HORIZON, "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    found = json.loads(result.stdout)
    assert found["capacity_lower_bound"] is True and found["capacity_per_seed_rps"] == [CEILING_RPS] * 2
    assert found["simulations"] == 12 and "--horizon" in found["capacity_limit"]
    text = run("simulate", ONE_GEMM, "--capacity", "--seeds", 1, "--horizon", HORIZON)
    assert f"light: capacity at 90% SLO attainment ≥ {CEILING_RPS:.3g} req/s (a lower bound)" in text.stdout
    assert "tuner simulate: capacity of regime light: 1/1 seeds, 6 simulations" in text.stderr, text.stderr


def test_goodput_rows_are_written_when_capacity_fails(monkeypatch, tmp_path):
    """An error in the capacity search of a goodput study costs the capacity, not the rows."""
    def failing(*args, **kwargs):
        raise ProblemError("regimes.light: the capacity search failed here")

    monkeypatch.setattr(capacity, "capacity_at", failing)
    db = tmp_path / "r.db"
    result = run("tune", ONE_GEMM, "--storage", f"sqlite:///{db}", "--trials", 2, "--seeds", 1,
                 "--horizon", HORIZON, "--sim-jobs", 1)
    assert result.exit_code == 0, (result.output, result.exception)
    assert ("capacity at the SLO not found (goodput and rows stand without it): regimes.light: the capacity "
            "search failed here") in result.stdout
    written = rows(db)
    assert len(written) == 14 and all(row[1] > 0 and row[3] is None for row in written)


def test_a_capacity_study_keeps_the_lower_bound_flag_through_its_trials(low_ceiling, tmp_path):
    """With ``objective: capacity`` the study's trials hold the capacities: the flag and the
    reason are stored with each trial and read back for the report (the tuned figure
    comes from the study, not from a new search)."""
    document = ONE_GEMM.read_text() + "objective: capacity\n"
    problem = tmp_path / "one_gemm_capacity.yaml"
    problem.write_text(document)
    result = run("tune", problem, "--storage", f"sqlite:///{tmp_path / 'r.db'}", "--trials", 2, "--seeds", 1,
                 "--horizon", HORIZON, "--sim-jobs", 1)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "(study maximised capacity)" in result.stdout
    bound = f"≥ {CEILING_RPS:.3g} (lower bound)"
    assert f"capacity at the SLO: tuned {bound}, per-bucket isolated-fastest {bound}: not compared, " in result.stdout


def test_the_docs_state_the_ceiling_the_code_uses():
    root = Path(__file__).resolve().parent.parent
    for doc in ("problem-files.md", "tuning.md"):
        assert f"{capacity.MAX_PROBE_ARRIVALS:,} arrivals" in (root / "docs" / doc).read_text(), doc
