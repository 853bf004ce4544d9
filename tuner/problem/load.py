"""Load a problem file: parse YAML, check structure, then check meaning, then build the model.

Every failure becomes one :class:`~tuner.errors.ProblemError` line of the form
``FILE: KEY: REASON`` — the user should never need a traceback to find a typo. The
stages, in order: :mod:`.document` (bytes → YAML data), :mod:`.schema` (structure and
single values, explained by :mod:`.explain`), this module (names, cross-references,
one key against another), :mod:`.probe` (every expression evaluated at probe batches).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from .. import bundled
from ..errors import ProblemError
from ..expr import FUNCTIONS, UNIT_CONSTANTS, Expr, compile_expr, is_identifier, names_read
from ..traffic import Jitter
from ..units import BYTE_UNITS, TIME_UNITS, is_quantity, parse_bytes, parse_seconds, size_text
from ..engine.defaults import H100_VLLM_V1
from . import bounds, bucket_rules, kernels, probe, regimes
from .batching import BATCHING, batching_kind
from . import schema as s
from .knobs import NOTHING_TO_OVERLAP, knob_space
from .document import read_document
from .explain import Invalid, checked, explain
from .model import (
    EAGER_HOST_LAUNCH_S, EngineSettings, WHOLE_DEVICE, Config, Device, Family, KernelProfile, Memory,
    Neighbor, Operator, Partition, PiecewiseLinear, Problem, Quantity, Service, Slo, same_value,
    service_variables,
)


def load_problem(path: str | Path, resources: object | None = None, device: str | None = None) -> Problem:
    """Read and validate a problem file.

    Args:
        path: the YAML file, or the name of a bundled problem (``llm_decode``;
            :mod:`tuner.bundled`) when no such file exists.
        resources: where built-in kernel families get compiled resources from (a
            :class:`tuner.profile.cache.CompileCache`); by default a compile cache in
            ``$TUNER_STORAGE`` or ``sqlite:///results.db``, opened on first use.
        device: a device preset to profile built-in families on instead of the file's.

    Raises:
        ProblemError: the file is missing, unreadable, malformed or inconsistent; the
            message names the file, the key and the reason on one line.
    """
    path = bundled.resolve(path)
    if not path.exists():
        raise ProblemError(f"{path}: {bundled.missing_hint()}")
    raw, spec = read_spec(path)
    try:
        return _build(spec, path, hashlib.sha256(raw).hexdigest(), resources, device)
    except Invalid as exc:
        raise ProblemError(f"{path}: {exc}") from None


def read_spec(path: Path) -> tuple[bytes, s.ProblemSpec]:
    """A problem file's bytes and its document validated for structure only (nothing
    built: no kernel compiled, no trace read).

    Raises:
        ProblemError: unreadable or malformed, on one line naming file and key.
    """
    raw, document = read_document(path)
    try:
        return raw, s.ProblemSpec.model_validate(document)
    except ValidationError as exc:
        raise ProblemError(f"{path}: {explain(exc, document)}") from None


def _expr(
    value: object, key: str, allowed: frozenset[str], constants: Mapping[str, float], unit: str | None = None
) -> Expr:
    return checked(key, lambda: compile_expr(value, allowed, constants, unit))


def _build(spec: s.ProblemSpec, path: Path, file_hash: str, resources: object | None,
           device_override: str | None = None) -> Problem:
    base = path.parent
    batching = spec.service.batching
    size_fields = regimes.size_fields(spec.regimes, base, batching)
    batch_vars = service_variables(batching, size_fields)
    constants = _constants(spec.constants, batch_vars)
    factors = kernels.factor_set(spec.device.factors)  # checked even where no built-in family prices with it
    device = Device(spec.device.name, spec.device.sms, spec.device.saturating_share or Device.saturating_share)
    partitions = _partitions(spec)
    operators = _operators(spec, batch_vars, constants, partitions)
    families = _families(spec, operators, batch_vars, constants)
    if any(fam.kernel is not None for fam in spec.families.values()):
        preset = kernels.device_preset(device_override or spec.device.name)
        device = Device(preset.name, preset.sms, spec.device.saturating_share or preset.saturating_share)
        families.update(kernels.kernel_families(spec, operators, preset, factors, resources, base, constants))
    service = _service(spec, operators, size_fields, constants, device, partitions)
    knobs = knob_space(spec.service.knobs, service, lambda family: families[family].configs)
    widest = knobs.widest(service)  # the buckets and probes cover every value the knobs may take
    built = {name: regimes.regime(name, r, base, service) for name, r in spec.regimes.items()}
    points = probe.probe_points(widest, size_fields)
    probe.check_operators(operators, families, points)
    budget = max([service.memory.budget, *(r.memory_budget for r in built.values() if r.memory_budget is not None)])
    reachable = probe.reachable_points(widest, size_fields, budget)
    if any(fam.kernel is not None for fam in spec.families.values()):
        kernels.check_shapes(spec, operators, families, reachable)
    probe.check_neighbors(service.neighbors)
    probe.check_per_request(service.memory.per_request, size_fields, service.max_context)
    operators, warnings = bucket_rules.bucketed(spec, operators, families, reachable, batch_vars)
    service = dataclasses.replace(service, operators=operators)
    return Problem(
        name=spec.name, path=str(path), file_hash=file_hash, description=spec.description.strip(),
        service=service, families=families, regimes=built, size_fields=size_fields,
        warnings=tuple(f"{path}: {warning}" for warning in warnings), objective=spec.objective, knobs=knobs,
    )


def _constants(written: Mapping[str, object], batch_vars: frozenset[str]) -> dict[str, float]:
    """Named numbers, in file order; each may be a quantity ('128 KiB') or an expression
    over units and the constants above it."""
    constants: dict[str, float] = {}
    names = list(written)
    for index, (name, value) in enumerate(written.items()):
        key = f"constants.{name}"
        _check_name(name, key, "constant", batch_vars)
        if isinstance(value, str) and is_quantity(value, BYTE_UNITS):
            number = checked(key, lambda value=value: parse_bytes(value))  # '1e308 GiB' overflows
        elif isinstance(value, str) and is_quantity(value, TIME_UNITS):
            number = checked(key, lambda value=value: parse_seconds(value))
        else:
            number = _constant(value, key, name, constants, names[index + 1:])
        constants[name] = _finite(number, key)
    return constants


def _constant(value: object, key: str, name: str, constants: dict[str, float], below: list[str]) -> float:
    """A constant's expression over the constants above it; one that uses a constant
    below it is told so, not that the name is unknown."""
    try:
        return _expr(value, key, frozenset(), constants).evaluate({})
    except Invalid:
        later = [other for other in below if other in names_read(value) and other not in UNIT_CONSTANTS]
        if later:
            raise Invalid(key, f"{s.show(later[0])} is defined after {s.show(name)}; constants may only use those above them") from None
        raise


def _finite(number: float, key: str) -> float:
    if not math.isfinite(number):
        raise Invalid(key, f"must be a finite number but got {number}")
    return number


def _check_name(name: str, key: str, what: str, taken: frozenset[str]) -> None:
    """A name that expressions read must be an identifier that hides no variable or function."""
    if not is_identifier(name):
        raise Invalid(
            key, f"{what} name {s.show(name)} must be an identifier (letters, digits, '_'; not starting with '_' or a digit)"
        )
    if name in taken:
        raise Invalid(key, f"{what} name {s.show(name)} is already a batch variable or constant; rename it")
    if name in FUNCTIONS:
        raise Invalid(key, f"{what} name {s.show(name)} hides the function {name}(); rename it")


def _partitions(spec: s.ProblemSpec) -> dict[str, Partition]:
    """The file's SM partitions by name; regimes may only change their shares."""
    partitions = {name: Partition(name, p.share, p.sized_to == "partition", p.priority)
                  for name, p in spec.service.partitions.items()}
    if "device" in partitions:
        raise Invalid("service.partitions.device", "'device' names the whole GPU; call the partition something else")
    for name, r in spec.regimes.items():
        for part in (r.partitions or {}):
            if part not in partitions:
                raise Invalid(f"regimes.{name}.partitions.{part}",
                              f"no such partition (service.partitions: {', '.join(partitions) or 'none'})")
    return partitions


