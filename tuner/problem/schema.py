"""The shape of a problem file, as pydantic models.

This layer checks structure and single values (unknown keys, wrong types, negative or
infinite quantities); meaning (expressions naming known variables, configs inside their
space, one key against another) is checked by :mod:`tuner.problem.load`, which knows
the whole file. Quantities stay as written (``'4 GiB'``, ``'10 ms'``) until a validator
converts them, so errors quote the input.

Models are strict (``true`` is not an integer, ``'5'`` is not a number) because YAML
already types its scalars; an ambiguous value is more likely a typo than an intent.
Where a key takes several forms (a number or an expression, a rate or a bucket), a
single validator decides, so a bad value gets one message instead of one per form.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, model_validator

from ..errors import SHOWN_CHARS, shown_value
from ..units import BYTE_UNITS, TIME_UNITS, is_bare_number, parse_bytes, parse_seconds
from .batching import BATCHING


class Strict(BaseModel):
    """Every block of a problem file: unknown keys refused, values not coerced (``"8"`` is
    not 8), no NaN or infinity, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


#: Python's repr of a message's value, bounded: each level shows its first few items and
#: at most three levels, so a value from a hostile file (aliases nesting a billion items)
#: costs microseconds to quote, never a walk over all of it.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60


def show(value: object) -> str:
    """A value as a message quotes it, in at most about :data:`~tuner.errors.SHOWN_CHARS`
    characters: a string through :func:`~tuner.errors.shown_value` (so a cut one says
    its length, and every echo of typed text reads alike), anything else as a bounded
    repr, so a message stays one readable line whatever the file holds."""
    if isinstance(value, str):
        return shown_value(value)
    text = _REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def refuse_bare(value: object, units: Mapping[str, float], example: str) -> None:
    """Refuse a bare number other than 0 where a time or a size is meant: ``latency: 10``
    read as 10 seconds and ``workspace: 2`` as 2 bytes, silently, as ``tpot: 60`` did.

    Raises:
        ValueError: naming the value, an example with a unit and the units.
    """
    if is_bare_number(value) and float(value) != 0:  # type: ignore[arg-type]
        raise ValueError(f"{show(value)} has no unit: write it with one, e.g. '{value} {example}' "
                         f"(units: {', '.join(units)})")


def _size_expr(value: object) -> int | float | str:
    """A size in bytes: a quantity ('2 GiB') or an expression of the shape or sizes."""
    refuse_bare(value, BYTE_UNITS, "GiB")
    return _expr_text(value)


def _quantity(parse: Callable[[object], float], positive: bool, units: Mapping[str, float],
              example: str) -> Callable[[object], float]:
    """A validator that parses a quantity and refuses negative (or, if asked, zero) values,
    and a bare number other than 0: ``tpot: 60`` read as 60 seconds and ``budget: 80``
    as 80 bytes, silently, where their writers meant milliseconds and gigabytes."""

    def check(value: object) -> float:
        number = parse(value)
        if number < 0:
            raise ValueError(f"must not be negative but got {show(value)}")
        refuse_bare(value, units, example)
        if positive and number == 0:
            raise ValueError(f"must be greater than 0 but got {show(value)}")
        return number

    return check


def _expr_text(value: object) -> int | float | str:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number, a quantity such as '4 GiB' or an expression but got {show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number but got {show(value)}")
    return value


def _batching_name(value: object) -> str:
    if not isinstance(value, str) or value not in BATCHING:
        names = [repr(name) for name in BATCHING]
        raise ValueError(f"must be {', '.join(names[:-1])} or {names[-1]} but got {show(value)}")
    return value


def _scalar(value: object) -> int | float | str | bool:
    if not isinstance(value, (int, float, str, bool)):
        raise ValueError(f"expected a number, a string or true/false but got {show(value)}")
    return value


def _rate(value: object) -> float | tuple[float, float]:
    """A rate in requests per second, or a bucket ``[low, high]`` sampled per seed."""
    def number(x: object) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ValueError(
                f"expected a rate in requests per second (e.g. 100) or a bucket [low, high] but got {show(value)}"
            )
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"a rate must be a finite number greater than 0 but got {show(value)}")
        return float(x)

    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError(f"a rate bucket is [low, high] but got {show(value)}")
        low, high = number(value[0]), number(value[1])
        if low > high:
            raise ValueError(f"a rate bucket [low, high] needs low <= high but got {show(value)}")
        return (low, high)
    return number(value)


