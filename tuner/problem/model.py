"""The validated, immutable model of a tuning problem.

A :class:`Problem` is what the loader builds from a YAML file after every check has
passed; the simulator and the search trust it and never re-validate.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np

from ..errors import ProblemError, SearchError
from ..expr import Expr
from .batching import BatchingKind, batching_kind
from .bounds import check_sample
from .buckets import Bucketing
from .explain import Invalid
from .knobs import KnobSpace, KnobValue
from ..phases import WHOLE_DEVICE, Partition, Phase, sm_need, wave_phases
from ..traffic import ArrivalProcess, Jitter, SizeDistribution, Workload, make_workload
from ..traffic.routing import Routing

Batching = str  # a name registered in tuner.problem.batching
ProfileSource = Literal["measured", "modeled", "declared"]


def same_value(a: object, b: object) -> bool:
    """Equal as parameter values are: ``true`` is not ``1``, although Python says so."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def service_variables(batching: str, size_fields: frozenset[str]) -> frozenset[str]:
    """The batch variables a batching policy exposes to expressions."""
    return batching_kind(batching).variables(size_fields)


@dataclass(frozen=True)
class EngineSettings:
    """``service.engine`` of a ``batching: vllm`` service (see tuner.sim.vllm_batching)."""

    kv_bytes_per_token: float
    block_size: int = 16
    num_gpu_blocks: int | None = None   # None: what the budget leaves after weights and workspace
    prefix_caching: bool = True
    cuda_graphs: bool = True
    capture_sizes: tuple[int, ...] | None = None  # None: vLLM's defaults for max_batch
    async_scheduling: bool = True
    step_cpu_s: float = 0.0
    request_cpu_s: float = 0.0
    request_overhead_s: float = 0.0


class Quantity(Protocol):
    """Anything that turns a batch's variables into a number (an :class:`Expr` or a table)."""

    def evaluate(self, variables: Mapping[str, float]) -> float: ...


@dataclass(frozen=True)
class PiecewiseLinear:
    """A quantity tabulated against one variable, interpolated linearly between points.

    Beyond the last point it extends the last segment's slope, because a latency measured
    up to batch 32 keeps growing past it rather than freezing.
    """

    variable: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def evaluate(self, variables: Mapping[str, float]) -> float:
        """The curve at ``variables[variable]``: linear between points, extended along the
        first and last segments beyond them, never below 0 (one point: a constant)."""
        x = variables[self.variable]
        xs, ys = self.xs, self.ys
        if len(xs) == 1:
            return ys[0]
        i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
        slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
        return max(0.0, ys[i] + slope * (x - xs[i]))


@dataclass(frozen=True)
class Device:
    """The GPU a problem targets; ``sms`` turns CTA counts into waves.

    ``saturating_share`` is the share of its SMs at which a streaming kernel saturates
    DRAM (each SM sustains a bounded number of outstanding loads): what a memory-bound
    kernel needs to keep its isolated speed beside others (:func:`tuner.phases.sm_need`).
    A preset's comes from its calibrated per-SM bandwidth; the default is an H100 SXM's
    (3.35 TB/s over 132 SMs × 40.9 GB/s).
    """

    name: str = "generic"
    sms: int = 132
    saturating_share: float = 0.62


class Profile(Protocol):
    """What the simulator asks of a config's profile, whatever its source.

    ``launches`` lists the kernels one operator invocation launches for a batch (a
    split-K GEMM launches two), each as ``(name, phases)``, on the device or on a
    partition of it (shares in the phases are always of the whole device);
    ``workspace_bytes`` is the global workspace it needs for that batch.
    """

    source: ProfileSource

    @property
    def variables_read(self) -> frozenset[str]:
        """The batch variables its launches depend on, which the simulator memoises them
        by (``"*"`` among them: it cannot say, and nothing is memoised)."""
        ...

    def launches(self, variables: Mapping[str, float], device: Device, tag: str,
                 partition: Partition = ...) -> tuple[tuple[str, tuple[Phase, ...]], ...]: ...

    def workspace_bytes(self, variables: Mapping[str, float], partition: Partition = ...) -> float: ...


