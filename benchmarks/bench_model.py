"""The analytic model against measured A100 GEMM times (vidur, Llama-2-7B, cuBLAS).

For every GEMM of a Llama-2-7B layer (QKV, O, gate+up, down) at 1–4096 tokens and
tensor-parallel degree 1, 2, 4, 8, the model times each config of a compact matmul space
(``tuner.profile.calibration.CALIBRATION_CONFIGS``: real plans of
``tuner.families.matmul.kernel.MatmulFamily``, real sm_80 compiled resources) and keeps the best —
what ``triton.autotune`` would pick — and compares it with the measured cuBLAS median.

1. Compile: every distinct launch once for sm_80, cached in SQLite
   (``benchmarks/data/compile_cache.db``, gitignored; about a minute the first time).
2. Fit: the efficiency factors on the TP-1 shapes at 1, 2, 4, … and 1.5 × powers of two
   (84 shapes), by least squares on log(modeled / measured).
3. Report: a table per GEMM × tokens (powers of two) at TP 1 with the fitted factors;
   the error distribution on the fit set, on all TP-1 shapes (175 token counts not
   fitted), and on TP 2/4/8 (held out: other N and K); the same with the committed
   defaults (``tuner.profile.model.DEFAULT``).

Usage::

    python benchmarks/bench_model.py                  # compile (cached), fit, report
    python benchmarks/bench_model.py --no-fit         # the committed defaults only
    python benchmarks/bench_model.py --json           # the numbers as JSON on stdout

Target: the best-config time within ±35 % of the measured median for at least 90 % of
the TP-1 shapes. Exit status 0; with ``--strict`` 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from tuner.profile import calibration as cal  # noqa: E402
from tuner.profile.devices import A100  # noqa: E402
from tuner.profile.model import DEFAULT, Efficiency  # noqa: E402

from recorded import add_options, load_average, record  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
CSV = DATA / "a100_llama2_7b_ops_vidur.csv"
CACHE_URL = f"sqlite:///{DATA / 'compile_cache.db'}"
TPS = (1, 2, 4, 8)
TOLERANCE = 0.35
TARGET_WITHIN = 0.90
OP_NAMES = {"qkv": "QKV", "o": "O", "up": "gate+up", "down": "down"}


def fit_tokens(tokens: set[int]) -> set[int]:
    """Powers of two and 1.5 × powers of two that the data has."""
    wanted = {2**i for i in range(13)} | {3 * 2**i for i in range(3, 11)}
    return tokens & wanted


def build_cases(measurements, workers: int, cache_url: str, quiet: bool):
    """Plan every config at every shape, compile what the cache lacks, attach resources."""
    from tuner.families.matmul.kernel import MatmulFamily
    from tuner.profile.cache import CompileCache

    family = MatmulFamily(dtype="fp16")
    cache = CompileCache(cache_url)
    launches, seen = [], set()
    for m in measurements:
        for config in cal.CALIBRATION_CONFIGS:
            if family.illegal(config, m.shape) is None:
                for launch in family.plan(config, m.shape, A100.sms).launches:
                    if launch.compile_key() not in seen:
                        seen.add(launch.compile_key())
                        launches.append(launch)

    def progress(done: int, total: int) -> None:
        if not quiet:
            print(f"\rcompiling for sm_80: {done}/{total}", end="", file=sys.stderr, flush=True)

    start = time.perf_counter()
    cache.warm(launches, A100, progress=progress, workers=workers)
    if not quiet:
        print(f" ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    cases = [(m, cal.candidates(family, cal.CALIBRATION_CONFIGS, m.shape, A100, cache)) for m in measurements]
    cache.close()
    return cases


def prune(cases, factors: Efficiency, keep: float = 1.6):
    """Each case's candidates within ``keep`` × its best at ``factors`` (speeds the fit)."""
    pruned = []
    for m, cands in cases:
        times = [cal.modeled_seconds(c, m.shape, A100, factors) for c in cands]
        best = min(times)
        pruned.append((m, [c for c, t in zip(cands, times) if t <= keep * best]))
    return pruned


def fit(cases, max_evaluations: int, quiet: bool) -> tuple[Efficiency, float]:
    """Two passes: fit on candidates pruned at the start, re-prune at the result, refit."""
    start = time.perf_counter()
    factors = DEFAULT
    for _ in range(2):
        factors = cal.calibrate(prune(cases, factors), A100, start=factors, max_evaluations=max_evaluations)
    if not quiet:
        print(f"fit: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return factors, time.perf_counter() - start


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.4f}"


def table(comparisons) -> str:
    lines = [f"{'GEMM':8} {'tokens':>6} {'M×N×K':>18} {'measured ms':>11} {'modeled ms':>10} {'error':>7}  best config"]
    for c in comparisons:
        m = c.measurement
        dims = f"{m.m}×{m.n}×{m.k}"
        lines.append(f"{OP_NAMES[m.op]:8} {m.tokens:6d} {dims:>18} {_ms(m.seconds):>11} {_ms(c.modeled_s):>10} "
                     f"{c.relative_error:+7.1%}  {c.best.label() if c.best else '-'}")
    return "\n".join(lines)