def _latency(value: object) -> object:
    """A duration, an expression in seconds, or a one-variable table (checked by the loader)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number but got {show(value)}")
    refuse_bare(value, TIME_UNITS, "ms")
    try:
        return _expr_text(value)
    except ValueError:
        raise ValueError(
            "expected a duration ('8 ms'), an expression in seconds or a table "
            f"{{batch: {{1: 8 ms, 32: 20 ms}}}} but got {show(value)}"
        ) from None


def _bare_size(value: object) -> object:
    """A bare count ``n`` is short for ``{dist: fixed, value: n}``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"dist": "fixed", "value": value}
    return value


Seconds = Annotated[float, BeforeValidator(_quantity(parse_seconds, False, TIME_UNITS, "ms"))]
PositiveSeconds = Annotated[float, BeforeValidator(_quantity(parse_seconds, True, TIME_UNITS, "ms"))]
Bytes = Annotated[float, BeforeValidator(_quantity(parse_bytes, False, BYTE_UNITS, "GiB"))]
PositiveBytes = Annotated[float, BeforeValidator(_quantity(parse_bytes, True, BYTE_UNITS, "GiB"))]
ExprText = Annotated[Union[int, float, str], PlainValidator(_expr_text)]
SizeExpr = Annotated[Union[int, float, str], PlainValidator(_size_expr)]
BatchingName = Annotated[str, PlainValidator(_batching_name)]
Scalar = Annotated[Union[int, float, str, bool], PlainValidator(_scalar)]
Rate = Annotated[Union[float, tuple[float, float]], PlainValidator(_rate)]
Latency = Annotated[object, PlainValidator(_latency)]


class DeviceSpec(Strict):
    """``saturating_share``: the share of SMs at which a streaming kernel saturates DRAM
    (a preset's is derived from its per-SM bandwidth; 0.5 otherwise). ``factors``: the
    analytic model's efficiency factors, by name (``tuner.profile.factor_sets``)."""

    name: str = "generic"
    sms: int = Field(132, gt=0)
    saturating_share: float | None = Field(None, gt=0, le=1)
    factors: str = "a100-cublas"


class PartitionSpec(Strict):
    """An SM partition: ``share`` of the SMs (MPS active-thread percentage / 100, a
    green context's SM count over the device's); ``sized_to``: what its kernels size
    persistent grids and split counts to (``partition`` when told its SM count);
    ``priority``: added to its kernels' stream priority (lower first)."""

    share: float = Field(gt=0, le=1)
    sized_to: Literal["partition", "device"] = "partition"
    priority: int = 0


class ProfileSpec(Strict):
    """``latency`` is a duration, an expression in seconds, or a table ``{batch: {1: 8 ms}}``.

    ``sm`` is the demand of a kernel without a grid; ``ctas`` (with ``ctas_per_sm``)
    derives it per wave instead, so giving both would leave one silently ignored.
    """

    latency: Latency
    workspace: SizeExpr = 0
    sm: float = Field(1.0, gt=0, le=1)
    ctas: ExprText | None = None
    ctas_per_sm: int = Field(1, gt=0)
    dram: float = Field(0.0, ge=0, le=1)
    persistent: bool = False
    compute: float | None = Field(None, ge=0, le=1)

    @model_validator(mode="after")
    def _sm_or_ctas(self) -> ProfileSpec:
        if "sm" in self.model_fields_set and self.ctas is not None:
            raise ValueError("give either 'sm' or 'ctas' (with ctas_per_sm), not both: the grid decides the SM share")
        return self