def _placed(name: str | None, key: str, partitions: Mapping[str, Partition]) -> Partition | None:
    """The partition ``name`` refers to (None: not placed)."""
    if name is None:
        return None
    if name == "device":
        return WHOLE_DEVICE
    if name not in partitions:
        raise Invalid(key, f"no such partition {s.show(name)} (service.partitions: {', '.join(partitions) or 'none'})")
    return partitions[name]


def _operators(spec: s.ProblemSpec, batch_vars: frozenset[str], constants: dict[str, float],
               partitions: Mapping[str, Partition]) -> tuple[Operator, ...]:
    seen: set[str] = set()
    operators = []
    for i, op in enumerate(spec.service.operators):
        key = f"service.operators[{i}]"
        if op.name in seen:
            raise Invalid(f"{key}.name", f"operator {s.show(op.name)} is listed twice; operator names must be unique")
        if "=" in op.name:
            raise Invalid(f"{key}.name", f"operator name {s.show(op.name)} must not contain '=' (--assign uses OP=CONFIG)")
        seen.add(op.name)
        if op.family not in spec.families:
            raise Invalid(f"{key}.family", f"unknown family {s.show(op.family)} (families: {', '.join(spec.families)})")
        shape = []
        for dim, value in op.shape.items():
            _check_name(dim, f"{key}.shape.{dim}", "shape dimension", batch_vars | frozenset(constants))
            shape.append((dim, _expr(value, f"{key}.shape.{dim}", batch_vars, constants)))
        operators.append(Operator(op.name, op.family, tuple(shape), op.repeat,
                                  partition=_placed(op.partition, f"{key}.partition", partitions)))
    return tuple(operators)


