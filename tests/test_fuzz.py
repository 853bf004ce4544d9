"""Fuzzing the CLI with bad input (issue 16): it never crashes and never loses data.

Hypothesis mutates the shipped problem files (a key dropped or given twice, a wrong
type, an extreme or non-finite number, a hostile expression, an unknown key), breaks
their traces (negative, out-of-order, non-numeric timestamps, empty files, bad sizes…)
and feeds odd options to ``simulate``, ``tune`` and ``table show|export``. Every case
must keep the CLI's contract:

- exit code 0 or 2, never a traceback (nor any exception but ``SystemExit``);
- on 2, exactly one ``tuner: error: …`` line on stderr (``tuner: warning:`` lines
  aside), of bounded length (echoed input is capped);
- a database a failed command was pointed at is byte-identical afterwards (sha256), and
  commands that only read one (``simulate --policy table``, ``table show|export``) never
  change it;
- each case finishes within a time bound and within an address-space limit (a huge
  allocation fails fast instead of swapping).

Each case runs the CLI in-process through click's ``CliRunner`` in a forked child (the
modules are imported once, so a case costs what the command costs), which gets
``RLIMIT_AS`` and is killed at its time bound; a few run ``python -m tuner`` in a real
subprocess, so what reaches a terminal's stderr is checked too.

Profiles (registered in tests/conftest.py): ``ci``, the default, is derandomized (a
fixed seed: every run draws the same cases), small and without shrinking, for under a
minute on the 2-core machine; ``long`` draws many more random cases and shrinks what
fails. Run the long one by hand with::

    HYPOTHESIS_PROFILE=long .venv/bin/python -m pytest tests/test_fuzz.py -q

``TUNER_FUZZ_TIME_SCALE`` (default 1) scales every time bound, for a loaded machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_engine_replay import LLAMA2_7B
from tests.fuzz_strategies import (
    dotted,
    FAST_PROBLEMS, SPACES, TRACES, BrokenTrace, OptionCase, ProblemMutation, broken_traces, problem_mutations,
    shipped, simulate_options, storages, table_options, tune_options, unitless_quantities,
)

ROOT = Path(__file__).resolve().parents[1]
TIME_SCALE = float(os.environ.get("TUNER_FUZZ_TIME_SCALE", "1"))
#: Seconds a case may take: loading or validating a file, a short simulation, a tiny tune.
VALIDATE_S = 10 * TIME_SCALE
SIMULATE_S = 20 * TIME_SCALE
TUNE_S = 40 * TIME_SCALE
#: Address space a case may add to what the forked child already maps.
MEMORY_BYTES = 3 * 2**30
#: The longest error line: a file path, a key and a sentence (echoed input is capped at ~80 characters).
LONGEST_ERROR = 600
#: Seconds of traffic a fuzzed simulation runs (the file's horizon is overridden).
HORIZON = "0.25"


def examples(share: float) -> int:
    """``share`` of the profile's ``max_examples`` (the ci profile keeps every test small)."""
    return max(1, round(settings.default.max_examples * share))


# --- running one case -----------------------------------------------------------------

@dataclass
class Outcome:
    argv: list[str]
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    exception: str = ""  # repr of an exception other than SystemExit, with its traceback
    elapsed_s: float = 0.0
    timed_out: bool = False
    died: str = ""  # the child ended without a result (a signal, an exit code)

    def command(self) -> str:
        shown = [a if len(a) <= 100 else f"{a[:60]}…<{len(a)} chars>" for a in self.argv]
        return "tuner " + " ".join(repr(a) if (" " in a or not a) else a for a in shown)


