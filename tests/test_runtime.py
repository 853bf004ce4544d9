"""tuner.runtime: loading (SQLite, JSON), per-bucket lookups, regime switching with
hysteresis, safety (every bad table serves the fallback with one warning), threads, and
the ``autotune`` decorator on the real matmul kernel under the Triton interpreter (in a
child process: TRITON_INTERPRET must be set before Triton is first imported)."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

import tuner.runtime as rt
from tests.conftest import schema_3_fields
from tests.test_store import version_1_export, write_version_1_database
from tuner.errors import SchemaMismatchError, StorageError
from tuner.store import SCHEMA_VERSION, Store, TableRow
from tuner.store.export import export_json, json_document
from tuner.store.row import ROW_FIELDS, SERVED_FIELDS, bucket_label

ROOT = Path(__file__).resolve().parents[1]
LOGGER = "tuner.runtime"

TILES = {
    "light": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3,
              "SPLIT_K": 1, "PERSISTENT": False, "FUSE_EPILOGUE": True},
    "heavy": {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 8, "num_stages": 2,
              "SPLIT_K": 1, "PERSISTENT": False, "FUSE_EPILOGUE": True},
}
RATES = {"light": 10.0, "heavy": 100.0}
FALLBACK = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}
POWERS_OF_TWO = [2 ** k for k in range(14)]  # 1 .. 8192: 14 buckets


def row(regime: str, op: str, *, problem: str = "toy", device: str = "h100", **changes) -> TableRow:
    values = {
        "problem": problem, "regime": regime, "op": op, "bucket": 0, "bucket_bounds": None,
        "regime_index": list(TILES).index(regime), "op_index": {"qkv": 0, "o": 1, "attn": 2}[op],
        "config": f"{op}-{regime}", "params": dict(TILES[regime]), "shape": {"M": 64, "N": 48, "K": 64},
        "device": device, "source": "modeled", "triton_version": "3.9.0", "kernel_source_hash": None,
        "problem_hash": "ab" * 32, "study_name": f"tuner:{problem}:{regime}", "trial_number": 3, "seeds": 3,
        "horizon_s": 60.0, "goodput_rps": 3.5, "goodput_ci_rps": 0.25, "baseline_config": f"{op}-fastest",
        "baseline_goodput_rps": 2.0, "delta_ci_rps": 0.5, "one_config_goodput_rps": 1.0, "oracle_goodput_rps": None,
        "regime_rate_rps": RATES[regime], "created_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        **schema_3_fields(realized_rates_rps=[RATES[regime] * f for f in (0.96, 1.03, 1.01)]),
    }
    values.update(changes)
    return TableRow(**values)


def rows(**changes) -> list[TableRow]:
    return [row(r, op, **changes) for r in TILES for op in ("qkv", "o")]


def bucket_params(regime: str, i: int) -> dict:
    """A config per (regime, bucket), each different."""
    return {**TILES[regime], "BLOCK_N": 16 << (i % 3), "BUCKET": i}


def bucketed(edges, op: str = "qkv", regimes=tuple(TILES), dim: str = "M", **changes) -> list[TableRow]:
    """One row per (regime, bucket ``(edges[i-1], edges[i]]``) of ``op``."""
    out = []
    for regime in regimes:
        for i, high in enumerate(edges):
            bounds = {dim: [None if i == 0 else edges[i - 1], high]}
            out.append(row(regime, op, bucket=i, bucket_bounds=bounds, config=f"{op}-{regime}@{bucket_label(bounds)}",
                           params=bucket_params(regime, i), shape={dim: high}, **changes))
    return out


def bucket_of(value: float, edges) -> int:
    """Independent of the runtime: a linear scan for the first upper edge at least the
    value; above the last edge, the last bucket."""
    for i, edge in enumerate(edges):
        if value <= edge:
            return i
    return len(edges) - 1


def sqlite_table(path: Path, table_rows: list[TableRow] | None = None) -> Path:
    table_rows = rows() if table_rows is None else table_rows
    with Store(f"sqlite:///{path}", create=True) as store:
        for regime in dict.fromkeys(r.regime for r in table_rows):
            store.replace_regime(table_rows[0].problem, regime, [r for r in table_rows if r.regime == regime])
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return sqlite_table(tmp_path / "table.db")


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    return export_json("toy", rows(), tmp_path / "table.json")


# --- loading and lookups -------------------------------------------------------------

@pytest.mark.parametrize("kind", ["sqlite-path", "sqlite-url", "json"])
def test_loads_and_serves_the_first_regime(kind, db, exported, caplog):
    source = {"sqlite-path": db, "sqlite-url": f"sqlite:///{db}", "json": exported}[kind]
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(source, device="h100", fallback=FALLBACK)
    assert not caplog.records
    assert d.fallback_reason is None
    assert d.table.regimes == ("light", "heavy") and d.table.problem == "toy"
    assert d.regime == "light"
    assert dict(d.config("qkv")) == TILES["light"]
    assert d.config_name("o") == "o-light"
    d.set_regime("heavy")
    assert dict(d.config("o", {"M": 64})) == TILES["heavy"]  # one bucket: the shape does not matter
    assert d.table.regime_rows("heavy") == tuple(rows()[2:])


def test_configs_are_read_only(exported):
    d = rt.load_table(exported)
    with pytest.raises(TypeError):
        d.config("qkv")["BLOCK_M"] = 1  # type: ignore[index]


def test_the_problem_is_chosen_when_the_database_holds_several(tmp_path, caplog):
    path = sqlite_table(tmp_path / "t.db")
    other = [row(r, op, problem="other") for r in TILES for op in ("qkv", "o")]
    with Store(f"sqlite:///{path}") as store:
        for regime in TILES:
            store.replace_regime("other", regime, [r for r in other if r.regime == regime])
    assert rt.load_table(path, problem="other").table.problem == "other"
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(path, fallback=FALLBACK)
    assert d.regime is None and "pass problem=" in d.fallback_reason


# --- per-bucket lookups --------------------------------------------------------------

EDGE_LISTS = {"powers-of-two": POWERS_OF_TWO, "uneven": [16, 64, 8192], "large": [1024, 100_000, 1_048_576]}


@pytest.mark.parametrize("kind", ["sqlite", "json"])
@pytest.mark.parametrize("name", list(EDGE_LISTS))
def test_every_m_of_a_bucket_gets_that_buckets_config(tmp_path, kind, name):
    edges = EDGE_LISTS[name]
    table_rows = bucketed(edges) + [row(r, "o") for r in TILES]
    source = (sqlite_table(tmp_path / "b.db", table_rows) if kind == "sqlite"
              else export_json("toy", table_rows, tmp_path / "b.json"))
    d = rt.load_table(source)
    assert d.fallback_reason is None
    values = range(0, edges[-1] + 3) if edges[-1] <= 8192 else [
        *range(0, 1100), *range(99_990, 100_010), *range(1_048_570, 1_048_580), 5_000_000]
    for regime in TILES:
        d.set_regime(regime)
        expected = [bucket_params(regime, i) for i in range(len(edges))]
        names = [r.config for r in table_rows if r.regime == regime and r.op == "qkv"]
        wrong = [m for m in values if d.config("qkv", {"M": m}) != expected[bucket_of(m, edges)]]
        assert not wrong, f"{regime}: M {wrong[:5]}… get another bucket's config"
        for m in list(values)[::97]:
            assert d.config_name("qkv", {"M": m}) == names[bucket_of(m, edges)]
        assert dict(d.config("o", {"M": 5})) == TILES[regime]


def test_the_bucket_of_a_value_that_is_not_an_integer_or_is_missing():
    params = tuple({"i": i} for i in range(4))
    entry = rt.OpConfigs(("M",), ((16, 64, 256, 1024),), params, tuple(f"c{i}" for i in range(4)), None)
    pick = entry.pick
    assert pick({"M": 16.0}) == {"i": 0} and pick({"M": 16.5}) == {"i": 1} and pick({"M": 1e9}) == {"i": 3}
    assert pick({"M": -5}) == {"i": 0} and pick({"M": True}) == {"i": 0}
    assert pick(None) == pick({}) == pick({"N": 3}) == pick({"M": None}) == pick({"M": "big"}) == {"i": 3}
    assert pick({"M": float("nan")}) == {"i": 3}  # not a number: the last bucket (bisect alone gave the first)
    np = pytest.importorskip("numpy")
    assert pick({"M": np.int64(17)}) == {"i": 1} and pick({"M": np.float32(300.5)}) == {"i": 3}
    assert entry.name({"M": 100}) == "c2" and entry.bucket(1024) == 3 and entry.bucket(1025) == 3
    fixed = rt.OpConfigs.fixed({"BLOCK_M": 8})
    assert fixed.pick({"M": 3}) == {"BLOCK_M": 8} and fixed.index(None) == 0
    with pytest.raises(ValueError, match="not strictly ascending"):
        rt.OpConfigs(("M",), ((64, 16),), params[:2], ("a", "b"), None)
    with pytest.raises(ValueError, match="for 4 buckets"):
        rt.OpConfigs(("M",), ((16, 64, 256, 1024),), params[:3], ("a", "b", "c"), None)


def test_a_missing_shape_or_key_value_serves_the_last_bucket_and_never_raises(tmp_path):
    d = rt.load_table(export_json("toy", bucketed([16, 64, 8192]), tmp_path / "b.json"))
    last = bucket_params("light", 2)
    for shape in (None, {}, {"N": 4096}, {"M": None}, {"M": "4096"}, {"M": object()}, {"M": [1, 2]}):
        assert d.config("qkv", shape) == last, shape
        assert d.config_name("qkv", shape) == "qkv-light@M65..8192"

    class Exploding(dict):
        def __getitem__(self, key):
            raise RuntimeError("no")

    assert d.config("qkv", Exploding()) == last


def test_a_nan_shape_serves_the_last_bucket_on_every_path(tmp_path):
    """NaN compares with nothing, so a bisect puts it in the first bucket (split-K at M..16
    here) where the docs promise a value that is not a number the last; the dispatcher's
    fast path, the entry's pick and name, and a two-dimensional key all agree."""
    nan = float("nan")
    d = rt.load_table(export_json("toy", bucketed([16, 64, 8192]), tmp_path / "b.json"))
    assert d.config("qkv", {"M": nan}) == bucket_params("light", 2) == d.config("qkv", {"M": float("inf")})
    assert d.config_name("qkv", {"M": nan}) == "qkv-light@M65..8192"
    two = rt.OpConfigs(("B", "L"), ((8, 64), (1024, 4096)), tuple({"i": i} for i in range(4)),
                       tuple(f"c{i}" for i in range(4)), None)
    assert two.pick({"B": nan, "L": 100}) == {"i": 2} and two.pick({"B": 1, "L": nan}) == {"i": 1}


