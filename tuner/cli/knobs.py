"""``tuner knobs``: what the engine's knobs alone give, against its defaults, per regime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .group import DEFAULT_PROBLEM, main, one_line_errors, warn
from .params import COUNT, SECONDS, SEEDS
from .progress import TerminalProgress


@main.command()
@click.argument("problem", type=click.Path(path_type=Path), required=False, metavar="[PROBLEM]")
@click.option("--regime", "regimes", multiple=True, help="Regime (repeatable; default: all).")
@click.option("--seeds", type=SEEDS, default=3, show_default=True,
              help="Paired workload seeds 0..K-1 (two at least for an interval).")
@click.option("--horizon", type=SECONDS, default=None, help="Measurement window in seconds (default: the regime's).")
@click.option("--tune", "tune_configs", is_flag=True,
              help="Also tune the configs under every combination (a study each, --trials trials): the four "
                   "answers (a) defaults, (b) best knobs, (c) tuned configs, (d) both.")
@click.option("--trials", type=COUNT, default=30, show_default=True, help="With --tune: trials per study.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@one_line_errors
def knobs(problem: Path | None, regimes: tuple[str, ...], seeds: int, horizon: float | None, tune_configs: bool,
          trials: int, as_json: bool, quiet: bool) -> None:
    """Every combination of the problem's service.knobs with the per-bucket isolated-fastest
    configs, against the engine's defaults (each list's first value), paired by seed:
    goodput at the regime's rate and capacity at the SLO: what the knobs alone give."""
    from ..problem import Scenario, load_problem
    from ..search.knob_sweep import sweep_knobs

    loaded = load_problem(problem or DEFAULT_PROBLEM)
    warn(loaded.warnings)
    chosen = list(regimes) or list(loaded.regimes)
    for name in chosen:
        loaded.regime(name)
    if tune_configs:
        _four(loaded, chosen, seeds, horizon, trials, as_json, quiet)
        return
    results: dict[str, Any] = {}
    capacities: dict = {}  # shared: regimes that differ only in load have one capacity per combination
    with TerminalProgress("tuner knobs", "combinations", quiet or as_json, transient=True) as shown:
        for name in chosen:
            shown.start(f"regime {name}")
            results[name] = sweep_knobs(Scenario.of(loaded, name, range(seeds), horizon), progress=shown.update,
                                        capacities=capacities)
    if as_json:
        click.echo(json.dumps({"problem": loaded.name, "seeds": seeds, "regimes": {
            name: [_answer_dict(answer) for answer in answers] for name, answers in results.items()}}, indent=2))
        return
    for name, answers in results.items():
        _print_regime(loaded, name, answers)


def _answer_dict(answer: Any) -> dict[str, Any]:
    from ..problem.knobs import shown

    return {
        "knobs": shown(answer.values), "default": answer.is_default,
        "goodput_rps": answer.goodput.mean, "goodput_ci_rps": answer.goodput.ci,
        "capacity_rps": answer.capacity.mean, "capacity_ci_rps": answer.capacity.ci,
        "capacity_lower_bound": answer.capacity.lower_bound,
        "goodput_delta_rps": None if answer.is_default else answer.goodput_delta.mean,
        "goodput_delta_ci_rps": None if answer.is_default else answer.goodput_delta.half_width,
        "capacity_delta_rps": None if answer.is_default else answer.capacity_delta.mean,
        "capacity_delta_ci_rps": None if answer.is_default else answer.capacity_delta.half_width,
    }