def _address_space() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def invoke(argv: list[str], cwd: Path, limit_s: float) -> Outcome:
    """``tuner ARGV`` in-process (click's CliRunner) in a forked child with ``RLIMIT_AS``,
    killed after ``limit_s`` seconds."""
    from click.testing import CliRunner

    from tuner.cli import main

    outcome = Outcome(argv=list(argv))
    fd, result_path = tempfile.mkstemp(prefix="fuzz-", suffix=".pickle")
    os.close(fd)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: run, write the result, leave without pytest's exit handlers
        code = 3
        try:
            os.chdir(cwd)
            limit = _address_space() + MEMORY_BYTES
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            env = {"TUNER_STORAGE": None, "COLUMNS": "120"}
            result = CliRunner().invoke(main, argv, env=env)
            found = {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr}
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                found["exception"] = "".join(traceback.format_exception(*result.exc_info))[-4000:]
            with open(result_path, "wb") as handle:
                pickle.dump(found, handle)
            code = 0
        except BaseException:  # noqa: BLE001 - the child must always leave through _exit
            try:
                with open(result_path, "wb") as handle:
                    pickle.dump({"exit_code": None, "exception": traceback.format_exc()[-4000:]}, handle)
            except BaseException:  # noqa: BLE001
                pass
        finally:
            os._exit(code)
    deadline = start + limit_s
    status = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            outcome.timed_out = True
            break
        time.sleep(0.005)
    outcome.elapsed_s = time.monotonic() - start
    try:
        if not outcome.timed_out:
            with open(result_path, "rb") as handle:
                found = pickle.load(handle)
            outcome.exit_code = found.get("exit_code")
            outcome.stdout = found.get("stdout", "")
            outcome.stderr = found.get("stderr", "")
            outcome.exception = found.get("exception", "")
    except (OSError, EOFError, pickle.UnpicklingError):
        outcome.died = f"no result (wait status {status})"
    finally:
        os.unlink(result_path)
    if status is not None and os.WIFSIGNALED(status):
        outcome.died = f"killed by signal {os.WTERMSIG(status)}"
    return outcome


def memory_limit(limit: int = 4 * 2**30):
    """A ``preexec_fn`` capping a subprocess's address space."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def run_subprocess(argv: list[str], cwd: Path, limit_s: float) -> Outcome:
    """``python -m tuner ARGV`` in a real process with a 4 GiB address space."""
    env = {k: v for k, v in os.environ.items() if k != "TUNER_STORAGE"}
    env["PYTHONPATH"] = str(ROOT)
    outcome = Outcome(argv=list(argv))
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "tuner", *argv], capture_output=True, text=True, cwd=cwd,
                              env=env, timeout=limit_s, preexec_fn=memory_limit(), errors="replace")
    except subprocess.TimeoutExpired as exc:
        outcome.timed_out = True
        outcome.stderr = (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (
            exc.stderr or "")
    else:
        outcome.exit_code, outcome.stdout, outcome.stderr = done.returncode, done.stdout, done.stderr
        if done.returncode < 0:
            outcome.died = f"killed by signal {-done.returncode}"
    outcome.elapsed_s = time.monotonic() - start
    return outcome


# --- the contract ----------------------------------------------------------------------

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(directory: Path) -> dict[str, str]:
    """sha256 of every regular file under ``directory`` (databases and their neighbours)."""
    return {str(p.relative_to(directory)): sha256(p) for p in sorted(directory.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not line.startswith("tuner: warning: ")]


def check(outcome: Outcome, case: object, limit_s: float) -> None:
    """The CLI's bad-input contract for one run."""
    where = f"{case!r}\n  command: {outcome.command()}"
    tail = f"\n  stdout: {outcome.stdout[-800:]!r}\n  stderr: {outcome.stderr[-1500:]!r}"
    assert not outcome.timed_out, f"ran past its time bound ({limit_s:.0f} s): {where}{tail}"
    assert not outcome.died, f"died ({outcome.died}): {where}{tail}\n{outcome.exception}"
    assert not outcome.exception, f"raised (exit {outcome.exit_code}): {where}\n{outcome.exception}"
    assert "Traceback (most recent call last)" not in outcome.stdout + outcome.stderr, f"traceback: {where}{tail}"
    assert outcome.exit_code in (0, 2), f"exit code {outcome.exit_code}: {where}{tail}"
    if outcome.exit_code == 2:
        lines = error_lines(outcome.stderr)
        assert len(lines) == 1 and lines[0].startswith("tuner: error: "), (
            f"not one 'tuner: error:' line ({len(lines)} lines): {where}{tail}")
        assert len(lines[0]) <= LONGEST_ERROR, f"error line of {len(lines[0])} characters: {where}{tail}"


