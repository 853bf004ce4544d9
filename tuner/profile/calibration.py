"""Calibrating the analytic model on measured GEMM times.

The reference is what a tuned library achieves: cuBLAS times of the Llama-2-7B linear
layers on an A100-SXM4-80GB, measured by the vidur project (``a100_llama2_7b_ops_vidur.csv``,
median of each op, 1–4096 tokens, tensor-parallel degree 1–8). For each shape the model's
*best* config over a compact matmul config space — what ``triton.autotune`` would pick —
is compared with the measured time, and :func:`calibrate` fits the model's efficiency
factors by minimising the mean squared log error of that best time.

The pipeline, each step usable on its own:

1. :func:`load_vidur` reads the CSV into :class:`GemmMeasurement` values (M, N, K, seconds).
2. :func:`candidates` plans every config of a space at a shape and attaches each launch's
   compiled resources (from a :class:`~tuner.profile.cache.CompileCache`, or any object
   with the same ``get_or_compile``).
3. :func:`best_config` / :func:`compare` time the candidates with the model and pick the
   fastest; :func:`calibrate` fits; :func:`summarize` gives the error distribution.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..kernels.family import KernelFamily, KernelLaunch
from .devices import DevicePreset
from .model import DEFAULT, Efficiency, plan_seconds
from .resources import CompiledResources

#: vidur's op names for the four GEMMs of a Llama layer.
VIDUR_OPS: dict[str, str] = {
    "qkv": "attn_pre_proj",
    "o": "attn_post_proj",
    "up": "mlp_up_proj",
    "down": "mlp_down_proj",
}

#: The factors :func:`calibrate` fits by default; the others stay as given.
FITTED = ("tensor", "tile_half", "dram", "fixed_s")


class ResourceSource(Protocol):
    """Where compiled resources come from (a compile cache, or a table in tests)."""

    def get_or_compile(self, launch: KernelLaunch, device: DevicePreset) -> CompiledResources: ...


@dataclass(frozen=True)
class GemmMeasurement:
    """One measured GEMM: ``C[M, N] = A[M, K] · B[K, N]`` took ``seconds`` (median)."""

    op: str
    tokens: int
    tp: int
    m: int
    n: int
    k: int
    seconds: float

    @property
    def shape(self) -> dict[str, int]:
        return {"M": self.m, "N": self.n, "K": self.k}


def gemm_dims(op: str, tokens: int, tp: int, n_embd: int, n_expanded: int) -> tuple[int, int, int]:
    """(M, N, K) of a Llama GEMM at ``tokens`` tokens and tensor-parallel degree ``tp``.

    QKV: N = 3·n_embd/t, K = n_embd; O: N = n_embd, K = n_embd/t; gate+up:
    N = 2·n_expanded/t, K = n_embd; down: N = n_embd, K = n_expanded/t; M = tokens.
    """
    if op == "qkv":
        return tokens, 3 * n_embd // tp, n_embd
    if op == "o":
        return tokens, n_embd, n_embd // tp
    if op == "up":
        return tokens, 2 * n_expanded // tp, n_embd
    if op == "down":
        return tokens, n_embd, n_expanded // tp
    raise ValueError(f"op must be one of {', '.join(VIDUR_OPS)} but got {op!r}.")


def load_vidur(path: str | Path, tps: Iterable[int] = (1,)) -> tuple[GemmMeasurement, ...]:
    """The four GEMMs of every row of the vidur CSV at the given TP degrees.

    Times are the ``median`` columns (milliseconds in the file, seconds here). A
    (tokens, TP) pair that appears in several rows gets the median of their medians.

    Raises:
        ValueError: the file lacks a column this needs, naming it.
    """
    wanted = set(tps)
    times: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    dims: dict[tuple[str, int, int], tuple[int, int, int]] = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        needed = ["num_tokens", "num_tensor_parallel_workers", "n_embd", "n_expanded_embd"]
        needed += [f"time_stats.{name}.median" for name in VIDUR_OPS.values()]
        missing = [c for c in needed if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r}; is this the vidur ops CSV?")
        for row in reader:
            tp = int(row["num_tensor_parallel_workers"])
            if tp not in wanted:
                continue
            tokens = int(row["num_tokens"])
            for op, name in VIDUR_OPS.items():
                key = (op, tokens, tp)
                times[key].append(float(row[f"time_stats.{name}.median"]) * 1e-3)
                dims[key] = gemm_dims(op, tokens, tp, int(row["n_embd"]), int(row["n_expanded_embd"]))
    order = {op: i for i, op in enumerate(VIDUR_OPS)}
    return tuple(
        GemmMeasurement(op, tokens, tp, *dims[(op, tokens, tp)], statistics.median(times[(op, tokens, tp)]))
        for op, tokens, tp in sorted(times, key=lambda k: (k[2], order[k[0]], k[1]))
    )


def _config(bm: int, bn: int, bk: int, warps: int, stages: int, split_k: int = 1,
            persistent: bool = False, group_m: int = 8) -> dict[str, Any]:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group_m, "num_warps": warps,
            "num_stages": stages, "SPLIT_K": split_k, "PERSISTENT": persistent, "FUSE_EPILOGUE": True}


#: A compact matmul space (32 configs, 28 distinct binaries) covering what an autotuner
#: would try on sm_80: Triton's tutorial configs for large M, thin tiles for decode-sized
#: M, split-K for small M and large K, two-stage and persistent variants, and a
#: row-major (GROUP_M = 1) order.
CALIBRATION_CONFIGS: tuple[dict[str, Any], ...] = (
    _config(128, 256, 64, 8, 3), _config(128, 256, 32, 8, 3), _config(64, 256, 32, 4, 4),
    _config(128, 128, 32, 4, 4), _config(128, 128, 64, 8, 3), _config(128, 64, 32, 4, 4),
    _config(64, 128, 32, 4, 4), _config(128, 32, 32, 4, 4), _config(64, 32, 32, 2, 5),
    _config(32, 64, 32, 2, 5), _config(64, 128, 64, 4, 3), _config(128, 128, 32, 8, 2),
    _config(64, 64, 64, 4, 4), _config(32, 128, 64, 4, 4), _config(32, 64, 128, 4, 3),
    _config(16, 64, 128, 4, 4), _config(16, 128, 128, 4, 3), _config(16, 256, 64, 4, 3),
    _config(16, 32, 128, 2, 4), _config(32, 32, 64, 2, 5),
    _config(16, 64, 128, 4, 4, split_k=2), _config(16, 64, 128, 4, 4, split_k=4),
    _config(16, 64, 64, 4, 4, split_k=8), _config(32, 64, 64, 4, 4, split_k=4),
    _config(64, 64, 64, 4, 4, split_k=2), _config(64, 128, 32, 4, 4, split_k=2),
    _config(128, 128, 32, 4, 4, split_k=2),
    _config(128, 128, 32, 4, 4, persistent=True), _config(128, 256, 64, 8, 3, persistent=True),
    _config(64, 128, 32, 4, 4, persistent=True),
    _config(128, 128, 32, 4, 4, group_m=1), _config(64, 128, 32, 4, 2),
)


@dataclass(frozen=True)
class Candidate:
    """One config planned at one shape, with each launch's compiled resources."""

    config: tuple[tuple[str, Any], ...]
    launches: tuple[KernelLaunch, ...]
    resources: tuple[CompiledResources, ...]

    def label(self) -> str:
        """``128x256x64 w8 s3`` plus ``splitk4``, ``persistent``, ``group1`` when set."""
        c = dict(self.config)
        text = f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']}"
        if c.get("SPLIT_K", 1) > 1:
            text += f" splitk{c['SPLIT_K']}"
        if c.get("PERSISTENT"):
            text += " persistent"
        if c.get("GROUP_M", 8) == 1:
            text += " group1"
        if c.get("FUSE_EPILOGUE") is False:
            text += " unfused"
        return text


