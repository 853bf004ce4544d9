"""Fitting the step coefficients (:class:`~tuner.engine.step_cost.StepCoefficients`) on
measured runs, and the predicted-against-measured figures of a run.

Why this works with least squares: with the schedule held fixed, every request's latency
is a sum of step times (the step in flight at its arrival counted from the arrival on),
and a step's time is linear in the coefficients, so a stage's mean TTFT, mean end-to-end
latency and mean TPOT are linear in them too. The fit alternates: replay every run with
the current coefficients, write each stage's three means as linear functions of the
coefficients, solve non-negative least squares on their relative errors, and replay
again, until the coefficients settle (the schedule moves less at each round).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from ..profile.devices import PRESETS
from ..profile.interconnect import NVLINK4
from .measured_run import METRICS, MeasuredRun, gpu_preset_name
from .replay import Replay, percentiles, replay
from .step_cost import FEATURES, StepCoefficients, StepCost

#: How much each metric's relative error weighs in the fit: TTFT is a few steps and the
#: client's own overhead, so its relative error is allowed to be larger.
WEIGHTS = {"e2e_ms": 1.0, "ttft_ms": 0.5, "tpot_ms": 1.0}


def step_cost_for(run: MeasuredRun) -> StepCost:
    """The step terms of a run's deployment on its GPU's preset (NVLink 4 between ranks)."""
    device = PRESETS[gpu_preset_name(run.gpu)]
    return StepCost(run.model, run.tp, device, NVLINK4, run.engine.max_num_batched_tokens)


def replay_run(run: MeasuredRun, coefficients: StepCoefficients, record: bool = False) -> Replay:
    return replay(run.requests, run.engine, step_cost_for(run), coefficients, record=record)


@dataclass(frozen=True)
class StageFigures:
    """Predicted and measured (None for a plan) figures of one stage, in milliseconds."""

    index: int
    requests: int
    predicted: dict[str, dict[str, float]]
    measured: dict[str, dict[str, float]] | None

    @property
    def error_pct(self) -> dict[str, dict[str, float]] | None:
        if self.measured is None:
            return None
        return {metric: {stat: 100.0 * (self.predicted[metric][stat] / value - 1.0) if value else math.nan
                         for stat, value in self.measured[metric].items()} for metric in METRICS}


def stage_figures(run: MeasuredRun, result: Replay) -> list[StageFigures]:
    """Per stage: mean, p50, p90 and p99 of predicted e2e, TTFT and TPOT, beside the
    measured ones."""
    stage_of = np.asarray(run.stage_of)
    series = {"e2e_ms": result.e2e_s * 1e3, "ttft_ms": result.ttft_s * 1e3, "tpot_ms": result.tpot_s * 1e3}
    figures = []
    for stage in run.stages:
        mask = stage_of == stage.index
        figures.append(StageFigures(stage.index, int(mask.sum()),
                                    {metric: percentiles(values[mask]) for metric, values in series.items()},
                                    stage.measured))
    return figures


def _linear_rows(run: MeasuredRun, result: Replay) -> list[tuple[np.ndarray, float, float]]:
    """Per stage and metric: (row of the mean as a linear function of the coefficients
    and the request overhead, the measured mean, its weight)."""
    assert result.features is not None and result.step_start is not None and result.step_end is not None
    f = result.features
    cumulative = np.vstack([np.zeros(f.shape[1]), np.cumsum(f, axis=0)])  # cumulative[k]: steps before k
    arrival = result.arrival_s
    first_step, last_step = result.first_step, result.last_step
    ok = (first_step >= 0) & (last_step >= 0)
    in_flight = np.searchsorted(result.step_end, arrival, side="right")  # the step running at arrival
    in_flight = np.minimum(in_flight, len(f) - 1)
    duration = result.step_end[in_flight] - result.step_start[in_flight]
    with np.errstate(invalid="ignore", divide="ignore"):
        elapsed = np.where(duration > 0, np.clip(arrival - result.step_start[in_flight], 0, None) / duration, 0.0)
    before = cumulative[in_flight] + elapsed[:, None] * f[in_flight]
    to_first = cumulative[np.where(ok, first_step, 0) + 1] - before
    to_last = cumulative[np.where(ok, last_step, 0) + 1] - before
    decode = (to_last - to_first) / np.maximum(result.output - 1, 1)[:, None]
    ones, zeros = np.ones((len(arrival), 1)), np.zeros((len(arrival), 1))
    per_metric = {"e2e_ms": np.hstack([to_last, ones]), "ttft_ms": np.hstack([to_first, ones]),
                  "tpot_ms": np.hstack([decode, zeros])}
    stage_of = np.asarray(run.stage_of)
    rows = []
    for stage in run.stages:
        if stage.measured is None:
            continue
        mask = (stage_of == stage.index) & ok
        for metric, matrix in per_metric.items():
            row, target = matrix[mask].mean(axis=0) * 1e3, stage.measured[metric]["mean"]
            if mask.any() and np.isfinite(row).all() and math.isfinite(target) and target > 0:
                rows.append((row, target, WEIGHTS[metric]))
    return rows


#: The priors every fit is pulled toward (:class:`StepCoefficients`' defaults) and how hard:
#: each coefficient's relative distance from its prior weighs as much as this fraction of
#: one stage metric's relative error. A term the runs cannot tell apart from another (prefill
#: attention, when nearly every prompt is cached) keeps its prior instead of being fitted to
#: zero, and a run left out is predicted by coefficients that did not trade one term for
#: another to fit the rest.
PRIORS = StepCoefficients()
PRIOR_WEIGHT = 0.05


def _prior_rows(prior: StepCoefficients, weight: float) -> tuple[np.ndarray, np.ndarray]:
    values = np.append(prior.vector(), prior.request_overhead_s)
    return np.diag(weight / values), np.full(len(values), weight)


def fit(runs: Sequence[MeasuredRun], start: StepCoefficients | None = None, rounds: int = 5,
        progress: Callable[[str], None] | None = None, source: str = "fit",
        prior: StepCoefficients = PRIORS, prior_weight: float = PRIOR_WEIGHT) -> StepCoefficients:
    """Coefficients that minimise the weighted relative errors of every stage's mean
    e2e, TTFT and TPOT over ``runs``, pulled toward ``prior`` (see the module docstring)."""
    coefficients = start or prior
    prior_matrix, prior_targets = _prior_rows(prior, prior_weight)
    for round_ in range(rounds):
        rows = []
        for run in runs:
            rows += _linear_rows(run, replay_run(run, coefficients, record=True))
        matrix = np.vstack([np.array([row / target * weight for row, target, weight in rows]), prior_matrix])
        targets = np.concatenate([np.array([weight for _, _, weight in rows]), prior_targets])
        solution, _ = nnls(matrix, targets)
        previous = coefficients
        coefficients = StepCoefficients.from_vector(solution[:-1], solution[-1], source)
        change = np.max(np.abs(coefficients.vector() - previous.vector()) / np.maximum(previous.vector(), 1e-9))
        if progress is not None:
            progress(f"round {round_ + 1}: largest relative change {change:.3g}")
        if change < 1e-3:
            break
    return coefficients


__all__ = ["FEATURES", "StageFigures", "WEIGHTS", "fit", "replay_run", "stage_figures", "step_cost_for"]