@dataclass(frozen=True)
class KernelProfile:
    """What one config costs: isolated latency and the resources it holds while it runs.

    Attributes:
        latency: isolated seconds as a function of the batch variables.
        workspace: global workspace bytes it needs (reserved by the engine up front).
        sm: fraction of the GPU's SM slots its full waves occupy (``s`` in DESIGN §4),
            used when ``ctas`` is not given.
        ctas, ctas_per_sm: grid size and occupancy; when given, the kernel runs in waves
            and its last partial wave only holds its remainder of the slots.
        dram: fraction of peak DRAM bandwidth it draws when running alone (``b``).
        persistent: a persistent kernel's grid (``ctas``; the device's slots when not
            given) holds its SM slots for its whole life.
        compute: share of its isolated time bound by its SMs (arithmetic, issue), which
            a co-runner taking SMs slows in proportion; None: ``1 - dram``, a kernel that
            computes whenever it does not stream (see :func:`tuner.phases.sm_need`).
        source: where the numbers come from: measured, modeled or declared.

    A declared profile describes the kernel on the whole device: on a partition it
    holds at most the partition's share and slows by the GPU layer's rule.
    """

    latency: Quantity
    workspace: Expr
    sm: float = 1.0
    ctas: Expr | None = None
    ctas_per_sm: int = 1
    dram: float = 0.0
    persistent: bool = False
    compute: float | None = None
    source: ProfileSource = "declared"

    def phases(self, variables: Mapping[str, float], device: Device) -> tuple[Phase, ...]:
        """``(isolated seconds, s, b, k, w)`` per phase: the full waves, then the partial tail
        wave; one fluid phase (``w = 0``) when it declares no grid."""
        latency = self.latency.evaluate(variables)
        compute = 1.0 - min(self.dram, 1.0) if self.compute is None else self.compute
        if self.ctas is None and not self.persistent:
            return ((latency, self.sm, self.dram, sm_need(self.sm, self.dram, compute, device.saturating_share), 0.0),)
        slots = float(self.ctas_per_sm * device.sms)
        ctas = slots if self.ctas is None else self.ctas.evaluate(variables)  # a persistent grid sized to the device
        return wave_phases(latency, ctas, slots, self.dram, self.persistent,
                           compute=compute, saturating_share=device.saturating_share)

    @property
    def variables_read(self) -> frozenset[str]:
        """The variables its launches depend on (the simulator memoises launches by them)."""
        names: set[str] = set()
        for quantity in (self.latency, self.ctas):
            if isinstance(quantity, Expr):
                names |= quantity.names
            elif isinstance(quantity, PiecewiseLinear):
                names.add(quantity.variable)
            elif quantity is not None:
                return frozenset({"*"})
        return frozenset(names)

    def launches(self, variables: Mapping[str, float], device: Device, tag: str,
                 partition: Partition = WHOLE_DEVICE) -> tuple[tuple[str, tuple[Phase, ...]], ...]:
        """The kernel launches this config makes for a batch: one, for a declared profile
        (the same on any partition: the GPU layer caps what it holds)."""
        return ((tag, self.phases(variables, device)),)

    def workspace_bytes(self, variables: Mapping[str, float], partition: Partition = WHOLE_DEVICE) -> float:
        return self.workspace.evaluate(variables)


@dataclass(frozen=True)
class Config:
    """One point of a kernel family's space, with its profile."""

    family: str
    name: str
    params: tuple[tuple[str, object], ...]
    profile: Profile = field(compare=False, hash=False)

    @property
    def param_dict(self) -> dict[str, object]:
        return dict(self.params)

    def label(self) -> str:
        """The name a user types in ``--assign``."""
        return self.name