def candidates(family: KernelFamily, configs: Iterable[Mapping[str, Any]], shape: Mapping[str, int],
               device: DevicePreset, resources: ResourceSource) -> list[Candidate]:
    """Every legal config of ``configs`` planned at ``shape`` on ``device``.

    Configs the family rejects for the shape, and those whose launches cannot run on the
    device (a failed compile, no CTA fits an SM), are left out. A persistent config is
    planned twice: its grid is SMs × CTAs per SM, which only the compiled kernel knows.
    """
    found = []
    for config in configs:
        if family.illegal(config, shape) is not None:
            continue
        plan = family.plan(config, shape, device.sms)
        compiled = [resources.get_or_compile(launch, device) for launch in plan.launches]
        if not all(r.legal and r.ctas_per_sm >= 1 for r in compiled):
            continue
        if any(launch.persistent for launch in plan.launches):
            occupancy = min(r.ctas_per_sm for r, launch in zip(compiled, plan.launches) if launch.persistent)
            plan = family.plan(config, shape, device.sms * occupancy)
        found.append(Candidate(tuple(config.items()), plan.launches, tuple(compiled)))
    return found


def modeled_seconds(candidate: Candidate, shape: Mapping[str, int], device: DevicePreset,
                    factors: Efficiency = DEFAULT) -> float:
    """What a timer around the whole config would read: its launches' isolated times plus
    one launch gap (``device.launch_overhead_s``) before each launch after the first.

    The first launch's start-up is inside the measured time as well; the fitted
    ``fixed_s`` absorbs it. (In the simulator every launch's overhead is added by the
    service, ``service.launch_overhead``, not by the model.)
    """
    gaps = (len(candidate.launches) - 1) * device.launch_overhead_s
    return plan_seconds(candidate.launches, candidate.resources, device, factors, shape=shape) + gaps