def _families(
    spec: s.ProblemSpec, operators: tuple[Operator, ...], batch_vars: frozenset[str], constants: dict[str, float]
) -> dict[str, Family]:
    families = {}
    for fname, fam in spec.families.items():
        if fam.kernel is not None:
            continue  # built-in Triton family: see .kernels
        users = [op for op in operators if op.family == fname]
        dims = frozenset(d for op in users for d, _ in op.shape)
        configs: list[Config] = []
        for i, cfg in enumerate(fam.configs):
            key = f"families.{fname}.configs[{i}]"
            _check_in_space(fam, cfg, key)
            name = cfg.name or ",".join(f"{k}={v}" for k, v in cfg.params.items())
            if cfg.name is not None and ("=" in name or "," in name or not name.strip()):
                raise Invalid(
                    f"{key}.name", f"config name {s.show(name)} must be non-empty without '=' or ',' (--assign OP=NAME)"
                )
            if any(c.name == name for c in configs):
                raise Invalid(f"{key}.name", f"config name {s.show(name)} is used twice in family {s.show(fname)}")
            params = tuple((k, cfg.params[k]) for k in fam.space)
            twin = next((c for c in configs if c.params == params), None)
            if twin is not None:
                raise Invalid(f"{key}.params", f"same parameters as config {s.show(twin.name)} of family {s.show(fname)}")
            profile = _profile(cfg.profile, f"{key}.profile", batch_vars | dims, constants)
            _check_profile_covers_operators(profile, users, batch_vars, f"{key}.profile")
            configs.append(Config(fname, name, params, profile))
        space = tuple((k, tuple(v)) for k, v in fam.space.items())
        families[fname] = Family(fname, space, tuple(configs))
    return families