@dataclass(frozen=True)
class Family:
    """A kernel family: its parameter space and the configs that have profiles.

    ``bucket_key`` names the shape dimensions its best config depends on (a built-in
    family says; None: an operator's first batch-dependent dimension).
    """

    name: str
    space: tuple[tuple[str, tuple[object, ...]], ...]
    configs: tuple[Config, ...]
    bucket_key: tuple[str, ...] | None = None

    @property
    def default(self) -> Config:
        return self.configs[0]

    def find(self, name: str | None = None, params: Mapping[str, object] | None = None) -> Config | None:
        """The config with that name, or with exactly those parameter values."""
        for config in self.configs:
            if name is not None and config.name == name:
                return config
            if params is not None and config.param_dict == dict(params):
                return config
        return None


@dataclass(frozen=True)
class Operator:
    """One step of the service's per-batch program."""

    name: str
    family: str
    shape: tuple[tuple[str, Expr], ...]
    repeat: int = 1
    bucketing: Bucketing = Bucketing()
    partition: Partition | None = None

    def variables(self, batch_variables: Mapping[str, float]) -> dict[str, float]:
        """The batch variables plus this operator's shape dimensions."""
        values = dict(batch_variables)
        for dim, expr in self.shape:
            values[dim] = expr.evaluate(batch_variables)
        return values

    def bucket_variables(self, largest: Mapping[str, float], bucket: int, at: str = "representative") -> dict[str, float]:
        """The variables a bucket is judged at: this operator's variables at the largest
        batch (``largest``), its key dimensions replaced by the bucket's representative
        values (``at="lowest"``: its smallest ones); see :mod:`tuner.problem.buckets`."""
        values = self.variables(largest)
        chosen = self.bucketing.buckets[bucket]
        values.update(self.bucketing.representative(chosen) if at == "representative"
                      else self.bucketing.lowest(chosen))
        return values


@dataclass(frozen=True)
class Neighbor:
    """A stream outside the service that keeps launching one kernel (closed loop), on
    the whole device or its own partition (a co-located tenant under MPS)."""

    name: str
    profile: KernelProfile
    gap_s: float = 0.0
    priority: int = 0
    partition: Partition = WHOLE_DEVICE


@dataclass(frozen=True)
class Slo:
    """A request is good when it meets every bound that is set.

    ``attainment`` is the share of requests that must be good for a load to count as
    served: the capacity at the SLO is the highest rate at which it holds (DistServe's
    per-GPU goodput is measured at 90% attainment, hence the default).
    """

    deadline_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    attainment: float = 0.9

    def met(self, latency: Any, ttft: Any = None, tpot: Any = None) -> Any:
        """Whether requests met every bound that is set: scalars or NumPy arrays alike
        (TTFT and TPOT only count when given, i.e. for token streams). The one rule of
        what a good request is, for judging a run and for stopping one early."""
        good: Any = True
        if self.deadline_s is not None:
            good = good & (latency <= self.deadline_s + SLO_SLACK_S)
        if ttft is not None and self.ttft_s is not None:
            good = good & (ttft <= self.ttft_s + SLO_SLACK_S)
        if tpot is not None and self.tpot_s is not None:
            good = good & (tpot <= self.tpot_s + SLO_SLACK_S)
        return good


#: Bounds are met up to this slack (absorbs float drift in event times).
SLO_SLACK_S = 1e-12


@dataclass(frozen=True)
class Memory:
    """The memory budget: fixed + reserved workspace + Σ admitted requests' state ≤ budget."""

    budget: float
    fixed: float
    per_request: Expr


#: Host seconds per eager launch when ``service.launch: eager`` gives no ``host_launch``:
#: 21 µs, the upper end of the host cost per call of the *fastest* backends at decode
#: sizes in FlashInfer's autotuner RFC (flashinfer-ai/flashinfer#3920: "17–21 µs host vs
#: ~8 µs kernel", SM100, bmm_fp8). Triton's own Python launcher alone measured 8.68 µs per
#: call on GB200 (vllm-project/vllm#34838) and 49 µs after a 2.2× speed-up
#: (triton-lang/triton#3638); a small PyTorch eager op 2–7 µs of host time
#: (pytorch/pytorch#41383), and 10–16 µs for ``torch.add`` of one-element CPU tensors
#: measured on this project's 2-core Xeon @ 2.80 GHz (torch 2.13 CPU build: the host-only
#: part, no CUDA launch).
EAGER_HOST_LAUNCH_S = 21e-6