class ConfigSpec(Strict):
    """One entry of a family's ``configs:`` list: its parameters and profile (``name`` defaults to the parameters)."""

    name: str | None = None
    params: dict[str, Scalar]
    profile: ProfileSpec


class GemmCostSpec(Strict):
    """A user kernel timed as a tiled GEMM: its M, N, K as expressions of the shape, and
    the kernel parameter that is each model tile parameter (``BLOCK_M: BLOCK_SIZE_M``)."""

    M: ExprText
    N: ExprText
    K: ExprText
    tile: dict[str, str]


class StreamCostSpec(Strict):
    """A user kernel bound by the bytes it moves (expressions of the shape)."""

    bytes: ExprText
    flops: ExprText | None = None


class CostSpec(Strict):
    """How the analytic model times a user kernel: one cost class."""

    gemm: GemmCostSpec | None = None
    memory_bound: StreamCostSpec | None = None

    @model_validator(mode="after")
    def _one_class(self) -> CostSpec:
        if (self.gemm is None) == (self.memory_bound is None):
            raise ValueError("name one cost class: 'gemm' or 'memory_bound'")
        return self


class UserKernelSpec(Strict):
    """What tuner needs of a user's kernel besides the kernel (``kernel: module:function``):
    its configs (``module:NAME`` of a ``triton.Config`` list, or inline parameter maps with
    ``num_warps``/``num_stages``), its autotune key's dimensions, the argument builder
    (``module:function``, shape and device → args, kwargs, grid), its cost class, its
    workspace in bytes (an expression of the shape) and the argument it writes. For a
    kernel under ``@triton.autotune``, ``configs`` and ``key`` default to the decorator's."""

    configs: str | list[dict[str, Scalar]] | None = Field(None, min_length=1)
    key: list[str] | None = Field(None, min_length=1)
    arguments: str
    cost: CostSpec
    workspace: SizeExpr = 0
    output: str | None = None


class FamilySpec(Strict):
    """Declared configs (``space`` and ``configs`` with profiles), a built-in Triton family
    (``kernel``, its ``options``, and ``space`` narrowing its parameters), or a user's
    Triton kernel (``kernel: module:function`` with ``user``)."""

    kernel: str | None = None
    options: dict[str, Scalar] = {}
    space: dict[str, list[Scalar]] = {}
    configs: list[ConfigSpec] | None = None
    user: UserKernelSpec | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> FamilySpec:
        if (self.user is not None) != (self.kernel is not None and ":" in self.kernel):
            raise ValueError("a user's kernel is named as 'module:function' together with 'user' "
                             "(its configs, key, arguments and cost); a built-in one by name alone")
        if self.user is not None and self.options:
            raise ValueError("'options' belong to a built-in 'kernel' family; a user kernel's go in its configs")
        if self.kernel is None:
            if not self.configs:
                raise ValueError("declare 'configs' (with 'space'), or name a built-in 'kernel' family")
            if self.options:
                raise ValueError("'options' belong to a built-in 'kernel' family")
        elif self.configs is not None:
            raise ValueError("a built-in 'kernel' family enumerates its configs from 'space'; drop 'configs'")
        for name, values in self.space.items():
            if not values:
                raise ValueError(f"space parameter {show(name)} lists no values")
        return self


class OperatorSpec(Strict):
    """One entry of ``service.operators``: a kernel call per batch, its shape expressions and shape buckets."""

    name: str = Field(min_length=1)
    family: str
    shape: dict[str, ExprText] = {}
    repeat: int = Field(1, ge=1)
    buckets: dict[str, list[float]] | None = None
    partition: str | None = None


class NeighborSpec(Strict):
    """One entry of ``service.neighbors``: a kernel stream beside the service (another model, a NCCL kernel)."""

    name: str
    profile: ProfileSpec
    gap: Seconds = 0.0
    priority: int = 0
    partition: str | None = None