def best_config(cands: Sequence[Candidate], shape: Mapping[str, int], device: DevicePreset,
                factors: Efficiency = DEFAULT) -> tuple[float, Candidate | None]:
    """The fastest candidate by the model and its modeled seconds (``inf``, None if none)."""
    best: tuple[float, Candidate | None] = (math.inf, None)
    for candidate in cands:
        seconds = modeled_seconds(candidate, shape, device, factors)
        if seconds < best[0]:
            best = (seconds, candidate)
    return best


@dataclass(frozen=True)
class Comparison:
    """A measured GEMM against the model's best config for it."""

    measurement: GemmMeasurement
    modeled_s: float
    best: Candidate | None

    @property
    def relative_error(self) -> float:
        """(modeled − measured) / measured."""
        return self.modeled_s / self.measurement.seconds - 1.0


Case = tuple[GemmMeasurement, Sequence[Candidate]]


def compare(cases: Iterable[Case], device: DevicePreset, factors: Efficiency = DEFAULT) -> list[Comparison]:
    """Each measurement against the model's best candidate for its shape."""
    return [Comparison(m, *best_config(cands, m.shape, device, factors)) for m, cands in cases]


@dataclass(frozen=True)
class ErrorSummary:
    """The distribution of relative errors |modeled / measured − 1| over some shapes."""

    count: int
    median: float
    p90: float
    worst: float
    within: float          # fraction of shapes within ±tolerance
    tolerance: float = 0.35
    bias: float = 0.0      # median signed error: > 0 when the model is slow


def summarize(errors: Sequence[float], tolerance: float = 0.35) -> ErrorSummary:
    """Summarise signed relative errors."""
    if not errors:
        return ErrorSummary(0, math.nan, math.nan, math.nan, math.nan, tolerance, math.nan)
    magnitude = np.abs(np.asarray(errors, dtype=float))
    return ErrorSummary(
        count=len(errors), median=float(np.median(magnitude)), p90=float(np.percentile(magnitude, 90)),
        worst=float(magnitude.max()), within=float(np.mean(magnitude <= tolerance)),
        tolerance=tolerance, bias=float(np.median(errors)),
    )


