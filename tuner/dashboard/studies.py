"""The Optuna study behind a table row: its optimization history and parameter importances.

The history is Optuna's own figure (:mod:`optuna.visualization`), with THE baseline (the
per-bucket isolated-fastest assignment) added so a reader sees when the search passed it.
Importances are Optuna's PED-ANOVA, which needs only numpy (fANOVA would need
scikit-learn), over the study's parameters — one per searched (operator, bucket) cell —
drawn as bars of the most important cells.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

MIN_TRIALS_FOR_IMPORTANCE = 3


@dataclass(frozen=True)
class StudySummary:
    name: str
    study_id: int
    trials: int
    complete: int
    infeasible: int
    pruned: int
    params: tuple[str, ...]


def snapshot(storage, name: str):
    """An in-memory copy of the study ``name`` and its id in ``storage``, or None when it is
    not there.

    The figures are drawn from the copy: ``tuner tune --fresh`` may delete and recreate
    the stored study while a page renders, and a copy keeps the page consistent. A trial
    caught half-written is left out (it shows on the next view).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        stored = optuna.load_study(study_name=name, storage=storage)
        trials = stored.get_trials(deepcopy=False)
        study_id = stored._study_id
    except KeyError:  # no such study, or deleted while we read it
        return None
    copy = optuna.create_study(study_name=name, direction=stored.direction)
    for trial in trials:
        try:
            copy.add_trial(trial)
        except ValueError:  # read half-written: SQLite gives each query its own snapshot, so
            continue  # while tune commits a trial its state can arrive before its value
    return copy, study_id


def summary(study, study_id: int) -> StudySummary:
    """What a study page shows of an Optuna study: its trial counts by outcome."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    infeasible = sum(1 for t in complete if any(v > 0.0 for v in t.constraints.values()))
    params = tuple(dict.fromkeys(p for t in trials for p in t.params))
    return StudySummary(study.study_name, study_id, len(trials), len(complete), infeasible,
                        sum(1 for t in trials if t.state == TrialState.PRUNED), params)


def objective_label(objective: str, attainment_target: float | None = None) -> str:
    """What a study's trial values are: ``goodput`` or ``capacity at 90% SLO attainment``."""
    from .cells import capacity_label

    return capacity_label(attainment_target) if objective == "capacity" else objective


def history_figure(study, baseline: float | None, sources_label: str, objective: str = "goodput",
                   attainment_target: float | None = None):
    """Optuna's history of the study's objective, with THE baseline's value of that same
    objective (its goodput, or its capacity at the SLO for a capacity study) drawn in."""
    import optuna.visualization as vis

    from ..search.baselines import PER_BUCKET

    what = objective_label(objective, attainment_target)
    fig = vis.plot_optimization_history(study, target_name=f"{what} (req/s)")
    if baseline is not None:
        fig.add_hline(y=baseline, line={"dash": "dash", "color": "#d62728"},
                      annotation_text=f"{PER_BUCKET.label} {baseline:.3g} req/s",
                      annotation_position="bottom right")
    fig.update_layout(title=f"Optimization history of {study.study_name} ({what} simulated, {sources_label})",
                      xaxis_title="trial", yaxis_title=f"{what} (req/s), simulated", height=420)
    return fig


MAX_IMPORTANCE_BARS = 20  # a study searches one parameter per (operator, bucket) cell: hundreds on LLM problems


def searched(params: tuple[str, ...]) -> str:
    """The searched parameters by operator: ``stage``, ``qkv (15 buckets), o (15 buckets)``
    (Optuna's parameter names are ``op`` or ``op@BUCKET``)."""
    buckets: dict[str, int] = {}
    for name in params:
        op, at, _ = name.partition("@")
        buckets[op] = buckets.get(op, 0) + bool(at)
    return ", ".join(op if n == 0 else f"{op} ({n} bucket{'s' if n != 1 else ''})" for op, n in buckets.items())


def no_importance(study) -> str | None:
    """Why the study has no importances to draw, or None when it has: too few complete
    trials, a single parameter, or trials that all scored the same — then PED-ANOVA still
    returns numbers (every cell at the same full bar), but no parameter explains a
    difference that is not there."""
    from optuna.trial import TrialState

    info = summary(study, -1)
    if info.complete < MIN_TRIALS_FOR_IMPORTANCE or len(info.params) < 2:
        return (f"No importances: {info.complete} complete trials over {len(info.params)} parameter(s) "
                f"(needs ≥ {MIN_TRIALS_FOR_IMPORTANCE} and ≥ 2).")
    values = {t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    if len(values) == 1:
        return (f"All {info.complete} complete trials scored the same ({values.pop():.3g}): "
                "no importance to show.")
    return None


def importance_figure(study, objective: str = "goodput"):
    """PED-ANOVA importances of the searched cells (the most important
    :data:`MAX_IMPORTANCE_BARS`), or None when :func:`no_importance` says why not."""
    import optuna.importance
    import plotly.graph_objects as go
    from optuna.importance import PedAnovaImportanceEvaluator

    if no_importance(study) is not None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PED-ANOVA warns when quantiles select the same trials
        importances = optuna.importance.get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    shown = list(importances.items())[:MAX_IMPORTANCE_BARS][::-1]  # largest on top
    fig = go.Figure(go.Bar(x=[v for _, v in shown], y=[k for k, _ in shown], orientation="h",
                           marker={"color": "#1f77b4"}, hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    which = (f"the {len(shown)} most important of {len(importances)} searched cells" if len(importances) > len(shown)
             else "per searched cell")
    fig.update_layout(title=f"Importances for {objective} in {study.study_name} (PED-ANOVA), {which} (operator@bucket)",
                      xaxis_title="importance (share, 0–1)", yaxis_title="operator@bucket",
                      height=140 + 28 * len(shown), title_font_size=13)
    return fig
