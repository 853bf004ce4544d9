"""Measure the runtime's hot path and start-up against their targets.

    .venv/bin/python benchmarks/bench_runtime.py            # about a minute
    .venv/bin/python benchmarks/bench_runtime.py --quick    # fewer, shorter repeats (a few seconds)
    .venv/bin/python benchmarks/bench_runtime.py --json     # the same numbers as JSON

* Lookups, side by side in one run (the loops take turns, so a noisy machine slows them
  alike): a plain ``dict`` subscript, ``Dispatcher.config(op)`` for a one-bucket operator,
  and ``Dispatcher.config(op, {"M": m})`` for a 14-bucket operator (power-of-two edges
  1..8192) over varied M (log-uniform, every bucket hit). Each figure is the fastest
  repeat's ns per loop iteration (timeit's rule); every loop walks the same list of shapes, so the
  loop's own cost is in each figure alike (the empty loop is shown; net = minus it).
  Also, on the same loop: a two-dimensional operator (decode attention's ``{B, L}``: 8 x 10
  buckets, B 1..128, L 16..8192) over varied (B, L); and shapes missing the key (the last
  bucket): ``{N, K}`` without M for the 14-bucket operator, ``{B}`` without L for the
  two-dimensional one. Targets: each of these lookups <= 1 us and <= 5x the plain dict
  lookup. For reference (no target): ``config(op)`` with no shape for the 14-bucket operator,
  M above its last edge, and an operator whose edges go beyond the integer index
  (2**7..2**20), served by bisect alone;
* ``Dispatcher.requirements(op, {"M": m})`` for a 14-bucket split-K matmul over the same
  varied M, side by side with the lookups (target <= 2 us: it is memoised per (regime, op,
  shape)), and, for reference, the same computed afresh (the memo cleared);
* ``load_table`` of a 10,000-row table (20 regimes x 50 operators x 10 buckets), SQLite
  and JSON (target < 100 ms);
* ``import tuner.runtime`` in a fresh interpreter (target < 150 ms).

The shapes are built before timing: a caller building ``{"M": m}`` per launch pays about
one more dict display (``autotune`` does that for you).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tuner.runtime as rt  # noqa: E402
from tuner.store import Store, TableRow  # noqa: E402
from tuner.store.export import export_json  # noqa: E402
from tuner.store.row import bucket_label  # noqa: E402

from recorded import add_options, load_average, record  # noqa: E402

PARAMS = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
FOURTEEN = tuple(2 ** k for k in range(14))  # 1 .. 8192
BEYOND = tuple(2 ** k for k in range(7, 21))  # 128 .. 1048576: past the integer index, bisected
B_EDGES = tuple(2 ** k for k in range(8))  # 1 .. 128
L_EDGES = tuple(2 ** k for k in range(4, 14))  # 16 .. 8192


#: What a split-K matmul row carries for ``Dispatcher.requirements`` (schema version 4).
NEEDS = {"family": "matmul", "family_options": {"epilogue": "none", "dtype": "bf16"}, "sms": 132,
         "workspace_bytes": 0.0}
NEEDS_PARAMS = {**PARAMS, "SPLIT_K": 4, "PERSISTENT": False, "FUSE_EPILOGUE": True}


def table_row(regime: int, op: str, op_index: int, bucket: int, edges: tuple[int, ...] | None,
              bounds: dict | None = None, **needs: object) -> TableRow:
    if bounds is None and edges is not None:
        bounds = {"M": [None if bucket == 0 else edges[bucket - 1], edges[bucket]]}
    return TableRow(
        problem="bench", regime=f"r{regime}", op=op, bucket=bucket, bucket_bounds=bounds, regime_index=regime,
        op_index=op_index, config=f"c{regime}-{op}" + (f"@{bucket_label(bounds)}" if bounds else ""),
        params={**PARAMS, "BLOCK_M": 16 << (bucket % 4)},
        shape={"M": edges[bucket] if edges else 2048, "N": 4096, "K": 4096} if bounds is None or "M" in bounds
        else {dim: high for dim, (_, high) in bounds.items()}, device="h100", source="modeled",
        triton_version="3.9.0", kernel_source_hash=None, problem_hash="ab" * 32, study_name=f"tuner:bench:r{regime}",
        trial_number=1, seeds=3, horizon_s=60.0, goodput_rps=1.0, goodput_ci_rps=0.1, baseline_config="c0",
        baseline_goodput_rps=0.9, delta_ci_rps=0.05, one_config_goodput_rps=0.8, oracle_goodput_rps=None,
        regime_rate_rps=float(regime + 1), realized_rates_rps=[float(regime + 1)] * 3, warmup_s=6.0,
        overloaded_seeds=0, baseline_overloaded_seeds=0, objective="goodput", attainment_target=0.9,
        capacity_rps=2.0, capacity_ci_rps=0.2, baseline_capacity_rps=1.8, capacity_delta_ci_rps=0.1,
        one_config_capacity_rps=1.5, created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), **needs,
    )


def grid_bounds(b: int, l: int) -> dict[str, list[int | None]]:
    return {"B": [None if b == 0 else B_EDGES[b - 1], B_EDGES[b]], "L": [None if l == 0 else L_EDGES[l - 1], L_EDGES[l]]}


def lookup_rows() -> list[TableRow]:
    """One regime: a one-bucket operator, a 14-bucket one (1..8192), one beyond the index
    and a two-dimensional one (B x L, first dimension slowest)."""
    return ([table_row(0, "single", 0, 0, None)]
            + [table_row(0, "bucketed", 1, b, FOURTEEN) for b in range(len(FOURTEEN))]
            + [table_row(0, "beyond", 2, b, BEYOND) for b in range(len(BEYOND))]
            + [table_row(0, "attention", 3, b * len(L_EDGES) + l, None, grid_bounds(b, l))
               for b in range(len(B_EDGES)) for l in range(len(L_EDGES))]
            + [replace(table_row(0, "needs", 4, b, FOURTEEN, **NEEDS), params=NEEDS_PARAMS)
               for b in range(len(FOURTEEN))])


def large_rows(regimes: int = 20, ops: int = 50) -> list[TableRow]:
    edges = tuple(2 ** k for k in range(4, 14))  # 16 .. 8192: 10 buckets
    return [table_row(r, f"op{o}", o, b, edges) for r in range(regimes) for o in range(ops) for b in range(len(edges))]


def shapes(edges: tuple[int, ...], n: int = 1000, seed: int = 0) -> list[dict[str, int]]:
    """``n`` shapes with M log-uniform over 1..edges[-1]."""
    rng = random.Random(seed)
    top = math.log(edges[-1])
    return [{"M": max(1, round(math.exp(rng.uniform(0.0, top))))} for _ in range(n)]


def grid_shapes(n: int = 1000, seed: int = 1) -> list[dict[str, int]]:
    """``n`` shapes ``{B, L}``, each log-uniform over 1..its last edge."""
    rng = random.Random(seed)
    return [{"B": max(1, round(math.exp(rng.uniform(0.0, math.log(B_EDGES[-1]))))),
             "L": max(1, round(math.exp(rng.uniform(0.0, math.log(L_EDGES[-1])))))} for _ in range(n)]


def bucket_of(edges: tuple[int, ...], value: int | None) -> int:
    """The expected bucket, by the rule (first edge >= value; above the last, or no value: the last)."""
    return len(edges) - 1 if value is None else next((i for i, e in enumerate(edges) if value <= e), len(edges) - 1)


def bench_lookups(path: Path, repeats: int, rounds: int) -> dict[str, float]:
    """Fastest ns per loop iteration of each loop; the loops take turns within a repeat."""
    d = rt.load_table(path)
    assert d.fallback_reason is None, d.fallback_reason
    config = d.config
    plain = {"single": PARAMS, "bucketed": PARAMS, "beyond": PARAMS}
    varied, wide, grid = shapes(FOURTEEN), shapes(BEYOND), grid_shapes()
    no_m = [{"N": 4096, "K": s["M"]} for s in varied]  # the key dimension M missing: the last bucket
    no_l = [{"B": s["B"]} for s in grid]  # L missing: the last L bucket of B's row
    above = [{"M": FOURTEEN[-1] + s["M"]} for s in varied]  # above the last edge: the last bucket
    served = d.table.configs["r0"]
    # the benchmark measures the right thing: each shape gets its bucket's config
    for shape, missing, high in zip(varied, no_m, above):
        assert config("bucketed", shape) is served["bucketed"].params[bucket_of(FOURTEEN, shape["M"])]
        assert config("bucketed", missing) is config("bucketed") is served["bucketed"].params[-1]
        assert config("bucketed", high) is served["bucketed"].params[-1]
    for shape, missing in zip(grid, no_l):
        row = bucket_of(B_EDGES, shape["B"]) * len(L_EDGES)
        assert config("attention", shape) is served["attention"].params[row + bucket_of(L_EDGES, shape["L"])]
        assert config("attention", missing) is served["attention"].params[row + len(L_EDGES) - 1]

    def empty() -> None:
        for _ in range(rounds):
            for shape in varied:
                pass

    def dict_lookup() -> None:
        for _ in range(rounds):
            for shape in varied:
                plain["bucketed"]

    def lookup(op: str, shape: object) -> object:  # a dict lookup as a dispatcher is called
        return plain[op]

    def dict_called() -> None:
        for _ in range(rounds):
            for shape in varied:
                lookup("bucketed", shape)

    def one_bucket() -> None:
        for _ in range(rounds):
            for shape in varied:
                config("single")

    def bucketed() -> None:
        for _ in range(rounds):
            for shape in varied:
                config("bucketed", shape)

    def bisected() -> None:
        for _ in range(rounds):
            for shape in wide:
                config("beyond", shape)

    def two_dimensional() -> None:
        for _ in range(rounds):
            for shape in grid:
                config("attention", shape)

    def missing_key() -> None:
        for _ in range(rounds):
            for shape in no_m:
                config("bucketed", shape)

    def missing_second_key() -> None:
        for _ in range(rounds):
            for shape in no_l:
                config("attention", shape)

    def no_shape() -> None:
        for _ in range(rounds):
            for shape in varied:
                config("bucketed")

    def above_last() -> None:
        for _ in range(rounds):
            for shape in above:
                config("bucketed", shape)

    requirements = d.requirements
    for shape in varied:  # the benchmark measures the right thing: 4·SPLIT_K·M·N bytes of partials
        assert requirements("needs", shape).workspace_bytes == 4 * 4 * shape["M"] * 4096

    def needs() -> None:
        for _ in range(rounds):
            for shape in varied:
                requirements("needs", shape)

    def needs_afresh() -> None:
        memo = d._state.needs
        for shape in varied:
            memo.clear()
            requirements("needs", shape)

    loops = {"empty loop": empty, "plain dict": dict_lookup, CALLED: dict_called, "config(op), 1 bucket": one_bucket,
             "config(op, {M: m}), 14 buckets": bucketed, "config(op, {B: b, L: l}), 8 x 10 buckets": two_dimensional,
             "config(op, {N, K}), 14 buckets, M missing": missing_key,
             "config(op, {B: b}), 8 x 10 buckets, L missing": missing_second_key,
             "config(op), 14 buckets, no shape": no_shape, "config(op, {M: m}), 14 buckets, M above the last edge":
             above_last, "config(op, {M: m}), 14 buckets, bisect only": bisected,
             "requirements(op, {M: m}), 14 buckets": needs}
    calls = rounds * len(varied)
    samples: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(repeats):
        for name, loop in loops.items():
            t0 = time.perf_counter_ns()
            loop()
            samples[name].append((time.perf_counter_ns() - t0) / calls)
        t0 = time.perf_counter_ns()
        needs_afresh()
        samples.setdefault("requirements(op, {M: m}), computed afresh", []).append(
            (time.perf_counter_ns() - t0) / len(varied))
    # the fastest repeat, as timeit advises: slower ones measure other processes (the
    # loops take turns within a repeat, so each ratio compares like with like)
    return {name: min(values) for name, values in samples.items()}


def bench_parse(path: Path, repeats: int) -> float:
    """The median ms of ``json.loads`` of the whole file: what a load that parsed the
    details too would take before building anything (a load parses only ``rows``)."""
    data = path.read_bytes()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        json.loads(data)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def bench_load(path: Path, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        d = rt.load_table(path)
        samples.append(time.perf_counter() - t0)
        assert d.fallback_reason is None, d.fallback_reason
    return statistics.median(samples) * 1e3


IMPORT = "import time; t0 = time.perf_counter(); import tuner.runtime; print(time.perf_counter() - t0)"


def bench_import(repeats: int) -> float:
    samples = [float(subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, cwd=ROOT,
                                    check=True).stdout) for _ in range(repeats)]
    return statistics.median(samples) * 1e3


def measure(quick: bool) -> dict[str, object]:
    repeats, rounds = (5, 20) if quick else (31, 100)
    with tempfile.TemporaryDirectory() as tmp:
        lookups = bench_lookups(export_json("bench", lookup_rows(), Path(tmp) / "lookup.json"), repeats, rounds)
        rows = large_rows()
        db = Path(tmp) / "bench.db"
        with Store(f"sqlite:///{db}", create=True) as store:
            for regime in dict.fromkeys(r.regime for r in rows):
                store.replace_regime("bench", regime, [r for r in rows if r.regime == regime])
        js = export_json("bench", rows, Path(tmp) / "bench.json")
        load_repeats = 3 if quick else 7
        load_sqlite_ms, load_json_ms = bench_load(db, load_repeats), bench_load(js, load_repeats)
        json_parse_ms = bench_parse(js, load_repeats)
        json_mb = js.stat().st_size / 1e6
    import_ms = bench_import(3 if quick else 7)
    return {"python": sys.version.split()[0], "quick": quick, "lookup_ns": lookups, "table_rows": len(rows),
            "json_mb": json_mb, "load_sqlite_ms": load_sqlite_ms, "load_json_ms": load_json_ms,
            "json_parse_ms": json_parse_ms,
            "import_ms": import_ms}


#: The lookups with targets (each <= 1 us and <= 5x the dict behind a call), then those
#: measured for reference: (the report's name, its short name, the record's key).
TARGETED = (("Dispatcher.config(op), one bucket", "one bucket", "config(op), 1 bucket"),
            ("Dispatcher.config(op, {'M': m}), 14 buckets", "14 buckets", "config(op, {M: m}), 14 buckets"),
            ("Dispatcher.config(op, {'B': b, 'L': l}), 8 x 10 buckets", "8 x 10 buckets",
             "config(op, {B: b, L: l}), 8 x 10 buckets"),
            ("config(op, {'N', 'K'}), M missing (last bucket)", "M missing",
             "config(op, {N, K}), 14 buckets, M missing"),
            ("config(op, {'B': b}), L missing (last L bucket)", "L missing",
             "config(op, {B: b}), 8 x 10 buckets, L missing"))
REFERENCE = (("config(op), 14 buckets, no shape", "no shape", "config(op), 14 buckets, no shape"),
             ("config(op, {'M': m}), M above the last edge", "above the last edge",
              "config(op, {M: m}), 14 buckets, M above the last edge"),
             ("config(op, {'M': m}), 14 buckets, bisect only", "bisect only",
              "config(op, {M: m}), 14 buckets, bisect only"))
CALLED = "dict behind a call"


def report(result: dict[str, object]) -> tuple[list[tuple[str, str, str, bool | None]], bool]:
    ns: dict[str, float] = result["lookup_ns"]  # type: ignore[assignment]
    bare, loop_ns = ns["plain dict"], ns["empty loop"]
    called = ns.get(CALLED)  # (an older record has not this one)
    lines: list[tuple[str, str, str, bool | None]] = [("plain dict subscript, table[op]", f"{bare:.0f} ns", "", None)]
    if called is not None:
        lines.append(("dict behind a call, lookup(op, shape) -> table[op]", f"{called:.0f} ns", "", None))
    for group, targeted in ((TARGETED, True), (REFERENCE, False)):
        for name, short, key in group:
            if key not in ns:  # (an older record has not these)
                continue
            value = ns[key]
            lines.append((name, f"{value:.0f} ns", "<= 1000 ns" if targeted else "", value <= 1000 if targeted else None))
            if called is not None:
                lines.append((f"  {short} / dict behind a call", f"{value / called:.1f}x", "<= 5x" if targeted else "",
                              value <= 5 * called if targeted else None))
            lines.append((f"  {short} / plain dict subscript", f"{value / bare:.1f}x",
                          "<= 5x" if targeted and called is None else "",
                          value <= 5 * bare if targeted and called is None else None))
    bucketed = ns["config(op, {M: m}), 14 buckets"]
    lines.append(("net of the empty loop: 14 buckets / subscript", f"{bucketed - loop_ns:.0f} / {bare - loop_ns:.0f} ns",
                  "", None))
    key = "requirements(op, {M: m}), 14 buckets"
    if key in ns:  # (an older record has not these)
        fresh = ns["requirements(op, {M: m}), computed afresh"]
        lines += [("Dispatcher.requirements(op, {'M': m}), 14 buckets", f"{ns[key]:.0f} ns", "<= 2000 ns",
                   ns[key] <= 2000),
                  ("  requirements, computed afresh (memo cleared)", f"{fresh:.0f} ns", "", None)]
    lines += [
        (f"load_table, {result['table_rows']:,} rows, SQLite", f"{result['load_sqlite_ms']:.1f} ms", "< 100 ms",
         result["load_sqlite_ms"] < 100),  # type: ignore[operator]
        (f"load_table, {result['table_rows']:,} rows, JSON ({result['json_mb']:.1f} MB)",
         f"{result['load_json_ms']:.1f} ms", "< 100 ms", result["load_json_ms"] < 100),  # type: ignore[operator]
    ]
    if "json_parse_ms" in result:
        lines.append(("  json.loads of the whole file, for reference", f"{result['json_parse_ms']:.1f} ms", "", None))
    lines.append(("import tuner.runtime, fresh interpreter", f"{result['import_ms']:.0f} ms", "< 150 ms",
                  result["import_ms"] < 150))  # type: ignore[operator]
    return lines, all(ok for *_, ok in lines if ok is not None)


def markdown(result: dict[str, object]) -> str:
    """docs/runtime.md's table (benchmarks/figures.py renders it from the record)."""
    lines, _ = report(result)
    out = ["| measure | value | target |", "|---|---|---|"]
    for name, value, target, ok in lines:
        verdict = "" if ok is None else (": met" if ok else ": **missed**")
        out.append(f"| {name.strip()} | {value} | {target}{verdict} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats (numbers are rougher)")
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    add_options(parser)
    args = parser.parse_args(argv)
    before = load_average()
    result = measure(args.quick)
    lines, passed = report(result)
    full = {**result, "targets": [{"measure": name.strip(), "value": value, "target": target, "pass": ok}
                                  for name, value, target, ok in lines if ok is not None], "pass": passed}
    if args.record:
        record("bench_runtime", full, args.note, before)
    if args.json:
        print(json.dumps(full, indent=2))
    else:
        width = max(len(name) for name, *_ in lines)
        print(f"{'measure':<{width}}  {'value':>12}  {'target':<10}  pass")
        for name, value, target, ok in lines:
            print(f"{name:<{width}}  {value:>12}  {target:<10}  {'' if ok is None else ('PASS' if ok else 'FAIL')}")
        ns: dict[str, float] = result["lookup_ns"]  # type: ignore[assignment]
        print(f"(Python {result['python']}; ns per loop iteration, the fastest repeat (loads: the median); the empty loop over "
              f"the same shapes takes {ns['empty loop']:.0f} ns of each)")
        print("all targets met" if passed else "some targets missed (FAIL above)")
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
