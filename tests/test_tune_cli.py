"""``tuner tune`` and ``tuner table``: the default run, resuming, exports, and bad input
(one line on stderr, exit code 2, nothing overwritten)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.store import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "search_spaces"
ROW_KEYS = {"problem", "regime", "op", "bucket", "bucket_bounds", "config", "params", "goodput_rps",
            "goodput_ci_rps", "baseline_config", "baseline_goodput_rps", "delta_ci_rps", "one_config_goodput_rps",
            "oracle_goodput_rps", "regime_rate_rps", "source", "device"}


def run(*args: object, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tuner: error: ") and "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """``tuner tune search_spaces/seed_example.yaml --horizon 10`` run from a fresh
    directory, with the default storage (the default problem, llm_decode, is exercised by
    benchmarks/bench_tune.py: it takes minutes)."""
    here = tmp_path_factory.mktemp("tune")
    (here / "search_spaces").symlink_to(SPACES)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(here)
        result = run("tune", "search_spaces/seed_example.yaml", "--horizon", 10, "--oracle")
    assert result.exit_code == 0, (result.output, result.exception)
    (here / "output.txt").write_text(result.stdout)
    return here


def db(here: Path) -> str:
    return f"sqlite:///{here / 'results.db'}"


def test_default_tune_writes_the_table_and_reports_baselines(tuned):
    out = (tuned / "output.txt").read_text()
    for needle in ("seed_example: config table", "light", "heavy", "fast", "lean", "per-bucket isolated-fastest",
                   "smallest-footprint", "tuned / oracle 1.000×",
                   "why: 1 of 1 cells differ (stage); memory: reserved workspace 16.000 → 0.000 GiB",
                   "3 rows written to sqlite:///results.db"):
        assert needle in out, needle
    assert (tuned / "results.db").exists()
    assert "one config per operator" not in out  # a straw man beside THE baseline: table show has it


def test_table_show_json_lists_row_objects(tuned):
    result = run("table", "show", "--storage", db(tuned), "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["regime"], r["op"]) for r in rows] == [("light", "stage"), ("bursty", "stage"), ("heavy", "stage")]
    assert all(ROW_KEYS <= set(r) for r in rows)
    by_regime = {r["regime"]: r for r in rows}
    assert (by_regime["light"]["config"], by_regime["light"]["params"]) == ("fast", {"variant": "fast"})
    assert by_regime["heavy"]["config"] == "lean" and by_regime["heavy"]["baseline_config"] == "fast"
    assert by_regime["heavy"]["goodput_rps"] > 10 * by_regime["heavy"]["baseline_goodput_rps"]
    assert by_regime["heavy"]["oracle_goodput_rps"] == pytest.approx(by_regime["heavy"]["goodput_rps"])


def test_table_show_prints_a_table(tuned):
    result = run("table", "show", "--storage", db(tuned), "--problem", "seed_example")
    assert result.exit_code == 0 and "tuner:seed_example:heavy:" in result.stdout


def test_table_show_reads_in_a_screen_filters_and_widens(tuned):
    """By default what differs from the baseline per (regime, operator); --regime and --op
    filter; --wide gives every bucket with its parameters; an unknown name is one line."""
    shown = run("table", "show", "--storage", db(tuned), env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "= baseline" in out and "all: lean ← fast" in out and "variant=" not in out
    heavy = run("table", "show", "--storage", db(tuned), "--regime", "heavy", "--op", "stage",
                env={"COLUMNS": "200"}).stdout
    assert "heavy" in heavy and "light" not in heavy and "bursty" not in heavy
    wide = run("table", "show", "--storage", db(tuned), "--wide", env={"COLUMNS": "200"}).stdout
    assert "variant=lean" in wide and "workspace at largest" in wide
    bad = run("table", "show", "--storage", db(tuned), "--regime", "rush")
    one_line_error(bad, "--regime 'rush': no such regime in the table (light, bursty, heavy)")


def test_table_export_json_and_vllm(tuned, tmp_path):
    result = run("table", "export", "--format", "json", tmp_path / "t.json", "--storage", db(tuned))
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "t.json").read_text())
    assert document["schema_version"] == SCHEMA_VERSION and document["problem"] == "seed_example"
    assert len(document["rows"]) == 3
    result = run("table", "export", "--format", "vllm", tmp_path / "vllm", "--storage", db(tuned))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "vllm").iterdir()) == [
        "seed_example_bursty_stage.json", "seed_example_heavy_stage.json", "seed_example_light_stage.json"]
    assert json.loads((tmp_path / "vllm" / "seed_example_light_stage.json").read_text()) == {"1": {"variant": "fast"}}
    assert "no vLLM tile parameters" in result.stdout


def test_a_rerun_resumes_and_other_settings_are_refused(tuned):
    result = run("tune", SPACES / "seed_example.yaml", "--storage", db(tuned), "--horizon", 10, "--regimes", "heavy")
    assert result.exit_code == 0, result.output
    assert "1 rows written" in result.stdout
    before = (tuned / "results.db").read_bytes()
    result = run("tune", SPACES / "seed_example.yaml", "--storage", db(tuned), "--horizon", 10, "--seeds", 2)
    one_line_error(result, "tuner:seed_example:light", "seeds [0, 1, 2]", "--fresh")
    assert (tuned / "results.db").read_bytes() == before


def test_fresh_starts_the_study_over(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    args = ("tune", SPACES / "seed_example.yaml", "--storage", url, "--regimes", "light", "--horizon", 5)
    assert run(*args).exit_code == 0
    assert run(*args, "--seeds", 2).exit_code == 2
    result = run(*args, "--seeds", 2, "--fresh")
    assert result.exit_code == 0, result.output
    rows = json.loads(run("table", "show", "--storage", url, "--json").stdout)
    assert [r["regime"] for r in rows] == ["light"]


def test_every_command_defaults_to_the_bundled_llm_decode_and_says_so(tmp_path, monkeypatch):
    """From a directory with no search_spaces/ (as after `pip install`), the problem given
    by name or not at all is the bundled one, and every command's help names the default."""
    import yaml

    from tuner import bundled

    monkeypatch.chdir(tmp_path)
    shipped = sorted(p.name for p in (ROOT / "search_spaces").glob("*.yaml"))
    assert shipped and bundled.problem_names() == [name.removesuffix(".yaml") for name in shipped]
    validated = run("validate")
    assert validated.exit_code == 0, validated.output
    assert validated.stdout.startswith(f"{bundled.PROBLEMS_DIR / 'llm_decode.yaml'}: ok")
    named = run("validate", "seed_example")
    assert named.exit_code == 0 and "stage(stage×1)" in named.stdout, named.output
    for command in (["validate"], ["simulate"], ["profile"], ["tune"], ["worker"]):
        text = " ".join(run(*command, "--help").stdout.split())
        assert "default: llm_decode" in text and "`tuner problems` lists them" in text, command
    for command in ("gate", "attribute"):
        assert "default: llm_decode" in " ".join(run(command, "--help").stdout.split()), command
    listed = json.loads(run("problems", "--json").stdout)
    assert [entry["name"] for entry in listed] == bundled.problem_names()
    decode = next(entry for entry in listed if entry["name"] == "llm_decode")
    document = yaml.safe_load((ROOT / "search_spaces" / "llm_decode.yaml").read_text())
    assert decode["regimes"] == list(document["regimes"])


