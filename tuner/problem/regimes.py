"""Build the traffic side of a problem: size fields, traces, arrival processes, regimes.

Every traffic object is built here once, through :func:`~.explain.checked`, so a value
the :mod:`tuner.traffic` constructors refuse becomes a keyed error when the file loads,
never a ValueError in the middle of a study. Traces are read through one helper that
blames the key naming the bad part (the file, its time column or a size column).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path

from ..errors import TraceError
from ..traffic.routing import SUM_TOLERANCE, Routing, routing_problem
from ..traffic.sizes import PROMPT_ID
from ..traffic import (
    Diurnal, Empirical, Exponential, Fixed, Gamma, LogNormal, OnOff, Poisson,
    SizeDistribution, Trace, TraceReplay, Uniform, load_trace,
)
from ..units import size_text
from . import bounds
from . import schema as s
from .batching import BATCHING, batching_kind
from .explain import Invalid, checked
from .model import ArrivalSpec, Regime, Service


def size_fields(specs: Mapping[str, s.RegimeSpec], base: Path, batching: str) -> frozenset[str]:
    """The size fields every regime describes (the same in each), checked against the batching."""
    per_regime = {name: _size_fields(r, base, f"regimes.{name}") for name, r in specs.items()}
    return _common_size_fields(per_regime, batching)


def _size_fields(regime: s.RegimeSpec, base: Path, key: str) -> frozenset[str]:
    if regime.sizes is not None:
        fields = frozenset(regime.sizes)
    elif isinstance(regime.arrivals, s.TraceSpec):
        fields = frozenset(_trace(regime.arrivals, base, f"{key}.arrivals").columns)
    else:
        fields = frozenset()
    for name in sorted(fields):
        if name == "batch" or name.endswith("_total"):
            raise Invalid(
                f"{key}.sizes.{name}",
                f"size field {s.show(name)} clashes with a batch variable (batch, FIELD_total); rename it",
            )
    return fields


def _common_size_fields(per_regime: dict[str, frozenset[str]], batching: str) -> frozenset[str]:
    names = list(per_regime)
    first = per_regime[names[0]]
    for name in names[1:]:
        if per_regime[name] != first:
            raise Invalid(
                f"regimes.{name}.sizes",
                f"size fields {sorted(per_regime[name])} differ from those of regime {s.show(names[0])} "
                f"({sorted(first)}); every regime describes the same requests",
            )
    if PROMPT_ID in first and not batching_kind(batching).engine:
        raise Invalid(f"regimes.{names[0]}.sizes.{PROMPT_ID}",
                      f"a prompt id only means something to an engine's prefix cache (batching: "
                      f"{', '.join(k for k, kind in BATCHING.items() if kind.engine)}), not to batching: {batching}")
    if batching_kind(batching).token_level:
        for name, fields in per_regime.items():
            if not {"prompt", "output"} <= fields:
                raise Invalid(
                    f"regimes.{name}.sizes",
                    f"a token-level service (batching: {batching}) needs 'prompt' and 'output' sizes but has "
                    f"{sorted(fields)}",
                )
    return first


def _trace(spec: s.TraceSpec, base: Path, key: str) -> Trace:
    trace = _load_trace(
        base / spec.file, spec.time_column, spec.columns, file_key=f"{key}.file",
        time_key=f"{key}.time_column", column_key=lambda field: f"{key}.columns.{field}",
    )
    for field, values in trace.columns.items():
        least, what = (0, "prompt id") if field == PROMPT_ID else (1, "size")  # an id is an identity, not a count
        if len(values) and values.min() < least:
            column = spec.columns[field] if spec.columns else field
            raise Invalid(
                f"{key}.columns.{field}" if spec.columns else f"{key}.file",
                f"trace column {s.show(column)} holds a {what} of {int(values.min())}; replayed {what}s must be "
                f">= {least}",
            )
    return trace


def _load_trace(
    path: Path, time_column: str, columns: Mapping[str, str] | None,
    file_key: str, time_key: str, column_key: Callable[[str], str],
) -> Trace:
    """:func:`load_trace`, its error keyed by the entry that names the bad part: the time
    column or a size column the header lacks, else the file."""
    try:
        return load_trace(path, time_column, columns)
    except ValueError as exc:  # a Trace the reader built but its own checks refuse
        raise Invalid(file_key, str(exc)) from None
    except TraceError as exc:
        key = file_key
        try:
            with path.open(newline="") as file:
                header = [name.strip() for name in next(csv.reader(file), [])]
        except (OSError, UnicodeDecodeError, csv.Error):
            header = []
        missing = [field for field, column in (columns or {}).items() if column not in header]
        if header and time_column not in header:
            key = time_key
        elif header and missing:
            key = column_key(missing[0])
        raise Invalid(key, str(exc)) from None


def regime(name: str, r: s.RegimeSpec, base: Path, service: Service) -> Regime:
    """The regime ``name``, its arrival process and sizes built (and probed) once."""
    key = f"regimes.{name}"
    arrivals = _arrivals(r.arrivals, base, f"{key}.arrivals")
    sizes = None if r.sizes is None else {
        field: _size(dist, base, f"{key}.sizes.{field}") for field, dist in r.sizes.items()
    }
    if r.memory_budget is not None and r.memory_budget < service.memory.fixed:
        raise Invalid(
            f"{key}.memory_budget",
            f"{size_text(r.memory_budget)} is below service.memory.fixed ({size_text(service.memory.fixed)})",
        )
    bounds.check_sample(key, arrivals.busiest(), r.horizon)
    if r.warmup is not None and r.warmup >= r.horizon:
        raise Invalid(f"{key}.warmup", f"a warm-up of {r.warmup:g} s leaves nothing of the {r.horizon:g} s window to judge")
    return Regime(name, r.description.strip(), arrivals, sizes, r.horizon, r.memory_budget, r.warmup,
                  shape_key(r), tuple((r.partitions or {}).items()), _routing(r.routing, service, f"{key}.routing"),
                  r.weight)


def _routing(spec: s.RoutingSpec | str | None, service: Service, key: str) -> Routing | None:
    """The regime's routing over the service's router (uniform where it declares none)."""
    if service.router is None:
        if spec is not None:
            raise Invalid(key, "no service.router declares the experts this routing spreads tokens over")
        return None
    experts, top_k = service.router
    if spec is None or spec == "uniform":
        return Routing.uniform(experts, top_k)
    assert isinstance(spec, s.RoutingSpec)
    if (spec.loads is None) == (spec.shares is None):
        raise Invalid(key, "give either loads (per-expert probability a token is routed there, summing to "
                           "top_k) or shares (per-expert share of the routed tokens, summing to 1)")
    field, values = ("loads", spec.loads) if spec.loads is not None else ("shares", spec.shares)
    assert values is not None
    if len(values) != experts:
        raise Invalid(f"{key}.{field}", f"{len(values)} experts, but service.router has {experts}")
    if field == "shares" and abs(math.fsum(values) - 1.0) > SUM_TOLERANCE:
        raise Invalid(f"{key}.shares", f"the shares sum to {math.fsum(values):.4g}, not 1")
    if field == "shares" and min(values) < 0:
        raise Invalid(f"{key}.shares", f"a share must not be negative but got {min(values):g}")
    loads = values if field == "loads" else [top_k * v / math.fsum(values) for v in values]
    problem = routing_problem(loads, top_k)
    if problem is not None:
        raise Invalid(f"{key}.{field}", problem)
    return Routing(tuple(loads), top_k, spec.source.strip())


def shape_key(r: s.RegimeSpec) -> str:
    """What a regime's traffic (and GPU share) is apart from its rate: two regimes with the
    same key differ only in load, so an assignment's capacity (the rate is its free variable) is the same
    in both."""
    arrivals = r.arrivals.model_dump(exclude={"rate"})
    sizes = None if r.sizes is None else {k: v.model_dump() for k, v in r.sizes.items()}
    routing = r.routing.model_dump() if isinstance(r.routing, s.RoutingSpec) else r.routing
    return json.dumps([arrivals, sizes, r.horizon, r.warmup, r.memory_budget, r.partitions]
                      + ([routing] if routing not in (None, "uniform") else []), sort_keys=True, default=str)


def _arrivals(a: s.ArrivalSpecs, base: Path, key: str) -> ArrivalSpec:
    rate_range = a.rate if isinstance(a.rate, tuple) else None
    fixed_rate = None if rate_range else a.rate
    trace = _trace(a, base, key) if isinstance(a, s.TraceSpec) else None

    def build(sampled: float | None) -> object:
        rate = sampled if sampled is not None else fixed_rate
        if isinstance(a, s.PoissonSpec):
            return Poisson(rate)
        if isinstance(a, s.GammaSpec):
            return Gamma(rate, a.burstiness)
        if isinstance(a, s.OnOffSpec):
            return OnOff(rate, a.on, a.off)
        if isinstance(a, s.DiurnalSpec):
            return Diurnal(rate, a.amplitude, a.period, a.phase)
        return TraceReplay(trace, rate, a.offset, basis=a.rate_basis)

    # Build both ends of a bucket once, so a bad value fails now and not in a study.
    for probe_rate in rate_range or (None,):
        checked(key, lambda probe_rate=probe_rate: build(probe_rate))
    declared = (rate_range[0] + rate_range[1]) / 2 if rate_range else fixed_rate
    return ArrivalSpec(build, rate_range, declared)


def _size(d: object, base: Path, key: str) -> SizeDistribution:
    if isinstance(d, s.EmpiricalSize):
        if d.values is not None:
            return checked(f"{key}.values", lambda: Empirical(tuple(d.values)))
        trace = _load_trace(
            base / d.trace, "TIMESTAMP", {"value": d.column}, file_key=f"{key}.trace",
            time_key=f"{key}.trace", column_key=lambda _: f"{key}.column",
        )
        return checked(
            f"{key}.column",
            lambda: _empirical_column(trace.columns["value"], d.column),
        )
    makers: dict[type, Callable[[], SizeDistribution]] = {
        s.FixedSize: lambda: Fixed(d.value),
        s.UniformSize: lambda: Uniform(d.low, d.high),
        s.LogNormalSize: lambda: LogNormal(d.mean, d.cv),
        s.ExponentialSize: lambda: Exponential(d.mean),
    }
    return checked(key, makers[type(d)])


def _empirical_column(values: object, column: str) -> Empirical:
    try:
        return Empirical(tuple(int(v) for v in values))  # type: ignore[attr-defined]
    except ValueError as exc:
        raise ValueError(f"trace column {s.show(column)} cannot be resampled: {exc}") from None
