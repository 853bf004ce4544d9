"""tuner.runtime: loading (SQLite, JSON), lookups, regime switching with hysteresis,
safety (every bad table serves the fallback with one warning), threads, and the
``autotune`` decorator on the real matmul kernel under the Triton interpreter (in a
child process: TRITON_INTERPRET must be set before Triton is first imported)."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

import tuner.runtime as rt
from tuner.store import SCHEMA_VERSION, Store, TableRow
from tuner.store.export import export_json

ROOT = Path(__file__).resolve().parents[1]
LOGGER = "tuner.runtime"

TILES = {
    "light": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3,
              "SPLIT_K": 1, "PERSISTENT": False, "FUSE_EPILOGUE": True},
    "heavy": {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 8, "num_stages": 2,
              "SPLIT_K": 1, "PERSISTENT": False, "FUSE_EPILOGUE": True},
}
FALLBACK = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}


def row(regime: str, op: str, *, problem: str = "toy", device: str = "h100", **changes) -> TableRow:
    values = {
        "problem": problem, "regime": regime, "op": op, "regime_index": list(TILES).index(regime),
        "op_index": {"qkv": 0, "o": 1}[op], "config": f"{op}-{regime}", "params": dict(TILES[regime]),
        "shape": {"M": 64, "N": 48, "K": 64}, "device": device, "source": "modeled", "triton_version": "3.9.0",
        "kernel_source_hash": None, "problem_hash": "ab" * 32, "study_name": f"tuner:{problem}:{regime}",
        "trial_number": 3, "seeds": 3, "horizon_s": 60.0, "goodput_rps": 3.5, "goodput_ci_rps": 0.25,
        "baseline_goodput_rps": 2.0, "oracle_goodput_rps": None,
        "created_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    }
    values.update(changes)
    return TableRow(**values)


def rows(**changes) -> list[TableRow]:
    return [row(r, op, **changes) for r in TILES for op in ("qkv", "o")]


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
    assert dict(d.config("o", {"M": 64})) == TILES["heavy"]


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


def test_regime_rates_from_a_problem_file():
    rates = rt.regime_rates_from_problem(ROOT / "search_spaces" / "seed_example.yaml")
    assert rates and all(v > 0 for v in rates.values())


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
    d = rt.load_table(exported, regime_rates={"light": 10.0, "heavy": 100.0}, confirm=2, margin=0.15)
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


def test_without_rates_the_first_regime_is_served_until_set(exported):
    d = rt.load_table(exported)
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


def _old_schema(tmp_path: Path) -> Path:
    path = sqlite_table(tmp_path / "old.db")
    with sqlite3.connect(path) as c:
        c.execute("UPDATE tuner_schema SET version = ?", (SCHEMA_VERSION + 1,))
    return path


def _old_json(tmp_path: Path) -> Path:
    path = export_json("toy", rows(), tmp_path / "old.json")
    document = json.loads(path.read_text())
    document["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(document))
    return path


def _other_device(tmp_path: Path) -> Path:
    return export_json("toy", rows(device="a100"), tmp_path / "a100.json")


@pytest.mark.parametrize("make, cause", [
    (_missing, "no such table file"), (_corrupt, "cannot"), (_garbage, "neither a SQLite database nor JSON"),
    (_empty_file, "is empty"), (_empty_table, "holds no row"), (_old_schema, "schema version 2 found"),
    (_old_json, "schema version 2 found"), (_other_device, "tuned for device 'a100', not 'h100'"),
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
    assert cause in d.fallback_reason


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


# --- threads -------------------------------------------------------------------------

def test_lookups_and_observations_race_a_reload(exported, tmp_path):
    d = rt.load_table(exported, regime_rates={"light": 10.0, "heavy": 100.0}, confirm=1)
    new_rows = [row(r, op, params={**TILES[r], "BLOCK_K": 128}) for r in TILES for op in ("qkv", "o")]
    new = export_json("toy", new_rows, tmp_path / "new.json")
    allowed = [dict(TILES[r]) for r in TILES] + [{**TILES[r], "BLOCK_K": 128} for r in TILES]
    errors: list[BaseException] = []
    bad: list[dict] = []
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
                params = d.config("qkv" if i % 2 else "o")
                seen_k.add(params["BLOCK_K"])
                if dict(params) not in allowed:
                    bad.append(dict(params))
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
    assert not errors and not bad
    assert 128 in seen_k and seen_k - {128}  # answers from both tables
    assert d.config("qkv")["BLOCK_K"] == 128


# --- the public API and the decorator ------------------------------------------------

def test_public_api_and_light_import():
    assert set(rt.__all__) == {
        "Autotuned", "Dispatcher", "LoadMonitor", "LoadSnapshot", "RateClassifier", "Table", "autotune",
        "load_table", "read_table", "regime_rates_from_problem",
    }
    # Import tuner.runtime with the tuner package stubbed (as a lazy tuner/__init__ would
    # make it): nothing heavy may come in through tuner.runtime itself.
    code = ("import sys, types; p = types.ModuleType('tuner'); p.__path__ = ['tuner']; sys.modules['tuner'] = p; "
            "import tuner.runtime; heavy = ('numpy', 'pydantic', 'yaml', 'sqlalchemy', 'optuna', 'torch', "
            "'triton', 'tuner.sim', 'tuner.problem'); print([m for m in heavy if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_autotune_passes_meta_parameters_and_launch_options(exported):
    d = rt.load_table(exported)
    calls = []

    class Kernel:  # a stand-in with a JITFunction's calling interface
        arg_names = ("a", "M", "N", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K")

        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((grid, args, kwargs))

    kernel = rt.autotune(op="qkv", key=["M", "N"], table=d)(Kernel())
    kernel[(4,)]("a", 64, 48)
    grid, args, kwargs = calls[-1]
    assert grid == (4,) and args == ("a", 64, 48)
    expected = {k: v for k, v in TILES["light"].items() if k not in ("PERSISTENT", "FUSE_EPILOGUE")}
    assert kwargs == expected
    with pytest.raises(ValueError, match="BLOCK_M"):
        kernel[(4,)]("a", 64, 48, BLOCK_M=8)


CHILD = r'''
import json, sys
import torch
import triton
import tuner.runtime as rt
from tuner.kernels.matmul import _matmul_kernel

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
M, N, K = 40, 48, 64
torch.manual_seed(0)
a = torch.randn(M, K, dtype=torch.float16)
b = torch.randn(K, N, dtype=torch.float16)
grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]) * META["SPLIT_K"],)
out = []
for regime in ("light", "heavy"):
    d.set_regime(regime)
    c = torch.empty(M, N, dtype=torch.float16)
    matmul[grid](a, b, c, a, M, N, K, EPILOGUE="none", APPLY_EPILOGUE=True)
    ref = a.float() @ b.float()
    out.append({"regime": regime, "err": (c.float() - ref).abs().max().item(), "launched": launched[-1]})
print(json.dumps(out))
'''


def test_autotune_launches_the_matmul_kernel_under_the_interpreter(exported):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", CHILD, str(exported)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for result in results:
        assert result["err"] < 0.1, result
        table = {k: v for k, v in TILES[result["regime"]].items() if k not in ("PERSISTENT", "FUSE_EPILOGUE")}
        assert {k: result["launched"][k] for k in table} == table


def test_importing_the_runtime_pulls_in_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, tuner.runtime; heavy = [m for m in ('numpy', 'pydantic', 'yaml', 'torch', 'triton', "
            "'optuna', 'sqlalchemy', 'tuner.sim', 'tuner.problem') if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_the_public_api_resolves():
    import tuner

    for name in tuner.__all__:
        assert getattr(tuner, name) is not None
