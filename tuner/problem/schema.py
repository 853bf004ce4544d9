"""The shape of a problem file, as pydantic models.

This layer checks structure and types only (unknown keys, wrong types, negative sizes);
meaning (expressions naming known variables, configs inside their space, …) is checked
by :mod:`tuner.problem.load`, which knows the whole file. Quantities stay as written
(``'4 GiB'``, ``'10 ms'``) and are converted by validators, so errors quote the input.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..units import parse_bytes, parse_seconds

Number = Union[int, float]
ExprText = Union[int, float, str]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _seconds(value: object) -> float:
    seconds = parse_seconds(value)
    if seconds < 0:
        raise ValueError(f"must not be negative but got {value!r}")
    return seconds


def _bytes(value: object) -> float:
    size = parse_bytes(value)
    if size < 0:
        raise ValueError(f"must not be negative but got {value!r}")
    return size


class DeviceSpec(Strict):
    name: str = "generic"
    sms: int = Field(132, gt=0)


class ProfileSpec(Strict):
    """``latency`` is a duration, an expression in seconds, or a table ``{batch: {1: 8 ms}}``."""

    latency: Union[ExprText, dict[str, dict[Number, Union[Number, str]]]]
    workspace: ExprText = 0
    sm: float = Field(1.0, gt=0, le=1)
    ctas: ExprText | None = None
    ctas_per_sm: int = Field(1, gt=0)
    dram: float = Field(0.0, ge=0, le=1)
    persistent: bool = False


class ConfigSpec(Strict):
    name: str | None = None
    params: dict[str, Union[int, float, str, bool]]
    profile: ProfileSpec


class FamilySpec(Strict):
    space: dict[str, list[Union[int, float, str, bool]]]
    configs: list[ConfigSpec] = Field(min_length=1)


class OperatorSpec(Strict):
    name: str
    family: str
    shape: dict[str, ExprText] = {}
    repeat: int = Field(1, ge=1)


class NeighborSpec(Strict):
    name: str
    profile: ProfileSpec
    gap: float = 0.0
    priority: int = 0

    _gap = field_validator("gap", mode="before")(_seconds)


class SloSpec(Strict):
    deadline: float | None = None
    ttft: float | None = None
    tpot: float | None = None

    _seconds = field_validator("deadline", "ttft", "tpot", mode="before")(
        lambda v: None if v is None else _seconds(v)
    )


class MemorySpec(Strict):
    budget: float
    fixed: float = 0.0
    per_request: ExprText = 0

    _bytes = field_validator("budget", "fixed", mode="before")(_bytes)


class JitterSpec(Strict):
    kind: Literal["deterministic", "exponential", "lognormal"] = "deterministic"
    cv: float = Field(0.0, ge=0)


class ServiceSpec(Strict):
    batching: Literal["dynamic", "continuous"]
    operators: list[OperatorSpec] = Field(min_length=1)
    memory: MemorySpec
    slo: SloSpec
    max_batch: int = Field(1, ge=1)
    max_wait: float = 0.0
    max_tokens: int = Field(2048, ge=1)
    max_context: int = Field(4096, ge=1)
    executors: int = Field(1, ge=1)
    priority: int = 0
    launch_overhead: float = 0.0
    neighbors: list[NeighborSpec] = []
    jitter: JitterSpec = JitterSpec()

    _seconds = field_validator("max_wait", "launch_overhead", mode="before")(_seconds)


Rate = Union[float, tuple[float, float]]


class PoissonSpec(Strict):
    process: Literal["poisson"]
    rate: Rate


class GammaSpec(Strict):
    process: Literal["gamma"]
    rate: Rate
    burstiness: float = Field(gt=0)


class OnOffSpec(Strict):
    process: Literal["onoff"]
    rate: Rate
    on: float
    off: float

    _seconds = field_validator("on", "off", mode="before")(_seconds)


class DiurnalSpec(Strict):
    process: Literal["diurnal"]
    rate: Rate
    amplitude: float = Field(ge=0, le=1)
    period: float
    phase: float = 0.0

    _seconds = field_validator("period", mode="before")(_seconds)


class TraceSpec(Strict):
    process: Literal["trace"]
    file: str
    rate: Rate | None = None
    offset: float | None = None
    time_column: str = "TIMESTAMP"
    columns: dict[str, str] | None = None

    _seconds = field_validator("offset", mode="before")(lambda v: None if v is None else _seconds(v))


ArrivalSpecs = Annotated[
    Union[PoissonSpec, GammaSpec, OnOffSpec, DiurnalSpec, TraceSpec], Field(discriminator="process")
]


class FixedSize(Strict):
    dist: Literal["fixed"]
    value: int = Field(ge=1)


class UniformSize(Strict):
    dist: Literal["uniform"]
    low: int = Field(ge=1)
    high: int = Field(ge=1)


class LogNormalSize(Strict):
    dist: Literal["lognormal"]
    mean: float = Field(gt=0)
    cv: float = Field(ge=0)


class ExponentialSize(Strict):
    dist: Literal["exponential"]
    mean: float = Field(gt=0)


class EmpiricalSize(Strict):
    dist: Literal["empirical"]
    values: list[int] | None = None
    trace: str | None = None
    column: str | None = None


SizeSpecs = Annotated[
    Union[FixedSize, UniformSize, LogNormalSize, ExponentialSize, EmpiricalSize],
    Field(discriminator="dist"),
]


class RegimeSpec(Strict):
    description: str = ""
    arrivals: ArrivalSpecs
    sizes: dict[str, Union[int, SizeSpecs]] | None = None
    horizon: float = 60.0
    memory_budget: float | None = None

    _horizon = field_validator("horizon", mode="before")(_seconds)
    _budget = field_validator("memory_budget", mode="before")(lambda v: None if v is None else _bytes(v))


class ProblemSpec(Strict):
    name: str
    description: str = ""
    device: DeviceSpec = DeviceSpec()
    constants: dict[str, float] = {}
    service: ServiceSpec
    families: dict[str, FamilySpec] = Field(min_length=1)
    regimes: dict[str, RegimeSpec] = Field(min_length=1)
