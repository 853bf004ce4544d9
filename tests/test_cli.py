"""The CLI's contract for bad input: one line on stderr naming file, key and reason;
exit code 2; never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from importlib.metadata import version as package_version

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
    # a 1 ns neighbour with no gap made `simulate --horizon 1` run without end (second fuzz round)
    ("neighbour launching too often", "toy_llm", [("service.neighbors", [{"name": "n", "profile": {"latency": "1 ns"},
                                                                           "gap": 0}])],
     "service.neighbors[0].profile.latency", "at most one a microsecond"),
    # 100,000 experts passed parsing and took 16.6 GiB at load (second fuzz round)
    ("experts beyond the bound", "moe_serving", [("service.router", {"experts": 100000, "top_k": 2})],
     "service.router.experts", "less than or equal to 4096"),
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
              "from tuner.search import objective\n"
              "def interrupted(self, trial):\n"
              "    raise KeyboardInterrupt\n"
              "objective.Objective.__call__ = interrupted\n"
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
    from tuner.cli.progress import TerminalProgress

    monkeypatch.setattr(TerminalProgress, "INTERVAL_S", 0.0)
    for quiet in (False, True):
        with TerminalProgress("tuner x", "steps", quiet) as shown:
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


def _commands(group) -> str:
    return ", ".join(sorted(group.commands))


#: (arguments, the one error line): every click parsing error, in every command, in tuner's format.
OPTION_CASES = [
    (["simulate", "--horizon", "abc"], "--horizon: 'abc' is not a number"),
    (["simulate", "--horizon", "-1"], "--horizon: '-1' is not a finite number of seconds above 0"),
    (["attribute", "a", "b", "--horizon", "inf"], "--horizon: 'inf' is not a finite number of seconds above 0"),
    (["simulate", "--seed", "1.5"], "--seed: '1.5' is not an integer"),
    (["tune", "--trials", "x"], "--trials: 'x' is not an integer"),
    (["tune", "--seeds", "0"], "--seeds: '0' is below the minimum 1"),
    (["simulate", "--capacity", "--seeds", "9223372036854775808"],
     "--seeds: '9223372036854775808' is above the maximum 1000 (each seed is one more simulation of every assignment)"),
    (["gate", "a", "b", "--seeds", "1001"],
     "--seeds: '1001' is above the maximum 1000 (each seed is one more simulation of every assignment)"),
    (["worker", "-j", "0"], "--jobs: '0' is below the minimum 1"),
    (["tune", "--horizon"], "--horizon: needs a value"),
    (["dashboard", "--port", "99999"], "--port: '99999' is above the maximum 65535"),
    (["dashboard", "--seeds", "51"], "--seeds: '51' is above the maximum 50"),
    (["report", "--html", "{dir}"], "--html: '{dir}' is a directory; name a file"),
    (["simulate", "--regime", "light", "--trace", "{dir}"], "--trace: '{dir}' is a directory; name a file"),
    (["gate", "a", "b", "--report", "{dir}"], "--report: '{dir}' is a directory; name a file"),
    (["table", "export", "--format", "xml", "out.json"],
     "--format: 'xml' is not one of json, vllm, vllm-args, sglang-args"),
    (["table", "export", "--format", "json"], "OUT: missing argument (usage: tuner table export [OPTIONS] OUT)"),
    (["table", "export", "out.json"], "--format: missing required option"),
    (["table", "show", "--json=1"], "--json: a flag takes no value"),
    (["table", "nope"], "nope: no such command (commands: export, show)"),
    (["gate", "a"], "CAND: missing argument (usage: tuner gate [OPTIONS] BASE CAND)"),
    (["gate", "a", "b", "--metric", "speed"], "--metric: 'speed' is not one of goodput, capacity"),
    (["gate", "a", "b", "--tolerance", "much"], "--tolerance: 'much' is not a number"),
    (["attribute", "a", "b", "--confidence", "high"], "--confidence: 'high' is not a number"),
    (["profile", "--device", "tpu"], "--device: 'tpu' is not one of a100, h100, h200, cuda"),
    (["profile", "--workers", "0"], "--workers: '0' is below the minimum 1"),
    (["simulate", "--bogus"], "--bogus: not an option of tuner simulate"),
    (["simulate", "--horiz", "1"], "--horiz: not an option of tuner simulate; did you mean --horizon?"),
    (["--bogus"], "--bogus: not an option of tuner"),
    (["validate", "a", "b"], "got unexpected extra argument (b) (usage: tuner validate [OPTIONS] [PROBLEM])"),
    (["nope"], f"nope: no such command (commands: {_commands(main)})"),
]


@pytest.mark.parametrize(("args", "expected"), OPTION_CASES, ids=[" ".join(c[0]) for c in OPTION_CASES])
def test_a_bad_option_is_one_line_naming_it(tmp_path: Path, monkeypatch, args: list[str], expected: str) -> None:
    """Click's own errors used to be its four-line ``Usage:/Try …/Error: Invalid value``
    block; they are the line every tuner error is, refused before any work (nothing is
    written in the working directory)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    result = CliRunner().invoke(main, [a.format(dir="d") for a in args], env={"TUNER_STORAGE": None})
    line = one_line_error(result)
    assert line == f"tuner: error: {expected.format(dir='d')}"
    assert "Usage:" not in result.output and "Try " not in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["d"]