@dataclass(frozen=True)
class Service:
    """What runs per batch and under which resource rules (DESIGN §3 'service')."""

    batching: Batching
    operators: tuple[Operator, ...]
    memory: Memory
    slo: Slo
    max_batch: int = 1
    max_wait_s: float = 0.0
    max_tokens: int = 2048
    max_context: int = 4096
    executors: int = 1
    priority: int = 0
    launch_overhead_s: float = 0.0
    neighbors: tuple[Neighbor, ...] = ()
    jitter: Jitter = Jitter()
    device: Device = Device()
    baseline_batch: tuple[tuple[str, float], ...] = ()
    partition: Partition = WHOLE_DEVICE
    #: how an operator on another lane runs beside the rest: ``independent`` (each lane
    #: runs its operators back to back, joined at the batch's end) or ``two_batch`` (the
    #: iteration split into two micro-batches with the lanes' real dependencies)
    overlap: str = "independent"
    #: the MoE router (experts, top_k) whose routing each regime declares, if any
    router: tuple[int, int] | None = None
    #: how the engine launches a batch's kernels (``service.launch``): ``graphs`` (one
    #: CUDA-graph replay per iteration: ``graph_replay_s`` before its first kernels, then
    #: ``launch_overhead_s`` per node on the GPU; with ``graph_replay_s`` 0, only the
    #: per-node cost) or ``eager`` (one host thread per executor issues every launch in order,
    #: ``host_launch_s`` each; a kernel starts once the host has issued it and its stream
    #: is free, then ``launch_overhead_s`` on the GPU, as under graphs)
    launch: str = "graphs"
    host_launch_s: float = 0.0
    graph_replay_s: float = 0.0
    #: the engine of a ``batching: vllm`` service
    engine: EngineSettings | None = None
    #: the channels NCCL holds every collective to, set at start-up (the knob
    #: ``nccl_channels``); None: each collective's config says (``CHANNELS``)
    collective_channels: int | None = None

    @property
    def kind(self) -> BatchingKind:
        """What its batching policy means to expressions and judging."""
        return batching_kind(self.batching)

    def lanes(self) -> tuple[Partition, ...]:
        """The partitions one batch runs on, the service's first: an operator placed on
        another partition runs on a second stream of the same executor, beside the
        first, as NanoFlow overlaps attention with GEMMs and Bullet prefill with decode."""
        lanes = [self.partition]
        for op in self.operators:
            if op.partition is not None and op.partition not in lanes:
                lanes.append(op.partition)
        return tuple(lanes)

    def partitions(self) -> tuple[Partition, ...]:
        """Every partition a kernel of this service or its neighbours runs on, once."""
        found = list(self.lanes())
        for neighbor in self.neighbors:
            if neighbor.partition not in found:
                found.append(neighbor.partition)
        return tuple(found)

    def with_shares(self, shares: Mapping[str, float]) -> Service:
        """The same service with the named partitions' shares replaced (a regime's)."""
        if not shares:
            return self

        def moved(partition: Partition) -> Partition:
            share = shares.get(partition.name)
            return partition if share is None else replace(partition, share=share)

        return replace(
            self, partition=moved(self.partition),
            operators=tuple(op if op.partition is None else replace(op, partition=moved(op.partition))
                            for op in self.operators),
            neighbors=tuple(replace(n, partition=moved(n.partition)) for n in self.neighbors),
        )

    def baseline_batch_variables(self, size_fields: frozenset[str]) -> dict[str, float]:
        """The batch an autotuner keyed on shape would judge configs at: the file's
        ``baseline_batch`` over the largest batch (which it defaults to)."""
        return {**self.largest_batch_variables(size_fields), **dict(self.baseline_batch)}

    def largest_batch_variables(self, size_fields: frozenset[str]) -> dict[str, float]:
        """Batch variables at the largest batch the engine runs (for workspace reservation)."""
        if self.kind.token_level:
            return {
                "batch": self.max_batch, "tokens": self.max_tokens,
                "prefill_tokens": self.max_tokens, "decode_seqs": self.max_batch,
                "context": self.max_batch * self.max_context, "max_context": self.max_context,
            }
        values: dict[str, float] = {"batch": self.max_batch}
        for name in size_fields:
            values[name] = self.max_context
            values[f"{name}_total"] = self.max_batch * self.max_context
        return values


