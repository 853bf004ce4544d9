"""Traffic: arrival processes, sizes, traces and workloads.

Statistical checks use fixed seeds and tolerances of about 4 standard errors from the
theory of each process, so they are deterministic and not flaky by construction.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

import tuner.traffic as traffic
import tuner.traffic.arrivals as arrivals_module
from tuner.errors import TraceError
from tuner.traffic.trace import MAX_TRACE_BYTES
from tuner.traffic import (
    Diurnal,
    Empirical,
    Exponential,
    Fixed,
    Gamma,
    Jitter,
    LogNormal,
    OnOff,
    Poisson,
    Trace,
    TraceReplay,
    Uniform,
    load_trace,
    make_workload,
)

TRACES = Path(__file__).resolve().parents[1] / "search_spaces" / "traces"
AZURE_COLUMNS = {"prompt": "ContextTokens", "output": "GeneratedTokens"}


def gap_cv(times: np.ndarray) -> float:
    gaps = np.diff(times)
    return float(gaps.std() / gaps.mean())


@pytest.fixture(scope="module")
def conv() -> Trace:
    return load_trace(TRACES / "azure_llm_conv_2023.csv", size_columns=AZURE_COLUMNS)


@pytest.fixture(scope="module")
def code() -> Trace:
    return load_trace(TRACES / "azure_llm_code_2023.csv", size_columns=AZURE_COLUMNS)


def small_trace() -> Trace:
    times = np.array([0.0, 1.0, 1.5, 4.0, 9.0])
    return Trace("memory", times, {"prompt": np.array([10, 20, 30, 40, 50])})


def bursty_trace() -> Trace:
    """10 bursts of 20 arrivals 10 ms apart, one a minute: gap CV about 4.7."""
    times = np.repeat(np.arange(10) * 60.0, 20) + np.tile(np.arange(20) * 0.01, 10)
    return Trace("bursty", times, {"prompt": np.arange(1, 201)})


def cyclic_gaps(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Gaps between consecutive replayed rows in the cyclic trace (a mean gap at a wrap)."""
    cycle_s = len(trace) / trace.mean_rate
    return np.mod(np.diff(trace.times_s[rows]), cycle_s)


def test_public_api_is_pinned():
    assert set(traffic.__all__) == {
        "ArrivalProcess", "Poisson", "Gamma", "OnOff", "Diurnal", "TraceReplay",
        "SizeDistribution", "Fixed", "Uniform", "LogNormal", "Exponential", "Empirical",
        "Trace", "load_trace", "Workload", "Jitter", "make_workload",
    }
    assert all(hasattr(traffic, name) for name in traffic.__all__)


# --- arrival processes -----------------------------------------------------------------


@pytest.mark.parametrize(
    "process",
    [
        Poisson(3.0),
        Gamma(3.0, 0.25),
        OnOff(3.0, 1.0, 4.0),
        Diurnal(3.0, 1.0, 10.0),
        TraceReplay(small_trace(), rate=3.0),
    ],
    ids=lambda p: type(p).__name__,
)
@pytest.mark.parametrize("horizon_s", [0.01, 50.0])
def test_sample_is_sorted_float_within_horizon(process, horizon_s):
    times = process.sample(np.random.default_rng(0), horizon_s)
    assert times.dtype == np.float64
    assert np.all(np.diff(times) >= 0)
    assert np.all((times >= 0) & (times < horizon_s))


def test_poisson_count_and_gap_cv():
    rate, horizon = 5.0, 10_000.0
    times = Poisson(rate).sample(np.random.default_rng(1), horizon)
    assert abs(len(times) - rate * horizon) < 4 * math.sqrt(rate * horizon)
    assert gap_cv(times) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(("rate", "horizon"), [(4.0, 5.0), (0.3, 2.0)])
