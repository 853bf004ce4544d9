"""The analytic kernel model's factors fitted to the calibrated engine's decode steps.

Why: the service simulator prices every kernel of a step with the analytic model, whose
shipped factors were fitted on event-timed single cuBLAS operators on an A100
(``a100-cublas``: ~5 µs fixed per launch). A vLLM decode step replays 250 to 900 kernels
in a CUDA graph on an H100, and the measured runs say the whole step costs far less. No
kernel of those runs was timed alone, but the engine model fitted on them
(:mod:`tuner.engine.defaults`) prices a decode step's GPU work term by term (GEMMs, the KV
cache read, a per-layer cost), and that price is checked against the measured TPOT. So
the targets here are those GPU terms for decode steps of 1 to 64 sequences of the runs'
mean context, on each calibration deployment as ``tuner init`` writes it; the model's
step is the sum over the step's kernels of the *best* config of each (what a tuned table
would run), and the factors minimise the squared log error of the step. Mixtral's experts
(``fused_moe``, priced per routed token count) and the all-reduces (their own
interconnect preset, ``nvlink4_vllm``) are left out of the sum and of its target.

Only a step's sum is identified: a fixed cost per launch, DRAM efficiency and memory
latency trade against one another across the deployments' kernel counts and sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tuner.engine.defaults import H100_VLLM_V1
from tuner.engine.step_cost import StepCost, StepCoefficients
from tuner.errors import IllegalConfigError
from tuner.profile.calibration import Candidate, _decode, _encode, _nelder_mead, candidates
from tuner.profile.devices import DevicePreset
from tuner.profile.model import DEFAULT, Efficiency, plan_seconds

BATCHES = (1, 4, 8, 16, 32, 64)
#: The runs' mean context during decode: 592-token prompts and half of 247 outputs.
CONTEXT = 712
FITTED = ("dram", "fixed_s", "mem_latency_s")
#: Operators whose price is not the Triton model's (or that a decode step does not run).
LEFT_OUT = frozenset({"experts", "prefill_attn"})
LEFT_OUT_FAMILIES = frozenset({"allreduce"})


@dataclass(frozen=True)
class StepCase:
    """One decode step of one deployment: the engine's GPU price and the step's kernels
    as ``(operator, repeat, shape, candidates)``."""

    run: str
    batch: int
    target_s: float
    kernels: tuple[tuple[str, int, dict[str, int], tuple[Candidate, ...]], ...]


def decode_variables(batch: int) -> dict[str, Any]:
    return {"batch": batch, "tokens": batch, "prefill_tokens": 0, "decode_seqs": batch,
            "context": batch * CONTEXT, "max_context": CONTEXT}


def engine_gpu_seconds(cost: StepCost, batch: int, coefficients: StepCoefficients = H100_VLLM_V1) -> float:
    """The engine model's GPU terms for a decode step of ``batch`` sequences of
    :data:`CONTEXT` tokens, without an MoE layer's experts and without all-reduces."""
    gemm = cost._layers_gemm[batch] + cost._head[batch]
    if cost.model.moe:
        gemm -= float(cost._experts(np.array([float(batch)]))[0]) * cost.model.layers
    return (coefficients.gemm * gemm + coefficients.kv_read * batch * CONTEXT * cost._kv_per_token
            + coefficients.layers * cost.model.layers)


def decode_cases(run_name: str, problem: Any, cost: StepCost, device: DevicePreset, resources: Any,
                 batches: Sequence[int] = BATCHES) -> list[StepCase]:
    """The decode steps of one deployment (a problem ``tuner init`` wrote for it), priced
    by the engine model with the shipped coefficients (:func:`retargeted` for others)."""
    found = []
    for batch in batches:
        variables = decode_variables(batch)
        kernels = []
        for op in problem.service.operators:
            if op.name in LEFT_OUT or op.family in LEFT_OUT_FAMILIES:
                continue
            family = problem.families[op.family]
            shape = {key: max(1, math.ceil(expr.evaluate(variables))) for key, expr in op.shape}
            kernel_family = family.configs[0].profile.family
            cands = candidates(kernel_family, [dict(c.params) for c in family.configs], shape, device, resources)
            kernels.append((op.name, op.repeat, shape, tuple(cands)))
        found.append(StepCase(run_name, batch, engine_gpu_seconds(cost, batch), tuple(kernels)))
    return found


def retargeted(case: StepCase, cost: StepCost, coefficients: StepCoefficients) -> StepCase:
    """``case`` priced by the engine model with ``coefficients`` (its kernels' planned
    candidates kept: only the target depends on the coefficients)."""
    return replace(case, target_s=engine_gpu_seconds(cost, case.batch, coefficients))