def test_the_bundled_problems_and_example_database_ship_as_package_data():
    """Every file under search_spaces/ and results.db.example match the package-data globs
    of pyproject.toml, through the links inside tuner/ (a new trace would otherwise be
    missing from a wheel)."""
    import fnmatch
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["tuner"]
    package = ROOT / "tuner"
    assert (package / "search_spaces").resolve() == ROOT / "search_spaces"
    assert (package / "results.db.example").resolve() == ROOT / "results.db.example"
    files = [p for p in (package / "search_spaces").rglob("*") if p.is_file()] + [package / "results.db.example"]
    for path in files:
        relative = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatchcase(relative, glob) for glob in globs), relative


def test_interrupt_says_how_to_resume(monkeypatch, tmp_path):
    import tuner.search

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner.search, "tune_problem", interrupted)
    result = run("tune", SPACES / "seed_example.yaml", "--storage", f"sqlite:///{tmp_path / 'r.db'}")
    assert result.exit_code == 130
    assert "interrupted; finished trials are kept" in result.stderr and "rerun the same command" in result.stderr


def bumped_schema(tmp_path: Path, source: Path) -> Path:
    target = tmp_path / "old.db"
    target.write_bytes((source / "results.db").read_bytes())
    with sqlite3.connect(target) as connection:
        connection.execute("UPDATE tuner_schema SET version = ?", (SCHEMA_VERSION + 1,))
    return target