def check_unchanged(before: dict[str, str], directory: Path, outcome: Outcome, case: object) -> None:
    after = snapshot(directory)
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert not changed, (f"exit {outcome.exit_code} changed {changed}: {case!r}\n  command: {outcome.command()}\n"
                         f"  stderr: {outcome.stderr[-800:]!r}")


# --- fixtures --------------------------------------------------------------------------

@contextmanager
def workdir() -> Iterator[Path]:
    """A fresh directory for one case (Hypothesis runs many cases per test function)."""
    with tempfile.TemporaryDirectory(prefix="tuner-fuzz-") as name:
        yield Path(name)


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database holding a finished (tiny) tune of seed_example, copied by each case."""
    directory = tmp_path_factory.mktemp("tuned")
    db = directory / "tuned.db"
    outcome = invoke(["tune", "seed_example", "-q", "--storage", str(db), "--trials", "1", "--seeds", "1",
                      "--horizon", HORIZON], cwd=directory, limit_s=TUNE_S * 2)
    assert outcome.exit_code == 0, (outcome.stderr, outcome.exception)
    return db


def fill(value: str, directory: Path, db: Path, made: dict[str, str]) -> str:
    if value.startswith("{storage:"):
        return made[value[len("{storage:"):-1]]
    return value.replace("{dir}", str(directory)).replace("{db}", str(db))


def option_argv(case: OptionCase, defaults: dict[str, str], directory: Path, db: Path) -> list[str]:
    """The command line of ``case``: ``defaults`` with its changes (an empty value is a flag)."""
    made = storages(directory, db)
    options = dict(defaults)
    positional = list(case.command)
    for name, value in case.changes:
        if name == "--capacity-seeds":
            options["--capacity"] = ""
            options["--seeds"] = value
        elif name == "OUT":
            options["OUT"] = value
        else:
            options[name] = value
    argv = positional
    out = options.pop("OUT", None)
    for name, value in options.items():
        if name in ("--fresh", "--oracle", "--json", "--capacity", "-q"):
            argv.append(name)
        else:
            argv += [name, fill(value, directory, db, made)]
    if out is not None:
        argv.append(fill(out, directory, db, made))
    return argv


# --- problem files ---------------------------------------------------------------------

def write_case(directory: Path, text: str, name: str = "problem.yaml") -> Path:
    traces = directory / "traces"
    if not traces.exists():
        traces.symlink_to(TRACES)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


@settings(max_examples=examples(1.0))
@given(mutation=problem_mutations())
def test_a_mutated_problem_file_is_refused_in_one_line_or_runs(mutation: ProblemMutation) -> None:
    """validate and a short simulate of every mutation keep the contract, and a file
    validate accepts, simulate runs (validate refuses what simulate cannot run)."""
    with workdir() as directory:
        problem = write_case(directory, mutation.text())
        validated = invoke(["validate", str(problem)], directory, VALIDATE_S)
        check(validated, mutation, VALIDATE_S)
        simulated = invoke(["simulate", str(problem), "--horizon", HORIZON], directory, SIMULATE_S)
        check(simulated, mutation, SIMULATE_S)
        if validated.exit_code == 0:
            assert simulated.exit_code == 0, (
                f"validate accepted what simulate refuses: {mutation!r}\n  {simulated.stderr.strip()}")


@settings(max_examples=examples(0.3))
@given(broken=broken_traces())
def test_a_broken_trace_is_refused_in_one_line_or_replayed(broken: BrokenTrace) -> None:
    with workdir() as directory:
        (directory / "broken.csv").write_text(broken.csv_text(), encoding="utf-8", errors="surrogateescape")
        problem = write_case(directory, broken.problem_text("broken.csv"))
        validated = invoke(["validate", str(problem)], directory, VALIDATE_S)
        check(validated, broken, VALIDATE_S)
        simulated = invoke(["simulate", str(problem), "--horizon", HORIZON], directory, SIMULATE_S)
        check(simulated, broken, SIMULATE_S)


@pytest.mark.parametrize("break_", ["negative timestamps", "out-of-order timestamps"])
def test_a_trace_whose_timestamps_go_backwards_is_not_accepted_silently(break_: str) -> None:
    """No recorder writes such a trace: loading refuses it or warns (issue 16)."""
    broken = BrokenTrace("toy_llm", break_, 1)
    with workdir() as directory:
        (directory / "broken.csv").write_text(broken.csv_text())
        problem = write_case(directory, broken.problem_text("broken.csv"))
        validated = invoke(["validate", str(problem)], directory, VALIDATE_S)
        check(validated, broken, VALIDATE_S)
        assert validated.exit_code == 2 or "tuner: warning:" in validated.stderr, (
            f"{break_} accepted without a word: {validated.command()}")


# --- options ---------------------------------------------------------------------------

@settings(max_examples=examples(0.8))
@given(case=simulate_options())
def test_odd_simulate_options_are_refused_in_one_line(case: OptionCase, tuned_db: Path) -> None:
    """simulate with odd options keeps the contract, and never changes the table it reads."""
    with workdir() as directory:
        db = directory / "results.db"
        shutil.copy(tuned_db, db)
        defaults = {"--horizon": HORIZON}
        changed = dict(case.changes)
        if "--storage" in changed and "--policy" not in changed:
            defaults["--policy"] = "table"
        argv = option_argv(case, defaults, directory, db)
        before = snapshot(directory)
        outcome = invoke(argv, directory, SIMULATE_S)
        check(outcome, case, SIMULATE_S)
        before.pop("t.json", None)
        check_unchanged({k: v for k, v in before.items() if k.endswith((".db", ".json"))}, directory, outcome, case)


@settings(max_examples=examples(0.3))
@given(case=tune_options())
def test_odd_tune_options_never_change_the_database_on_failure(case: OptionCase, tuned_db: Path) -> None:
    with workdir() as directory:
        db = directory / "results.db"
        shutil.copy(tuned_db, db)
        defaults = {"-q": "", "--storage": str(db), "--trials": "1", "--seeds": "1", "--horizon": HORIZON}
        argv = option_argv(case, defaults, directory, db)
        before = snapshot(directory)
        outcome = invoke(argv, directory, TUNE_S)
        check(outcome, case, TUNE_S)
        if outcome.exit_code == 2:
            check_unchanged(before, directory, outcome, case)


@settings(max_examples=examples(0.3))
@given(mutation=problem_mutations(bases=("seed_example",)), fresh=st.booleans())
def test_tuning_a_mutated_problem_never_changes_the_database_on_failure(mutation: ProblemMutation, fresh: bool,
                                                                        tuned_db: Path) -> None:
    """Into a database that holds the original's studies: a failing run (refused, or
    failing part-way, with or without --fresh) leaves it byte-identical."""
    with workdir() as directory:
        db = directory / "results.db"
        shutil.copy(tuned_db, db)
        problem = write_case(directory, mutation.text())
        argv = ["tune", str(problem), "-q", "--storage", str(db), "--trials", "1", "--seeds", "1",
                "--horizon", HORIZON] + (["--fresh"] if fresh else [])
        before = snapshot(directory)
        outcome = invoke(argv, directory, TUNE_S)
        case = (mutation, "--fresh" if fresh else "")
        check(outcome, case, TUNE_S)
        if outcome.exit_code == 2:
            check_unchanged(before, directory, outcome, case)


@settings(max_examples=examples(0.5))
@given(case=table_options())
def test_table_show_and_export_never_change_the_database(case: OptionCase, tuned_db: Path) -> None:
    with workdir() as directory:
        db = directory / "results.db"
        shutil.copy(tuned_db, db)
        (directory / "out_dir").mkdir()
        defaults = {"--storage": str(db)}
        if case.command[1] == "export":
            defaults.update({"--format": "json", "OUT": "{dir}/t.json"})
        argv = option_argv(case, defaults, directory, db)
        before = snapshot(directory)
        outcome = invoke(argv, directory, VALIDATE_S)
        check(outcome, case, VALIDATE_S)
        # An export writes its OUT (replacing a file there: intrinsic); nothing else changes,
        # least of all the database it reads.
        out = Path(argv[-1]) if case.command[1] == "export" else None
        kept = {k: v for k, v in before.items() if out is None or directory / k != out or out == db}
        check_unchanged(kept, directory, outcome, case)


@settings(max_examples=examples(0.25))
@given(cache=st.sampled_from(("{dir}/cache", "{dir}/a_file", "{dir}/a_file/under_a_file", "{dir}/new/deep/cache",
                              "{dir}/cache\nwith a newline")),
       command=st.sampled_from((("simulate", "llm_decode", "--regime", "light", "--horizon", HORIZON),
                                ("profile", "--family", "rmsnorm", "--shape", "M=16,N=4096", "-q"),
                                ("validate", "llm_decode"))))
def test_any_cache_directory_keeps_the_contract_and_the_working_directory_clean(cache: str,
                                                                                command: tuple[str, ...]) -> None:
    """Issue 38, item 5: commands that name no database keep compiles in the user's cache
    directory; whatever it is (a file, a path under a file, not yet there), the command
    runs or stops in one line, and writes nothing into the working directory."""
    with workdir() as directory:
        (directory / "a_file").write_text("not a directory")
        before = set(directory.iterdir())
        saved = os.environ.get("TUNER_CACHE_DIR")
        os.environ["TUNER_CACHE_DIR"] = cache.replace("{dir}", str(directory))
        try:
            outcome = invoke(list(command), directory, SIMULATE_S)
        finally:
            if saved is None:
                os.environ.pop("TUNER_CACHE_DIR", None)
            else:
                os.environ["TUNER_CACHE_DIR"] = saved
        check(outcome, (cache, command), SIMULATE_S)
        assert not (directory / "results.db").exists()
        assert {p for p in directory.iterdir() if p.name not in ("cache", "new", "cache\nwith a newline")} == before


@settings(max_examples=examples(0.5))
@given(mutation=unitless_quantities())
def test_a_time_or_size_without_its_unit_is_refused_naming_key_and_units(mutation: ProblemMutation) -> None:
    """Issue 38, item 4, fuzzed: wherever a shipped file writes a time or a size with its
    unit, the bare number (0 aside, the same in any unit) is refused by validate in one
    line that names the key and the units to use; it is never read in seconds or bytes."""
    with workdir() as directory:
        problem = write_case(directory, mutation.text())
        outcome = invoke(["validate", str(problem)], directory, VALIDATE_S)
        check(outcome, mutation, VALIDATE_S)
        if float(mutation.value) == 0:
            return  # 0 may also be refused for a quantity that must be positive
        assert outcome.exit_code == 2, f"a bare number was accepted: {mutation!r}\n  {outcome.stdout[-400:]}"
        line = error_lines(outcome.stderr)[0]
        key = dotted(mutation.path)
        assert f"{key}: " in line and "has no unit" in line and "(units: " in line, (
            f"{mutation!r}: {line}")


#: Commands that write a file, each with the option naming it (the target comes last).
WRITERS = {
    "table export": ("table", "export", "--format", "json", "--storage", "{db}", "--problem", "seed_example"),
    "simulate --trace": ("simulate", "seed_example", "--regime", "light", "--horizon", HORIZON, "--trace"),
    "report --html": ("report", "--storage", "{db}", "--problem", "seed_example", "--html"),
    "init --out": ("init", "--model", "{model}", "--out"),
}


def _target(directory: Path, kind: str, db: Path) -> Path | str:
    """A target of ``kind``, made inside ``directory`` (never the machine's own /dev)."""
    import socket

    path = directory / f"target-{kind.replace(' ', '-')}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as bound:
            bound.bind(str(path))
    elif kind == "directory":
        path.mkdir()
    elif kind == "someone's file":
        path.write_text("someone else's notes\n")
    elif kind == "database":
        shutil.copy(db, path)
    elif kind.startswith("link to "):
        path.symlink_to(_target(directory, kind[len("link to "):], db))
    elif kind == "dangling link":
        path.symlink_to(directory / "nowhere")
    elif kind == "under a file":
        (directory / "a-file").write_text("x")
        path = directory / "a-file" / "out.json"
    elif kind == "dash":
        return "-"
    return path


def _state(path: Path | str) -> object:
    """What must not change unless the write was allowed: the kind of file and its bytes."""
    if path == "-" or not os.path.lexists(path):
        return None
    mode = os.lstat(path).st_mode
    return (mode, sha256(Path(path)) if Path(path).is_file() and not Path(path).is_symlink() else None)


@settings(max_examples=examples(1.0))
@given(command=st.sampled_from(sorted(WRITERS)), force=st.booleans(),
       kind=st.sampled_from(("new", "fifo", "socket", "directory", "someone's file", "database", "link to fifo",
                             "link to directory", "link to database", "link to someone's file", "dangling link",
                             "under a file", "dash")))
def test_no_write_replaces_what_it_must_not_or_hangs(command: str, force: bool, kind: str, tuned_db: Path) -> None:
    """Issue 39, items 1 and 6: every command that writes a file, pointed at a special file,
    a link, a directory, a database or someone's file (with and without --force), keeps
    the contract and its time bound; a special file, a directory or a database is never
    replaced, someone's file only with --force, and a FIFO is never opened (it hung)."""
    with workdir() as directory:
        db = directory / "tuned.db"
        shutil.copy(tuned_db, db)
        target = _target(directory, kind, tuned_db)
        model = directory / "config.json"
        model.write_text(json.dumps(LLAMA2_7B))
        argv = [part.format(db=db, model=model) for part in WRITERS[command]] + [str(target)]
        argv += ["--force"] if force and command != "simulate --trace" else []
        before = _state(target), sha256(db)
        outcome = invoke(argv, directory, SIMULATE_S)
        check(outcome, (command, kind, force), SIMULATE_S)
        replaceable = kind in ("new", "dangling link", "dash") or (force and kind in (
            "someone's file", "link to someone's file"))
        if not replaceable:
            assert _state(target) == before[0], f"{command} changed {kind} (force={force}): {outcome.stderr}"
        assert sha256(db) == before[1], f"{command} changed the database it read: {outcome.stderr}"


USER_KERNEL = Path(__file__).resolve().parent / "user_kernels" / "tutorial_matmul.py"


@settings(max_examples=examples(0.5))
@given(kernel=st.sampled_from(("autotuned_kernel", "matmul_kernel", "arguments", "CONFIGS", "leaky_relu", "nothing")),
       configs=st.sampled_from((None, "tutorial_matmul:CONFIGS", "tutorial_matmul:arguments", [], [{"num_warps": 4}])),
       key=st.sampled_from((None, ["M", "N", "K"], ["Q"], [])),
       arguments=st.sampled_from(("tutorial_matmul:arguments_without_activation", "tutorial_matmul:arguments",
                                  "tutorial_matmul:broken")))
def test_a_users_kernel_as_the_module_has_it_keeps_the_contract(kernel: str, configs, key, arguments: str) -> None:
    """Issue 38, item 2: a kernel under @triton.autotune/@triton.heuristics, a bare
    @triton.jit one, or something that is no kernel, with the file's configs and key given
    or left to the decorator: `validate` loads it or says why in one line."""
    from tests.test_user_kernel import PROBLEM

    document = yaml.safe_load(yaml.safe_dump(PROBLEM))
    user = document["families"]["tutorial"]["user"]
    document["families"]["tutorial"]["kernel"] = f"tutorial_matmul:{kernel}"
    user["arguments"] = arguments
    for name, value in (("configs", configs), ("key", key)):
        if value is None:
            user.pop(name, None)
        else:
            user[name] = value
    with workdir() as directory:
        shutil.copy(USER_KERNEL, directory / "tutorial_matmul.py")
        path = write_case(directory, yaml.safe_dump(document))
        outcome = invoke(["validate", str(path)], directory, VALIDATE_S * 3)
        check(outcome, (kernel, configs, key, arguments), VALIDATE_S * 3)


# --- real processes: what reaches a terminal -------------------------------------------

def _edited(base: str, *edits: tuple[tuple, object]) -> str:
    import copy

    document = copy.deepcopy(shipped(base))
    for path, value in edits:
        node = document
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    return yaml.safe_dump(document, sort_keys=False, width=10**6)


def _alias_bomb() -> str:
    """A billion-laughs document under an unknown top-level key of seed_example."""
    lines = [(SPACES / "seed_example.yaml").read_text(), "bomb:", '  a0: &a0 ["lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        lines.append(f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


REFUSED, EITHER = "refused", "either"
HEAVY_CASES = [
    # (id, problem text (None: the shipped seed_example), arguments after the file, expected)
    ("rate 1e12", _edited("seed_example", (("regimes", "light", "arrivals", "rate"), 1e12)),
     ["simulate", "--regime", "light"], REFUSED),
    ("rate 1e12 validate", _edited("seed_example", (("regimes", "light", "arrivals", "rate"), 1e12)), ["validate"],
     REFUSED),
    ("horizon 1e9 s", _edited("seed_example", (("regimes", "light", "horizon"), "1e9 s")),
     ["simulate", "--regime", "light"], REFUSED),
    ("executors 1e12", _edited("seed_example", (("service", "executors"), 10**12)),
     ["simulate", "--regime", "light", "--horizon", HORIZON], REFUSED),
    # A batch limit the traffic never reaches costs nothing: allowed if it runs in bounds.
    ("max_batch 1e12", _edited("seed_example", (("service", "max_batch"), 10**12)),
     ["simulate", "--regime", "light", "--horizon", HORIZON], EITHER),
    ("toy_llm max_tokens 1e12", _edited("toy_llm", (("service", "max_tokens"), 10**12),
                                        (("service", "max_batch"), 10**12)),
     ["simulate", "--regime", "light", "--horizon", HORIZON], EITHER),
    ("--horizon 1e6", None, ["simulate", "--regime", "light", "--horizon", "1e6"], REFUSED),
    ("--horizon inf", None, ["simulate", "--regime", "light", "--horizon", "inf"], REFUSED),
    ("--horizon abc", None, ["simulate", "--horizon", "abc"], REFUSED),
    ("--seed -1", None, ["simulate", "--regime", "light", "--horizon", HORIZON, "--seed", "-1"], REFUSED),
    ("alias bomb", _alias_bomb(), ["validate"], REFUSED),
    ("long expression", _edited("seed_example", (("families", "stage", "configs", 0, "profile", "latency"),
                                                 "1 +" * 7000 + " 1")), ["validate"], EITHER),
    ("10**10**10", _edited("seed_example", (("families", "stage", "configs", 0, "profile", "latency"),
                                            "10**10**10")), ["validate"], REFUSED),
]


@pytest.mark.parametrize(("text", "args", "expected"), [c[1:] for c in HEAVY_CASES],
                         ids=[c[0] for c in HEAVY_CASES])
def test_heavy_input_in_a_real_process_is_refused_fast_within_4_gib(text: str | None, args: list[str],
                                                                    expected: str, tmp_path: Path) -> None:
    """Input whose honest run would need terabytes or hours: refused in one line, in a
    few seconds, under a 4 GiB address space, with nothing but that line on stderr."""
    problem = write_case(tmp_path, text) if text is not None else SPACES / "seed_example.yaml"
    command, *rest = args
    outcome = run_subprocess([command, str(problem), *rest], tmp_path, VALIDATE_S)
    check(outcome, args, VALIDATE_S)
    if expected == REFUSED:
        assert outcome.exit_code == 2, f"accepted: {outcome.command()}\n{outcome.stdout[-500:]}"


@settings(max_examples=examples(0.15))
@given(mutation=problem_mutations(bases=FAST_PROBLEMS))
def test_a_mutated_problem_in_a_real_process_prints_no_traceback(mutation: ProblemMutation) -> None:
    with workdir() as directory:
        problem = write_case(directory, mutation.text())
        outcome = run_subprocess(["simulate", str(problem), "--horizon", HORIZON], directory, SIMULATE_S)
        check(outcome, mutation, SIMULATE_S)


def test_a_failed_fresh_tune_keeps_the_completed_studies(tuned_db: Path) -> None:
    """--fresh on a problem that then fails part-way (the heavy regime cannot be simulated):
    the database is byte-identical afterwards (issue 16: the studies were deleted first)."""
    with workdir() as directory:
        db = directory / "results.db"
        shutil.copy(tuned_db, db)
        problem = write_case(directory, _edited("seed_example", (("regimes", "heavy", "arrivals", "rate"), 1e12)))
        before = snapshot(directory)
        outcome = invoke(["tune", str(problem), "-q", "--fresh", "--storage", str(db), "--trials", "1", "--seeds", "1",
                          "--horizon", HORIZON], directory, TUNE_S)
        check(outcome, "--fresh, heavy rate 1e12", TUNE_S)
        if outcome.exit_code == 2:
            check_unchanged(before, directory, outcome, "--fresh, heavy rate 1e12")
