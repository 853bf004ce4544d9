"""Issue 40's four answers on the measured H100 deployments, from their tuned studies.

For each shipped deployment (``scripts/make_deployments.py``: Llama-2-7B TP1,
CodeLlama-34B TP2, Mixtral-8x7B TP2, Llama-2-70B TP4 on H100 under vLLM V1) and
``llm_tp_overlap`` (Llama-3-70B over 8 H100s, continuous batching with SGLang's two-batch
overlap of the all-reduces, its knobs the overlap and the chunk size; an engine model not
calibrated on a measured run), tuned into a database by ``tuner tune`` (one study per
regime over the engine knobs and the kernel configs together), and per regime, on the
study's own seeds:

* (a) the engine's defaults (the measured runs' ``max_num_seqs`` 128 and
  ``max_num_batched_tokens`` 2048; llm_tp_overlap's file: the overlap on, 8192 tokens)
  with the per-bucket isolated-fastest configs: what a user runs today;
* (b) the knob setting a knob-only tuner would deploy: chosen across the regimes exactly
  as ``tuner tune`` chooses (:mod:`tuner.search.deployment`), but among the per-bucket
  isolated-fastest configs only (the study's first trials hold them under every setting);
* (c) the engine's defaults with the regime's best configs under them (the study's best
  trial with the default knobs);
* (d) what the table serves: its rows' configs under their ``engine_args``.

Each answer's capacity at the SLO (the highest rate at which 90% of requests meet it) with
its paired difference from (a) and the 95% interval over the seeds, and its p90 TTFT and
TPOT at the regime's own rate (mean over the seeds). Every figure is simulated (modeled
kernels, the engine model calibrated on the measured runs: docs/sim2real.md).

Usage::

    python benchmarks/bench_deployments.py --record            # results.db.example
    python benchmarks/bench_deployments.py --storage sqlite:///results.db --problem h100_llama2_7b_tp1
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from recorded import add_options, load_average, publish  # noqa: E402

PROCESSES = 2  # seeds simulated side by side (this machine's two cores)
DEPLOYMENTS = ("h100_llama2_7b_tp1", "h100_codellama34b_tp2", "h100_mixtral8x7b_tp2", "h100_llama2_70b_tp4",
               "llm_tp_overlap")
LABELS = ("(a) engine defaults, per-bucket isolated-fastest configs", "(b) knob-only tuner",
          "(c) engine defaults, tuned configs", "(d) the table: knobs and configs tuned together")


def four_answers(name: str, storage: str, progress=print) -> dict[str, Any]:
    """The four answers of every regime of the deployment ``name`` tuned in ``storage``."""
    from tuner.bundled import problem_file
    from tuner.search import parallel

    problem = parallel.load_for_tuning(problem_file(name), storage)
    with parallel.seed_pool(problem, storage, PROCESSES) as seed_runner:
        return _answers(problem, storage, progress, seed_runner)


def _answers(problem, storage: str, progress, seed_runner) -> dict[str, Any]:
    import optuna

    from tuner.problem.assignment import Assignment
    from tuner.search import PER_BUCKET, JointSpace, TuneSettings
    from tuner.search.deployment import choose_deployment
    from tuner.search.outcome import capacity_at_slo
    from tuner.search.ranking import select_best
    from tuner.search.settings import study_name
    from tuner.store import Store

    name = problem.name
    space = JointSpace.of(problem)
    axis = space.axis
    studies = {r: optuna.load_study(study_name=study_name(name, r), storage=storage) for r in problem.regimes}
    seeds = tuple(next(iter(studies.values())).user_attrs["seeds"])
    settings = TuneSettings(seeds=len(seeds), base_seed=seeds[0])
    memo: dict = {}

    def capacity(regime: str, key: tuple, assignment: Assignment):
        progress(f"{name}: capacity of {axis.text(key)} in {regime}")
        return capacity_at_slo(problem, regime, studies[regime], settings, key, assignment, capacities=memo,
                               seed_runner=seed_runner)

    trials = {r: s.get_trials(deepcopy=False) for r, s in studies.items()}
    per_bucket = PER_BUCKET.assignment(space)
    baseline_point = space.point_of(per_bucket)
    knob_only = {r: [t for t in ts if space.point(t.params) == baseline_point] for r, ts in trials.items()}
    b_key = choose_deployment(problem, knob_only, len(seeds), capacity).knobs
    with Store(storage) as store:
        rows = store.rows(name)
    out: dict[str, Any] = {}
    for regime in problem.regimes:
        mine = [row for row in rows if row.regime == regime]
        d_key = axis.key_of(_knob_values(mine[0].engine_args))
        tuned_under_defaults = select_best(space, trials[regime], len(seeds), knobs=axis.defaults)
        answers = [(axis.defaults, per_bucket), (b_key, per_bucket),
                   (axis.defaults, tuned_under_defaults.assignment if tuned_under_defaults else per_bucket),
                   (d_key, Assignment.from_rows(problem, mine, storage))]
        figures = [_figures(problem, regime, key, assignment, seeds, capacity) for key, assignment in answers]
        base, knob_only = figures[0]["capacity_values"], figures[1]["capacity_values"]
        for label, found in zip(LABELS, figures):
            found["answer"] = label
            found["capacity_delta"] = _paired(found["capacity_values"], base)
            found["capacity_delta_b"] = _paired(found["capacity_values"], knob_only)
        out[regime] = {"answers": figures, "rate_rps": problem.mean_rate(regime, seeds, problem.regimes[regime].horizon_s)}
    return {"regimes": out, "seeds": list(seeds), "defaults": axis.text(axis.defaults)}


def _knob_values(stored: dict | None) -> dict:
    """The rows' ``engine_args`` as knob values (capture sizes back to a tuple)."""
    stored = stored or {}
    return {name: tuple(value) if isinstance(value, list) else value for name, value in stored.items()}