class SloSpec(Strict):
    """``service.slo``: the deadline (or TTFT and TPOT) a request must meet, and the share that must meet it."""

    deadline: PositiveSeconds | None = None
    ttft: PositiveSeconds | None = None
    tpot: PositiveSeconds | None = None
    attainment: float = Field(0.9, gt=0, lt=1)


class MemorySpec(Strict):
    """``service.memory``: the budget, the fixed part (weights) and each admitted request's state."""

    budget: PositiveBytes
    fixed: Bytes = 0.0
    per_request: SizeExpr = 0


class JitterSpec(Strict):
    """``service.jitter``: how much a kernel's time varies from batch to batch."""

    kind: Literal["deterministic", "exponential", "lognormal"] = "deterministic"
    cv: float = Field(0.0, ge=0)


#: The most experts ``service.router`` takes (see :class:`RouterSpec`).
MAX_EXPERTS = 4096


class RouterSpec(Strict):
    """``service.router``: a mixture-of-experts layer's expert count and experts per token.
    At most :data:`MAX_EXPERTS`: twice the 2,048 of Switch Transformer's largest model,
    the most experts of any published MoE layer; the simulator's routing draws and the
    fused-MoE plans grow with the count (100,000 took 16.6 GiB at load)."""

    experts: int = Field(ge=2, le=MAX_EXPERTS)
    top_k: int = Field(ge=1)


class EngineSpec(Strict):
    """``service.engine``: the vLLM engine of ``batching: vllm`` (tuner.engine): its KV
    cache, prefix caching, CUDA graphs, async scheduling and CPU costs."""

    kv_bytes_per_token: ExprText
    block_size: int = Field(16, ge=1, le=4096)
    num_gpu_blocks: int | None = Field(None, ge=2, le=1 << 26)
    prefix_caching: bool = True
    cuda_graphs: bool = True
    capture_sizes: list[int] | None = Field(None, min_length=1, max_length=4096)
    async_scheduling: bool = True
    step_cpu: Seconds | None = None
    request_cpu: Seconds | None = None
    request_overhead: Seconds | None = None


class RoutingSpec(Strict):
    """A regime's ``routing:`` block: measured per-expert loads (or shares) and where they come from."""

    loads: list[float] | None = None
    shares: list[float] | None = None
    source: str = Field(min_length=1)


class ServiceSpec(Strict):
    """The ``service:`` block: operators, batching, memory, SLO, executors, launch behaviour, partitions."""

    batching: BatchingName
    operators: list[OperatorSpec] = Field(min_length=1)
    memory: MemorySpec
    slo: SloSpec
    max_batch: int = Field(1, ge=1)
    max_wait: Seconds = 0.0
    max_tokens: int = Field(2048, ge=1)
    max_context: int = Field(4096, ge=1)
    executors: int = Field(1, ge=1)
    priority: int = 0
    launch_overhead: Seconds = 0.0
    launch: Literal["graphs", "eager"] = "graphs"
    host_launch: Seconds | None = None
    graph_replay: Seconds | None = None
    neighbors: list[NeighborSpec] = []
    jitter: JitterSpec = JitterSpec()
    baseline_batch: dict[str, float] | None = None
    partitions: dict[str, PartitionSpec] = {}
    partition: str | None = None
    overlap: Literal["independent", "two_batch"] = "independent"
    router: RouterSpec | None = None
    engine: EngineSpec | None = None
    knobs: dict[str, list[Any]] = {}  # engine settings to search: values, the service's own first (problem.knobs)


class PoissonSpec(Strict):
    """``arrivals: {process: poisson}``: independent arrivals at a rate."""

    process: Literal["poisson"]
    rate: Rate


class GammaSpec(Strict):
    """``arrivals: {process: gamma}``: renewal arrivals with gamma gaps, squared CV = 1 / burstiness."""

    process: Literal["gamma"]
    rate: Rate
    burstiness: float = Field(gt=0)


class OnOffSpec(Strict):
    """``arrivals: {process: onoff}``: arrivals during ``on`` periods only, alternating with ``off``."""

    process: Literal["onoff"]
    rate: Rate
    on: PositiveSeconds
    off: PositiveSeconds