def modeled_step(case: StepCase, device: DevicePreset, factors: Efficiency) -> dict[str, float]:
    """Seconds per operator of the step (best config each, times its repeat), and ``total``.
    No gap between a config's launches: under CUDA graphs the service's launch overhead
    is 0 and a launch's fixed cost is the factors' (``tuner init``)."""
    parts = {}
    for name, repeat, shape, cands in case.kernels:
        seconds = min((plan_seconds(c.launches, c.resources, device, factors, shape=shape) for c in cands),
                      default=math.inf)
        parts[name] = repeat * seconds
    parts["total"] = math.fsum(parts.values())
    return parts


def log_loss(cases: Sequence[StepCase], device: DevicePreset, factors: Efficiency) -> float:
    total = 0.0
    for case in cases:
        seconds = modeled_step(case, device, factors)["total"]
        if not math.isfinite(seconds) or seconds <= 0.0:
            return math.inf
        total += math.log(seconds / case.target_s) ** 2
    return total / max(1, len(cases))


def fit(cases: Sequence[StepCase], device: DevicePreset, start: Efficiency = DEFAULT,
        names: Sequence[str] = FITTED, evaluations: int = 300) -> Efficiency:
    """Nelder-Mead over the named factors (logit of fractions, log of the rest), as
    :func:`tuner.profile.calibration.calibrate` fits single GEMMs."""

    def factors_at(x: np.ndarray) -> Efficiency:
        return replace(start, **{n: _decode(n, float(v)) for n, v in zip(names, x)})

    def loss(x: np.ndarray) -> float:
        try:
            return log_loss(cases, device, factors_at(x))
        except ValueError:
            return math.inf

    x0 = np.array([_encode(n, getattr(start, n)) for n in names])
    return factors_at(_nelder_mead(loss, x0, step=0.3, max_evaluations=evaluations))


def rounded(factors: Efficiency, names: Sequence[str] = FITTED) -> dict[str, float]:
    """The fitted factors as shipped: fractions to three digits, seconds to 0.01 µs."""
    return {n: round(getattr(factors, n), 3) if n == "dram" else round(getattr(factors, n) * 1e8) / 1e8
            for n in names}


def step_errors(cases: Sequence[StepCase], device: DevicePreset, factors: Efficiency) -> list[dict[str, Any]]:
    """Per case: the engine's price, the model's, and the model's per operator (ms)."""
    rows = []
    for case in cases:
        parts = modeled_step(case, device, factors)
        rows.append({"run": case.run, "batch": case.batch, "engine_ms": 1e3 * case.target_s,
                     "model_ms": 1e3 * parts["total"], "error_pct": 100.0 * (parts["total"] / case.target_s - 1.0),
                     "operators_ms": {k: 1e3 * v for k, v in parts.items() if k != "total"}})
    return rows


def experts_check(run_name: str, problem: Any, cost: StepCost, batches: Sequence[int] = BATCHES,
                  draws: int = 5, seed: int = 0) -> list[dict[str, Any]]:
    """An MoE layer's experts, left out of the fit: the problem's fastest ``fused_moe``
    config (priced with the problem's factor set) on uniformly routed decode batches
    (``draws`` seeded draws, mean) against the engine model's experts term."""
    operator = next((op for op in problem.service.operators if op.name == "experts"), None)
    if operator is None:
        return []
    family = problem.families[operator.family]
    model = cost.model
    rng = np.random.default_rng(seed)
    rows = []
    for batch in batches:
        shape = {key: max(1, math.ceil(expr.evaluate(decode_variables(batch)))) for key, expr in operator.shape}
        seconds = []
        for _draw in range(draws):
            counts = np.zeros(model.experts, dtype=int)
            for _token in range(batch):
                counts[rng.choice(model.experts, model.experts_per_token, replace=False)] += 1
            variables = {**shape, "expert_counts": tuple(int(c) for c in counts)}
            device = problem.service.device
            seconds.append(min(_seconds(config.profile, variables, device) for config in family.configs))
        engine = H100_VLLM_V1.gemm * float(cost._experts(np.array([float(batch)]))[0])
        model_s = float(np.mean(seconds))
        rows.append({"run": run_name, "batch": batch, "engine_us": 1e6 * engine, "model_us": 1e6 * model_s,
                     "error_pct": 100.0 * (model_s / engine - 1.0)})
    return rows


def _seconds(profile: Any, variables: dict[str, Any], device: Any) -> float:
    """A profile's launches back to back; ``inf`` for a config that cannot run."""
    try:
        launches = profile.launches(variables, device, "experts")
    except IllegalConfigError:
        return math.inf
    return math.fsum(phase[0] for launch in launches for phase in launch[1])