def test_numbers_written_as_text_are_read_as_numbers_with_one_warning_per_operator(tmp_path, caplog):
    """``config("down", {"M": "4"})`` used to serve the last bucket silently (a prefill
    config for a decode launch); now "4" is read as 4, and anything else that is not a
    number still gets the last bucket, each operator warned once."""
    edges = [16, 64, 8192]
    d = rt.load_table(export_json("toy", bucketed(edges) + bucketed(edges, op="o"), tmp_path / "b.json"))
    with caplog.at_level(logging.WARNING, "tuner.runtime"):
        assert d.config("qkv", {"M": "4"}) == bucket_params("light", 0) == d.config("qkv", {"M": 4})
        assert d.config("qkv", {"M": "100.0"}) == bucket_params("light", 2)
        assert d.config("qkv", {"M": 40.0}) == bucket_params("light", 1)  # a float is a number: no warning
        assert d.config("o", {"M": "four"}) == bucket_params("light", 2)
        assert d.config("o", {"M": "4"}) == bucket_params("light", 0)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "config('qkv', ...): shape {'M': '4'} has numbers written as text; read as numbers" in messages[0]
    assert "config('o', ...): shape {'M': 'four'} is not a mapping of M to numbers; serving the last bucket" \
        in messages[1]


def test_a_switch_never_asks_for_a_config_no_graph_captured(tmp_path):
    """An engine that declares vLLM-style capture sizes captures, at start-up, one graph per
    distinct graph_key over the regimes; then, whatever regime the dispatcher switches to,
    every padded decode step (13 sequences run as 16) finds its configs, as config() serves
    them, among the captured graphs. o holds the same configs in both regimes (stable);
    qkv differs per regime and bucket."""
    edges = [1, 4, 16, 8192]
    table_rows = bucketed(edges) + bucketed(edges, op="o")
    same = {(r.op, r.bucket): r.params for r in table_rows if r.regime == "light"}
    table_rows = [r if r.op == "qkv" else replace(r, params=same[(r.op, r.bucket)]) for r in table_rows]
    d = rt.load_table(export_json("toy", table_rows, tmp_path / "g.json"))
    sizes, dims = [1, 2, 4, 8, 16], {"qkv": "M", "o": "M"}
    listed = rt.graph_configs(d.table, sizes, dims)
    assert listed["qkv"][16] == {"light": bucket_params("light", 2), "heavy": bucket_params("heavy", 2)}
    assert rt.graph_stable(d.table, sizes, dims) == ("o",)
    captured = {rt.graph_key(d.table, regime, size, dims) for regime in d.table.regimes for size in sizes}
    for regime in ("heavy", "light", "heavy"):
        d.set_regime(regime)
        for step in range(1, 17):
            padded = next(s for s in sizes if s >= step)
            served = tuple((op, tuple(sorted((k, repr(v)) for k, v in d.config(op, {"M": padded}).items())))
                           for op in sorted(dims))
            assert served in captured, (regime, step)


def test_observations_that_are_not_finite_numbers_are_ignored_with_one_warning_each(exported, caplog):
    """A serving engine's bad reading (NaN, inf, a string) must not raise inside it:
    ignored, the estimates kept, one warning per kind of observation."""
    d = rt.load_table(exported)
    for i in range(20):
        d.observe_arrival(i / 10.0)
    d.observe_queue(7)
    d.observe_free_memory(1 << 30)
    before = d.load(now=1.9)
    with caplog.at_level(logging.WARNING, "tuner.runtime"):
        for bad in (float("nan"), float("inf"), "x", None, [1]):
            d.observe_queue(bad)  # type: ignore[arg-type]
            d.observe_free_memory(bad)  # type: ignore[arg-type]
            if bad is not None:  # None is "now" for an arrival
                d.observe_arrival(bad)  # type: ignore[arg-type]
    assert d.load(now=1.9) == before and before.queue_depth == 7 and before.free_memory == 1 << 30
    assert sorted(r.getMessage().split("(")[0] for r in caplog.records) == [
        "tuner.runtime: observe_arrival", "tuner.runtime: observe_free_memory", "tuner.runtime: observe_queue"]