@pytest.mark.parametrize("command", [
    ("tune", SPACES / "seed_example.yaml", "--horizon", 5),
    ("table", "show"),
    ("table", "export", "--format", "json", "OUT"),
])
def test_another_schema_version_is_refused_untouched(tuned, tmp_path, command):
    target = bumped_schema(tmp_path, tuned)
    before = target.read_bytes()
    args = [str(tmp_path / "out.json") if a == "OUT" else a for a in command]
    one_line_error(run(*args, "--storage", f"sqlite:///{target}"),
                   f"version {SCHEMA_VERSION + 1} found", f"version {SCHEMA_VERSION}", str(target))
    assert target.read_bytes() == before and not (tmp_path / "out.json").exists()


def test_bad_input_is_one_line(tuned, tmp_path):
    seed = SPACES / "seed_example.yaml"
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    one_line_error(run("tune", tmp_path / "missing.yaml"), "missing.yaml")
    one_line_error(run("tune", seed, "--regimes", "medium", "--storage", f"sqlite:///{tmp_path}/x.db"),
                   "no regime 'medium'", "light, bursty, heavy")
    assert not (tmp_path / "x.db").exists()
    one_line_error(run("tune", seed, "--storage", "nosuchdb://x/y"), "cannot load a database driver")
    one_line_error(run("tune", seed, "--storage", str(tmp_path / "no" / "dir" / "r.db")), "no directory")
    one_line_error(run("tune", seed, "--storage", "postgresql+psycopg://nobody@127.0.0.1:1/db"),
                   "cannot open the database")
    one_line_error(run("tune", seed, "--storage", f"sqlite:///{notes}"), "is not a SQLite database")
    assert notes.read_text() == "not a database\n"
    one_line_error(run("tune", seed, "--trials", 0, "--storage", f"sqlite:///{tmp_path}/y.db"),
                   "--trials: '0' is below the minimum 1")
    one_line_error(run("tune", seed, "--horizon", -1, "--storage", f"sqlite:///{tmp_path}/y.db"),
                   "--horizon: '-1' is not a finite number of seconds above 0")
    one_line_error(run("table", "show", "--storage", f"sqlite:///{tmp_path}/none.db"), "no such database file")
    assert not (tmp_path / "none.db").exists()
    one_line_error(run("table", "show", "--storage", db(tuned), "--problem", "toy"),
                   "no rows for problem 'toy'", "seed_example")
    one_line_error(run("table", "export", "--format", "json", tmp_path, "--storage", db(tuned)), "is a directory")
    one_line_error(run("table", "export", "--format", "vllm", notes, "--storage", db(tuned)), "not a directory")
    assert notes.read_text() == "not a database\n"


def test_a_regime_named_twice_is_tuned_and_counted_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    args = ("tune", SPACES / "seed_example.yaml", "--storage", url, "--trials", 2, "--seeds", 1, "--horizon", 1,
            "--regimes", "light,light", "-q")
    first = run(*args)
    assert first.exit_code == 0, first.output
    assert "1 rows written" in first.stdout and first.stdout.count("light: tuned") == 1, first.stdout
    assert [r["regime"] for r in json.loads(run("table", "show", "--storage", url, "--json").stdout)] == ["light"]
    again = run(*args)
    assert again.exit_code == 0 and again.stdout.count("regime light: rows already written") == 1, again.stdout


@pytest.mark.parametrize("command", ["tune", "worker"])
@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?uri=true"])
def test_an_in_memory_database_is_refused_by_the_commands_that_write(tmp_path, monkeypatch, command, url):
    """It used to tune, report the rows written, and lose them at exit."""
    monkeypatch.chdir(tmp_path)
    line = one_line_error(run(command, SPACES / "seed_example.yaml", "--storage", url, "--trials", 1))
    assert line == (f"tuner: error: --storage: {url!r} is an in-memory database, gone when tuner exits; "
                    "name a file (results.db) or a database server's URL")
    assert list(tmp_path.iterdir()) == []


