"""The CLI's contract for bad input: one line on stderr naming file, key and reason;
exit code 2; never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main

from tests.variants import DELETE, SPACES, variant

ROOT = Path(__file__).resolve().parents[1]
SEED = SPACES / "seed_example.yaml"


def bad_variant(tmp_path: Path, base: str, edits: list[tuple[str, object]]) -> Path:
    return variant(tmp_path, base, *edits, name="bad.yaml")


def one_line_error(result, *needles: str) -> str:
    """Assert the CLI's bad-input contract and return the line."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("tuner: error: ")
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


POISSON = {"process": "poisson", "rate": 10}

FILE_CASES = [
    # (id, base, edits, key, reason)
    ("unknown key", "seed_example", [("service.memory.spare", "1 GiB")], "service.memory.spare", "unknown key"),
    ("unknown top key", "seed_example", [("regime", {})], "regime", "did you mean 'regimes'?"),
    ("wrong type", "seed_example", [("service.executors", "eight")], "service.executors", "must be an integer"),
    ("wrong type list", "seed_example", [("service.operators", {"name": "stage"})], "service.operators",
     "must be a list"),
    ("negative memory", "seed_example", [("service.memory.budget", "-1 GiB")], "service.memory.budget",
     "must not be negative but got '-1 GiB'"),
    ("negative fixed", "seed_example", [("service.memory.fixed", -5)], "service.memory.fixed", "must not be negative"),
    ("unknown shape variable", "seed_example", [("service.operators[0].shape", {"M": "tokens * 2"})],
     "service.operators[0].shape.M", "unknown variable 'tokens'"),
    ("config outside space", "seed_example", [("families.stage.configs[1].params.variant", "medium")],
     "families.stage.configs[1].params.variant", "outside the space"),
    ("unreadable trace", "toy_llm", [("regimes.light.arrivals.file", "traces/missing.csv")],
     "regimes.light.arrivals.file", "cannot read trace"),
    ("trace column", "toy_llm", [("regimes.heavy.arrivals.columns.output", "Generated")],
     "regimes.heavy.arrivals.columns.output", "column 'Generated' missing"),
    ("lognormal mean", "seed_example",
     [("regimes", {"only": {"arrivals": POISSON, "sizes": {"n": {"dist": "lognormal", "mean": 0.5, "cv": 1}}}})],
     "regimes.only.sizes.n.mean", "greater than or equal to 1 but got 0.5"),
    ("exponential mean", "seed_example",
     [("regimes", {"only": {"arrivals": POISSON, "sizes": {"n": {"dist": "exponential", "mean": 0}}}})],
     "regimes.only.sizes.n.mean", "greater than or equal to 1"),
    ("jitter deterministic cv", "seed_example", [("service.jitter", {"kind": "deterministic", "cv": 0.5})],
     "service.jitter.cv", "cv of deterministic jitter"),
    ("jitter exponential cv", "seed_example", [("service.jitter", {"kind": "exponential", "cv": 0.5})],
     "service.jitter.cv", "cv of exponential jitter"),
    ("continuous max_batch", "toy_llm", [("service.max_batch", 4096)], "service.max_batch",
     "make max_batch <= max_tokens"),
    ("process wrong tag", "seed_example", [("regimes.light.arrivals.process", "poison")],
     "regimes.light.arrivals.process", "unknown process 'poison' (one of: poisson, gamma, onoff, diurnal, trace)"),
    ("process missing field", "seed_example", [("regimes.bursty.arrivals.burstiness", DELETE)],
     "regimes.bursty.arrivals.burstiness", "required key is missing"),
    ("process extra field", "seed_example", [("regimes.light.arrivals.burstiness", 2)],
     "regimes.light.arrivals.burstiness", "unknown key (allowed: process, rate)"),
    ("dist wrong tag", "seed_example",
     [("regimes", {"only": {"arrivals": POISSON, "sizes": {"n": {"dist": "normal", "mean": 4}}}})],
     "regimes.only.sizes.n.dist", "unknown dist 'normal'"),
    ("dist missing field", "seed_example",
     [("regimes", {"only": {"arrivals": POISSON, "sizes": {"n": {"dist": "uniform", "low": 4}}}})],
     "regimes.only.sizes.n.high", "required key is missing"),
    ("dist extra field", "seed_example",
     [("regimes", {"only": {"arrivals": POISSON, "sizes": {"n": {"dist": "fixed", "value": 4, "cv": 1}}}})],
     "regimes.only.sizes.n.cv", "unknown key (allowed: dist, value)"),
    ("negative rate", "seed_example", [("regimes.light.arrivals.rate", -3)], "regimes.light.arrivals.rate",
     "greater than 0 but got -3"),
    ("zero rate", "seed_example", [("regimes.heavy.arrivals.rate", 0)], "regimes.heavy.arrivals.rate",
     "greater than 0 but got 0"),
    ("negative horizon", "seed_example", [("regimes.light.horizon", "-5 s")], "regimes.light.horizon",
     "must not be negative but got '-5 s'"),
    ("sm zero", "seed_example", [("families.stage.configs[0].profile.sm", 0)],
     "families.stage.configs[0].profile.sm", "greater than 0"),
    ("sm above one", "seed_example", [("families.stage.configs[0].profile.sm", 1.5)],
     "families.stage.configs[0].profile.sm", "less than or equal to 1 but got 1.5"),
    ("negative latency", "seed_example", [("families.stage.configs[1].profile.latency", "8 * ms - batch * 10 * ms")],
     "families.stage.configs[1].profile.latency", "evaluates to -0.002 for operator 'stage' at the largest batch"),
    ("duplicate operator", "seed_example",
     [("service.operators", [{"name": "stage", "family": "stage"}, {"name": "stage", "family": "stage"}])],
     "service.operators[1].name", "operator 'stage' is listed twice"),
    ("unknown family", "seed_example", [("service.operators[0].family", "stages")],
     "service.operators[0].family", "unknown family 'stages' (families: stage)"),
]