class DiurnalSpec(Strict):
    """``arrivals: {process: diurnal}``: a Poisson rate modulated by a sinusoid over ``period``."""

    process: Literal["diurnal"]
    rate: Rate
    amplitude: float = Field(ge=0, le=1)
    period: PositiveSeconds
    phase: float = 0.0


class TraceSpec(Strict):
    """``arrivals: {process: trace}``: arrival times (and sizes) replayed from a CSV request trace."""

    process: Literal["trace"]
    file: str = Field(min_length=1)
    rate: Rate | None = None
    offset: Seconds | None = None
    rate_basis: Literal["window", "trace"] = "window"
    time_column: str = "TIMESTAMP"
    columns: dict[str, str] | None = None


ArrivalSpecs = Annotated[
    Union[PoissonSpec, GammaSpec, OnOffSpec, DiurnalSpec, TraceSpec], Field(discriminator="process")
]


#: The largest size (or prompt id) a distribution may give: numpy draws int64.
INT64_MAX = 2**63 - 1


class FixedSize(Strict):
    """``{dist: fixed}``: every request the same size."""

    dist: Literal["fixed"]
    value: int = Field(ge=1, le=INT64_MAX)


class UniformSize(Strict):
    """``{dist: uniform}``: sizes uniform between ``low`` and ``high``."""

    dist: Literal["uniform"]
    low: int = Field(ge=1, le=INT64_MAX)
    high: int = Field(ge=1, le=INT64_MAX)

    @model_validator(mode="after")
    def _ordered(self) -> UniformSize:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class LogNormalSize(Strict):
    """``{dist: lognormal}``: sizes log-normal with this mean and coefficient of variation."""

    dist: Literal["lognormal"]
    mean: float = Field(ge=1)
    cv: float = Field(ge=0)


class ExponentialSize(Strict):
    """``{dist: exponential}``: sizes exponential with this mean."""

    dist: Literal["exponential"]
    mean: float = Field(ge=1)


class EmpiricalSize(Strict):
    """``{dist: empirical}``: sizes drawn from listed values or a trace's column."""

    dist: Literal["empirical"]
    values: list[Annotated[int, Field(ge=1, le=INT64_MAX)]] | None = Field(None, min_length=1)
    trace: str | None = None
    column: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EmpiricalSize:
        if (self.values is None) == (self.trace is None):
            raise ValueError("give either 'values' or 'trace' with 'column'")
        if (self.trace is None) != (self.column is None):
            raise ValueError("'trace' and 'column' go together: the CSV file and the column of sizes in it")
        return self


SizeSpecs = Annotated[
    Union[FixedSize, UniformSize, LogNormalSize, ExponentialSize, EmpiricalSize],
    Field(discriminator="dist"),
    BeforeValidator(_bare_size),
]


class RegimeSpec(Strict):
    """One entry of ``regimes:``: a traffic condition (arrivals, sizes, window, budget, partitions, routing)."""

    description: str = ""
    arrivals: ArrivalSpecs
    sizes: dict[str, SizeSpecs] | None = None
    horizon: PositiveSeconds = 60.0
    warmup: Seconds | None = None
    memory_budget: PositiveBytes | None = None
    partitions: dict[str, Annotated[float, Field(gt=0, le=1)]] | None = None
    routing: Literal["uniform"] | RoutingSpec | None = None
    # how much this regime counts when one setting serves every regime (a start-up engine knob)
    weight: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0


class ProblemSpec(Strict):
    """A whole problem file: the service, its kernel families and the regimes it is tuned for."""

    name: str = Field(min_length=1)
    description: str = ""
    device: DeviceSpec = DeviceSpec()
    constants: dict[str, ExprText] = {}
    service: ServiceSpec
    families: dict[str, FamilySpec] = Field(min_length=1)
    regimes: dict[str, RegimeSpec] = Field(min_length=1)
    objective: Literal["goodput", "capacity"] = "goodput"