def test_a_negative_seed_is_refused_by_tune_and_simulate_alike(tmp_path):
    """simulate used to end in numpy's ValueError; tune named the setting ``seed``."""
    expected = "tuner: error: --seed: '-1' is below the minimum 0 (workload seeds are numbered from 0)"
    for args in (("tune", "--storage", f"sqlite:///{tmp_path / 'r.db'}"), ("simulate", "--regime", "light")):
        assert one_line_error(run(*args, SPACES / "seed_example.yaml", "--seed", -1)) == expected
    assert not (tmp_path / "r.db").exists()


def test_a_setting_is_named_as_its_option(tmp_path):
    line = one_line_error(run("tune", SPACES / "seed_example.yaml", "--storage", f"sqlite:///{tmp_path / 'r.db'}",
                              "--oracle", "--oracle-limit", 0))
    assert line == "tuner: error: --oracle-limit: '0' is below the minimum 1"


def test_oracle_too_large_is_reported_with_the_size(tmp_path):
    from tests.test_search import tradeoff_problem, write_yaml

    problem = write_yaml(tmp_path / "tradeoff.yaml", tradeoff_problem(horizon="0.2 s"))
    result = run("tune", problem, "--storage", f"sqlite:///{tmp_path / 'r.db'}", "--trials", 2, "--seeds", 1,
                 "--oracle", "--oracle-limit", 100)
    assert result.exit_code == 0, result.output
    assert "oracle not computed: the joint space has 216 assignments (more than --oracle-limit 100)" in result.stdout


def test_simulate_with_the_tuned_table_as_policy(tuned):
    common = ["simulate", SPACES / "seed_example.yaml", "--regime", "heavy", "--horizon", 5, "--json"]
    table = run(*common, "--policy", "table", "--storage", db(tuned))
    fastest = run(*common, "--policy", "isolated-fastest")
    static_light = run(*common, "--policy", "static:light", "--storage", db(tuned))
    assert table.exit_code == fastest.exit_code == static_light.exit_code == 0, (table.output, fastest.output)
    goodput = {name: json.loads(r.stdout)["goodput_rps"] for name, r in
               (("table", table), ("fastest", fastest), ("light", static_light))}
    assert goodput["table"] > 5 * goodput["fastest"]  # heavy traffic: the table serves lean
    assert goodput["light"] == goodput["fastest"]  # light's row is fast, the isolated-fastest choice
    missing = run(*common, "--policy", "static:nope", "--storage", db(tuned))
    one_line_error(missing, "no regime 'nope'")
    assert "tuned from another version" not in table.stderr


def test_a_table_tuned_from_another_version_of_the_file_is_said_so(tuned, tmp_path):
    """The rows carry the problem file's hash: a file edited since (here one comment; a
    changed `device.factors` reprices every kernel) still simulates the stored configs,
    with one warning that the tuned figures are not this file's."""
    edited = tmp_path / "seed_example.yaml"
    edited.write_text((SPACES / "seed_example.yaml").read_text() + "\n# edited after tuning\n")
    result = run("simulate", edited, "--regime", "heavy", "--horizon", 5, "--json", "--policy", "table",
                 "--storage", db(tuned))
    assert result.exit_code == 0, result.output
    assert result.stderr.count("tuned from another version") == 1 and "run `tuner tune` again" in result.stderr
    json.loads(result.stdout)  # the figures still come, on stdout


@pytest.mark.parametrize("quiet", [False, True])
def test_progress_lines_on_a_non_terminal_and_none_with_quiet(monkeypatch, tmp_path, quiet) -> None:
    """In a log or CI stderr is no terminal: a long tune prints a line every few seconds
    (here every trial) with done/total and the best goodput, and nothing with -q."""
    from tuner.cli.progress import TerminalProgress

    monkeypatch.setattr(TerminalProgress, "INTERVAL_S", 0.0)
    args = ["tune", SPACES / "seed_example.yaml", "--storage", f"sqlite:///{tmp_path / 'r.db'}", "--trials", 2,
            "--seeds", 1, "--horizon", 2, "--regimes", "light"] + (["-q"] if quiet else [])
    result = run(*args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("tuner tune: regime light (1/1): ")]
    if quiet:
        assert not lines
    else:
        assert any("2/2 trials, best " in line for line in lines), result.stderr
        assert any("baselines and capacities" in line for line in lines), result.stderr