def test_a_two_dimensional_key_picks_the_bucket_of_each_value(tmp_path):
    b_edges, l_edges = [1, 8, 64], [1024, 65536]
    table_rows = []
    for regime in TILES:
        for i, b in enumerate(b_edges):
            for j, l in enumerate(l_edges):
                bounds = {"B": [None if i == 0 else b_edges[i - 1], b], "L": [None if j == 0 else l_edges[j - 1], l]}
                table_rows.append(row(regime, "attn", bucket=i * 2 + j, bucket_bounds=bounds, config=f"s{i}{j}",
                                      params={"splits": 10 * i + j}))
    d = rt.load_table(export_json("toy", table_rows, tmp_path / "a.json"))
    for b in [0, 1, 2, 7, 8, 9, 63, 64, 65, 1000]:
        for l in [1, 1023, 1024, 1025, 65536, 10 ** 6]:
            expected = {"splits": 10 * bucket_of(b, b_edges) + bucket_of(l, l_edges)}
            assert d.config("attn", {"B": b, "L": l}) == expected, (b, l)
        assert d.config("attn", {"B": b}) == {"splits": 10 * bucket_of(b, b_edges) + 1}  # L missing: its last
    assert d.config("attn") == {"splits": 21}


def test_rows_read_from_sqlite_are_decoded_as_written_and_share_no_container(tmp_path):
    """Repeated JSON cells are parsed once per load; each row still gets its own values."""
    written = rows()  # the two ops of a regime have the same params, shape and realized rates
    table = rt.read_table(sqlite_table(tmp_path / "t.db", written))
    assert table.rows == tuple(written)
    first, second = table.regime_rows("light")
    for name in ("params", "shape", "realized_rates_rps"):
        assert getattr(first, name) == getattr(second, name)
        assert getattr(first, name) is not getattr(second, name), name
    bounded = rt.read_table(sqlite_table(tmp_path / "b.db", bucketed([16, 64], regimes=("light", "heavy"))))
    light, heavy = bounded.regime_rows("light")[1], bounded.regime_rows("heavy")[1]
    assert light.bucket_bounds == heavy.bucket_bounds == {"M": [16, 64]}
    assert light.bucket_bounds["M"] is not heavy.bucket_bounds["M"]


def test_the_precomputed_lookups_serve_what_the_bucket_rules_say_on_every_path(tmp_path):
    """The dispatcher's indexes (one and two key dimensions, a missing key, values off the
    index) give the bucket an independent scan gives, and the same as OpConfigs.pick."""
    b_edges, l_edges, m_edges = [1, 2, 4, 8, 16, 32, 64, 128], [16, 64, 256, 1024, 8192], [1, 16, 64, 8192]
    table_rows = bucketed(m_edges, regimes=("light",))
    for i, b in enumerate(b_edges):
        for j, l in enumerate(l_edges):
            bounds = {"B": [None if i == 0 else b_edges[i - 1], b], "L": [None if j == 0 else l_edges[j - 1], l]}
            table_rows.append(row("light", "attn", bucket=i * len(l_edges) + j, bucket_bounds=bounds,
                                  config=f"s{i}{j}", params={"splits": 100 * i + j}))
    d = rt.load_table(export_json("toy", table_rows, tmp_path / "a.json"))
    attn, qkv = d.table.configs["light"]["attn"], d.table.configs["light"]["qkv"]
    values = [0, 1, 2, 3, 15, 16, 17, 63, 64, 65, 128, 129, 1024, 8191, 8192, 8193, 10 ** 9, -1, -10 ** 9, 2.5, 16.0,
              64.000001, True, False, None, "x", [1], float("inf")]
    missing = object()

    def expected(value, edges):
        if value is missing or value is None or isinstance(value, (str, list)):
            return len(edges) - 1  # no value, or one the edges cannot be compared with: the last bucket
        return bucket_of(value, edges)

    for v in values + [missing]:
        shape = {} if v is missing else {"M": v}
        assert d.config("qkv", shape) is qkv.pick(shape) is qkv.params[expected(v, m_edges)], v
        for w in values + [missing]:
            shape = {"B": v, "L": w, "N": 7}
            if v is missing:
                del shape["B"]
            if w is missing:
                del shape["L"]
            want = attn.params[expected(v, b_edges) * len(l_edges) + expected(w, l_edges)]
            assert d.config("attn", shape) is attn.pick(shape) is want, (v, w)
    assert d.config("qkv") is d.config("qkv", None) is d.config("qkv", 5) is qkv.params[-1]
    assert d.config("attn") is d.config("attn", "BL") is attn.params[-1]


@pytest.mark.parametrize("damage, cause", [
    (lambda rs: rs[:1] + rs[2:], "are not 0..1"),
    (lambda rs: [rs[0], replace(rs[1], bucket_bounds=None), rs[2]], "malformed bucket bounds"),
    (lambda rs: [rs[0], replace(rs[1], bucket=2), replace(rs[2], bucket=1)], "out of order"),
    (lambda rs: [rs[0], replace(rs[1], bucket_bounds={"M": [20, 64]}), rs[2]],
     "does not start where the bucket before it ends"),
    (lambda rs: [rs[0], replace(rs[1], bucket_bounds={"M": [16, "x"]}), rs[2]], "malformed bucket bounds"),
    (lambda rs: [rs[0], replace(rs[1], bucket_bounds={"N": [16, 64]}), rs[2]], "malformed bucket bounds"),
    (lambda rs: [rs[0], replace(rs[1], bucket_bounds={"M": [16, 8192]}), rs[2]], "do not form a grid"),
])
def test_bucket_rows_that_do_not_form_a_grid_are_refused(tmp_path, caplog, damage, cause):
    table_rows = damage(bucketed([16, 64, 8192], regimes=("light",)))
    path = export_json("toy", table_rows, tmp_path / "bad.json")
    with pytest.raises(StorageError, match=cause) as info:
        rt.read_table(path)
    assert "\n" not in str(info.value)
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(path, fallback=FALLBACK)
    assert dict(d.config("qkv", {"M": 20})) == FALLBACK and cause in d.fallback_reason
    assert len(caplog.records) == 1 and "light/qkv" in caplog.records[0].getMessage()


# --- the load monitor and regime switching -------------------------------------------

def test_monitor_estimates_rate_and_burstiness():
    m = rt.LoadMonitor(alpha=0.05)
    for i in range(400):
        m.observe_arrival(i / 50.0)
    s = m.snapshot(now=399 / 50.0)
    assert s.rate_rps == pytest.approx(50.0, rel=1e-6) and s.burstiness == pytest.approx(0.0, abs=1e-6)
    assert m.snapshot(now=399 / 50.0 + 10.0).rate_rps < 0.2  # idle decays
    bursty = rt.LoadMonitor(alpha=0.05)
    t = 0.0
    for i in range(400):  # bursts of 10 back-to-back arrivals, 1 s apart
        t += 1.0 if i % 10 == 0 else 0.001
        bursty.observe_arrival(t)
    assert bursty.snapshot(now=t).burstiness > 1.5


def feed(d: rt.Dispatcher, rate: float, start: float, seconds: float, ticks_every: float = 0.5) -> tuple[float, list]:
    """Arrivals at ``rate`` from ``start``; a tick every ``ticks_every`` s. Returns (end, regimes at ticks)."""
    seen = []
    n = int(rate * seconds)
    next_tick = start + ticks_every
    t = start
    for i in range(n):
        t = start + i / rate
        d.observe_arrival(t)
        if t >= next_tick:
            seen.append(d.tick(now=t))
            next_tick += ticks_every
    return t, seen