def test_poisson_window_counts_have_poisson_mean_and_variance(rate, horizon):
    windows, mean = 4000, rate * horizon
    counts = np.array(
        [len(Poisson(rate).sample(np.random.default_rng(seed), horizon)) for seed in range(windows)]
    )
    # Standard errors over n windows: of the mean sqrt(mean / n); of the sample variance
    # sqrt((mu4 - var^2) / n) = sqrt((mean + 2 mean^2) / n), as a Poisson count has
    # fourth central moment mean + 3 mean^2.
    assert abs(counts.mean() - mean) < 4 * math.sqrt(mean / windows)
    assert abs(counts.var(ddof=1) - mean) < 4 * math.sqrt((mean + 2 * mean**2) / windows)


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_squared_gap_cv_is_inverse_burstiness(burstiness):
    rate, horizon = 5.0, 10_000.0
    times = Gamma(rate, burstiness).sample(np.random.default_rng(2), horizon)
    assert len(times) / horizon == pytest.approx(rate, rel=0.05)
    # Relative standard error of a sample variance is sqrt((kurtosis - 1) / n), with
    # gamma kurtosis 3 + 6 / shape: about 2.3% at shape 0.25, 0.8% at shape 4.
    assert gap_cv(times) ** 2 == pytest.approx(1 / burstiness, rel=0.1)


def test_gamma_with_burstiness_one_is_poisson():
    times = Gamma(5.0, 1.0).sample(np.random.default_rng(3), 10_000.0)
    assert gap_cv(times) == pytest.approx(1.0, abs=0.03)


def test_onoff_keeps_mean_rate_and_is_bursty():
    rate, horizon = 5.0, 20_000.0
    times = OnOff(rate, on_s=0.5, off_s=2.0).sample(np.random.default_rng(4), horizon)
    # Asymptotic index of dispersion of this interrupted Poisson process is 17, so the
    # count's relative standard error is sqrt(17 / (rate * horizon)) = 1.3%.
    assert len(times) / horizon == pytest.approx(rate, rel=0.06)
    assert gap_cv(times) > 1.5


@pytest.mark.parametrize(
    "process",
    [
        Poisson(5.0),
        Gamma(5.0, 0.25),
        OnOff(5.0, 2.0, 8.0),
        TraceReplay(small_trace(), 5.0, basis="trace"),
    ],
    ids=lambda p: type(p).__name__,
)
def test_short_windows_are_stationary(process):
    """Processes start in their stationary regime, so E[count in T] = rate * T."""
    rng = np.random.default_rng(5)
    horizon, windows = 3.7, 3000
    counts = np.array([len(process.sample(rng, horizon)) for _ in range(windows)])
    standard_error = counts.std() / math.sqrt(windows)
    assert abs(counts.mean() - process.mean_rate * horizon) < 4.5 * standard_error


def test_diurnal_follows_the_sinusoid():
    rate, amplitude, period = 5.0, 0.8, 100.0
    process = Diurnal(rate, amplitude, period)
    times = process.sample(np.random.default_rng(6), 200 * period)
    # Over whole periods the count is Poisson with mean rate * horizon.
    assert abs(len(times) - rate * 200 * period) < 4 * math.sqrt(rate * 200 * period)
    high_half = np.mod(times, period) < period / 2  # sin > 0 there (phase 0)
    expected = 0.5 + amplitude / math.pi  # integral of the rate over the high half
    assert high_half.mean() == pytest.approx(expected, abs=4 * math.sqrt(0.25 / len(times)))
    assert process.rate_at(np.array([period / 4]))[0] == pytest.approx(rate * 1.8)


def test_diurnal_phase_shifts_the_peak():
    period = 100.0
    times = Diurnal(5.0, 1.0, period, phase=math.pi).sample(
        np.random.default_rng(7), 50 * period
    )
    assert (np.mod(times, period) < period / 2).mean() < 0.25