def test_an_export_never_overwrites_a_database(tmp_path: Path) -> None:
    """`tuner table export --format json --storage results.db results.db` replaced the
    database with its own export (found by the fuzz suite): refused, the file untouched."""
    import hashlib

    database = tmp_path / "results.db"
    database.write_bytes((ROOT / "results.db.example").read_bytes())
    before = hashlib.sha256(database.read_bytes()).hexdigest()
    for fmt in ("json", "vllm"):
        result = run("table", "export", "--format", fmt, "--storage", database, "--problem", "seed_example", database)
        one_line_error(result, str(database), "is a SQLite database", "never overwrites one")
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before


def _special_targets(tmp_path: Path) -> dict[str, Path]:
    """Targets a write must refuse, all made inside ``tmp_path``: a FIFO (opening it to
    read blocked forever), a link to it, a link to nothing, a directory, a database and a
    link to the database."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    database = tmp_path / "results.db"
    database.write_bytes((ROOT / "results.db.example").read_bytes())
    (tmp_path / "folder").mkdir()
    targets = {"fifo": fifo, "link to fifo": tmp_path / "to-fifo", "dangling link": tmp_path / "dangling",
               "directory": tmp_path / "folder", "database": database, "link to database": tmp_path / "to-db"}
    targets["link to fifo"].symlink_to(fifo)
    targets["dangling"] = targets.pop("dangling link")
    targets["dangling"].symlink_to(tmp_path / "nowhere")
    targets["link to database"].symlink_to(database)
    return targets


@pytest.mark.parametrize("command", [
    ("simulate", "seed_example", "--regime", "light", "--horizon", "1", "--trace"),
    ("table", "export", "--format", "json", "--storage", str(ROOT / "results.db.example"), "--problem",
     "seed_example"),
    ("gate", "stage=lean", "stage=fast", "--problem", "seed_example", "--regime", "heavy", "--seeds", "2",
     "--horizon", "1", "--report"),
    ("report", "--storage", str(ROOT / "results.db.example"), "--problem", "seed_example", "--html"),
], ids=["simulate --trace", "table export", "gate --report", "report --html"])
def test_no_output_replaces_a_special_file_a_link_or_a_database(tmp_path: Path, command) -> None:
    """Found by the second fuzz round: as root `table export /dev/full` turned the device
    into a regular file, a FIFO target hung forever, and `simulate --trace`, `gate
    --report`, `report --html` replaced the tuning database. Each target is refused with
    one line before any work, and nothing there changes."""
    import hashlib
    import os

    targets = _special_targets(tmp_path)
    before = {name: (os.lstat(p).st_mode, hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
              for name, p in targets.items()}
    for name, target in targets.items():
        result = run(*command, target)
        one_line_error(result, str(target))
    after = {name: (os.lstat(p).st_mode, hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None)
             for name, p in targets.items()}
    assert after == before


def test_an_output_through_a_link_writes_the_file_it_names(tmp_path: Path) -> None:
    """A link to a regular file is written through (the link stays a link), not replaced.
    (The file is someone else's, "old": replacing it takes --force.)"""
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    result = run("table", "export", "--format", "json", "--storage", ROOT / "results.db.example", "--problem",
                 "seed_example", link, "--force")
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and '"rows"' in real.read_text()


def test_regimes_naming_nothing_is_refused(tmp_path: Path) -> None:
    """`--regimes ,` tuned every regime (second fuzz round): refused before any work."""
    storage = f"sqlite:///{tmp_path / 'r.db'}"
    for value in (",", " ", ", ,"):
        one_line_error(run("tune", "seed_example", "--storage", storage, "--regimes", value), "names no regime")
    assert not (tmp_path / "r.db").exists()


def test_more_processes_than_cores_need_force(tmp_path: Path, monkeypatch) -> None:
    """`--jobs 40` on 2 cores started 41 processes and 1.6 GB in 12 s: refused in one line
    (before any process starts) unless --force."""
    import tuner.search.parallel as parallel

    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    storage = f"sqlite:///{tmp_path / 'r.db'}"
    for flag in ("--jobs", "--sim-jobs"):
        one_line_error(run("tune", "seed_example", "--storage", storage, flag, 3), f"{flag} 3", "2 usable cores",
                       "--force")
    assert not (tmp_path / "r.db").exists()


def test_a_very_long_path_is_shown_cut(tmp_path: Path) -> None:
    """A 5,000-character --storage path: the one error line shows its head and length."""
    long = "x" * 5000
    for args in (["table", "export", "--format", "json", "--storage", f"sqlite:///{long}", str(tmp_path / "o.json")],
                 ["table", "show", "--storage", f"sqlite:///{long}"]):
        line = one_line_error(run(*args))
        assert len(line) < 400 and "characters)" in line, line


def test_an_echoed_value_is_capped() -> None:
    from tuner.errors import shown_value

    assert shown_value("abc") == "'abc'"
    assert shown_value("x" * 5000) == f"'{'x' * 80}…' (5,000 characters)"
    assert shown_value("a\nb") == "'a\\nb'"  # one line, whatever was typed
    line = one_line_error(run("simulate", "--horizon", "9" * 40 + "x" * 5000))
    assert line == f"tuner: error: --horizon: '{'9' * 40 + 'x' * 40}…' (5,040 characters) is not a number"


def test_help_and_version_are_still_clicks() -> None:
    for args in (["--help"], ["-h"], ["table", "--help"], ["table", "export", "--help"]):
        result = run(*args)
        assert result.exit_code == 0 and result.stdout.startswith("Usage: ") and not result.stderr, args
    version = run("--version")
    assert version.exit_code == 0 and version.stdout.startswith(f"tuner {package_version('tuner')}, simulator core ")
    bare = run("table")  # a group alone shows its help, not an error
    assert "Commands:" in bare.output and "export" in bare.output and "tuner: error" not in bare.output


def test_every_commands_description_wraps_as_prose() -> None:
    """A command with a problem has a sentence appended to its docstring; the docstring's
    indentation must not survive into the help as runs of spaces mid-paragraph."""
    from tuner.cli import main as group

    for name in group.commands:
        described = run(name, "--help").stdout.split("Options:")[0]
        assert "     " not in described.replace("\n  ", "\n"), name


def test_an_option_error_is_one_line_from_the_real_command(tmp_path: Path) -> None:
    done = _python_m_tuner("table", "export", "--format", "xml", "out.json", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", "tuner: error: --format: 'xml' is not one of "
                                                                  "json, vllm, vllm-args, sglang-args\n")


def test_report_into_a_read_only_database_is_one_line(tmp_path: Path) -> None:
    """Optuna's write error used to come out as a 114-line traceback; the database is
    left as it was."""
    import hashlib

    copy = tmp_path / "ro.db"
    copy.write_bytes((ROOT / "results.db.example").read_bytes())
    before = hashlib.sha256(copy.read_bytes()).hexdigest()
    result = run("report", "--into-studies", "--storage", f"sqlite:///file:{copy}?mode=ro&uri=true",
                 "--problem", "seed_example", "--seeds", 1, "-j", 1, "-q")
    one_line_error(result, "read-only database", "--into-studies")
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before


def test_a_database_error_while_saving_into_the_studies_is_one_line(tmp_path: Path, monkeypatch) -> None:
    """Any other refusal of the write (here a lock held too long) is one line too, with
    the driver's reason rather than Optuna's "invalid data in the commit"."""
    import sqlite3

    import optuna

    import tuner.dashboard

    def locked(*args, **kwargs):
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as exc:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from exc

    monkeypatch.setattr(tuner.dashboard, "save_into_studies", locked)
    copy = tmp_path / "r.db"
    copy.write_bytes((ROOT / "results.db.example").read_bytes())
    result = run("report", "--into-studies", "--storage", f"sqlite:///{copy}", "--seeds", 1, "-j", 1, "-q")
    line = one_line_error(result)
    assert line == f"tuner: error: sqlite:///{copy}: --into-studies cannot write into the studies: database is locked"