@dataclass(frozen=True)
class ArrivalSpec:
    """An arrival process whose rate may be a bucket ``[low, high]`` sampled per seed.

    ``declared_rate`` is the file's mean rate: the bucket's midpoint or the fixed rate
    (None for a trace replayed at its own rate)."""

    build: object = field(compare=False)  # Callable[[float | None], ArrivalProcess]
    rate_range: tuple[float, float] | None
    declared_rate: float | None = None

    @property
    def nominal_rate(self) -> float:
        """The rate the file gives (a bucket's midpoint, a fixed rate), else the process's
        own mean rate (a trace replayed at its own rate): the one rule for "the regime's
        rate" where no seed has been drawn."""
        if self.declared_rate is not None:
            return self.declared_rate
        return float(self.build(None).mean_rate)  # type: ignore[operator]

    def busiest(self) -> ArrivalProcess:
        """The process at the highest rate a seed may draw (what bounds a window's size)."""
        return self.build(None if self.rate_range is None else self.rate_range[1])  # type: ignore[operator]

    def sample(self, rng: np.random.Generator) -> ArrivalProcess:
        """The process of one seed: its rate drawn uniformly from the regime's rate range
        (a fixed rate, or the process's own, without one)."""
        if self.rate_range is None:
            return self.build(None)  # type: ignore[operator]
        low, high = self.rate_range
        return self.build(float(rng.uniform(low, high)) if high > low else low)  # type: ignore[operator]


#: The share of a window served but not judged when a regime does not set ``warmup``.
WARMUP_FRACTION = 0.1


@dataclass(frozen=True)
class Regime:
    """A traffic condition: the index of the config table.

    ``warmup_s`` is the start of each window whose requests are served but not judged:
    the simulated service starts empty (no queue, an empty KV cache, an idle GPU), which
    no running service is, so the first requests would be judged under a load lighter
    than the regime's. None means :data:`WARMUP_FRACTION` of the window in use (6 s of
    the default 60 s: several sojourn times of the shipped problems' requests, after
    which admission, batch sizes and the queue have left their empty start).
    """

    name: str
    description: str
    arrivals: ArrivalSpec
    sizes: Mapping[str, SizeDistribution] | None
    horizon_s: float
    memory_budget: float | None = None
    warmup_s: float | None = None
    shape_key: str = ""
    partition_shares: tuple[tuple[str, float], ...] = ()
    routing: Routing | None = None
    weight: float = 1.0  # its share when one start-up knob setting must serve every regime

    def window_s(self, horizon_s: float | None = None) -> float:
        """The window a run of this regime covers: ``horizon_s`` where one is asked for
        (``--horizon``, a study's setting), else the regime's own: the one place that
        default is written."""
        return self.horizon_s if horizon_s is None else horizon_s

    def warmup_for(self, horizon_s: float) -> float:
        """The warm-up of a window of ``horizon_s`` (an explicit one is capped at half the window)."""
        if self.warmup_s is None:
            return WARMUP_FRACTION * horizon_s
        return min(self.warmup_s, horizon_s / 2)

    def workload(self, seed: int, jitter: Jitter, horizon_s: float | None = None,
                 rate_rps: float | None = None) -> Workload:
        """The seeded sample of this regime's bucket: identical for every assignment.

        ``rate_rps`` replaces the bucket's rate (the capacity search's free variable): the
        same arrival process, sizes and seed at another load.

        Raises:
            ProblemError: the window would hold more than the simulator can (a
                ``--horizon`` or a rate beyond the file's; :mod:`.bounds`), before any
                of it is allocated.
        """
        if rate_rps is None:
            process = self.arrivals.sample(np.random.default_rng([seed, 0x7E91]))
        else:
            process = self.arrivals.build(rate_rps)  # type: ignore[operator]
        horizon = self.window_s(horizon_s)
        try:
            check_sample(f"regimes.{self.name}", process, horizon)
        except Invalid as exc:
            asked = "" if horizon_s is None else f"a horizon of {horizon:g} s: "
            raise ProblemError(f"{asked}{exc}") from None
        return make_workload(process, self.sizes, jitter, horizon, seed, self.warmup_for(horizon), self.routing)