def _check_in_space(fam: s.FamilySpec, cfg: s.ConfigSpec, key: str) -> None:
    for param, value in cfg.params.items():
        if param not in fam.space:
            raise Invalid(f"{key}.params.{param}", f"parameter not in the family's space ({', '.join(fam.space)})")
        if not any(same_value(value, allowed) for allowed in fam.space[param]):
            raise Invalid(f"{key}.params.{param}", f"value {s.show(value)} is outside the space {s.show(fam.space[param])}")
    missing = [p for p in fam.space if p not in cfg.params]
    if missing:
        raise Invalid(
            f"{key}.params", f"missing parameter {s.show(missing[0])}; every config sets every parameter of the space"
        )


def _check_profile_covers_operators(
    profile: KernelProfile, users: list[Operator], batch_vars: frozenset[str], key: str
) -> None:
    needed: set[str] = set()
    for quantity in (profile.latency, profile.workspace, profile.ctas):
        if isinstance(quantity, Expr):
            needed |= quantity.names
        elif isinstance(quantity, PiecewiseLinear):
            needed.add(quantity.variable)
    for op in users:
        lacking = sorted(needed - batch_vars - {d for d, _ in op.shape})
        if lacking:
            raise Invalid(key, f"uses {s.show(lacking[0])}, which operator {s.show(op.name)} does not define in its shape")


def _profile(p: s.ProfileSpec, key: str, allowed: frozenset[str], constants: dict[str, float]) -> KernelProfile:
    return KernelProfile(
        latency=_latency(p.latency, f"{key}.latency", allowed, constants),
        workspace=_expr(p.workspace, f"{key}.workspace", allowed, constants, unit="bytes"),
        sm=p.sm,
        ctas=None if p.ctas is None else _expr(p.ctas, f"{key}.ctas", allowed, constants),
        ctas_per_sm=p.ctas_per_sm,
        dram=p.dram,
        persistent=p.persistent,
        compute=p.compute,
    )


def _latency(value: object, key: str, allowed: frozenset[str], constants: dict[str, float]) -> Quantity:
    if not isinstance(value, dict):
        return _expr(value, key, allowed, constants, unit="seconds")
    if len(value) != 1:
        raise Invalid(key, "a latency table names exactly one variable, e.g. {batch: {1: 8 ms, 32: 20 ms}}")
    ((variable, points),) = value.items()
    if variable not in allowed:
        raise Invalid(key, f"table variable {s.show(variable)} is unknown (known: {', '.join(sorted(allowed))})")
    if not isinstance(points, dict) or not points:
        raise Invalid(
            f"{key}.{variable}",
            f"expected a mapping of {variable} to latency, e.g. {{1: 8 ms, 32: 20 ms}}, but got {s.show(points)}",
        )
    table: dict[float, float] = {}
    for x, y in points.items():
        where = f"{key}.{variable}.{x}"
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x < 0:
            raise Invalid(where, f"a table point must be a number >= 0 but got {s.show(x)}")
        checked(where, lambda y=y: s.refuse_bare(y, TIME_UNITS, "ms"))
        seconds = checked(where, lambda y=y: parse_seconds(y))
        if seconds < 0:
            raise Invalid(where, f"a latency must not be negative but got {s.show(y)}")
        table[float(x)] = seconds
    xs = sorted(table)
    return PiecewiseLinear(variable, tuple(xs), tuple(table[x] for x in xs))


def _router(sv: s.ServiceSpec) -> tuple[int, int] | None:
    """``(experts, top_k)`` of the service's MoE router, if it declares one."""
    if sv.router is None:
        return None
    if not batching_kind(sv.batching).token_level:
        raise Invalid("service.router", "routing is drawn per iteration of tokens; it needs token-level batching "
                                        f"({', '.join(n for n, k in BATCHING.items() if k.token_level)})")
    if sv.router.top_k > sv.router.experts:
        raise Invalid("service.router.top_k", f"a token goes to {sv.router.top_k} distinct experts, "
                                              f"but there are only {sv.router.experts}")
    return sv.router.experts, sv.router.top_k