@pytest.mark.parametrize(("base", "edits", "key", "reason"), [c[1:] for c in FILE_CASES],
                         ids=[c[0] for c in FILE_CASES])
def test_bad_file_is_one_line(tmp_path: Path, base: str, edits: list, key: str, reason: str) -> None:
    bad = bad_variant(tmp_path, base, edits)
    line = one_line_error(run("simulate", bad, "--horizon", "1"), str(bad), f": {key}: ", reason)
    assert line == f"tuner: error: {bad}: {key}: {line.split(f': {key}: ', 1)[1]}"


def test_validate_reports_the_same_line(tmp_path: Path) -> None:
    bad = bad_variant(tmp_path, "seed_example", [("service.memory.budget", "-1 GiB")])
    line = one_line_error(run("validate", bad))
    assert line == f"tuner: error: {bad}: service.memory.budget: must not be negative but got '-1 GiB'"


def test_empirical_trace_column_with_zeros(tmp_path: Path) -> None:
    (tmp_path / "sizes.csv").write_text("TIMESTAMP,Tokens\n0,5\n1,0\n2,7\n")
    bad = bad_variant(tmp_path, "seed_example", [("regimes", {"only": {
        "arrivals": POISSON, "sizes": {"n": {"dist": "empirical", "trace": "sizes.csv", "column": "Tokens"}}}})])
    one_line_error(run("simulate", bad), str(bad), "regimes.only.sizes.n.column: ", "values must be integers >= 1")


def test_unknown_regime() -> None:
    one_line_error(run("simulate", SEED, "--regime", "nope"), str(SEED), "regime", "'nope'",
                   "light, bursty, heavy")


@pytest.mark.parametrize(("spec", "reason"), [
    ("nope=lean", "unknown operator 'nope' (operators: stage)"),
    ("stage=medium", "family 'stage' has no config 'medium' (configs: lean, fast)"),
    ("stage=variant=medium", "no config of family 'stage' has these parameters"),
    ("stage", "expected OP=CONFIG"),
])
def test_bad_assign(spec: str, reason: str) -> None:
    one_line_error(run("simulate", SEED, "--regime", "light", "--assign", spec), str(SEED), f"--assign {spec}", reason)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    one_line_error(run("simulate", missing), str(missing), "no such file, and no bundled problem of that name")