def test_regime_changes_only_at_tick_and_with_hysteresis(exported):
    # The rates are the rows' regime_rate_rps (light 10/s, heavy 100/s): no problem file.
    d = rt.load_table(exported, confirm=2, margin=0.15)
    assert dict(d.table.rates) == RATES
    end, seen = feed(d, 10.0, 0.0, 20.0)
    assert set(seen) == {"light"}
    for i in range(1, 400):  # heavy traffic, no tick: the assignment does not move
        d.observe_arrival(end + i / 100.0)
    end += 399 / 100.0
    assert d.regime == "light" and dict(d.config("qkv")) == TILES["light"]
    assert d.tick(now=end) == "light"  # first tick asking for heavy: not yet confirmed
    assert d.tick(now=end) == "heavy"
    assert dict(d.config("qkv")) == TILES["heavy"] and dict(d.config("o")) == TILES["heavy"]
    # Hovering just under the boundary (sqrt(10*100) = 31.6/s) inside the band: stays heavy.
    end, seen = feed(d, 29.0, end + 1 / 29.0, 20.0)
    assert set(seen) == {"heavy"}
    end, seen = feed(d, 10.0, end + 0.1, 20.0)
    assert seen[-1] == "light"


def test_hysteresis_band_does_not_flap():
    c = rt.RateClassifier({"light": 10.0, "heavy": 100.0}, margin=0.15)
    snap = lambda rate: rt.LoadSnapshot(rate, 1.0, None, None, 100)
    assert c(snap(34.0), "light") == "light" and c(snap(34.0), "heavy") == "heavy"
    assert c(snap(37.0), "light") == "heavy" and c(snap(26.0), "heavy") == "light"


def test_regime_rates_given_override_the_tables(exported):
    d = rt.load_table(exported, regime_rates={"light": 1000.0, "heavy": 10_000.0}, confirm=1)
    feed(d, 500.0, 0.0, 4.0)
    assert d.regime == "light"  # 500/s is heavy by the table's rates, light by these


def test_without_rates_the_first_regime_is_served_until_set(tmp_path, caplog):
    with caplog.at_level(logging.INFO, LOGGER):
        d = rt.load_table(export_json("toy", rows(regime_rate_rps=None), tmp_path / "norates.json"))
    assert d.table.rates is None and any("regime_rate_rps" in r.getMessage() for r in caplog.records)
    feed(d, 500.0, 0.0, 2.0)
    assert d.regime == "light"
    d.set_regime("heavy")
    assert d.regime == "heavy"
    with pytest.raises(KeyError):
        d.set_regime("nope")


# --- safety --------------------------------------------------------------------------

def _missing(tmp_path: Path) -> Path:
    return tmp_path / "nope.db"


def _corrupt(tmp_path: Path) -> Path:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"SQLite format 3\x00" + os.urandom(2000))
    return path