def test_tune_on_a_read_only_database_says_so_in_one_line(tuned, tmp_path, monkeypatch):
    """Not Optuna's "invalid data in the commit": the file, why, and what tune writes there."""
    import os

    from tuner.store import store as store_module

    path = tmp_path / "results.db"
    path.write_bytes((tuned / "results.db").read_bytes())
    before = path.read_bytes()
    real = os.access
    monkeypatch.setattr(store_module.os, "access", lambda p, mode: Path(p) != path and real(p, mode))
    result = run("tune", SPACES / "seed_example.yaml", "--storage", f"sqlite:///{path}", "--horizon", 10)
    one_line_error(result, f"{path}: read-only database (the file is not writable): "
                           "tuner tune writes its studies and rows there")
    monkeypatch.undo()
    result = run("tune", SPACES / "seed_example.yaml", "--storage", f"sqlite:///file:{path}?mode=ro&uri=true")
    one_line_error(result, "read-only database (opened with mode=ro)")
    assert path.read_bytes() == before


def test_progress_covers_the_whole_run_not_only_the_trials(monkeypatch, capsys) -> None:
    """Issue 38, item 6: the trials were the only counted part, and the ETA said 8 s when a
    minute of baselines and capacity searches followed. Now each regime says k/n, the
    phase after its trials is counted in simulations with its own ETA, and the run ends
    with its time split into preparing, trials, and baselines and capacities."""
    from tuner.cli.progress import TerminalProgress
    from tuner.cli.tune import TrialProgress

    monkeypatch.setattr(TerminalProgress, "INTERVAL_S", 0.0)  # every line shown
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    with TrialProgress(regimes=["light", "heavy"]) as progress:
        progress.start("heavy", 0, 4)
        progress.update(2, 8.65)
        progress.finish()
        progress.after_trials(60)
        progress.simulated(30)
        progress.note("capacity of tuned: probed 12.6 req/s")
        summary = progress.summary()
    err = capsys.readouterr().err
    assert "tuner tune: regime heavy (2/2): 2/4 trials, best 8.65/s" in err
    assert "regime heavy (2/2): baselines and capacities: capacity of tuned: probed 12.6 req/s; 30/60 simulations" \
        in err
    assert summary.startswith("tuner tune: ") and "in all: preparing " in summary and \
        ", trials " in summary and ", baselines and capacities " in summary


def test_a_first_use_compile_is_announced_with_its_estimate_and_counted(tmp_path, monkeypatch) -> None:
    """Issue 38, item 6: a user problem compiled for 1 min 42 s inside its trials, silently.
    Now the launches the search will time and no cache holds compile before the first
    trial, announced once with their number and an estimate from what one compile took
    on average in the caches (results.db.example's here: this config is in none), and
    counted; a second run finds them all and says nothing."""
    from tuner.collect.fill import compile_ahead
    from tuner.search.parallel import load_for_tuning

    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "cache"))
    text = (Path(__file__).parent / "problems" / "one_gemm.yaml").read_text()
    space = text[text.index("    space:"):text.index("regimes:")]
    odd = "    space: {BLOCK_M: [32], BLOCK_N: [32], BLOCK_K: [32], num_warps: [2], num_stages: [2], SPLIT_K: [1]}\n"
    problem_file = tmp_path / "odd_tiles.yaml"
    problem_file.write_text(text.replace(space, odd))
    problem = load_for_tuning(problem_file, f"sqlite:///{tmp_path / 'r.db'}")
    said: list[tuple[int, float | None]] = []
    counted: list[tuple[int, int]] = []
    compiled = compile_ahead(problem, lambda missing, each: said.append((missing, each)),
                             lambda done, total: counted.append((done, total)))
    assert compiled > 0 and len(said) == 1 and said[0][0] == compiled
    assert said[0][1] is not None and 0 < said[0][1] < 60
    assert counted[0] == (0, compiled) and counted[-1] == (compiled, compiled)
    said.clear()
    again = load_for_tuning(problem_file, f"sqlite:///{tmp_path / 'r.db'}")
    assert compile_ahead(again, lambda missing, each: said.append((missing, each)), lambda done, total: None) == 0
    assert not said