def _check_sizes(sv: s.ServiceSpec) -> None:
    """Executors and batch sizes the simulator can hold (why each limit: :mod:`.bounds`)."""
    bounds.check_count("service.executors", sv.executors, bounds.MAX_EXECUTORS, "executors",
                       "a GPU runs at most 128 kernels at once, so more executors only queue")
    bounds.check_count("service.max_batch", sv.max_batch, bounds.MAX_BATCH, "requests per batch",
                       "64 times vLLM's largest max_num_seqs; each batch is planned request by request")
    for name in ("max_tokens", "max_context"):
        bounds.check_count(f"service.{name}", getattr(sv, name), bounds.MAX_TOKENS, "tokens",
                           "2^24, beyond any served model's context window")


def _service(
    spec: s.ProblemSpec, operators: tuple[Operator, ...], size_fields: frozenset[str],
    constants: dict[str, float], device: Device, partitions: Mapping[str, Partition],
) -> Service:
    sv = spec.service
    _check_sizes(sv)
    if sv.memory.fixed > sv.memory.budget:
        raise Invalid(
            "service.memory.fixed",
            f"{size_text(sv.memory.fixed)} exceed the budget of {size_text(sv.memory.budget)}",
        )
    per_request = _expr(sv.memory.per_request, "service.memory.per_request", size_fields, constants, unit="bytes")
    slo = Slo(sv.slo.deadline, sv.slo.ttft, sv.slo.tpot, sv.slo.attainment)
    if slo.deadline_s is None and slo.ttft_s is None and slo.tpot_s is None:
        raise Invalid("service.slo", "set a deadline, or ttft and tpot for a token service")
    if not batching_kind(sv.batching).token_level:
        if slo.deadline_s is None:
            raise Invalid("service.slo.deadline", "a dynamic-batching service needs an end-to-end deadline")
        for unused in ("ttft", "tpot", "max_tokens"):
            if unused in sv.slo.model_fields_set | sv.model_fields_set:
                where = f"service.slo.{unused}" if unused in ("ttft", "tpot") else f"service.{unused}"
                raise Invalid(where, "only applies to continuous batching (batching: continuous); remove it")
    else:
        if "max_wait" in sv.model_fields_set:
            raise Invalid("service.max_wait", "only applies to dynamic batching; continuous batching never waits")
        if sv.max_batch > sv.max_tokens:
            raise Invalid(
                "service.max_batch",
                f"{sv.max_batch} sequences cannot each decode a token within max_tokens={sv.max_tokens}; "
                "make max_batch <= max_tokens",
            )
    host_launch, graph_replay = _launch_costs(sv)
    if sv.overlap == "two_batch":
        if not batching_kind(sv.batching).two_batch:
            raise Invalid("service.overlap", "two_batch splits a continuous-batching iteration's sequences; "
                                             "it needs batching: continuous")
        if all(op.partition is None or op.partition == sv.partition for op in sv.operators):
            raise Invalid("service.overlap", NOTHING_TO_OVERLAP)
    names = [n.name for n in sv.neighbors]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise Invalid(f"service.neighbors[{i}].name", f"neighbour {s.show(name)} is listed twice")
    neighbors = tuple(
        Neighbor(n.name, _profile(n.profile, f"service.neighbors[{i}].profile", frozenset(), constants),
                 n.gap, n.priority,
                 _placed(n.partition, f"service.neighbors[{i}].partition", partitions) or WHOLE_DEVICE)
        for i, n in enumerate(sv.neighbors)
    )
    try:
        jitter = Jitter(sv.jitter.kind, sv.jitter.cv)
    except ValueError as exc:
        raise Invalid("service.jitter.cv", f"{exc}; only kind: lognormal takes a free cv") from None
    baseline_batch: tuple[tuple[str, float], ...] = ()
    if sv.baseline_batch is not None:
        allowed = service_variables(sv.batching, size_fields)
        for name, value in sv.baseline_batch.items():
            if name not in allowed:
                raise Invalid(f"service.baseline_batch.{name}",
                              f"not a batch variable (variables: {', '.join(sorted(allowed))})")
            if not (math.isfinite(value) and value >= 0):
                raise Invalid(f"service.baseline_batch.{name}", f"must be a finite number >= 0 but got {value}")
        baseline_batch = tuple(sv.baseline_batch.items())
    return Service(
        batching=sv.batching, operators=operators, baseline_batch=baseline_batch,
        memory=Memory(sv.memory.budget, sv.memory.fixed, per_request), slo=slo,
        max_batch=sv.max_batch, max_wait_s=sv.max_wait, max_tokens=sv.max_tokens,
        max_context=sv.max_context, executors=sv.executors, priority=sv.priority,
        launch_overhead_s=sv.launch_overhead, neighbors=neighbors, jitter=jitter, device=device,
        partition=_placed(sv.partition, "service.partition", partitions) or WHOLE_DEVICE,
        overlap=sv.overlap, router=_router(sv),
        launch=sv.launch, host_launch_s=host_launch, graph_replay_s=graph_replay,
        engine=_engine(sv, constants),
    )