def distribution_line(name: str, s: cal.ErrorSummary) -> str:
    return (f"{name:26} n={s.count:4d}  median {s.median:6.1%}  p90 {s.p90:6.1%}  worst {s.worst:6.1%}  "
            f"within ±{s.tolerance:.0%} {s.within:6.1%}  bias {s.bias:+6.1%}")


def markdown(report: dict) -> str:
    """docs/analytic-model.md's error table (benchmarks/figures.py renders it from the record)."""
    lines = [f"| shapes | n | median | p90 | worst | within ±{report['tolerance']:.0%} | bias (median signed) |",
             "|---|---|---|---|---|---|---|"]
    for name, s in report["distribution"].items():
        lines.append(f"| {name} | {s['count']} | {s['median']:.1%} | {s['p90']:.1%} | {s['worst']:.1%} "
                     f"| {s['within']:.1%} | {s['bias']:+.1%} |")
    return "\n".join(lines)


def distributions(cases, factors: Efficiency, fit_set: set[int]) -> dict[str, cal.ErrorSummary]:
    comps = cal.compare(cases, A100, factors)
    groups: dict[str, list[float]] = {"TP 1 fit set": [], "TP 1 all": [], "TP 1 not fitted": []}
    for tp in TPS[1:]:
        groups[f"TP {tp} (held out)"] = []
    groups["TP 2/4/8 (held out)"] = []
    for c in comps:
        m, e = c.measurement, c.relative_error
        if m.tp == 1:
            groups["TP 1 all"].append(e)
            groups["TP 1 fit set" if m.tokens in fit_set else "TP 1 not fitted"].append(e)
        else:
            groups[f"TP {m.tp} (held out)"].append(e)
            groups["TP 2/4/8 (held out)"].append(e)
    return {name: cal.summarize(errors, TOLERANCE) for name, errors in groups.items() if errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-fit", action="store_true", help="report the committed defaults only")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--workers", type=int, default=2, help="compile processes (default 2)")
    parser.add_argument("--cache", default=CACHE_URL, help="compile cache database URL")
    parser.add_argument("--max-evaluations", type=int, default=300, help="loss evaluations per fit pass")
    add_options(parser)
    args = parser.parse_args(argv)
    before = load_average()

    measurements = cal.load_vidur(CSV, tps=TPS)
    cases = build_cases(measurements, args.workers, args.cache, quiet=args.json)
    fit_set = fit_tokens({m.tokens for m in measurements})
    fit_cases = [(m, c) for m, c in cases if m.tp == 1 and m.tokens in fit_set]

    report: dict = {"device": A100.name, "configs": len(cal.CALIBRATION_CONFIGS), "tolerance": TOLERANCE,
                    "defaults": asdict(DEFAULT)}
    if args.no_fit:
        factors = DEFAULT
    else:
        factors, seconds = fit(fit_cases, args.max_evaluations, quiet=args.json)
        report["fitted"] = asdict(factors)
        report["fit_seconds"] = seconds
    powers = [(m, c) for m, c in cases if m.tp == 1 and m.tokens & (m.tokens - 1) == 0]
    comps = cal.compare(powers, A100, factors)
    dist = distributions(cases, factors, fit_set)
    report["distribution"] = {name: asdict(s) for name, s in dist.items()}
    # the two groups the README quotes, under names a path can spell
    report["summary"] = {"tp1": report["distribution"]["TP 1 all"],
                         "held_out": report["distribution"]["TP 2/4/8 (held out)"]}
    defaults = None if args.no_fit else distributions(cases, DEFAULT, fit_set)
    if defaults is not None:
        report["distribution_defaults"] = {name: asdict(s) for name, s in defaults.items()}
    report["table"] = [{"op": c.measurement.op, "tokens": c.measurement.tokens,
                        "measured_ms": c.measurement.seconds * 1e3, "modeled_ms": c.modeled_s * 1e3,
                        "error": c.relative_error, "best": c.best.label() if c.best else None} for c in comps]
    met = dist["TP 1 all"].within >= TARGET_WITHIN
    report["target_met"] = met
    if args.record:
        record("bench_model" + ("_no_fit" if args.no_fit else ""), report, args.note, before)

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"A100-SXM4-80GB, Llama-2-7B GEMMs (vidur cuBLAS medians) vs the model's best of "
              f"{len(cal.CALIBRATION_CONFIGS)} matmul configs\n")
        shown = "  ".join(f"{n}={getattr(factors, n):.4g}" for n in cal.FITTED)
        print(f"factors ({'fitted on the TP-1 fit set' if not args.no_fit else 'committed defaults'}): {shown}\n")
        print(table(comps))
        print("\nrelative error |modeled / measured − 1|:")
        for name, s in dist.items():
            print("  " + distribution_line(name, s))
        if defaults is not None:
            print("\nwith the committed defaults (tuner.profile.model.DEFAULT):")
            for name, s in defaults.items():
                print("  " + distribution_line(name, s))
        print(f"\ntarget: ≥{TARGET_WITHIN:.0%} of TP-1 shapes within ±{TOLERANCE:.0%}: "
              f"{'met' if met else 'MISSED'} ({dist['TP 1 all'].within:.1%})")
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