@pytest.mark.parametrize(("text", "where"), [
    ("name: [unclosed\n", "malformed YAML"),
    ("service:\n  batching: dynamic\n  batching: continuous\n", "line 3: malformed YAML (key 'batching' appears twice"),
    ("\t- tab\n", "malformed YAML"),
    ("", "top level: the file is empty"),
    ("42\n", "top level: expected a mapping"),
])
def test_invalid_yaml(tmp_path: Path, text: str, where: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    one_line_error(run("validate", bad), str(bad), where)


def test_good_file_still_runs() -> None:
    result = run("simulate", SEED, "--regime", "light", "--horizon", "0.5", "--json", "--assign", "stage=fast")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["assignment"] == {"stage": "fast"}


def test_simulate_capacity_json_gives_the_capacity_at_the_slo_per_regime() -> None:
    """`lean` serves 8 requests at once for 10 ms: at most 800 req/s of service, and a
    100 ms deadline met by 90% of requests just below it (the seed example's comment)."""
    result = run("simulate", SEED, "--regime", "heavy", "--horizon", "20", "--seeds", "2", "--capacity", "--json",
                 "--assign", "stage=lean")
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["attainment_target"] == 0.9 and len(found["capacity_per_seed_rps"]) == 2
    assert 700 < found["capacity_rps"] < 800 and found["capacity_ci_rps"] is not None
    assert found["capacity_rps"] == pytest.approx(sum(found["capacity_per_seed_rps"]) / 2)


@pytest.mark.parametrize("extra, words", [
    (("--policy", "isolated-fastest"), "drop --assign, --trace and --capacity"),
    (("--trace", "t.json"), "drop --trace"),
    (("--seeds", "0"), "--seeds"),
])
def test_simulate_capacity_refuses_what_it_cannot_do_in_one_line(extra, words) -> None:
    result = run("simulate", SEED, "--regime", "heavy", "--capacity", *extra)
    assert result.exit_code == 2 and words in result.output, result.output


def _python_m_tuner(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tuner", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=60)


def test_subprocess_bad_file_and_bad_regime(tmp_path: Path) -> None:
    bad = bad_variant(tmp_path, "seed_example", [("service.memory.budget", "-1 GiB")])
    done = _python_m_tuner("simulate", bad.name, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "tuner: error: bad.yaml: service.memory.budget: must not be negative but got '-1 GiB'\n"
    assert done.stdout == ""
    done = _python_m_tuner("simulate", SEED, "--regime", "nope", cwd=ROOT)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert "'nope'" in done.stderr and str(SEED) in done.stderr


def test_storage_takes_a_plain_sqlite_path_like_the_runtime(tmp_path: Path) -> None:
    copy = tmp_path / "results.db"
    copy.write_bytes((ROOT / "results.db.example").read_bytes())
    shown = run("table", "show", "--storage", str(copy), "--json")
    assert shown.exit_code == 0, shown.output
    assert {row["problem"] for row in json.loads(shown.stdout)} >= {"seed_example", "llm_decode"}
    missing = run("table", "show", "--storage", str(tmp_path / "none" / "x.db"))
    assert missing.exit_code == 2 and len(missing.stderr.splitlines()) == 1, missing.output


def test_an_error_lists_a_few_config_names_and_says_how_many_more() -> None:
    result = run("simulate", SPACES / "llm_decode.yaml", "--regime", "heavy", "--assign", "qkv=BLOCK_M=7")
    line = one_line_error(result, "qkv=BLOCK_M=7", "no config of family")
    assert "… and 40 more; `tuner profile PROBLEM` lists them" in line and line.count("bm") == 8


def test_ctrl_c_in_tune_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """An interrupt inside a trial: Optuna logs the failed trial with its traceback at
    WARNING on its own handler; the user sees only the line saying the finished trials
    are kept (a subprocess, so Optuna's handler writes to the stderr we read)."""
    script = ("import sys\n"
              "from tuner.search import study\n"
              "def interrupted(self, trial):\n"
              "    raise KeyboardInterrupt\n"
              "study._Objective.__call__ = interrupted\n"
              "from tuner.cli import main\n"
              "main(sys.argv[1:])\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, "tune", str(SEED), "--storage",
                           f"sqlite:///{tmp_path / 'r.db'}", "--trials", "2", "--horizon", "1"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 130, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "interrupted; finished trials are kept" in lines[0], done.stderr


@pytest.mark.parametrize("command", [("validate",), ("simulate", "--regime", "light"),
                                     ("gate", "stage=lean", "stage=fast", "--problem"),
                                     ("attribute", "stage=lean", "stage=fast", "--problem"), ("profile",)])
def test_ctrl_c_in_any_command_is_one_line_and_exit_130(command: tuple[str, ...], tmp_path: Path) -> None:
    """A real SIGINT in the middle of each command (as it loads its problem): one line on
    stderr, no traceback, exit 130 (click alone would print "Aborted!" and exit 1)."""
    script = ("import os, signal, sys, time\n"
              "import tuner.problem\n"
              "def interrupted(*args, **kwargs):\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "    time.sleep(30)\n"
              "tuner.problem.load_problem = interrupted\n"
              "from tuner.cli import main\n"
              "main(sys.argv[1:])\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, *command, str(SEED)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=60)
    assert (done.returncode, done.stderr) == (130, "tuner: interrupted\n")


def test_progress_prints_throttled_lines_with_an_eta_off_a_terminal(monkeypatch, capsys) -> None:
    """Off a terminal a line per update once INTERVAL_S has passed (0 here); the ETA
    comes from this run's pace once a step is done and the total known; -q prints none."""
    from tuner.cli.progress import Progress

    monkeypatch.setattr(Progress, "INTERVAL_S", 0.0)
    for quiet in (False, True):
        with Progress("tuner x", "steps", quiet) as shown:
            shown.start("stage")
            shown.update(2, 4)
            shown.update(3, detail="best 1.5/s")
            shown.note("writing")
        lines = capsys.readouterr().err.splitlines()
        if quiet:
            assert not lines
            continue
        assert lines[0] == "tuner x: stage: 2/4 steps"  # the first total: no pace yet
        assert lines[1].startswith("tuner x: stage: 3/4 steps, best 1.5/s, ETA 0m0")
        assert lines[2] == "tuner x: stage: writing"