def _print_regime(problem: Any, regime: str, answers: list[Any]) -> None:
    from ..problem.knobs import settings_text
    from ..search.knob_sweep import best_by_capacity
    from ..stats import delta_text, figure

    click.echo(f"{problem.name} / {regime}: the per-bucket isolated-fastest configs under each knob combination "
               "(simulated; differences paired by seed against the defaults, the first line)")
    for answer in answers:
        knob_text = settings_text(answer.values)
        capacity = ("≥ " if answer.capacity.lower_bound else "") + figure(answer.capacity.mean, answer.capacity.ci)
        line = f"  {knob_text}: goodput {figure(answer.goodput.mean, answer.goodput.ci)}, capacity {capacity} req/s"
        if answer.is_default:
            line += "  (defaults)"
        else:
            line += (f"  (goodput {delta_text(answer.goodput_delta.mean, answer.goodput_delta.half_width)}, "
                     f"capacity {delta_text(answer.capacity_delta.mean, answer.capacity_delta.half_width)})")
        click.echo(line)
    best = best_by_capacity(answers)
    if best is answers[0]:
        click.echo("  best capacity: the defaults")
    else:
        low = best.capacity_delta.low
        verdict = ("a gain" if low is not None and low > 0 else
                   "not a significant gain (the paired interval includes 0)")
        click.echo(f"  best capacity: {settings_text(best.values)}: "
                   f"{delta_text(best.capacity_delta.mean, best.capacity_delta.half_width)} req/s, {verdict}")


def _four(problem: Any, regimes: list[str], seeds: int, horizon: float | None, trials: int, as_json: bool,
          quiet: bool) -> None:
    """``tuner knobs --tune``: issue 40's four answers per regime."""
    from ..processes import quiet_logs
    from ..search import TuneSettings
    from ..search.knob_sweep import four_answers

    quiet_logs()  # Optuna's line per trial
    settings = TuneSettings(trials=trials, seeds=seeds, horizon_s=horizon)
    found = {}
    with TerminalProgress("tuner knobs", "combinations tuned", quiet or as_json, transient=True) as shown:
        for name in regimes:
            shown.start(f"regime {name}")
            found[name] = four_answers(problem, name, settings, progress=shown.update)
    if as_json:
        click.echo(json.dumps({"problem": problem.name, "seeds": seeds, "trials": trials, "regimes": {
            name: _four_dict(problem, four) for name, four in found.items()}}, indent=2))
        return
    for name, four in found.items():
        _print_four(problem, four)


def _four_dict(problem: Any, four: Any) -> dict[str, Any]:
    from ..problem.knobs import shown

    rows = []
    for answer in four.answers:
        reference = answer is four.answers[0]
        delta = four.against_defaults(answer)
        rows.append({"answer": answer.label, "knobs": shown(answer.values),
                     "configs": answer.choice.assignment.as_dict(problem),
                     "capacity_rps": answer.capacity.mean, "capacity_ci_rps": answer.capacity.ci,
                     "goodput_rps": answer.choice.evaluation.mean,
                     "capacity_delta_rps": None if reference or not delta.values else delta.mean,
                     "capacity_delta_ci_rps": None if reference or not delta.values else delta.half_width})
    interaction = four.interaction()
    return {"answers": rows, "interaction_rps": interaction.mean, "interaction_ci_rps": interaction.half_width}


def _print_four(problem: Any, four: Any) -> None:
    from ..problem.knobs import settings_text
    from ..stats import delta_text, figure

    click.echo(f"{problem.name} / {four.regime}: capacity at the SLO (simulated; paired by seed against (a))")
    for answer in four.answers:
        knob_text = settings_text(answer.values)
        delta = four.against_defaults(answer)
        change = "" if answer is four.answers[0] else f"  {delta_text(delta.mean, delta.half_width)}"
        click.echo(f"  {answer.label}: {figure(answer.capacity.mean, answer.capacity.ci)} req/s{change}  [{knob_text}]")
    a, b, c, d = four.answers
    kernels_beyond = four.difference(d, b)
    interaction = four.interaction()
    low = kernels_beyond.low
    verdict = ("the tuned configs add to the best knobs" if low is not None and low > 0 else
               "the tuned configs add nothing significant beyond the best knobs")
    click.echo(f"  (d) − (b): {delta_text(kernels_beyond.mean, kernels_beyond.half_width)} req/s: {verdict}; "
               f"interaction (d) − (b) − (c) + (a): {delta_text(interaction.mean, interaction.half_width)} req/s")
