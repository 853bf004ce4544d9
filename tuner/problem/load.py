"""Load a problem file: parse YAML, check structure, then check meaning, then build the model.

Every failure becomes one :class:`~tuner.errors.ProblemError` line of the form
``FILE: KEY: REASON`` — the user should never need a traceback to find a typo.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..errors import ProblemError, TunerError
from ..expr import Expr, compile_expr
from ..traffic import (
    Diurnal, Empirical, Exponential, Fixed, Gamma, Jitter, LogNormal, OnOff, Poisson,
    SizeDistribution, TraceReplay, Uniform, load_trace,
)
from ..units import parse_seconds
from . import schema as s
from .model import (
    CONTINUOUS_VARIABLES, ArrivalSpec, Config, Device, Family, KernelProfile, Memory,
    Neighbor, Operator, PiecewiseLinear, Problem, Quantity, Regime, Service, Slo,
    dynamic_variables,
)


class _Invalid(Exception):
    """Internal: a semantic error at ``key``; :func:`load_problem` adds the file name."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")


def load_problem(path: str | Path) -> Problem:
    """Read and validate a problem file.

    Raises:
        ProblemError: the file is missing, unreadable, malformed or inconsistent; the
            message names the file, the key and the reason on one line.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read problem file ({exc.strerror or exc})") from None
    try:
        document = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProblemError(f"{path}: {where}: malformed YAML ({reason})") from None
    if not isinstance(document, dict):
        raise ProblemError(f"{path}: top level: expected a mapping of keys but got {type(document).__name__}")
    try:
        spec = s.ProblemSpec.model_validate(document)
    except ValidationError as exc:
        raise ProblemError(f"{path}: {_describe_validation_error(exc)}") from None
    try:
        return _build(spec, path, hashlib.sha256(raw).hexdigest())
    except _Invalid as exc:
        raise ProblemError(f"{path}: {exc}") from None
    except TunerError as exc:
        raise ProblemError(str(exc)) from None


def _describe_validation_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    # Drop the discriminator tags pydantic inserts ("arrivals.poisson.rate" → "arrivals.rate").
    loc = [str(part) for part in error["loc"] if not str(part).startswith(("function-", "tagged-union"))]
    key = ".".join(loc) or "top level"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif error["type"] == "union_tag_invalid":
        message = message.replace("Input tag", "value")
    if error["type"] != "missing" and "input" in error and error["type"] != "extra_forbidden":
        message = f"{message} (got {error['input']!r})"
    return f"{key}: {message}"


def _expr(value: object, key: str, allowed: frozenset[str], constants: Mapping[str, float], unit: str | None = None) -> Expr:
    try:
        return compile_expr(value, allowed, constants, unit)
    except ValueError as exc:
        raise _Invalid(key, str(exc)) from None


def _checked(key: str, build: Callable[[], object]) -> object:
    """Run a constructor that validates, turning its ValueError into a keyed error."""
    try:
        return build()
    except ValueError as exc:
        raise _Invalid(key, str(exc)) from None


def _build(spec: s.ProblemSpec, path: Path, file_hash: str) -> Problem:
    base = path.parent
    constants = dict(spec.constants)
    regimes_size_fields = {name: _size_fields(r, base, f"regimes.{name}") for name, r in spec.regimes.items()}
    size_fields = _common_size_fields(regimes_size_fields, spec.service.batching)
    batch_vars = CONTINUOUS_VARIABLES if spec.service.batching == "continuous" else dynamic_variables(size_fields)
    device = Device(spec.device.name, spec.device.sms)

    operators = _operators(spec, batch_vars, constants)
    families = _families(spec, operators, batch_vars, constants)
    service = _service(spec, operators, size_fields, constants, device)
    regimes = {
        name: _regime(name, r, base, spec.service.batching)
        for name, r in spec.regimes.items()
    }
    return Problem(
        name=spec.name, path=str(path), file_hash=file_hash, description=spec.description.strip(),
        service=service, families=families, regimes=regimes, size_fields=size_fields,
    )


def _operators(spec: s.ProblemSpec, batch_vars: frozenset[str], constants: dict[str, float]) -> tuple[Operator, ...]:
    seen: set[str] = set()
    operators = []
    for i, op in enumerate(spec.service.operators):
        key = f"service.operators[{i}]"
        if op.name in seen:
            raise _Invalid(f"{key}.name", f"operator {op.name!r} is listed twice")
        seen.add(op.name)
        if op.family not in spec.families:
            raise _Invalid(f"{key}.family", f"unknown family {op.family!r} (families: {', '.join(spec.families)})")
        shape = tuple(
            (dim, _expr(value, f"{key}.shape.{dim}", batch_vars, constants)) for dim, value in op.shape.items()
        )
        operators.append(Operator(op.name, op.family, shape, op.repeat))
    return tuple(operators)


def _families(
    spec: s.ProblemSpec, operators: tuple[Operator, ...], batch_vars: frozenset[str], constants: dict[str, float]
) -> dict[str, Family]:
    families = {}
    for fname, fam in spec.families.items():
        users = [op for op in operators if op.family == fname]
        dims = frozenset().union(*(frozenset(d for d, _ in op.shape) for op in users)) if users else frozenset()
        configs: list[Config] = []
        for i, cfg in enumerate(fam.configs):
            key = f"families.{fname}.configs[{i}]"
            _check_in_space(fam, cfg, key)
            name = cfg.name or ",".join(f"{k}={v}" for k, v in cfg.params.items())
            if any(c.name == name for c in configs):
                raise _Invalid(f"{key}.name", f"config name {name!r} is used twice in family {fname!r}")
            profile = _profile(cfg.profile, f"{key}.profile", batch_vars | dims, constants)
            _check_profile_covers_operators(profile, users, batch_vars, f"{key}.profile")
            params = tuple((k, cfg.params[k]) for k in fam.space)
            if any(c.params == params for c in configs):
                raise _Invalid(f"{key}.params", f"two configs of family {fname!r} have the same parameters")
            configs.append(Config(fname, name, params, profile))
        space = tuple((k, tuple(v)) for k, v in fam.space.items())
        families[fname] = Family(fname, space, tuple(configs))
    return families


def _check_in_space(fam: s.FamilySpec, cfg: s.ConfigSpec, key: str) -> None:
    for param, value in cfg.params.items():
        if param not in fam.space:
            raise _Invalid(f"{key}.params.{param}", f"parameter not in the family's space ({', '.join(fam.space)})")
        if value not in fam.space[param]:
            raise _Invalid(
                f"{key}.params.{param}",
                f"value {value!r} is outside the space {fam.space[param]!r}",
            )
    missing = [p for p in fam.space if p not in cfg.params]
    if missing:
        raise _Invalid(f"{key}.params", f"missing parameter {missing[0]!r}")


def _check_profile_covers_operators(
    profile: KernelProfile, users: list[Operator], batch_vars: frozenset[str], key: str
) -> None:
    needed = set()
    for quantity in (profile.latency, profile.workspace, profile.ctas):
        if isinstance(quantity, Expr):
            needed |= quantity.names
        elif isinstance(quantity, PiecewiseLinear):
            needed.add(quantity.variable)
    for op in users:
        available = batch_vars | {d for d, _ in op.shape}
        lacking = sorted(needed - available)
        if lacking:
            raise _Invalid(key, f"uses {lacking[0]!r}, which operator {op.name!r} does not define in its shape")


def _profile(p: s.ProfileSpec, key: str, allowed: frozenset[str], constants: dict[str, float]) -> KernelProfile:
    return KernelProfile(
        latency=_latency(p.latency, f"{key}.latency", allowed, constants),
        workspace=_expr(p.workspace, f"{key}.workspace", allowed, constants, unit="bytes"),
        sm=p.sm,
        ctas=None if p.ctas is None else _expr(p.ctas, f"{key}.ctas", allowed, constants),
        ctas_per_sm=p.ctas_per_sm,
        dram=p.dram,
        persistent=p.persistent,
    )


def _latency(value: object, key: str, allowed: frozenset[str], constants: dict[str, float]) -> Quantity:
    if not isinstance(value, dict):
        return _expr(value, key, allowed, constants, unit="seconds")
    if len(value) != 1:
        raise _Invalid(key, "a latency table names exactly one variable, e.g. {batch: {1: 8 ms, 32: 20 ms}}")
    ((variable, points),) = value.items()
    if variable not in allowed:
        raise _Invalid(key, f"table variable {variable!r} is unknown (known: {', '.join(sorted(allowed))})")
    if not points:
        raise _Invalid(f"{key}.{variable}", "a latency table needs at least one point")
    xs = sorted(points)
    ys = [_checked(f"{key}.{variable}.{x}", lambda x=x: parse_seconds(points[x])) for x in xs]
    return PiecewiseLinear(variable, tuple(float(x) for x in xs), tuple(ys))  # type: ignore[arg-type]


def _service(
    spec: s.ProblemSpec, operators: tuple[Operator, ...], size_fields: frozenset[str],
    constants: dict[str, float], device: Device,
) -> Service:
    sv = spec.service
    if sv.memory.fixed > sv.memory.budget:
        raise _Invalid("service.memory.fixed", f"{sv.memory.fixed:.0f} bytes exceed the budget of {sv.memory.budget:.0f} bytes")
    per_request = _expr(sv.memory.per_request, "service.memory.per_request", size_fields, constants, unit="bytes")
    slo = Slo(sv.slo.deadline, sv.slo.ttft, sv.slo.tpot)
    if slo.deadline_s is None and slo.ttft_s is None and slo.tpot_s is None:
        raise _Invalid("service.slo", "set a deadline, or ttft and tpot for a token service")
    if sv.batching == "dynamic" and slo.deadline_s is None:
        raise _Invalid("service.slo.deadline", "a dynamic-batching service needs an end-to-end deadline")
    neighbors = tuple(
        Neighbor(n.name, _profile(n.profile, f"service.neighbors[{i}].profile", frozenset(), constants), n.gap, n.priority)
        for i, n in enumerate(sv.neighbors)
    )
    jitter = _checked("service.jitter", lambda: Jitter(sv.jitter.kind, sv.jitter.cv))
    return Service(
        batching=sv.batching, operators=operators,
        memory=Memory(sv.memory.budget, sv.memory.fixed, per_request), slo=slo,
        max_batch=sv.max_batch, max_wait_s=sv.max_wait, max_tokens=sv.max_tokens,
        max_context=sv.max_context, executors=sv.executors, priority=sv.priority,
        launch_overhead_s=sv.launch_overhead, neighbors=neighbors, jitter=jitter, device=device,  # type: ignore[arg-type]
    )


def _size_fields(regime: s.RegimeSpec, base: Path, key: str) -> frozenset[str]:
    if regime.sizes is not None:
        return frozenset(regime.sizes)
    if isinstance(regime.arrivals, s.TraceSpec):
        trace = _checked(f"{key}.arrivals.file", lambda: _trace(regime.arrivals, base))
        return frozenset(trace.columns)  # type: ignore[attr-defined]
    return frozenset()


def _common_size_fields(per_regime: dict[str, frozenset[str]], batching: str) -> frozenset[str]:
    names = list(per_regime)
    first = per_regime[names[0]]
    for name in names[1:]:
        if per_regime[name] != first:
            raise _Invalid(
                f"regimes.{name}.sizes",
                f"size fields {sorted(per_regime[name])} differ from regime {names[0]!r}'s {sorted(first)}",
            )
    if batching == "continuous":
        for name, fields in per_regime.items():
            if not {"prompt", "output"} <= fields:
                raise _Invalid(f"regimes.{name}.sizes", "a continuous-batching service needs 'prompt' and 'output' sizes")
    return first


def _trace(spec: s.TraceSpec, base: Path):
    return load_trace(base / spec.file, spec.time_column, spec.columns)


def _regime(name: str, r: s.RegimeSpec, base: Path, batching: str) -> Regime:
    key = f"regimes.{name}"
    arrivals = _arrivals(r.arrivals, base, f"{key}.arrivals")
    sizes = None if r.sizes is None else {
        field: _size(dist, base, f"{key}.sizes.{field}") for field, dist in r.sizes.items()
    }
    return Regime(name, r.description.strip(), arrivals, sizes, r.horizon, r.memory_budget)


def _arrivals(a: object, base: Path, key: str) -> ArrivalSpec:
    rate = getattr(a, "rate", None)
    rate_range = None
    if isinstance(rate, tuple):
        low, high = rate
        if not 0 < low <= high:
            raise _Invalid(f"{key}.rate", f"a rate bucket [low, high] needs 0 < low <= high but got {list(rate)}")
        rate_range = (float(low), float(high))
    builders: dict[type, Callable[[float], object]] = {
        s.PoissonSpec: lambda r: Poisson(r),
        s.GammaSpec: lambda r: Gamma(r, a.burstiness),
        s.OnOffSpec: lambda r: OnOff(r, a.on, a.off),
        s.DiurnalSpec: lambda r: Diurnal(r, a.amplitude, a.period, a.phase),
    }
    if isinstance(a, s.TraceSpec):
        trace = _trace(a, base)
        builders[s.TraceSpec] = lambda r: TraceReplay(trace, r, a.offset)
    make = builders[type(a)]
    fixed_rate = rate if not isinstance(rate, tuple) else None

    def build(sampled: float | None) -> object:
        return make(sampled if sampled is not None else fixed_rate)

    probe = rate_range[0] if rate_range else None
    _checked(f"{key}", lambda: build(probe))
    return ArrivalSpec(build, rate_range)


def _size(d: object, base: Path, key: str) -> SizeDistribution:
    if isinstance(d, int):
        return _checked(key, lambda: Fixed(d))  # type: ignore[return-value]
    if isinstance(d, s.EmpiricalSize):
        if (d.values is None) == (d.trace is None):
            raise _Invalid(key, "give either 'values' or 'trace' with 'column'")
        if d.values is not None:
            return _checked(key, lambda: Empirical(tuple(d.values)))  # type: ignore[return-value]
        if d.column is None:
            raise _Invalid(f"{key}.column", "required with 'trace'")
        trace = load_trace(base / d.trace, size_columns={"value": d.column})
        return Empirical(tuple(int(v) for v in trace.columns["value"]))
    makers: dict[type, Callable[[], SizeDistribution]] = {
        s.FixedSize: lambda: Fixed(d.value),
        s.UniformSize: lambda: Uniform(d.low, d.high),
        s.LogNormalSize: lambda: LogNormal(d.mean, d.cv),
        s.ExponentialSize: lambda: Exponential(d.mean),
    }
    return _checked(key, makers[type(d)])  # type: ignore[return-value]
