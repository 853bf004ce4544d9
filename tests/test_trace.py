"""``tuner simulate --trace``: streamed Trace Event JSON, its size estimate and warning,
the window and kernel options, and gzip output (events counted in the written files)."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.problem.assignment import Assignment
from tuner.console import stream_names
from tuner.sim import recording, simulate, write_chrome_trace
from tuner.sim.chrome_trace import TraceOptions, estimate_trace

from tests.variants import SPACES

SEED = SPACES / "seed_example.yaml"
ARGS = ["simulate", SEED, "--regime", "light", "--horizon", 5, "--seed", 1]


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def events(path: Path) -> list[dict]:
    opened = gzip.open(path, "rt") if path.name.endswith(".gz") else path.open()
    with opened as text:
        return json.load(text)["traceEvents"]


def ordered(trace: list[dict]) -> list[str]:
    return sorted(json.dumps(event, sort_keys=True) for event in trace)


def traced(tmp_path: Path, name: str, *options: object) -> list[dict]:
    path = tmp_path / name
    result = run(*ARGS, "--trace", path, *options)
    assert result.exit_code == 0, result.output
    assert f"trace written to {path}: " in result.stdout
    return events(path)


@pytest.fixture
def whole(tmp_path: Path) -> list[dict]:
    return traced(tmp_path, "all.json")


def test_the_streamed_trace_is_the_in_memory_one_whatever_the_chunk(seed_example, tmp_path, monkeypatch, whole):
    """The recording hands its series on in chunks (here of 7 kernels), emptying the
    lists the GPU appends to: nothing may be lost or repeated at a chunk's edge."""
    monkeypatch.setattr(recording, "CHUNK", 7)
    streamed = traced(tmp_path, "chunked.json")
    result = simulate(seed_example, Assignment.default(seed_example), "light", seed=1, horizon_s=5, record=True)
    path = tmp_path / "memory.json"
    write_chrome_trace(result.recording, path, stream_names(seed_example.service))
    assert ordered(streamed) == ordered(whole) == ordered(events(path))  # chunks interleave the series
    assert sum(e["ph"] == "X" for e in whole) == result.metrics.kernels


def test_the_size_estimate_is_within_a_factor_of_the_written_size(seed_example, tmp_path):
    names = stream_names(seed_example.service)
    assignment = Assignment.default(seed_example)
    for name, gzipped in (("t.json", False), ("t.json.gz", True)):
        path = tmp_path / name
        result = run(*ARGS, "--trace", path)
        assert result.exit_code == 0, result.output
        estimate = estimate_trace(seed_example, assignment, "light", 1, 5.0, names, gzipped=gzipped)
        assert estimate.pilot_s == pytest.approx(0.5)
        assert 0.5 < estimate.bytes / path.stat().st_size < 2, (name, estimate, path.stat().st_size)
        assert 0.5 < estimate.events / len(events(path)) < 2


def test_a_window_keeps_the_events_inside_it_and_each_counter_value_at_its_start(tmp_path, whole):
    window = traced(tmp_path, "window.json", "--trace-window", "1:2")
    start, end = 1e6, 2e6  # microseconds
    kernels = [e for e in window if e["ph"] == "X"]
    assert kernels == [e for e in whole if e["ph"] == "X" and e["ts"] < end and e["ts"] + e["dur"] >= start]
    counters = [e for e in window if e["ph"] == "C"]
    assert counters and all(start <= e["ts"] < end for e in counters)
    for name in {e["name"] for e in whole if e["ph"] == "C"}:
        series = [e for e in whole if e["name"] == name]
        first = next(e for e in counters if e["name"] == name)
        assert first["ts"] == start and first["args"] == [e for e in series if e["ts"] <= start][-1]["args"]
    assert len(window) < len(whole) / 3


def test_kernel_slices_none_or_every_nth_of_each_stream(tmp_path, whole):
    per_stream = Counter(e["tid"] for e in whole if e["ph"] == "X")
    none = traced(tmp_path, "none.json", "--trace-kernels", "none")
    assert not [e for e in none if e["ph"] == "X"]
    assert [e for e in none if e["ph"] != "X"] == [e for e in whole if e["ph"] != "X"]
    sampled = traced(tmp_path, "sampled.json", "--trace-kernels", "sample:3")
    assert Counter(e["tid"] for e in sampled if e["ph"] == "X") == {
        tid: math.ceil(count / 3) for tid, count in per_stream.items()}


def test_a_json_gz_name_writes_gzip_that_loads_to_the_same_events(tmp_path, whole):
    path = tmp_path / "t.json.gz"
    assert traced(tmp_path, "t.json.gz") == whole
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert path.stat().st_size < (tmp_path / "all.json").stat().st_size / 5


def test_a_big_estimate_and_an_existing_file_each_warn_in_one_line(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    quiet = run(*ARGS, "--trace", path)
    assert quiet.exit_code == 0 and not quiet.stderr, quiet.stderr
    monkeypatch.setenv("TUNER_TRACE_WARN_MB", "0.01")
    loud = run(*ARGS, "--trace", path)
    assert loud.exit_code == 0, loud.output
    lines = loud.stderr.splitlines()
    assert lines[0] == f"tuner: warning: --trace {path}: the file exists and is overwritten"
    assert lines[1].startswith(f"tuner: warning: --trace {path}: about ") and len(lines) == 2
    for needle in (" MB and ", " events (a 0.5 s pilot run", "--trace-window START:END",
                   "--trace-kernels none|sample:N", ".json.gz"):
        assert needle in lines[1]
    assert not (tmp_path / "t.json.part").exists()


@pytest.mark.parametrize("options, needle", [
    (["--trace-window", "2:1"], "--trace-window '2:1': expected START:END"),
    (["--trace-window", "a:b"], "--trace-window 'a:b'"),
    (["--trace-window", "5"], "--trace-window '5'"),
    (["--trace-kernels", "sample:0"], "--trace-kernels 'sample:0': expected all, none or sample:N"),
    (["--trace-kernels", "some"], "--trace-kernels 'some'"),
])
def test_bad_trace_options_are_one_line_exit_2(tmp_path, options, needle):
    from tests.test_cli import one_line_error

    one_line_error(run(*ARGS, "--trace", tmp_path / "t.json", *options), needle)
    assert not list(tmp_path.iterdir())


def test_trace_options_need_trace(tmp_path, monkeypatch):
    from tests.test_cli import one_line_error

    one_line_error(run(*ARGS, "--trace-kernels", "none"), "--trace-window and --trace-kernels go with --trace FILE")
    monkeypatch.setenv("TUNER_TRACE_WARN_MB", "lots")
    one_line_error(run(*ARGS, "--trace", tmp_path / "t.json"), "$TUNER_TRACE_WARN_MB='lots': expected a number of MB")


def test_options_parse_to_a_window_and_a_kernel_sample():
    assert TraceOptions.parse(None, "all") == TraceOptions()
    assert TraceOptions.parse("30:", "sample:4") == TraceOptions(30.0, math.inf, 4)
    assert TraceOptions.parse(":2.5", "none") == TraceOptions(0.0, 2.5, 0)
    assert TraceOptions(10, 20).share(40) == 0.25 and TraceOptions(30).share(40) == 0.25
