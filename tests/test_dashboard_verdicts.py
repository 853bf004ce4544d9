"""The dashboard's first screen: problems ordered by their largest significant effect, a
verdict per regime in words, highlights only where a figure changes beyond its interval,
no importance chart for trials that all scored the same, and one digits rule for figures
with intervals."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from tests.conftest import schema_3_fields
from tests.test_dashboard_analysis import SEED, _board, _matrix, _row
from tuner.dashboard import verdicts
from tuner.stats import figure, percent


@pytest.mark.parametrize(("value", "half_width", "signed", "expected"), [
    (414.2, 104.0, True, "+414 ± 100"),  # "+414 ± 1e+02" with .3g/.2g
    (668.34, 183.92, False, "668 ± 180"),  # "668.34 ± 183.92" with two decimals
    (722.4, 2.3, True, "+722 ± 2.3"),
    (0.0403, 0.17, True, "+0.04 ± 0.17"),  # the interval sets the last digit shown
    (-9.49, 7.5, True, "-9.5 ± 7.5"),
    (0.00617, 3.2e-16, True, "+0.00617 ± 0"),  # float noise on seeds that agree: no 17 decimals
    (0.0, 0.0, True, "+0 ± 0"),
    (72.67, None, False, "72.7"), (488.0, None, False, "488"), (1.0, None, True, "+1"), (12345.6, None, False, "12346"),
])
def test_one_digits_rule_for_figures_and_intervals(value, half_width, signed, expected) -> None:
    assert figure(value, half_width, signed=signed) == expected
    assert "e+" not in figure(value * 1e3, half_width and half_width * 1e3) and "e-" not in figure(value / 1e3)


def test_percent_has_two_significant_digits() -> None:
    assert [percent(x) for x in (0.622, 0.022, -0.0177, 0.0)] == ["+62%", "+2.2%", "-1.8%", "+0%"]


def _regime(problem: str, regime: str, **fields):
    """One regime's single row: goodput 100 vs 100 (CI 5), capacity 200 vs 200 (CI 10),
    unless ``fields`` say otherwise."""
    base = dict(problem=problem, regime=regime, goodput_rps=100.0, goodput_ci_rps=5.0, baseline_goodput_rps=100.0,
                delta_ci_rps=5.0, study_name=f"tuner:{problem}:{regime}")
    figures = dict(capacity_rps=200.0, capacity_ci_rps=10.0, baseline_capacity_rps=200.0, capacity_delta_ci_rps=10.0,
                   overloaded_seeds=0, baseline_overloaded_seeds=0)
    figures.update({k: fields.pop(k) for k in list(fields) if k in figures})
    return _row(**{**base, **fields}, **schema_3_fields(**figures))


def test_significance_is_the_paired_interval_excluding_zero() -> None:
    gain = verdicts.effects([_regime("p", "r", capacity_rps=300.0, capacity_delta_ci_rps=20.0)])
    assert [(e.measure, e.significant, e.relative) for e in gain] == [("capacity", True, 0.5), ("goodput", False, 0.0)]
    within = verdicts.effects([_regime("p", "r", capacity_rps=205.0)])  # +5 ± 10
    assert not any(e.significant for e in within)
    agree = verdicts.effects([_regime("p", "r", capacity_rps=201.0, capacity_delta_ci_rps=0.0)])  # every seed +1
    assert agree[0].significant
    one_seed = verdicts.effects([_regime("p", "r", capacity_rps=300.0, capacity_delta_ci_rps=None)])
    assert not one_seed[0].significant
    zero = verdicts.effects([_regime("p", "r", baseline_goodput_rps=0.0, delta_ci_rps=2.0)])[1]
    assert zero.significant and zero.relative == math.inf and zero.text() == "goodput 100 vs 0 req/s"


def test_problems_are_ordered_by_their_largest_significant_effect() -> None:
    rows = [
        # first in the table, 1.000× everywhere: what the first screen used to show
        _regime("flat", "light"), _regime("flat", "heavy"),
        # a large goodput difference, but measured in an overloaded window: it does not rank
        _regime("window", "heavy", goodput_rps=200.0, overloaded_seeds=0, baseline_overloaded_seeds=3),
        # a small significant loss, and a large one that is not significant
        _regime("loss", "heavy", capacity_rps=190.0, capacity_delta_ci_rps=2.0),
        _regime("loss", "light", capacity_rps=100.0, capacity_delta_ci_rps=150.0),
        # the largest significant effect: +62% capacity, three regimes down
        _regime("gain", "light"), _regime("gain", "bursty"),
        _regime("gain", "heavy", capacity_rps=324.0, capacity_delta_ci_rps=11.0),
    ]
    assert verdicts.largest_effect([r for r in rows if r.problem == "gain"]) == pytest.approx(0.62)
    assert verdicts.largest_effect([r for r in rows if r.problem == "window"]) == 0.0
    assert verdicts.problem_order(rows) == ["gain", "loss", "flat", "window"]  # no effect: table order

    from tuner.dashboard.index import index_body

    html = index_body(_board(), rows)
    assert re.findall(r'<section class=problem id="table-(\w+)"', html) == ["gain", "loss", "flat", "window"]
    assert html.index("Problems, largest significant effect first: <a") < html.index('id="table-gain"')


def test_each_regime_has_a_verdict_in_words() -> None:
    gain = [_regime("p", "heavy", capacity_rps=324.0, capacity_delta_ci_rps=11.0, goodput_rps=180.0,
                    baseline_goodput_rps=0.0, delta_ci_rps=2.3, baseline_overloaded_seeds=3)]
    assert verdicts.kind(gain) == "gain"
    assert verdicts.verdict(gain, "memory: lean admits 2× more requests at once") == (
        "+62% capacity (324 vs 200 req/s); goodput 180 vs 0 req/s in an overloaded window — "
        "memory: lean admits 2× more requests at once")
    loss = [_regime("p", "heavy", capacity_rps=196.4, capacity_delta_ci_rps=1.5)]
    assert verdicts.kind(loss) == "loss" and verdicts.verdict(loss).startswith("-1.8% capacity (196 vs 200 req/s)")
    same = [_regime("p", "light")]
    assert verdicts.kind(same) == "none"
    assert verdicts.verdict(same) == "no significant difference: the same configs as the baseline"
    changed = [_regime("p", "light", op=op, config="b", baseline="a") for op in ("qkv", "o")] + [_regime("p", "light")]
    assert verdicts.verdict(changed) == "no significant difference (2 of 3 cells differ)"

    from tuner.dashboard.index import index_body

    html = index_body(_board(), [*gain, *[_regime("p", "light")]])
    items = dict(re.findall(r'<li class="\w+" data-regime="(\w+)"[^>]*>(.*?)</li>', html))
    assert re.sub(r"<[^>]+>", "", items["heavy"]).startswith("heavy: +62% capacity (324 vs 200 req/s)")
    assert re.sub(r"<[^>]+>", "", items["light"]) == (
        "light: no significant difference: the same configs as the baseline")


def test_only_differences_that_change_a_figure_are_highlighted() -> None:
    from tuner.dashboard.index import index_body

    rows = [_regime("p", "heavy", config="b", baseline="a", capacity_rps=300.0),  # +100 ± 10
            _regime("p", "light", config="b", baseline="a")]  # the same config change, no significant figure
    html = index_body(_board(), rows)
    cells = re.findall(r'<tr data-regime="(\w+)"><th class="regime">.*?<td class="([\w ]+)" data-op', html)
    assert cells == [("heavy", "differs significant"), ("light", "differs")]
    assert _matrix(html)["light"]["qkv"] == _matrix(html)["heavy"]["qkv"]  # both still say what changed
    from tuner.dashboard.render import STYLE

    assert ".differs.significant{background:#fde2c8}" in STYLE  # orange: a difference that changes a figure
    assert not re.search(r"(^|[}\n])\.differs\{[^}]*background", STYLE)  # a plain difference is not orange


def test_the_memory_mechanism_says_how_many_more_requests_fit() -> None:
    """The seed example: lean reserves no workspace, fast 2 GiB on each of 8 executors; the
    72 GiB budget less 40 GiB of weights holds 8 requests of 4 GiB beside lean, 4 beside fast."""
    from tuner.problem import load_problem
    from tuner.problem.assignment import Assignment

    problem = load_problem(SEED)
    lean, fast = (Assignment.uniform(problem, {"stage": problem.family_of("stage").find(name=name)})
                  for name in ("lean", "fast"))
    assert verdicts.memory_text(problem, lean, fast, "lean") == (
        "memory: lean admits 2× more requests at once (8 vs 4; workspace 0 GiB vs 16 GiB)")
    assert verdicts.memory_text(problem, fast, lean, "fast") == (
        "memory: fast admits 2× fewer requests at once (4 vs 8; workspace 16 GiB vs 0 GiB)")
    assert verdicts.memory_text(problem, lean, lean, "lean") is None
    board = SimpleNamespace(problem=lambda name: problem, assignment=lambda p, rows: lean, baseline=lambda p: fast,
                            cached=lambda key, compute: compute())
    rows = [_regime("seed_example", "heavy", op="stage", config="lean", baseline="fast")]
    short, full = verdicts.mechanism_text(board, rows)
    assert short == full == ("memory: lean admits 2× more requests at once (8 vs 4; workspace 0 GiB vs 16 GiB); "
                             "1 of 1 cells differ (stage)")


def _study(values: list[float]):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    it = iter(values)
    study.optimize(lambda t: (t.suggest_categorical("a", [0, 1]), t.suggest_categorical("b", [0, 1]), next(it))[2],
                   n_trials=len(values))
    return study


def test_no_importance_chart_when_every_trial_scored_the_same() -> None:
    from tuner.dashboard import studies

    flat = _study([8.65] * 6)
    assert studies.no_importance(flat) == "All 6 complete trials scored the same (8.65): no importance to show."
    assert studies.importance_figure(flat) is None
    varied = _study([1.0, 2.0, 3.0, 1.5, 2.5, 0.5])
    assert studies.no_importance(varied) is None and studies.importance_figure(varied) is not None
    assert studies.no_importance(_study([1.0, 2.0])).startswith("No importances: 2 complete trials")


def test_trials_that_differ_draw_the_most_important_cells() -> None:
    import optuna

    from tuner.dashboard import studies

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")  # 45 cells, as toy_embedder's 3 operators × 15 buckets
    study.optimize(lambda t: sum(t.suggest_categorical(f"op@{i}", [0, 1]) * (i + 1) for i in range(45)), n_trials=12)
    fig = studies.importance_figure(study)
    assert len(fig.data[0].y) == studies.MAX_IMPORTANCE_BARS == 20
    assert "the 20 most important of 45 searched cells" in fig.layout.title.text


def test_regimes_of_one_rate_share_one_label_on_the_load_plot() -> None:
    """moe_serving's heavy and heavy_uniform both run at 20 req/s: one band, one label, not two
    labels drawn over each other; neighbouring labels are staggered in height."""
    from tuner.dashboard.figures import sweep_figure
    from tuner.dashboard.sweep import Curve, RateBucket, Sweep

    buckets = (RateBucket("light", 5.0, 5.0), RateBucket("heavy", 20.0, 20.0), RateBucket("heavy_uniform", 20.0, 20.0))
    sweep = Sweep("p", "heavy", (2.5, 25.0), (1.0, 1.0), 2,
                  (Curve("tuned", ((2.5, 2.5), (20.0, 21.0))), Curve("base", ((2.5, 2.5), (19.0, 20.0)), True)),
                  buckets, ("declared",))
    labels = [(a.text, a.x, a.y) for a in sweep_figure(sweep).layout.annotations if a.yref == "paper"]
    assert labels == [("light", 5.0, 1.0), ("heavy, heavy_uniform", 20.0, 0.95)]