# --- traces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "count", "rate", "cv", "first_sizes"),
    [("conv", 19_366, 5.53, 1.09, (374, 44)), ("code", 8_819, 2.57, 13.2, (4808, 10))],
)
def test_azure_traces_load(name, count, rate, cv, first_sizes, request):
    trace = request.getfixturevalue(name)
    assert len(trace) == count
    assert trace.mean_rate == pytest.approx(rate, rel=0.005)
    assert trace.gap_cv() == pytest.approx(cv, rel=0.1)
    assert trace.times_s[0] == 0.0
    assert trace.span_s == pytest.approx((count - 1) / trace.mean_rate)
    assert set(trace.columns) == {"prompt", "output"}
    assert all(col.dtype == np.int64 and len(col) == count for col in trace.columns.values())
    assert (trace.columns["prompt"][0], trace.columns["output"][0]) == first_sizes


def test_trace_is_cached_until_the_file_changes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("t,n\n0,1\n2,3\n")
    first = load_trace(path, time_column="t")
    assert load_trace(path, time_column="t") is first
    path.write_text("t,n\n0,1\n4,3\n")
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 10**9))
    assert load_trace(path, time_column="t").span_s == 4.0


def test_trace_arrays_are_read_only(conv):
    with pytest.raises(ValueError):
        conv.times_s[0] = 1.0
    with pytest.raises(ValueError):
        conv.columns["prompt"][0] = 1