def _engine(sv: s.ServiceSpec, constants: dict[str, float]) -> EngineSettings | None:
    """``service.engine`` of a ``batching: vllm`` service; its CPU costs default to the
    H100/vLLM calibration (tuner.engine.defaults)."""
    kind = batching_kind(sv.batching)
    spec = sv.engine
    if not kind.engine:
        if spec is not None:
            raise Invalid("service.engine", f"only applies to an engine's batching (batching: "
                                            f"{', '.join(n for n, k in BATCHING.items() if k.engine)}); remove it")
        return None
    if spec is None:
        raise Invalid("service.engine", f"batching: {sv.batching} needs an engine block with kv_bytes_per_token")
    if sv.executors != 1:
        raise Invalid("service.executors", f"batching: {sv.batching} runs one engine; use executors: 1")
    kv = _expr(spec.kv_bytes_per_token, "service.engine.kv_bytes_per_token", frozenset(), constants,
               unit="bytes").evaluate({})
    if not kv > 0:
        raise Invalid("service.engine.kv_bytes_per_token", f"must be positive, got {kv:g}")
    if spec.capture_sizes is not None and any(isinstance(c, bool) or c < 1 for c in spec.capture_sizes):
        raise Invalid("service.engine.capture_sizes", "every capture size must be a positive integer")
    fitted = H100_VLLM_V1
    return EngineSettings(
        kv_bytes_per_token=kv, block_size=spec.block_size, num_gpu_blocks=spec.num_gpu_blocks,
        prefix_caching=spec.prefix_caching, cuda_graphs=spec.cuda_graphs,
        capture_sizes=None if spec.capture_sizes is None else tuple(sorted(set(spec.capture_sizes))),
        async_scheduling=spec.async_scheduling,
        step_cpu_s=fitted.step if spec.step_cpu is None else spec.step_cpu,
        request_cpu_s=fitted.requests if spec.request_cpu is None else spec.request_cpu,
        request_overhead_s=fitted.request_overhead_s if spec.request_overhead is None else spec.request_overhead)


def _launch_costs(sv: s.ServiceSpec) -> tuple[float, float]:
    """``(host_launch_s, graph_replay_s)`` of ``service.launch``: each key belongs to one
    mode, so a file that sets the other mode's is told in one line rather than ignored."""
    if sv.launch == "eager":
        if sv.graph_replay is not None:
            raise Invalid("service.graph_replay", "only applies to launch: graphs (an eager engine replays no "
                                                  "graph; its cost per launch is host_launch)")
        return (EAGER_HOST_LAUNCH_S if sv.host_launch is None else sv.host_launch), 0.0
    if sv.host_launch is not None:
        raise Invalid("service.host_launch", "only applies to launch: eager (under graphs the host replays one "
                                             "graph per iteration: set graph_replay)")
    return 0.0, (0.0 if sv.graph_replay is None else sv.graph_replay)