def _figures(problem, regime: str, key: tuple, assignment, seeds, capacity) -> dict[str, Any]:
    from tuner.search import JointSpace
    from tuner.sim import simulate

    axis = JointSpace.of(problem).axis
    deployed = axis.variant(problem, key)
    found = capacity(regime, key, assignment)
    metrics = [simulate(deployed, assignment, regime, seed=seed).metrics for seed in seeds]
    return {
        "knobs": axis.text(key), "capacity_rps": found.mean if found.feasible else None,
        "capacity_values": list(found.values),
        "ttft_p90_ms": _mean_ms([m.ttft_p90_s for m in metrics]), "tpot_p90_ms": _mean_ms([m.tpot_p90_s for m in metrics]),
    }


def _mean_ms(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return 1e3 * statistics.fmean(known) if known else None


def _paired(after: list[float], before: list[float]) -> dict[str, float | None]:
    from tuner.stats import paired

    if len(after) != len(before) or not after:
        return {"mean": None, "half_width": None}
    delta = paired(after, before, 0.95)
    return {"mean": delta.mean, "half_width": delta.half_width}


def table(report: dict[str, Any]) -> str:
    """The README's first table: per deployment and regime the four answers' capacity at
    the SLO, (d)'s paired difference from (a), p90 TTFT / TPOT at the regime's rate under
    (a) and (d), and a verdict; gains first (largest first), then no difference."""
    lines = ["| deployment (H100) | regime | capacity at the SLO, req/s: (a) / (b) / (c) / (d) | "
             "(d) − (a), paired 95% CI | p90 TTFT / TPOT at the regime's rate, ms: (a) → (d) | verdict |",
             "|---|---|---|---|---|---|"]
    rows = []
    for name, found in report["deployments"].items():
        for regime, answers in found["regimes"].items():
            a, b, c, d = answers["answers"]
            rows.append((_verdict(a, b, d, len(found["seeds"])), name, regime, a, b, c, d))
    rows.sort(key=lambda row: (not row[0][0], -row[0][1]))
    for (gain, _, verdict), name, regime, a, b, c, d in rows:
        capacities = " / ".join(_rate(answer["capacity_rps"]) for answer in (a, b, c, d))
        delta = d["capacity_delta"]
        difference = "—" if delta["mean"] is None else _signed(delta)
        lines.append(f"| {name} | {regime} | {capacities} | {difference} | {_tails(a)} → {_tails(d)} | {verdict} |")
    return "\n".join(lines)


def _verdict(a: dict, b: dict, d: dict, seeds: int) -> tuple[bool, float, str]:
    """(significant gain, its share, the words): a gain of (d) over (a) beyond the paired
    interval, with the knobs that give it, and how (d) stands against (b) (whether the
    tuned configs add to the knob-only tuner's answer, each beyond its paired interval)."""
    low, high = _bounds(d["capacity_delta"])
    share = (d["capacity_rps"] / a["capacity_rps"] - 1.0) if a["capacity_rps"] and d["capacity_rps"] else 0.0
    over_b = d["capacity_delta_b"]
    low_b, high_b = _bounds(over_b)
    against_b = ("the configs add nothing beyond the knobs" if over_b["mean"] == 0 else
                 f"the tuned configs add {_signed(over_b)} req/s to (b)" if low_b is not None and low_b > 0 else
                 f"below (b) by {_signed(over_b)} req/s" if high_b is not None and high_b < 0 else
                 f"no different from (b) beyond the interval ({_signed(over_b)} req/s)")
    if low is None or low <= 0:
        kept = f"no difference: {d['knobs']} kept" if d["knobs"] == a["knobs"] else \
            f"no difference beyond the interval ({d['knobs']})"
        return False, 0.0, kept + ("" if over_b["mean"] == 0 else f"; {against_b}")
    return True, share, f"gain: {share:+.0%} capacity over {seeds} seeds ({d['knobs']}); {against_b}"


def _bounds(delta: dict) -> tuple[float | None, float | None]:
    """A paired difference's 95% interval (None, None without one)."""
    if delta["mean"] is None or delta["half_width"] is None:
        return None, None
    return delta["mean"] - delta["half_width"], delta["mean"] + delta["half_width"]


def _signed(delta: dict) -> str:
    """A paired difference as ``+0.5 ± 0.42`` (two significant figures)."""
    return f"{delta['mean']:+.2g}" + ("" if delta["half_width"] is None else f" ± {delta['half_width']:.2g}")


def _rate(value: float | None) -> str:
    return "infeasible" if value is None else f"{value:.3g}"


def _tails(answer: dict) -> str:
    ttft, tpot = answer["ttft_p90_ms"], answer["tpot_p90_ms"]
    return "—" if ttft is None or tpot is None else f"{ttft:.0f} / {tpot:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", default=f"sqlite:///{ROOT / 'results.db.example'}")
    parser.add_argument("--problem", action="append", help="a deployment (default: all four)")
    parser.add_argument("--json", action="store_true")
    add_options(parser)
    args = parser.parse_args(argv)
    before = load_average()
    names = args.problem or list(DEPLOYMENTS)
    report = {"deployments": {name: four_answers(name, args.storage, progress=lambda t: print(t, file=sys.stderr))
                              for name in names},
              "sim_processes": PROCESSES,
              "note": "simulated: modeled kernels, the vLLM engine model calibrated on the measured runs"}
    return publish("bench_deployments", report, args, before, table)


if __name__ == "__main__":
    sys.exit(main())