def _garbage(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.json"
    path.write_text('{"schema_version": 1, "rows": [')
    return path


def _empty_file(tmp_path: Path) -> Path:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    return path


def _empty_table(tmp_path: Path) -> Path:
    return sqlite_table(tmp_path / "empty-table.db", [])


def _version_1_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "v1.db"
    write_version_1_database(f"sqlite:///{path}")  # the version-1 DDL: no bucket columns
    return path


def _version_1_json(tmp_path: Path) -> Path:
    return version_1_export(tmp_path / "v1.json")


def _newer_schema(tmp_path: Path) -> Path:
    path = sqlite_table(tmp_path / "new.db")
    with sqlite3.connect(path) as c:
        c.execute("UPDATE tuner_schema SET version = ?", (SCHEMA_VERSION + 1,))
    return path


def _newer_json(tmp_path: Path) -> Path:
    path = export_json("toy", rows(), tmp_path / "newer.json")
    document = json.loads(path.read_text())
    document["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(document))
    return path


def _other_device(tmp_path: Path) -> Path:
    return export_json("toy", rows(device="a100"), tmp_path / "a100.json")


@pytest.mark.parametrize("make, cause", [
    (_missing, "no such table file"), (_corrupt, "cannot"), (_garbage, "neither a SQLite database nor JSON"),
    (_empty_file, "is empty"), (_empty_table, "holds no row"),
    (_version_1_sqlite, f"schema version 1 found, this tuner reads and writes version {SCHEMA_VERSION}"),
    (_version_1_json, f"schema version 1 found, this tuner reads and writes version {SCHEMA_VERSION}"),
    (_newer_schema, f"schema version {SCHEMA_VERSION + 1} found"),
    (_newer_json, f"schema version {SCHEMA_VERSION + 1} found"), (_other_device, "tuned for device 'a100', not 'h100'"),
])
def test_a_bad_table_serves_the_fallback_with_one_warning(make, cause, tmp_path, caplog):
    source = make(tmp_path)
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(source, device="h100", fallback=FALLBACK)
        assert dict(d.config("qkv")) == FALLBACK and dict(d.config("anything")) == FALLBACK
        assert d.tick() is None and d.regime is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert cause in warnings[0].getMessage() and str(source.name) in warnings[0].getMessage()
    assert "\n" not in warnings[0].getMessage()
    assert cause in d.fallback_reason


@pytest.mark.parametrize("make, fix", [(_version_1_sqlite, "tuner tune --storage"),
                                       (_version_1_json, "tuner table export --format json")])
def test_a_version_1_table_is_refused_with_one_line_naming_the_fix(make, fix, tmp_path, caplog):
    source = make(tmp_path)
    with pytest.raises(SchemaMismatchError, match="schema version 1 found") as info:
        rt.read_table(source)
    assert fix in str(info.value)
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(source, fallback=FALLBACK)
    assert dict(d.config("qkv", {"M": 3})) == FALLBACK
    [warning] = caplog.records
    assert fix in warning.getMessage() and "\n" not in warning.getMessage()


def test_per_op_fallback_and_unknown_op_warns_once(exported, caplog):
    fallback = {"qkv": {"BLOCK_M": 1}, "*": {"BLOCK_M": 2}}
    bad = rt.load_table(exported.with_name("missing.json"), fallback=fallback)
    assert dict(bad.config("qkv")) == {"BLOCK_M": 1} and dict(bad.config("o")) == {"BLOCK_M": 2}
    d = rt.load_table(exported, fallback=fallback)
    caplog.clear()
    with caplog.at_level(logging.WARNING, LOGGER):
        for _ in range(5):
            assert dict(d.config("mlp")) == {"BLOCK_M": 2}
            assert dict(d.config("zzz")) == {"BLOCK_M": 2}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "'mlp'" in messages[0] and "'zzz'" in messages[1]


def test_a_failed_reload_keeps_the_table(exported, tmp_path, caplog):
    d = rt.load_table(exported, regime_rates={"light": 1.0, "heavy": 10.0})
    d.set_regime("heavy")
    with caplog.at_level(logging.WARNING, LOGGER):
        assert d.reload(tmp_path / "missing.json") is False
    assert len(caplog.records) == 1 and dict(d.config("qkv")) == TILES["heavy"]
    swapped = [row(r, op, params={**TILES[r], "BLOCK_M": 128}) for r in TILES for op in ("qkv", "o")]
    assert d.reload(export_json("toy", swapped, tmp_path / "new.json")) is True
    assert d.regime == "heavy" and d.config("qkv")["BLOCK_M"] == 128


# --- malformed rows: one warning naming the file, the row and the field ----------------

def _export_document(table_rows: list[TableRow] | None = None) -> dict:
    return json_document("toy", rows() if table_rows is None else table_rows)


def _block(field: str) -> str:
    """Where an export holds ``field``: a served one in ``rows``, the rest in ``details``."""
    return "rows" if field in SERVED_FIELDS else "details"


def _write(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))
    return path


def _set(index: int, field: str, value):
    def damage(document: dict) -> None:
        document[_block(field)][index][field] = value
    return damage


def _duplicate(document: dict) -> None:
    for block in ("rows", "details"):
        document[block].append(dict(document[block][1]))


DEEP = 5000  # past Python's recursion limit for the JSON parser


@pytest.mark.parametrize("damage, row, field, cause", [
    (_set(0, "regime", 7), "row 0", "'regime'", "must be a non-empty string, found the number 7"),
    (_set(2, "regime", None), "row 2", "'regime'", "must be a non-empty string, found null"),
    (_set(1, "regime", ""), "row 1", "'regime'", "must be a non-empty string, found the string ''"),
    (_set(1, "problem", {"name": "toy"}), "row 1 (light/o)", "'problem'", "found an object {'name': 'toy'}"),
    (_set(3, "op", {"a": [1, 2]}), "row 3", "'op'", "must be a non-empty string, found an object"),
    (_set(0, "regime_index", "0"), "row 0 (light/qkv)", "'regime_index'", "must be an integer, found the string '0'"),
    (_set(0, "bucket", 0.5), "row 0 (light/qkv)", "'bucket'", "must be an integer, found 0.5"),
    (_set(0, "bucket", True), "row 0 (light/qkv)", "'bucket'", "must be an integer, found True"),
    (_set(0, "params", [1, 2]), "row 0 (light/qkv)", "'params'", "must be an object"),
    (_set(0, "params", {"BLOCK_M": {"nested": 1}}), "row 0 (light/qkv)", "'params'", "found an object"),
    (_set(0, "params", {"BLOCK_M": float("nan")}), "row 0 (light/qkv)", "'params'", "not a finite number"),
    (_set(0, "bucket_bounds", "x"), "row 0 (light/qkv)", "'bucket_bounds'", "must be JSON text, found 'x'"),
    (_set(0, "bucket_bounds", [16, 64]), "row 0 (light/qkv)", "'bucket_bounds'", "must be an object or null"),
    (_set(0, "bucket_bounds", {"M": 16}), "row 0 (light/qkv)", "'bucket_bounds'", "to [low, high]"),
    (_set(0, "regime_rate_rps", -1), "row 0 (light/qkv)", "'regime_rate_rps'", "finite number > 0 or null"),
    (_set(0, "regime_rate_rps", "fast"), "row 0 (light/qkv)", "'regime_rate_rps'", "found the string 'fast'"),
    (_set(1, "regime_rate_rps", 11.0), "row 1 (light/o)", "'regime_rate_rps'", "but row 0 of regime 'light' has"),
    (lambda d: [r.update(regime_rate_rps=None) for r in d["rows"][2:]], "row 2 (heavy/qkv)", "'regime_rate_rps'",
     "is null while regime 'light' has one: the rate classifier could not place regime 'heavy'"),
    (_set(1, "regime_index", 5), "row 1 (light/o)", "'regime_index'", "the rows of regime 'light' must agree"),
    (lambda d: d["rows"][0].pop("device"), "row 0 (light/qkv)", "'device'", "is missing"),
    (lambda d: d["rows"].__setitem__(1, 42), "row 1", "", "a table row is a mapping"),
    (_set(0, "params", "DEEP"), "row 0", "'params'", f"nests {DEEP + 3} levels deep"),
    (lambda d: d["rows"].append(d["rows"][0].update(regime="r" * 10_000) or dict(d["rows"][0])), "'rrrrrrrrrr",
     "/qkv: rows 0 and 4", "are both bucket 0"),  # a name is capped too
    (lambda d: d["rows"][0].update(regime="r" * 10_000, bucket=0.5), "row 0 ('rrrrrrrrrr", "'bucket'",
     "must be an integer"),
])
def test_a_malformed_row_is_one_warning_naming_the_file_row_and_field(tmp_path, caplog, damage, row, field, cause):
    document = _export_document()
    damage(document)
    text = json.dumps(document).replace('"DEEP"', "[" * DEEP + "]" * DEEP)
    path = tmp_path / "damaged.json"
    path.write_text(text)
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(path, fallback=FALLBACK)
        assert dict(d.config("qkv", {"M": 20})) == FALLBACK and d.regime is None
    [warning] = caplog.records
    message = warning.getMessage()
    assert f"{path}: {row}" in message and field in message and cause in message, message
    assert "\n" not in message and len(message) < 300, message
    assert message.endswith(d.fallback_reason)


@pytest.mark.parametrize("damage, row, cause", [
    (_set(0, "created_at", "yesterday"), "row 0 (light/qkv)", "field 'created_at' must be an ISO 8601 time"),
    (_set(1, "shape", "x" * 10_000), "row 1 (light/o)", "field 'shape' must be JSON text"),
    (lambda d: d["details"][2].pop("goodput_rps"), "row 2 (heavy/qkv)", "field 'goodput_rps' is missing"),
])
def test_a_malformed_field_the_lookups_do_not_read_is_refused_where_it_is_read(tmp_path, caplog, damage, row,
                                                                                cause):
    """Provenance is decoded when first asked for (``Table.rows``), not at load: the
    configs serve, and reading the rows fails in one line naming the file, row and field."""
    document = _export_document()
    damage(document)
    path = _write(tmp_path / "damaged.json", document)
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(path, fallback=FALLBACK)
    assert not caplog.records and d.fallback_reason is None and d.config("qkv") == TILES["light"]
    with pytest.raises(StorageError) as raised:
        d.table.rows
    assert str(raised.value).startswith(f"{path}: {row}: {cause}") and "\n" not in str(raised.value)
    with pytest.raises(StorageError, match=re.escape(cause)):  # the failure is kept: the file is not read again
        d.table.regime_rows("light")


def _edited(change):
    """A text damage made by changing the parsed document (written back compact)."""
    def damage(text: str) -> str:
        document = json.loads(text)
        change(document)
        return json.dumps(document).replace('"DEEP"', "[" * DEEP + "]" * DEEP)
    return damage


@pytest.mark.parametrize("damage, cause", [
    (lambda t: t.replace('"goodput_rps": 3.5', '"goodput_rps": oops', 1),
     "cannot read what follows the rows (Expecting value: line 11 column"),  # (the first details line)
    (lambda t: t[:t.rindex("}")] + ', "rows": []}\n', "the document's key 'rows' appears twice"),
    (_edited(lambda d: d["details"].pop()), "'details' must be a list of one object per row (4), found 3 entries"),
    (_edited(lambda d: d.update(details={})), "'details' must be a list of one object per row (4), found a dict"),
    (_edited(lambda d: d["details"].__setitem__(2, [])), "row 2: its details must be an object, found list []"),
    (_edited(lambda d: d["rows"][1].update(goodput_rps=3.5)),
     "row 1: field 'goodput_rps' is both in 'rows' and in 'details'"),
    (_edited(_set(3, "shape", "DEEP")), f"row 3, field 'shape', nests {DEEP + 3} levels deep"),
])
def test_an_exports_details_are_parsed_when_first_asked_for(tmp_path, caplog, damage, cause):
    """A JSON export is parsed up to its ``details`` at load: damage after the rows does
    not stop the configs serving; reading the full rows fails in one line naming it, and
    ``requirements`` answers None with that line."""
    path = tmp_path / "table.json"
    path.write_text(damage(export_json("toy", rows(), path).read_text()))
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(path, fallback=FALLBACK)
        assert not caplog.records and d.config("qkv") == TILES["light"] and d.config_name("o") == "o-light"
        assert d.requirements("qkv") is None
    [warning] = caplog.records
    assert warning.getMessage().startswith(f"tuner.runtime: requirements() returns None: {path}: {cause}")
    with pytest.raises(StorageError) as raised:
        d.table.rows
    assert str(raised.value).startswith(f"{path}: {cause}") and "\n" not in str(raised.value)


def test_what_the_store_calls_served_is_what_a_lookup_reads():
    """The exporter puts SERVED_FIELDS in ``rows`` and the SQLite read selects them, in
    the order ServedRow takes them: the two must not drift apart."""
    from tuner.runtime.rows import ServedRow

    assert ServedRow._fields[:-1] == SERVED_FIELDS and ServedRow._fields[-1] == "at"


def test_an_export_cut_short_is_refused_at_load(tmp_path, caplog):
    """The details are parsed later, but a file cut anywhere (an interrupted copy) does
    not end its document: refused at load, not served from the rows before the cut."""
    text = export_json("toy", rows(), tmp_path / "table.json").read_text()
    cut = tmp_path / "cut.json"
    for at in (len(text) - 3, text.index('"details"') + 40):
        cut.write_text(text[:at])
        with caplog.at_level(logging.WARNING, LOGGER):
            caplog.clear()
            d = rt.load_table(cut, fallback=FALLBACK)
        assert d.table is None and dict(d.config("qkv")) == FALLBACK
        [warning] = caplog.records
        assert f"{cut}: neither a SQLite database nor JSON (" in warning.getMessage()


def test_an_export_in_any_key_order_or_without_details_reads_the_same_rows(tmp_path):
    """The exporter writes ``rows`` before ``details``; a file re-serialised with sorted
    keys (``jq -S``), and one written before the split (every field in ``rows``), hold
    the same table."""
    written = rows()
    document = _export_document(written)
    sorted_keys = _write(tmp_path / "sorted.json", document)
    sorted_keys.write_text(json.dumps(document, sort_keys=True, indent=1))
    joined = _write(tmp_path / "joined.json", {"schema_version": SCHEMA_VERSION, "problem": "toy",
                                                "rows": [r.to_dict() for r in written]})
    for path in (export_json("toy", written, tmp_path / "t.json"), sorted_keys, joined):
        d = rt.load_table(path)
        assert d.fallback_reason is None and d.config("o") == TILES["light"]
        assert list(d.table.rows) == written, path


def test_duplicate_rows_are_refused_naming_both(tmp_path, caplog):
    document = _export_document()
    _duplicate(document)  # (light, o, bucket 0) twice
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(_write(tmp_path / "dup.json", document), fallback=FALLBACK)
    [warning] = caplog.records
    assert "dup.json: light/o: rows 1 and 4 are both bucket 0" in warning.getMessage()
    assert dict(d.config("o")) == FALLBACK
    table_rows = bucketed([16, 64, 8192], regimes=("light",))
    table_rows.insert(2, replace(table_rows[1], params={"BLOCK_M": 1}))  # bucket 1 twice, differently
    d = rt.load_table(export_json("toy", table_rows, tmp_path / "dup2.json"), fallback=FALLBACK)
    assert "light/qkv: rows 1 and 2 are both bucket 1" in d.fallback_reason


def _with_key_twice(text: str, before: str, pair: str, at: int = 0) -> str:
    """``text`` with ``pair`` (``"config": "other"``) inserted before the ``at``-th ``before``."""
    index = -1
    for _ in range(at + 1):
        index = text.index(before, index + 1)
    return text[:index] + pair + ", " + text[index:]


@pytest.mark.parametrize("before, pair, where", [
    ('"config": ', '"config": "other"', "row 0 (light/qkv): key 'config' appears twice"),
    ('"BLOCK_M": ', '"BLOCK_M": 256', "row 0 (light/qkv), field 'params': key 'BLOCK_M' appears twice"),
    ('"rows": ', '"rows": []', "the document's key 'rows' appears twice"),
])
def test_a_key_written_twice_refuses_the_table_naming_it(tmp_path, caplog, before, pair, where):
    """Issue 39, item 2: JSON keeps the last of two equal keys, silently, so a row with
    ``config`` (or a parameter) twice was served as the second one said, and a second
    ``rows`` replaced the first. Now the table is refused, naming the row and key, and
    the fallback serves."""
    text = export_json("toy", rows(), tmp_path / "table.json").read_text()
    path = tmp_path / "twice.json"
    path.write_text(_with_key_twice(text, before, pair))
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(path, fallback=FALLBACK)
    assert d.table is None and dict(d.config("qkv")) == FALLBACK
    [warning] = caplog.records
    message = warning.getMessage()
    assert f"{path}: {where}" in message


def test_colons_inside_strings_are_not_taken_for_a_key_written_twice(tmp_path):
    """The cheap test (colons in the rows' text against the keys parsed) sends a file whose
    strings hold colons to the full check, which finds nothing: the table serves."""
    document = _export_document()
    document["rows"][0]["config"] = "tile: 64x64: split 4"
    d = rt.load_table(_write(tmp_path / "colons.json", document), fallback=FALLBACK)
    assert d.fallback_reason is None and d.table.rows[0].config == "tile: 64x64: split 4"


def test_a_key_written_twice_in_the_details_is_refused_when_they_are_read(tmp_path):
    text = export_json("toy", rows(), tmp_path / "table.json").read_text()
    path = tmp_path / "twice.json"
    path.write_text(_with_key_twice(text, '"goodput_rps": ', '"goodput_rps": 1e9'))
    d = rt.load_table(path, fallback=FALLBACK)
    assert d.fallback_reason is None  # the rows served are whole; the details are read when asked
    with pytest.raises(StorageError, match=r"the details of row 0: key 'goodput_rps' appears twice"):
        d.table.rows


def test_a_string_schema_version_is_reported_as_a_malformed_export(tmp_path, caplog):
    document = _export_document()
    document["schema_version"] = "1"
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(_write(tmp_path / "v.json", document), fallback=FALLBACK)
    [warning] = caplog.records
    assert warning.getMessage().endswith("v.json: schema_version must be an integer, found the string '1'")
    assert dict(d.config("qkv")) == FALLBACK


def test_nesting_past_the_json_parser_outside_the_rows_names_the_key(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"schema_version": 3, "problem": ' + "[" * DEEP + "]" * DEEP + ', "rows": []}')
    d = rt.load_table(path, fallback=FALLBACK)
    assert d.fallback_reason == f"{path}: the value of 'problem' nests {DEEP + 1} levels deep, deeper than Python's JSON parser reads"


def test_a_malformed_sqlite_row_is_named_too(tmp_path):
    path = sqlite_table(tmp_path / "t.db")
    with sqlite3.connect(path) as c:  # SQLite's columns take any type
        c.execute("UPDATE tuner_configs SET op_index = 'first', params = '{\"BLOCK_M\": ' WHERE op = 'o' "
                  "AND regime = 'heavy'")
    d = rt.load_table(path, fallback=FALLBACK)
    assert "t.db: row " in d.fallback_reason and "(heavy/o): field 'params' must be JSON text" in d.fallback_reason
    with sqlite3.connect(path) as c:
        c.execute("UPDATE tuner_configs SET params = '{}'")
    assert "(heavy/o): field 'op_index' must be an integer, found the string 'first'" in \
        rt.load_table(path).fallback_reason


def test_regime_rates_that_leave_a_table_regime_unplaced_warn(exported, caplog):
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(exported, regime_rates={"light": 1.0})
    [warning] = caplog.records
    assert "regime_rates gives no rate for heavy" in warning.getMessage() and d.regime == "light"


BAD_ARGUMENTS = [
    ({"fallback": 1}, TypeError, "fallback must be a mapping"),
    ({"fallback": "BLOCK_M=64"}, TypeError, "fallback must be a mapping"),
    ({"fallback": [("BLOCK_M", 64)]}, TypeError, "fallback must be a mapping"),
    ({"fallback": {1: 64}}, TypeError, "fallback: names must be strings"),
    ({"fallback": {"qkv": {2: 1}}}, TypeError, "fallback['qkv']: names must be strings"),
    ({"fallback": {"qkv": {"BLOCK_M": 1}, "BLOCK_N": 2}}, ValueError, "mixes per-operator mappings"),
    ({"problem": 3}, TypeError, "problem must be a string"),
    ({"device": ["h100"]}, TypeError, "device must be a string"),
    ({"confirm": 0}, ValueError, "confirm must be at least 1"),
    ({"confirm": 2.5}, TypeError, "confirm must be an integer"),
    ({"margin": 1.5}, ValueError, "margin must be in [0, 1)"),
    ({"margin": "0.1"}, TypeError, "margin must be a number"),
    ({"alpha": 0}, ValueError, "alpha must be in (0, 1]"),
    ({"regime_rates": {}}, ValueError, "regime_rates is empty"),
    ({"regime_rates": {"light": -1.0}}, ValueError, "regime_rates['light'] must be a finite number > 0"),
    ({"regime_rates": [1.0, 2.0]}, TypeError, "regime_rates must map"),
    ({"classifier": "rate"}, TypeError, "classifier must be a callable"),
    ({"initial_regime": 0}, TypeError, "initial_regime must be a string"),
    ({"clock": 0.0}, TypeError, "clock must be a callable"),
    ({"fallbak": {}}, TypeError, "unknown option 'fallbak'"),
    ({"reader": print}, TypeError, "unknown option 'reader'"),
]


@pytest.mark.parametrize("table", ["good", "missing"])
@pytest.mark.parametrize("arguments, error, message", BAD_ARGUMENTS)
def test_bad_arguments_raise_whatever_the_table(exported, tmp_path, caplog, table, arguments, error, message):
    source = exported if table == "good" else tmp_path / "missing.json"
    with caplog.at_level(logging.WARNING, LOGGER), pytest.raises(error) as info:
        rt.load_table(source, **arguments)
    assert message in str(info.value)
    assert not caplog.records  # raised before the table is read: no warning about it


def test_a_source_that_is_not_a_path_raises():
    for source in (None, 3, b"table.json"):
        with pytest.raises(TypeError, match="source must be a path"):
            rt.load_table(source)  # type: ignore[arg-type]


def _mutations(rng: random.Random, document: dict) -> None:
    """One to three JSON-ish changes to an export: a field set to another kind of value,
    dropped, or copied from another row; a row duplicated or replaced; a top-level key
    replaced."""
    def value(depth: int = 0):
        kind = rng.randrange(9)
        if kind == 0:
            return rng.choice([None, True, False, "", "1", "light", "qkv", "x" * 300, "{", "2026-13-01"])
        if kind == 1:
            return rng.choice([0, -1, 7, 2 ** 70, 0.5, -0.0, 1e308, float("nan"), float("inf")])
        if kind == 2 and depth < 3:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        if kind == 3 and depth < 3:
            return {rng.choice(["M", "a", "", "BLOCK_M"]): value(depth + 1) for _ in range(rng.randrange(3))}
        if kind == 4:
            return [rng.choice([None, 16, "16", 16.0, True]), rng.choice([64, "64", None, [64], {"M": 1}])]
        if kind == 5:
            return "DEEP"  # replaced in the text by nesting past the parser's limit
        return rng.choice([1, "a", {}, []])

    def objects(block: str) -> list[dict]:
        entries = document.get(block)
        return [r for r in entries if isinstance(r, dict)] if isinstance(entries, list) else []

    for _ in range(rng.randint(1, 3)):
        table = document.get("rows")
        records = objects("rows")
        kind = rng.randrange(8)
        field = rng.choice(ROW_FIELDS)
        owners = objects(_block(field)) or records  # (mostly where the exporter puts the field)
        if not records or kind == 0:
            document[rng.choice(["schema_version", "rows", "details", "problem"])] = value()
        elif kind == 1:
            rng.choice(owners)[field] = value()
        elif kind == 2:
            rng.choice(owners).pop(field, None)
        elif kind == 3:
            table.append(dict(rng.choice(records)))
        elif kind == 4:
            table[rng.randrange(len(table))] = value()
        elif kind == 7:
            details = document.get("details")
            if isinstance(details, list) and details:
                rng.choice([details.pop, lambda: details.append(dict(details[0])),
                            lambda: details.__setitem__(rng.randrange(len(details)), value())])()
        elif kind == 5:
            name = rng.choice(["regime", "op", "bucket", "regime_index", "op_index", "regime_rate_rps"])
            rng.choice(records)[name] = rng.choice(records).get(name)
        else:
            rng.choice(records)[rng.choice(["bucket_bounds", "params"])] = {rng.choice(["M", "BLOCK_M"]): value()}


def test_random_mutations_of_a_valid_export_never_raise(tmp_path, caplog):
    """Property: whatever a mutated export holds, ``load_table`` returns a dispatcher
    whose lookups never raise; a refused table logs exactly one warning line, naming the
    file; a served one serves only rows that passed the checks."""
    rng = random.Random(16)
    valid = _export_document(bucketed([16, 64, 8192]) + [row(r, "o") for r in TILES])
    path = tmp_path / "mutated.json"
    refused = lazy = 0
    for case in range(300):
        document = json.loads(json.dumps(valid))
        _mutations(rng, document)
        path.write_text(json.dumps(document).replace('"DEEP"', "[" * DEEP + "]" * DEEP))
        caplog.clear()
        with caplog.at_level(logging.WARNING, LOGGER):
            d = rt.load_table(path, fallback=FALLBACK)
            for shape in (None, {"M": 20}, {"M": 10 ** 6}, {"M": "x"}):
                d.config("qkv", shape), d.config("o", shape), d.config_name("qkv", shape)
            d.tick()
        warnings = [r.getMessage() for r in caplog.records]
        if d.table is None:
            refused += 1
            assert len(warnings) == 1 and str(path) in warnings[0] and "\n" not in warnings[0], (case, warnings)
            assert len(warnings[0]) < 400, (case, warnings[0])
            assert dict(d.config("qkv")) == FALLBACK
        else:
            try:
                full = d.table.rows
            except StorageError as exc:  # a field the lookups do not read: refused where it is read
                assert str(exc).startswith(f"{path}: ") and "\n" not in str(exc), (case, exc)
                assert "row " in str(exc) or "'details'" in str(exc) or "follows the rows" in str(exc), (case, exc)
                lazy += 1
                full = ()
            for served in full:
                assert type(served.regime) is str and served.regime and type(served.bucket) is int, (case, served)
    assert 150 < refused < 300 and lazy > 10, (refused, lazy)  # the mutations reach every outcome


# --- threads -------------------------------------------------------------------------

def test_lookups_and_observations_race_a_reload(tmp_path):
    edges = [16, 64, 8192]
    old_rows = bucketed(edges) + [row(r, "o") for r in TILES]
    new_rows = [replace(r, params={**r.params, "BLOCK_K": 128}) for r in old_rows]
    d = rt.load_table(export_json("toy", old_rows, tmp_path / "old.json"), confirm=1)
    new = export_json("toy", new_rows, tmp_path / "new.json")
    allowed = {}  # (op, bucket) -> every params a lookup may see: either table, either regime
    for r in old_rows + new_rows:
        allowed.setdefault((r.op, r.bucket), []).append(dict(r.params))
    errors: list[BaseException] = []
    bad: list[tuple] = []
    seen_k: set[int] = set()
    start, stop = threading.Barrier(9), threading.Event()

    def worker(k: int) -> None:
        try:
            start.wait()
            i = 0
            while not stop.is_set():
                i += 1
                d.observe_arrival()
                if i % 50 == 0:
                    d.observe_queue(i)
                    d.tick()
                m = (i * 37 + k) % 9000
                op, bucket = ("qkv", bucket_of(m, edges)) if i % 2 else ("o", 0)
                params = d.config(op, {"M": m})
                seen_k.add(params["BLOCK_K"])
                if dict(params) not in allowed[(op, bucket)]:
                    bad.append((op, m, dict(params)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    start.wait()
    time.sleep(0.05)
    assert d.reload(new)
    time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    assert not errors and not bad, bad[:3]
    assert 128 in seen_k and seen_k - {128}  # answers from both tables
    assert d.config("qkv", {"M": 20})["BLOCK_K"] == 128


# --- the public API and the decorator ------------------------------------------------

def test_public_api_and_light_import():
    assert set(rt.__all__) == {
        "Autotuned", "Dispatcher", "LaunchNeeds", "LoadMonitor", "LoadSnapshot", "OpConfigs", "RateClassifier",
        "Requirements", "Table", "autotune", "graph_configs", "graph_key", "graph_stable", "load_table", "read_table",
    }
    # Import tuner.runtime with the tuner package stubbed: nothing heavy may come in
    # through tuner.runtime itself.
    code = ("import sys, types; p = types.ModuleType('tuner'); p.__path__ = ['tuner']; sys.modules['tuner'] = p; "
            "import tuner.runtime; heavy = ('numpy', 'pydantic', 'yaml', 'sqlalchemy', 'optuna', 'torch', "
            "'triton', 'tuner.sim', 'tuner.problem'); print([m for m in heavy if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class Kernel:
    """A stand-in with a JITFunction's calling interface; records each launch."""

    def __init__(self, *arg_names: str) -> None:
        self.arg_names = arg_names
        self.calls: list[tuple] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs))


LAUNCHED = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_warps", "num_stages")


def launched_with(params: dict) -> dict:
    """What a launch passes from ``params``: the kernel's arguments and launch options (not
    planning parameters such as PERSISTENT)."""
    return {k: v for k, v in params.items() if k not in ("PERSISTENT", "FUSE_EPILOGUE")}


def test_autotune_passes_meta_parameters_and_launch_options(exported):
    d = rt.load_table(exported)
    fn = Kernel("a", "M", "N", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K")
    kernel = rt.autotune(op="qkv", key=["M", "N"], table=d)(fn)
    kernel[(4,)]("a", 64, 48)
    grid, args, kwargs = fn.calls[-1]
    assert grid == (4,) and args == ("a", 64, 48)
    expected = {k: v for k, v in TILES["light"].items() if k not in ("PERSISTENT", "FUSE_EPILOGUE")}
    assert kwargs == expected
    with pytest.raises(ValueError, match="BLOCK_M"):
        kernel[(4,)]("a", 64, 48, BLOCK_M=8)


def test_autotune_launches_each_m_with_its_buckets_config(tmp_path):
    edges = [16, 64, 8192]
    d = rt.load_table(export_json("toy", bucketed(edges), tmp_path / "b.json"))
    fn = Kernel("a", "M", "N", *LAUNCHED, "BUCKET")
    kernel = rt.autotune(op="qkv", key=["M", "N"], table=d)(fn)
    for m in [1, 16, 17, 64, 65, 8192, 10_000]:
        kernel[(1,)]("a", m, 48)  # positional
        kernel[(1,)]("a", N=48, M=m)  # by keyword
        expected = launched_with(bucket_params("light", bucket_of(m, edges)))
        assert fn.calls[-2][2] == expected and fn.calls[-1][2] == {"N": 48, "M": m, **expected}, m


def test_autotune_maps_a_key_dimension_to_an_argument_named_otherwise(tmp_path):
    edges = [16, 64, 8192]
    d = rt.load_table(export_json("toy", bucketed(edges), tmp_path / "b.json"))
    fn = Kernel("a", "num_tokens", "N", *LAUNCHED, "BUCKET")
    kernel = rt.autotune(op="qkv", key={"M": "num_tokens"}, table=d)(fn)
    assert kernel.shape("a", 40, 48) == {"M": 40}
    for m in [3, 40, 100]:
        kernel[(1,)]("a", m, 48)
        assert fn.calls[-1][2] == launched_with(bucket_params("light", bucket_of(m, edges)))
    with pytest.raises(ValueError, match="names no argument"):
        rt.autotune(op="qkv", key={"M": "tokens"}, table=d)(Kernel("a", "num_tokens"))


def test_autotune_warns_when_its_key_lacks_the_tables_bucket_dimension(tmp_path, caplog):
    d = rt.load_table(export_json("toy", bucketed([16, 64, 8192]), tmp_path / "b.json"))
    fn = Kernel("a", "N", "K", *LAUNCHED, "BUCKET")
    with caplog.at_level(logging.WARNING, LOGGER):
        kernel = rt.autotune(op="qkv", key=["N", "K"], table=d)(fn)
    [warning] = caplog.records
    assert "buckets 'qkv' by M" in warning.getMessage() and "last bucket" in warning.getMessage()
    kernel[(1,)]("a", 48, 64)
    assert fn.calls[-1][2] == launched_with(bucket_params("light", 2))


CHILD = r'''
import json, sys
import torch
import triton
import tuner.runtime as rt
from tuner.families.matmul.kernel import _matmul_kernel

d = rt.load_table(sys.argv[1])
launched = []

class Spy:
    def __init__(self, fn):
        self.fn, self.arg_names = fn, fn.arg_names
    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            launched.append({k: v for k, v in kwargs.items() if isinstance(v, (int, str, bool))})
            return self.fn[grid](*args, **kwargs)
        return launch

matmul = rt.autotune(op="qkv", key=["M", "N", "K"], table=d)(Spy(_matmul_kernel))
N, K = 48, 64
torch.manual_seed(0)
out = []
for M in (40, 80):
    a = torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(K, N, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]) * META["SPLIT_K"],)
    for regime in ("light", "heavy"):
        d.set_regime(regime)
        c = torch.empty(M, N, dtype=torch.float16)
        matmul[grid](a, b, c, a, M, N, K, EPILOGUE="none", APPLY_EPILOGUE=True)
        ref = a.float() @ b.float()
        out.append({"M": M, "regime": regime, "err": (c.float() - ref).abs().max().item(),
                    "launched": launched[-1]})
print(json.dumps(out))
'''


def test_autotune_launches_the_matmul_kernel_under_the_interpreter(tmp_path):
    # qkv has two buckets, M <= 64 and above, each with its own tiles per regime.
    variant = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "num_warps": 4, "num_stages": 2}
    tiles = {(r, 0): TILES[r] for r in TILES} | {(r, 1): {**TILES[r], **variant} for r in TILES}
    table_rows = [row(r, "qkv", bucket=i, bucket_bounds={"M": [None if i == 0 else 64, 64 if i == 0 else 8192]},
                      params=tiles[(r, i)]) for r in TILES for i in (0, 1)]
    exported = export_json("toy", table_rows, tmp_path / "mm.json")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", CHILD, str(exported)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == 4
    for result in results:
        assert result["err"] < 0.1, result
        params = tiles[(result["regime"], 0 if result["M"] <= 64 else 1)]
        table = {k: v for k, v in params.items() if k not in ("PERSISTENT", "FUSE_EPILOGUE")}
        assert {k: result["launched"][k] for k in table} == table


def test_importing_the_runtime_pulls_in_nothing_heavy():
    code = ("import sys, tuner.runtime; heavy = [m for m in ('numpy', 'pydantic', 'yaml', 'torch', 'triton', "
            "'optuna', 'sqlalchemy', 'tuner.sim', 'tuner.problem') if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_public_api_resolves():
    import tuner

    for name in tuner.__all__:
        assert getattr(tuner, name) is not None
