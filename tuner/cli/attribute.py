"""``tuner attribute``: which operator's (or, by bucket, which cell's) config change moved goodput."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import TunerError
from .group import DEFAULT_PROBLEM, main, one_line_errors, warn
from .params import MAX_SEEDS, SECONDS, SEEDS, Choice, Integer, Number

ASSIGNMENT_HELP = ("BASE and CAND are each a config table (a SQLite file, sqlite:/// URL or JSON export; "
                   "each regime uses its own rows, one per operator and shape bucket) or OP=CONFIG and "
                   "OP@BUCKET=CONFIG specs separated by spaces or ';' (quote them; unnamed operators and buckets "
                   "keep the default; 'default' alone is the default assignment).")


def common_options(min_seeds: int, why: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options ``attribute`` and ``gate`` share; ``--seeds`` is at least ``min_seeds``
    (``why``), refused as it is parsed: the gate needs two seeds, attribution one."""
    options = [
        click.option("--problem", type=click.Path(path_type=Path), default=None,
                     help=f"Problem file, or a bundled problem's name (default: {DEFAULT_PROBLEM.stem})."),
        click.option("--regime", "regimes", multiple=True, help="Regime (repeatable; default: all)."),
        click.option("--seeds", default=5, show_default=True, help="Paired workload seeds 0..K-1.",
                     type=Integer(minimum=min_seeds, maximum=MAX_SEEDS, why=why, why_maximum=SEEDS.why_maximum)),
        click.option("--horizon", type=SECONDS, default=None,
                     help="Measurement window in seconds (default: the regime's)."),
        click.option("--metric", type=Choice(["goodput", "capacity"]), default="goodput", show_default=True,
                     help="Compare goodput at each regime's rates, or capacity at the SLO (the highest rate meeting "
                          "the SLO's attainment target: independent of the window's length, about ten times the "
                          "simulations)."),
    ]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def load_inputs(problem: Path | None, base: str, cand: str, regimes: tuple[str, ...]):
    """What ``tuner attribute`` and ``tuner gate`` share: the problem (its warnings
    printed), the checked regimes, and BASE's and CAND's assignment per regime."""
    from ..attribution import assignments_per_regime, check_regimes
    from ..problem import load_problem

    loaded = load_problem(problem or DEFAULT_PROBLEM)
    warn(loaded.warnings)
    chosen = check_regimes(loaded, regimes)
    told = lambda message: warn([message])  # noqa: E731
    return (loaded, chosen, assignments_per_regime(loaded, base, chosen, "BASE", told),
            assignments_per_regime(loaded, cand, chosen, "CAND", told))


@main.command(epilog=ASSIGNMENT_HELP)
@click.argument("base")
@click.argument("cand")
@common_options(min_seeds=1)
@click.option("--confidence", default=0.95, show_default=True, type=Number(),
              help="Two-sided confidence of the intervals.")
@click.option("--by-bucket", is_flag=True,
              help="One substitution per changed (operator, bucket) cell, labelled OP@BUCKET, with a summary per "
                   "operator (default: one per changed operator, all its changed buckets together).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the waterfall.")
@one_line_errors
def attribute(base: str, cand: str, problem: Path | None, regimes: tuple[str, ...], seeds: int,
              horizon: float | None, metric: str, confidence: float, by_bucket: bool, as_json: bool) -> None:
    """Attribute CAND's goodput change against BASE to each operator's config change."""
    from ..attribution import attribute as run_attribution
    from ..problem.scenario import Scenario
    from ..attribution.render import attribution_to_dict, waterfall

    if not 0.5 <= confidence < 1:
        raise TunerError(f"--confidence must be in [0.5, 1) but got {confidence}")
    loaded, chosen, base_a, cand_a = load_inputs(problem, base, cand, regimes)
    results = [run_attribution(Scenario.of(loaded, r, range(seeds), horizon), base_a[r], cand_a[r], confidence,
                               by_bucket=by_bucket, metric=metric)
               for r in chosen]
    if as_json:
        click.echo(json.dumps({"problem": loaded.name,
                               "regimes": [attribution_to_dict(loaded, a) for a in results]}, indent=2))
        return
    waterfall(results)