# --- the fit -----------------------------------------------------------------------------------------

_FRACTIONS = frozenset({"tensor", "dram", "cuda_core"})


def _encode(name: str, value: float) -> float:
    """Map a factor to an unconstrained coordinate (logit for fractions, log otherwise)."""
    if name in _FRACTIONS:
        value = min(max(value, 1e-6), 1 - 1e-6)
        return math.log(value / (1 - value))
    return math.log(max(value, 1e-12))


def _decode(name: str, x: float) -> float:
    if name in _FRACTIONS:
        return 1.0 / (1.0 + math.exp(-x))
    return math.exp(x)


def log_loss(cases: Sequence[Case], device: DevicePreset, factors: Efficiency) -> float:
    """Mean squared log error of the best modeled config against the measurement."""
    total = 0.0
    for measurement, cands in cases:
        seconds, _ = best_config(cands, measurement.shape, device, factors)
        if not math.isfinite(seconds):
            return math.inf
        total += math.log(seconds / measurement.seconds) ** 2
    return total / max(1, len(cases))


def calibrate(
    cases: Sequence[Case],
    device: DevicePreset,
    *,
    start: Efficiency = DEFAULT,
    fit: Sequence[str] = FITTED,
    max_evaluations: int = 400,
    progress: Callable[[int, float], None] | None = None,
) -> Efficiency:
    """Fit the factors named in ``fit`` so the model's best config per shape matches
    the measured times (least squares on the log of modeled / measured).

    A Nelder–Mead simplex over unconstrained coordinates (logit of fractions, log of
    positive quantities), started at ``start``; the other factors keep ``start``'s values.

    Args:
        cases: each measurement with the candidates (configs planned at its shape).
        device: the device the measurements come from.
        start: the starting factors.
        fit: the :class:`Efficiency` fields to fit.
        max_evaluations: loss evaluations allowed.
        progress: called as ``progress(evaluations, best_loss)`` after each iteration.

    Raises:
        ValueError: ``fit`` names something that is not a factor, or nothing.
    """
    names = {f.name for f in fields(Efficiency)}
    unknown = [n for n in fit if n not in names]
    if unknown or not fit:
        raise ValueError(f"fit must name Efficiency fields ({', '.join(sorted(names))}) but got {list(fit)!r}.")

    def factors_at(x: np.ndarray) -> Efficiency:
        return replace(start, **{n: _decode(n, float(v)) for n, v in zip(fit, x)})

    def loss(x: np.ndarray) -> float:
        try:
            return log_loss(cases, device, factors_at(x))
        except ValueError:  # a coordinate decoded outside a factor's domain
            return math.inf

    x0 = np.array([_encode(n, getattr(start, n)) for n in fit])
    x = _nelder_mead(loss, x0, step=0.3, max_evaluations=max_evaluations, progress=progress)
    return factors_at(x)


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, *, step: float, max_evaluations: int,
                 tolerance: float = 1e-6, progress: Callable[[int, float], None] | None = None) -> np.ndarray:
    """Minimise ``f`` from ``x0`` with the standard Nelder–Mead simplex (no SciPy here)."""
    n = len(x0)
    simplex = [x0.astype(float)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(p) for p in simplex]
    evaluations = n + 1
    while evaluations < max_evaluations:
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if progress is not None:
            progress(evaluations, values[0])
        if abs(values[-1] - values[0]) <= tolerance * (abs(values[0]) + tolerance):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        fr = f(reflected)
        evaluations += 1
        if fr < values[0]:
            expanded = centroid + 2.0 * (centroid - worst)
            fe = f(expanded)
            evaluations += 1
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            inside = fr >= values[-1]
            contracted = centroid + (0.5 * (worst - centroid) if inside else 0.5 * (reflected - centroid))
            fc = f(contracted)
            evaluations += 1
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (p - best) for p in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
                evaluations += n
    return simplex[int(np.argmin(values))]