@dataclass(frozen=True)
class Problem:
    """A loaded, validated problem file."""

    name: str
    path: str
    file_hash: str
    description: str
    service: Service
    families: Mapping[str, Family]
    regimes: Mapping[str, Regime]
    size_fields: frozenset[str]
    warnings: tuple[str, ...] = ()
    objective: str = "goodput"
    knobs: KnobSpace = KnobSpace()
    #: What is derived from this problem once and kept while it lives (the search's joint
    #: space per routing, its knob variants, the problem a variant varies): owned here,
    #: not by module-level dicts keyed by ``id()``; a copy (``with_knobs``) starts empty.
    memo: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False, hash=False)
    #: What is derived from the configs' profiles alone, and so holds for every knob
    #: variant too (they keep the same configs): the simulator's launch memos
    #: (:func:`tuner.sim.program.launch_memos`). A variant (``with_knobs``) shares it.
    profile_caches: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False, hash=False)

    def with_knobs(self, values: Mapping[str, KnobValue]) -> Problem:
        """The problem as the engine runs with these knob values (``service.knobs``): a
        deployment of its own, simulated like any problem, whose knobs are set (it lists
        none: a study of it searches configs only).

        Raises:
            ValueError: a knob the problem does not list, or a value not among its own.
        """
        if not values:
            return self
        variant = replace(self, service=self.knobs.apply(self.service, values), knobs=KnobSpace())
        object.__setattr__(variant, "profile_caches", self.profile_caches)  # the same configs
        return variant

    def regime(self, name: str) -> Regime:
        """The regime ``name``: the one place a regime asked for by name is checked.

        Raises:
            SearchError: the file has no such regime (the message lists those it has).
        """
        try:
            return self.regimes[name]
        except KeyError:
            raise SearchError(f"{self.path}: regimes: no regime {name!r} (regimes: {', '.join(self.regimes)})") from None

    def memory_budget(self, regime: str) -> float:
        """Bytes the service may use in ``regime``: the regime's own budget, else the service's."""
        chosen = self.regime(regime)
        return chosen.memory_budget if chosen.memory_budget is not None else self.service.memory.budget

    def mean_rate(self, regime: str, seeds: Sequence[int], horizon_s: float) -> float | None:
        """The regime's mean arrival rate (req/s): the file's (a rate bucket's midpoint, or a
        fixed rate), else the mean rate its seeded workloads realise (requests / window)."""
        chosen = self.regime(regime)
        if chosen.arrivals.declared_rate is not None:
            return chosen.arrivals.declared_rate
        rates = [len(chosen.workload(seed, self.service.jitter, horizon_s)) / horizon_s for seed in seeds]
        return sum(rates) / len(rates) if rates else None

    def service_for(self, regime: str) -> Service:
        """The service as it runs in ``regime`` (its partition shares, if it sets any)."""
        return self.service.with_shares(dict(self.regime(regime).partition_shares))

    def family_of(self, op: str) -> Family:
        return self.families[self.operator(op).family]

    def operator(self, op: str) -> Operator:
        """The service's operator named ``op`` (KeyError when there is none)."""
        for operator in self.service.operators:
            if operator.name == op:
                return operator
        raise KeyError(op)
