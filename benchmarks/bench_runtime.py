"""Measure the runtime's hot path and start-up against the targets of issue 5.

    .venv/bin/python benchmarks/bench_runtime.py

* ``Dispatcher.config`` lookup: median over batches of a loop doing it, beside the same
  loop doing a plain ``dict`` lookup (targets: <= 1 us, and within 5x of the dict). The
  net figures subtract an empty loop: a bare subscript is a few ns, any method call
  ~25 ns, so the net ratio says more about Python's call cost than about the dispatcher;
* ``load_table`` of a 10,000-row table, SQLite and JSON (target < 100 ms);
* ``import tuner.runtime`` in a fresh interpreter (target < 150 ms), as the package is
  today and with ``tuner/__init__`` stubbed out (what a lazy ``tuner/__init__`` would give).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tuner.runtime as rt
from tuner.store import Store, TableRow
from tuner.store.export import export_json

PARAMS = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}


def table_rows(regimes: int, ops: int) -> list[TableRow]:
    created = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [TableRow(
        problem="bench", regime=f"r{r}", op=f"op{o}", regime_index=r, op_index=o, config=f"c{r}-{o}",
        params={**PARAMS, "BLOCK_M": 16 << (o % 4)}, shape={"M": 2048, "N": 4096, "K": 4096}, device="h100",
        source="modeled", triton_version="3.9.0", kernel_source_hash=None, problem_hash="ab" * 32,
        study_name=f"tuner:bench:r{r}", trial_number=1, seeds=3, horizon_s=60.0, goodput_rps=1.0,
        goodput_ci_rps=0.1, baseline_goodput_rps=1.0, oracle_goodput_rps=None, created_at=created,
    ) for r in range(regimes) for o in range(ops)]


def per_call_ns(fn, n: int = 200_000, repeats: int = 15) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn(n)
        samples.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(samples)


def bench_lookup(path: Path) -> tuple[float, float, float]:
    """Per-iteration ns of a loop doing ``d.config(op)``, ``plain[op]``, and nothing."""
    d = rt.load_table(path)
    plain = {f"op{o}": PARAMS for o in range(50)}
    config = d.config

    def dispatcher_loop(n: int) -> None:
        for _ in range(n):
            config("op7")

    def dict_loop(n: int) -> None:
        for _ in range(n):
            plain["op7"]

    def empty_loop(n: int) -> None:
        for _ in range(n):
            pass

    return per_call_ns(dispatcher_loop), per_call_ns(dict_loop), per_call_ns(empty_loop)


def bench_load(path: Path, repeats: int = 7) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        d = rt.load_table(path)
        samples.append(time.perf_counter() - t0)
        assert d.fallback_reason is None, d.fallback_reason
    return statistics.median(samples) * 1e3


IMPORT = "import time; t0 = time.perf_counter(); {stub}import tuner.runtime; print(time.perf_counter() - t0)"
STUB = "import sys, types; p = types.ModuleType('tuner'); p.__path__ = ['tuner']; sys.modules['tuner'] = p; "


def bench_import(stub: bool, repeats: int = 5) -> float:
    code = IMPORT.format(stub=STUB if stub else "")
    samples = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                                    check=True).stdout) for _ in range(repeats)]
    return statistics.median(samples) * 1e3


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = table_rows(200, 50)  # 10,000 rows
        db = Path(tmp) / "bench.db"
        with Store(f"sqlite:///{db}", create=True) as store:
            for r in range(200):
                store.replace_regime("bench", f"r{r}", rows[r * 50:(r + 1) * 50])
        js = export_json("bench", rows, Path(tmp) / "bench.json")
        lookup_ns, dict_ns, loop_ns = bench_lookup(js)
        load_sqlite_ms, load_json_ms = bench_load(db), bench_load(js)
    import_ms, import_stub_ms = bench_import(False), bench_import(True)

    lines = [
        ("Dispatcher.config lookup (loop iteration)", f"{lookup_ns:.0f} ns", "<= 1000 ns", lookup_ns <= 1000),
        ("plain dict lookup (loop iteration, same run)", f"{dict_ns:.0f} ns", "", None),
        ("lookup / dict", f"{lookup_ns / dict_ns:.1f}x", "<= 5x", lookup_ns <= 5 * dict_ns),
        ("  net of the empty loop: config / dict", f"{lookup_ns - loop_ns:.0f}/{dict_ns - loop_ns:.0f} ns", "",
         None),
        ("load_table, 10,000 rows, SQLite", f"{load_sqlite_ms:.1f} ms", "< 100 ms", load_sqlite_ms < 100),
        ("load_table, 10,000 rows, JSON", f"{load_json_ms:.1f} ms", "< 100 ms", load_json_ms < 100),
        ("import tuner.runtime (as is)", f"{import_ms:.0f} ms", "< 150 ms", import_ms < 150),
        ("import tuner.runtime (tuner/__init__ stubbed)", f"{import_stub_ms:.0f} ms", "< 150 ms",
         import_stub_ms < 150),
    ]
    width = max(len(name) for name, *_ in lines)
    print(f"{'measure':<{width}}  {'value':>10}  {'target':<10}  ok")
    for name, value, target, ok in lines:
        print(f"{name:<{width}}  {value:>10}  {target:<10}  {'' if ok is None else ('yes' if ok else 'NO')}")
    print(f"(Python {sys.version.split()[0]}; a loop iteration includes the for-loop's own cost, "
          f"{loop_ns:.0f} ns here)")


if __name__ == "__main__":
    main()