def test_trace_default_columns_keep_their_names_and_times_start_at_0(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("when,a,b\n10.5,1,2\n\n11.0,3,4\n11.0,7,8\n12.5,5,6\n")
    trace = load_trace(path, time_column="when")
    np.testing.assert_array_equal(trace.times_s, [0.0, 0.5, 0.5, 2.0])
    np.testing.assert_array_equal(trace.columns["a"], [1, 3, 7, 5])
    np.testing.assert_array_equal(trace.columns["b"], [2, 4, 8, 6])


@pytest.mark.parametrize(("text", "message"), [
    # line 1 is the header, line 3 blank: the row after it is line 4
    ("when,n\n10.5,1\n\n12.5,5\n11.0,3\n",
     "line 5, column 'when': '11.0' is earlier than '12.5' on line 4; rows must be in time order"),
    ("when,n\n2023-11-16 18:15:50,1\n2023-11-16 18:15:46,2\n",
     "line 3, column 'when': '2023-11-16 18:15:46' is earlier than '2023-11-16 18:15:50' on line 2"),
    ("when,n\n0,1\n-3.5,2\n4,3\n", "line 3, column 'when': time '-3.5' is negative"),
])
def test_trace_times_out_of_order_or_negative_are_refused(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        load_trace(path, time_column="when")
    assert str(info.value).startswith(f"{path.resolve()}: {message}"), info.value


def test_trace_larger_than_the_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.csv"
    with path.open("wb") as file:  # sparse: the size without the disk
        file.write(b"TIMESTAMP,n\n0,1\n")
        file.truncate(MAX_TRACE_BYTES + 1)
    with pytest.raises(TraceError, match=r"the trace is 64\.0 MiB; at most 64 MiB can be loaded"):
        load_trace(path)
    legal = tmp_path / "legal.csv"
    legal.write_text("TIMESTAMP,n\n0,1\n1,2\n")
    assert len(load_trace(legal)) == 2


def test_trace_parses_iso_datetimes(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,n\n2023-11-16T23:59:59.5,1\n2023-11-17T00:00:01.25,2\n")
    np.testing.assert_allclose(load_trace(path).times_s, [0.0, 1.75])


@pytest.mark.parametrize(
    ("text", "kwargs", "where"),
    [
        ("a,b\n0,1\n1,2\n", {}, "column 'TIMESTAMP' missing (columns: a, b)"),
        ("t,n\n0,1\n1,2\n", {"time_column": "t", "size_columns": {"x": "m"}}, "column 'm'"),
        ("t,n\n0,1\n1,abc\n", {"time_column": "t"}, "line 3, column 'n'"),
        ("t,n\n0,1\n1,2.5\n", {"time_column": "t"}, "line 3, column 'n'"),
        ("t,n\n0,1\n1,-2\n", {"time_column": "t"}, "line 3, column 'n'"),
        ("t,n\n2023-11-16 18:15:46.68,1\nyesterday,2\n", {"time_column": "t"}, "line 3"),
        ("t,n\n0,1\nnan,2\n", {"time_column": "t"}, "line 3, column 't'"),
        ("t,n\n0,1\n1,2,3\n", {"time_column": "t"}, "line 3 has 3 fields"),
        ("t,n\n0,1\n", {"time_column": "t"}, "at least 2 arrivals"),
        ("t,n\n5,1\n5,2\n", {"time_column": "t"}, "2 rows spanning 0 s"),
        ("", {}, "empty"),
    ],
)
def test_malformed_trace_raises_trace_error_naming_file_and_place(tmp_path, text, kwargs, where):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        load_trace(path, **kwargs)
    message = str(info.value)
    assert str(path) in message and where in message
    assert "\n" not in message


def test_missing_trace_file_raises_trace_error(tmp_path):
    with pytest.raises(TraceError, match="missing.csv"):
        load_trace(tmp_path / "missing.csv")


# --- trace replay ----------------------------------------------------------------------


@pytest.mark.parametrize("basis", ["window", "trace"])
def test_trace_replay_at_target_rate_keeps_gap_cv(code, basis):
    rate = 10.0
    replay = TraceReplay(code, rate=rate, basis=basis)
    cycle_s = len(code) / rate
    times = replay.sample(np.random.default_rng(8), 3 * cycle_s)
    # Three whole cycles of the (cyclic) trace hold each row three times.
    assert abs(len(times) - 3 * len(code)) <= 3
    assert len(times) / (3 * cycle_s) == pytest.approx(rate, rel=1e-3)
    assert gap_cv(times) == pytest.approx(code.gap_cv(), rel=0.02)


def test_trace_replay_at_own_rate_from_offset_zero_is_the_trace(conv):
    replay = TraceReplay(conv, offset_s=0.0, basis="trace")
    times, rows = replay.sample_rows(np.random.default_rng(0), 600.0)
    count = np.searchsorted(conv.times_s, 600.0)
    np.testing.assert_array_equal(times, conv.times_s[:count])
    np.testing.assert_array_equal(rows, np.arange(count))


def test_trace_replay_wraps_around_with_a_mean_gap():
    trace = small_trace()  # 5 arrivals over 9 s: mean gap 2.25 s, cycle 11.25 s
    replay = TraceReplay(trace, offset_s=8.0, basis="trace")
    times, rows = replay.sample_rows(np.random.default_rng(0), 5.0)
    np.testing.assert_array_equal(rows, [4, 0, 1, 2])
    np.testing.assert_allclose(times, [1.0, 3.25, 4.25, 4.75])


def test_trace_replay_offset_is_random_per_seed_unless_given(conv):
    def first(process, seed):
        return process.sample(np.random.default_rng(seed), 60.0)[0]

    assert first(TraceReplay(conv), 1) != first(TraceReplay(conv), 2)
    fixed = TraceReplay(conv, rate=2.0, offset_s=100.0)
    assert first(fixed, 1) == first(fixed, 2)


def test_trace_replay_sizes_are_paired_with_their_rows(conv):
    offset = 500.0
    workload = make_workload(
        TraceReplay(conv, offset_s=offset, basis="trace"), None, Jitter(), horizon_s=900.0, seed=3
    )
    rows = np.searchsorted(conv.times_s, workload.arrivals_s + offset - 1e-9)
    np.testing.assert_allclose(conv.times_s[rows], workload.arrivals_s + offset)
    for name in ("prompt", "output"):
        np.testing.assert_array_equal(workload.sizes[name], conv.columns[name][rows])


def test_window_basis_realises_the_rate_in_every_window():
    trace = bursty_trace()
    for rate in (0.2, 1.0, 7.7):
        for horizon in (3.3, 60.0):
            for seed in range(20):
                replay = TraceReplay(trace, rate)
                times, rows = replay.sample_rows(np.random.default_rng(seed), horizon)
                assert len(times) == len(rows) == round(rate * horizon)
                assert times.dtype == np.float64 and rows.dtype == np.int64
                assert np.all(np.diff(times) >= 0)
                assert np.all((times >= 0) & (times < horizon))
                # Consecutive rows of the cyclic trace, its gaps scaled by one factor.
                assert np.all(np.mod(np.diff(rows), len(trace)) == 1)
                gaps, scaled = cyclic_gaps(trace, rows), np.diff(times)
                if len(gaps):
                    np.testing.assert_allclose(scaled, gaps * scaled.sum() / gaps.sum())


def test_without_a_rate_the_trace_is_replayed_as_recorded_whatever_the_basis():
    trace = bursty_trace()
    for offset in (0.0, 37.5):
        window = TraceReplay(trace, offset_s=offset).sample(np.random.default_rng(0), 100.0)
        recorded = TraceReplay(trace, offset_s=offset, basis="trace").sample(np.random.default_rng(0), 100.0)
        assert np.array_equal(window, recorded)
    assert TraceReplay(trace).mean_rate == trace.mean_rate


def test_trace_basis_windows_of_a_bursty_trace_vary_where_window_basis_does_not():
    trace, rate, horizon = bursty_trace(), 1.0, 10.0  # bursts 22 s apart at this rate
    def counts(basis):
        return {
            len(TraceReplay(trace, rate, basis=basis).sample(np.random.default_rng(seed), horizon))
            for seed in range(200)
        }

    assert counts("window") == {10}
    assert {0, 20} <= counts("trace")


def test_window_basis_with_no_arrivals_is_empty():
    times, rows = TraceReplay(small_trace(), rate=0.1).sample_rows(np.random.default_rng(0), 1.0)
    assert times.dtype == np.float64 and rows.dtype == np.int64
    assert len(times) == len(rows) == 0


def test_window_basis_from_offset_zero_is_the_trace_stretched(conv):
    horizon = 600.0
    count = round(conv.mean_rate * horizon)
    times, rows = TraceReplay(conv, conv.mean_rate, offset_s=0.0).sample_rows(np.random.default_rng(0), horizon)
    np.testing.assert_array_equal(rows, np.arange(count))
    np.testing.assert_allclose(times, conv.times_s[:count] * horizon / conv.times_s[count])


def test_window_basis_wraps_around_with_a_mean_gap():
    trace = small_trace()  # cycle 11.25 s: arrivals at 9, 11.25, 12.25, then 12.75 s
    replay = TraceReplay(trace, rate=0.6, offset_s=8.0)  # 3 arrivals in 5 s
    times, rows = replay.sample_rows(np.random.default_rng(0), 5.0)
    np.testing.assert_array_equal(rows, [4, 0, 1])
    np.testing.assert_allclose(times, np.array([1.0, 3.25, 4.25]) * 5.0 / 4.75)


def test_window_basis_with_an_offset_is_deterministic():
    replay = TraceReplay(bursty_trace(), rate=2.0, offset_s=100.0)
    first = replay.sample_rows(np.random.default_rng(1), 30.0)
    second = replay.sample_rows(np.random.default_rng(2), 30.0)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert first[1][0] == 40  # the first arrival after 100 s: the third burst's first


def test_window_basis_sizes_are_paired_with_their_rows(conv):
    offset, horizon = 500.0, 90.0
    workload = make_workload(TraceReplay(conv, 3.0, offset), None, Jitter(), horizon, seed=3)
    first = np.searchsorted(conv.times_s, offset)
    rows = (first + np.arange(round(3.0 * horizon))) % len(conv)
    assert len(workload) == len(rows)
    for name in ("prompt", "output"):
        np.testing.assert_array_equal(workload.sizes[name], conv.columns[name][rows])


def test_given_sizes_override_trace_sizes(conv):
    workload = make_workload(TraceReplay(conv), {"prompt": Fixed(7)}, Jitter(), 60.0, seed=0)
    assert set(workload.sizes) == {"prompt"}
    assert np.all(workload.sizes["prompt"] == 7)


# --- common random numbers across rates -----------------------------------------------

RESCALED = {
    "Poisson": Poisson,
    "Gamma-0.25": lambda rate: Gamma(rate, 0.25),
    "Gamma-4": lambda rate: Gamma(rate, 4.0),
    "trace-basis": lambda rate: TraceReplay(bursty_trace(), rate, basis="trace"),
    "window-basis": lambda rate: TraceReplay(bursty_trace(), rate),
}


def sample_rows(process, seed, horizon):
    rng = np.random.default_rng(seed)
    if isinstance(process, TraceReplay):
        return process.sample_rows(rng, horizon)
    return process.sample(rng, horizon), None


def test_generator_draws_concatenate_across_calls():
    """What the chunked samplers rely on: n draws in one call or in several are equal."""
    draws = {
        "exponential": lambda rng, n: rng.standard_exponential(n),
        "gamma-0.25": lambda rng, n: rng.gamma(0.25, 1.0, n),
        "gamma-4": lambda rng, n: rng.gamma(4.0, 1.0, n),
        "uniform": lambda rng, n: rng.random(n),
    }
    sizes = [1, 3, 100, 7, 1000, 5]
    for draw in draws.values():
        whole, split = np.random.default_rng(7), np.random.default_rng(7)
        np.testing.assert_array_equal(
            draw(whole, sum(sizes)), np.concatenate([draw(split, n) for n in sizes])
        )
        assert whole.random() == split.random()


@pytest.mark.parametrize("make", RESCALED.values(), ids=RESCALED.keys())
def test_doubling_the_rate_halves_time_exactly(make):
    rate, horizon = 1.3, 37.0
    for seed in range(10):
        fast_times, fast_rows = sample_rows(make(2 * rate), seed, horizon)
        slow_times, slow_rows = sample_rows(make(rate), seed, 2 * horizon)
        assert len(fast_times) > 0
        np.testing.assert_array_equal(fast_times, slow_times / 2)
        np.testing.assert_array_equal(fast_rows, slow_rows)


@pytest.mark.parametrize("name", ["Poisson", "Gamma-0.25", "Gamma-4", "trace-basis"])
def test_a_higher_rate_replays_the_same_draws_compressed(name):
    make, rate, horizon = RESCALED[name], 1.3, 37.0
    for seed in range(10):
        fast_times, fast_rows = sample_rows(make(2 * rate), seed, horizon)
        slow_times, slow_rows = sample_rows(make(rate), seed, horizon)
        early = fast_times < horizon / 2
        assert early.sum() > 0
        np.testing.assert_array_equal(fast_times[early] * 2, slow_times)
        if slow_rows is not None:
            np.testing.assert_array_equal(fast_rows[early], slow_rows)


def test_window_basis_at_a_higher_rate_extends_the_same_window():
    trace, rate, horizon = bursty_trace(), 1.3, 37.0
    for seed in range(10):
        fast_times, fast_rows = sample_rows(TraceReplay(trace, 2 * rate), seed, horizon)
        slow_times, slow_rows = sample_rows(TraceReplay(trace, rate), seed, horizon)
        count = len(slow_times)
        assert count == round(rate * horizon) and len(fast_times) == round(2 * rate * horizon)
        np.testing.assert_array_equal(fast_rows[:count], slow_rows)
        # The same arrivals from the same start, on a different time scale.
        factor = fast_times[count - 1] / slow_times[count - 1]
        np.testing.assert_allclose(fast_times[:count], slow_times * factor, rtol=1e-12)


@pytest.mark.parametrize("name", ["Poisson", "Gamma-0.25"])
def test_chunk_size_does_not_change_the_sample(name, monkeypatch):
    make = RESCALED[name]
    wide = [make(3.0).sample(np.random.default_rng(seed), 20.0) for seed in range(5)]
    monkeypatch.setattr(arrivals_module, "_chunk", lambda expected: 3)
    narrow = [make(3.0).sample(np.random.default_rng(seed), 20.0) for seed in range(5)]
    for a, b in zip(wide, narrow):
        np.testing.assert_array_equal(a, b)


# --- sizes -----------------------------------------------------------------------------

N_SIZES = 200_000


@pytest.mark.parametrize(
    ("dist", "mean", "cv"),
    [
        (Fixed(12), 12.0, 0.0),
        (Uniform(3, 7), 5.0, math.sqrt(2.0) / 5.0),  # discrete uniform: var (k^2 - 1) / 12
        (LogNormal(200.0, 0.5), 200.0, 0.5),
        (LogNormal(1000.0, 1.5), 1000.0, 1.5),
        (Exponential(50.0), 50.0, math.sqrt(1 - 1 / 50)),
        (Empirical((1, 2, 2, 9)), 3.5, math.sqrt(10.5) / 3.5),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, float) else "",
)
def test_size_distribution_mean_and_cv(dist, mean, cv):
    values = dist.sample(np.random.default_rng(9), N_SIZES)
    assert values.dtype == np.int64 and len(values) == N_SIZES
    assert values.min() >= 1
    assert dist.mean == pytest.approx(mean)
    assert values.mean() == pytest.approx(mean, rel=0.02)
    assert values.std() / values.mean() == pytest.approx(cv, rel=0.08, abs=1e-12)


def test_uniform_covers_both_ends():
    assert set(Uniform(3, 7).sample(np.random.default_rng(10), 1000)) == {3, 4, 5, 6, 7}


def test_small_lognormal_sizes_stay_at_least_one():
    assert LogNormal(1.0, 3.0).sample(np.random.default_rng(11), 10_000).min() == 1


def test_empirical_stores_a_hashable_tuple():
    dist = Empirical(np.array([3, 1, 2]))
    assert dist.values == (3, 1, 2)
    assert hash(dist) == hash(Empirical((3, 1, 2)))


# --- workloads -------------------------------------------------------------------------

SIZES = {"prompt": LogNormal(500.0, 1.0), "output": Exponential(100.0)}


def make(seed=0, jitter=Jitter(), sizes=SIZES, process=Gamma(4.0, 0.5)):
    return make_workload(process, sizes, jitter, horizon_s=300.0, seed=seed)


def assert_same(a, b):
    np.testing.assert_array_equal(a.arrivals_s, b.arrivals_s)
    assert a.sizes.keys() == b.sizes.keys()
    for name in a.sizes:
        np.testing.assert_array_equal(a.sizes[name], b.sizes[name])
    np.testing.assert_array_equal(a.jitter, b.jitter)


def test_workload_shape():
    workload = make(jitter=Jitter("exponential"))
    assert len(workload) == len(workload.arrivals_s) > 0
    assert all(len(v) == len(workload) for v in (*workload.sizes.values(), workload.jitter))
    assert workload.horizon_s == 300.0
    with pytest.raises(ValueError):
        workload.arrivals_s[0] = 1.0


def test_same_seed_same_workload_different_seed_different():
    assert_same(make(seed=1), make(seed=1))
    assert not np.array_equal(make(seed=1).arrivals_s, make(seed=2).arrivals_s)


def test_changing_one_component_leaves_the_others_unchanged():
    base = make(seed=4)
    other_jitter = make(seed=4, jitter=Jitter("lognormal", 0.5))
    np.testing.assert_array_equal(base.arrivals_s, other_jitter.arrivals_s)
    np.testing.assert_array_equal(base.sizes["prompt"], other_jitter.sizes["prompt"])
    other_output = make(seed=4, sizes={"prompt": SIZES["prompt"], "output": Fixed(3)})
    np.testing.assert_array_equal(base.sizes["prompt"], other_output.sizes["prompt"])
    reordered = make(seed=4, sizes={"output": SIZES["output"], "prompt": SIZES["prompt"]})
    np.testing.assert_array_equal(base.sizes["prompt"], reordered.sizes["prompt"])


def test_no_sizes_for_a_synthetic_process_is_an_empty_mapping():
    assert dict(make(sizes=None).sizes) == {}


@pytest.mark.parametrize(
    ("jitter", "cv"),
    [(Jitter(), 0.0), (Jitter("exponential"), 1.0), (Jitter("lognormal", 0.3), 0.3)],
    ids=["deterministic", "exponential", "lognormal"],
)
def test_jitter_has_mean_one_and_its_cv(jitter, cv):
    values = jitter.sample(np.random.default_rng(12), N_SIZES)
    assert values.mean() == pytest.approx(1.0, rel=0.01)
    assert values.std() == pytest.approx(cv, rel=0.03, abs=1e-12)


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "quoted"),
    [
        (lambda: Poisson(-1.0), "rate must be a finite number > 0 but got -1.0"),
        (lambda: Poisson(math.inf), "but got inf"),
        (lambda: Gamma(1.0, 0.0), "burstiness must be a finite number > 0 but got 0.0"),
        (lambda: OnOff(1.0, 0.0, 1.0), "on_s must be a finite number > 0 but got 0.0"),
        (lambda: OnOff(1.0, 1.0, -2.0), "off_s must be a finite number > 0 but got -2.0"),
        (lambda: Diurnal(1.0, 1.5, 10.0), "amplitude must be in [0, 1] but got 1.5"),
        (lambda: Diurnal(1.0, 0.5, 0.0), "period_s must be a finite number > 0 but got 0.0"),
        (lambda: Diurnal(1.0, 0.5, 1.0, math.nan), "phase must be a finite number but got nan"),
        (lambda: TraceReplay(small_trace(), rate=0.0), "rate must be a finite number > 0"),
        (lambda: TraceReplay(small_trace(), offset_s=-1.0), "offset_s must be a finite"),
        (lambda: TraceReplay(small_trace(), basis="scaled"), "basis must be 'window' or 'trace'"),
        (lambda: Fixed(0), "value must be an integer >= 1 but got 0"),
        (lambda: Fixed(2.5), "value must be an integer >= 1 but got 2.5"),
        (lambda: Uniform(5, 4), "high must be >= low (5) but got 4"),
        (lambda: LogNormal(0.5, 1.0), "mean must be a finite number >= 1 but got 0.5"),
        (lambda: LogNormal(10.0, -1.0), "cv must be a finite number >= 0 but got -1.0"),
        (lambda: Exponential(0.0), "mean must be a finite number >= 1 but got 0.0"),
        (lambda: Empirical(()), "values must be a non-empty sequence but got ()"),
        (lambda: Empirical((3, 0)), "values must be integers >= 1 but got [3, 0]"),
        (lambda: Empirical((1.5,)), "values must be integers >= 1 but got [1.5]"),
        (lambda: Jitter("gaussian"), "kind must be one of"),
        (lambda: Jitter("deterministic", 0.5), "but got 0.5"),
        (lambda: Jitter("exponential", 2.0), "but got 2.0"),
        (lambda: Jitter("lognormal", -0.1), "cv must be a finite number >= 0 but got -0.1"),
        (lambda: make_workload(Poisson(1.0), None, Jitter(), 0.0, 0), "horizon_s must be"),
        (lambda: Trace("x", np.array([0.0]), {}), "at least 2 arrivals but got 1"),
        (lambda: Trace("x", np.array([1.0, 2.0]), {}), "must be sorted, start at 0"),
        (lambda: Trace("x", np.array([0.0, 1.0]), {"n": np.ones(3)}), "has 3 rows"),
    ],
)
def test_bad_parameters_raise_value_error_quoting_the_value(build, quoted):
    with pytest.raises(ValueError) as info:
        build()
    assert quoted in str(info.value)