def test_the_compile_stage_says_what_it_compiles_and_how_long(monkeypatch, capsys) -> None:
    """The announcement's estimate is count × mean seconds / processes, and the run's
    time split gains a compiling part only when something compiled."""
    from tuner.cli.progress import TerminalProgress
    from tuner.cli.tune import TrialProgress

    monkeypatch.setattr(TerminalProgress, "INTERVAL_S", 0.0)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    with TrialProgress(regimes=["light"]) as progress:
        progress.compiling(240, 0.5, "sqlite:///r.db", 2)
        progress.compiled(120, 240)
        summary = progress.summary()
    err = capsys.readouterr().err
    assert ("tuner tune: preparing: 240 kernel launches of this problem's configs are in no compile cache "
            "(sqlite:///r.db's, your cache directory's, results.db.example's); compiling them now, once: about "
            "1m00s (0.5 s each on average in the cache, 2 processes)") in err
    assert "tuner tune: compiling: 120/240 kernels" in err and ", compiling " in summary
    with TrialProgress(regimes=["light"]) as quiet_run:
        assert ", compiling " not in quiet_run.summary()


def test_dash_writes_to_standard_output_and_nothing_else(tuned, tmp_path, monkeypatch):
    """Issue 39, item 1: `-` is standard output, written through (never a file named `-`,
    never a rename): table export's JSON, gate's report (its verdicts then on stderr);
    simulate --trace, whose stdout is simulate's own report, refuses it in one line."""
    monkeypatch.chdir(tmp_path)
    exported = run("table", "export", "--format", "json", "-", "--storage", db(tuned))
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.stdout)["schema_version"] == SCHEMA_VERSION
    assert "written to standard output" in exported.stderr and not (tmp_path / "-").exists()
    folder = run("table", "export", "--format", "vllm", "-", "--storage", db(tuned))
    one_line_error(folder, "--format vllm writes a folder")
    trace = run("simulate", SPACES / "seed_example.yaml", "--regime", "light", "--trace", "-")
    one_line_error(trace, "'-': standard output carries simulate's own report; name a file")
    gated = run("gate", "default", "default", "--problem", SPACES / "seed_example.yaml", "--regime", "light",
                "--seeds", 2, "--horizon", 2, "--report", "-")
    assert gated.exit_code == 0, gated.output
    assert gated.stdout.lstrip().startswith("#") and "gate: PASS" in gated.stderr and not (tmp_path / "-").exists()


def test_an_output_replaces_only_what_its_command_wrote_unless_forced(tuned, tmp_path):
    """Issue 39, item 1: a file a command did not write (someone's notes, another tool's
    JSON) is refused before any work, unless --force; what the command wrote before it
    replaces again freely (its first bytes say so)."""
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}\n')
    refused = run("table", "export", "--format", "json", notes, "--storage", db(tuned))
    one_line_error(refused, f"{notes}: exists and was not written by this tuner command; pass --force")
    assert notes.read_text() == '{"mine": 1}\n'
    assert run("table", "export", "--format", "json", notes, "--storage", db(tuned), "--force").exit_code == 0
    assert run("table", "export", "--format", "json", notes, "--storage", db(tuned)).exit_code == 0  # its own now
    mine = tmp_path / "notes.md"
    mine.write_text("# my notes\n")
    gated = run("gate", "default", "default", "--problem", SPACES / "seed_example.yaml", "--regime", "light",
                "--seeds", 2, "--horizon", 2, "--report", mine)
    one_line_error(gated, "exists and was not written by this tuner command")
    trace = tmp_path / "t.json"
    trace.write_text("[]")
    traced = run("simulate", SPACES / "seed_example.yaml", "--regime", "light", "--horizon", 1, "--trace", trace)
    one_line_error(traced, "exists and was not written by this tuner command")
    again = run("simulate", SPACES / "seed_example.yaml", "--regime", "light", "--horizon", 1, "--trace", trace,
                "--force")
    assert again.exit_code == 0 and trace.read_bytes().startswith(b'{"displayTimeUnit":"ms","traceEvents"')
    assert mine.read_text() == "# my notes\n"
