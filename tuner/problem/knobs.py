"""Engine knobs: settings of the serving engine the search may vary with the kernel configs.

Issue 40: in the field, engine settings move serving far more than kernel tiles (the
maximum batch, the chunk size, the CUDA-graph sizes), and they are coupled to the kernels:
``max_num_batched_tokens`` is the M of every prefill GEMM, ``max_num_seqs`` the decode M
and the largest batch whose workspace is reserved, the capture sizes the M a padded
batch really runs. A problem file lists, under ``service.knobs``, the values each may
take, the engine's own (the service's) first.

Each knob is a registered :class:`Knob`: how it reads and sets a :class:`Service`, which
batchings it exists under, and whether the engine can change it while it serves or only
at start-up, with the place in the engine's code that says so. In vLLM all three are
start-up settings: ``EngineArgs`` builds the ``VllmConfig`` once, ``SchedulerConfig``
(``vllm/config/scheduler.py``: ``max_num_seqs``, ``max_num_batched_tokens``) sizes the
scheduler's budgets and ``CompilationConfig`` (``vllm/config/compilation.py``:
``cudagraph_capture_sizes``, defaulting from ``max_num_seqs`` in
``set_cudagraph_sizes``) the graphs captured before the first request. A start-up knob
takes one value per deployment, never switched at run time. So is SGLang's two-batch
overlap (``ServerArgs.enable_two_batch_overlap``, ``python/sglang/srt/server_args.py``),
a switch: each step split into two micro-batches whose collectives and compute overlap
(``service.overlap: two_batch``). And so are NCCL's channel bounds, read from the
environment when the engine creates its communicators (``NCCL_MIN_NCHANNELS``,
``NCCL_MAX_NCHANNELS``: ``src/graph/connect.cc``), which hold every collective to one
channel count: the knob ``nccl_channels``, the count a ``comm`` family's ``CHANNELS``
otherwise sets per config.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from ..registry import register_named
from .capabilities import ChannelBound
from .explain import Invalid

#: A :class:`tuner.problem.model.Service` (not imported: the model holds a KnobSpace).
Service = Any

#: A knob's value: a count, a list of counts (capture sizes), or a switch (on/off); None:
#: the engine's own default.
KnobValue = Union[int, bool, tuple[int, ...], None]

#: The most knob combinations a problem may list (each is a deployment to simulate).
MAX_COMBINATIONS = 256


@dataclass(frozen=True)
class Knob:
    """One engine setting the search may vary."""

    name: str
    summary: str
    start_up: bool
    source: str
    batchings: frozenset[str]
    read: Callable[[Service], KnobValue]
    write: Callable[[Service, KnobValue], Service]
    parse: Callable[[object], KnobValue]
    many: bool = False  # its value is a list (written NAME=1,2,4 on a command line)
    #: which kernels' profiles it changes, where it changes only some (a knob no
    #: operator's kernel answers to changes nothing, and a problem listing it is refused)
    acts_on: Callable[[object], bool] | None = None
    acts_on_what: str = ""


#: The knobs by name: how an engine names its argument (``vllm serve --max-num-seqs``).
KNOBS: dict[str, Knob] = {}


def register(knob: Knob) -> Knob:
    """Make ``knob`` known to problem files (a new engine's settings register here)."""
    return register_named(KNOBS, knob, "knob")


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected a whole number >= 1 but got {value!r}")
    return value


def _sizes(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"expected a list of batch sizes (or null: the engine's default) but got {value!r}")
    sizes = tuple(_count(size) for size in value)
    if list(sizes) != sorted(set(sizes)):
        raise ValueError(f"capture sizes must ascend without repeats but got {list(sizes)}")
    return sizes


def _optional_count(value: object) -> int | None:
    return None if value is None else _count(value)


def _switch(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false but got {value!r}")
    return value


#: Why two-batch overlap cannot run (``service.overlap: two_batch`` or the knob on) where
#: every operator is on the service's own partition.
NOTHING_TO_OVERLAP = ("two_batch overlaps operators on another partition (a second stream) with the rest, and no "
                      "operator is placed on one")


def _with_two_batch_overlap(service: Service, value: KnobValue) -> Service:
    """The service with each step split into two overlapped micro-batches (on), or not.

    Off is what an engine without the overlap runs: no split, and each layer's collective
    issued on the compute stream after the GEMM that feeds it, so the operators a
    two-batch service places on a second stream run in series with the rest (not beside
    it, as ``overlap: independent`` lanes would: an all-reduce depends on the GEMM before
    it). A service already without the overlap is left as it is.

    Raises:
        ValueError: on, but no operator runs on a second partition: nothing to overlap.
    """
    if value:
        if len(service.lanes()) < 2:
            raise ValueError(NOTHING_TO_OVERLAP)
        return dataclasses.replace(service, overlap="two_batch")
    if service.overlap != "two_batch":
        return service
    return dataclasses.replace(service, overlap="independent",
                               operators=tuple(dataclasses.replace(op, partition=None) for op in service.operators))


def _with_engine(service: Service, **changes: Any) -> Service:
    assert service.engine is not None, "capture sizes are registered for batching: vllm only"
    return dataclasses.replace(service, engine=dataclasses.replace(service.engine, **changes))


register(Knob(
    "max_num_seqs", "the most sequences in one step (the decode M; the batch whose workspace is reserved)", True,
    "vllm/config/scheduler.py SchedulerConfig.max_num_seqs", frozenset({"continuous", "vllm"}),
    lambda service: service.max_batch, lambda service, value: dataclasses.replace(service, max_batch=value),
    _count))
register(Knob(
    "max_num_batched_tokens", "the tokens one step schedules (the M of every prefill GEMM; the chunk size)", True,
    "vllm/config/scheduler.py SchedulerConfig.max_num_batched_tokens", frozenset({"continuous", "vllm"}),
    lambda service: service.max_tokens, lambda service, value: dataclasses.replace(service, max_tokens=value),
    _count))
register(Knob(
    "cudagraph_capture_sizes", "the batch sizes captured as CUDA graphs (a step pads up to the next)", True,
    "vllm/config/compilation.py CompilationConfig.cudagraph_capture_sizes", frozenset({"vllm"}),
    lambda service: service.engine.capture_sizes if service.engine is not None else None,
    lambda service, value: _with_engine(service, capture_sizes=value), _sizes, many=True))

register(Knob(
    "two_batch_overlap", "each step split into two micro-batches, one's collectives overlapping the other's compute",
    True, "python/sglang/srt/server_args.py ServerArgs.enable_two_batch_overlap (vLLM's counterpart, "
          "ParallelConfig.enable_dbo, runs only with data and expert parallelism: docs/design/dbo.md)",
    frozenset({"continuous"}), lambda service: service.overlap == "two_batch", _with_two_batch_overlap, _switch))

register(Knob(
    "nccl_channels", "the channels (one CTA, one SM each) NCCL holds every collective to; default: each "
                     "collective's CHANNELS", True,
    "src/graph/connect.cc (NVIDIA/nccl) NCCL_PARAM MinNchannels, MaxNchannels: the environment's "
    "NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, read when the engine creates its communicators",
    frozenset({"dynamic", "continuous", "vllm"}), lambda service: service.collective_channels,
    lambda service, value: dataclasses.replace(service, collective_channels=value), _optional_count,
    acts_on=lambda profile: isinstance(profile, ChannelBound), acts_on_what="a collective (kernel: comm)"))


@dataclass(frozen=True)
class KnobSpace:
    """The values each knob of a problem may take, the engine's own first (``service.knobs``)."""

    choices: tuple[tuple[str, tuple[KnobValue, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.choices)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.choices)

    def combinations(self) -> Iterator[dict[str, KnobValue]]:
        """Every combination, the defaults first."""
        for values in itertools.product(*(values for _, values in self.choices)):
            yield dict(zip(self.names, values))

    def size(self) -> int:
        return math.prod(len(values) for _, values in self.choices)

    def widest(self, service: Service) -> Service:
        """The service with each count knob at its largest value: the range its buckets
        and probes must cover whatever the search picks."""
        for name, values in self.choices:
            counts = [value for value in values if isinstance(value, int) and not isinstance(value, bool)]
            if counts:
                service = KNOBS[name].write(service, max(counts))
        return service

    def apply(self, service: Service, values: Mapping[str, KnobValue]) -> Service:
        """``service`` with ``values`` set (knobs not named keep the service's).

        Raises:
            ValueError: a knob this space does not have, or a value not among its choices.
        """
        listed = dict(self.choices)
        for name, value in values.items():
            if name not in listed:
                known = ", ".join(self.names) or "none: the problem lists no service.knobs"
                raise ValueError(f"knob {name!r} is not among the problem's knobs ({known})")
            if value not in listed[name]:
                raise ValueError(f"knob {name}={show(value)} is not among its values "
                                 f"({', '.join(show(v) for v in listed[name])})")
            service = KNOBS[name].write(service, value)
        if service.kind.token_level and service.max_batch > service.max_tokens:
            raise ValueError(f"max_num_seqs {service.max_batch} > max_num_batched_tokens {service.max_tokens}: "
                             "each sequence needs a token of the step")
        return service


def show(value: KnobValue) -> str:
    """A knob value as a command line writes it (``8,16,32``; ``default``)."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def shown(values: Mapping[str, KnobValue]) -> dict[str, str]:
    """Knob values by name, each as a command line writes it (for JSON)."""
    return {name: show(value) for name, value in values.items()}


def settings_text(values: Mapping[str, KnobValue]) -> str:
    """``max_num_seqs=64, max_num_batched_tokens=2048``."""
    return ", ".join(f"{name}={text}" for name, text in shown(values).items())


def parse_setting(text: str) -> tuple[str, KnobValue]:
    """``NAME=VALUE`` from a command line (``max_num_seqs=128``,
    ``cudagraph_capture_sizes=1,2,4,8``, ``...=default``); whether the problem lists the
    value is :meth:`Problem.with_knobs`'s to say.

    Raises:
        ValueError: not of that form, an unknown knob, a value it cannot take.
    """
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(f"--knob {text!r}: expected NAME=VALUE, e.g. max_num_seqs=128")
    knob = KNOBS.get(name)
    if knob is None:
        raise ValueError(f"--knob {text!r}: unknown knob {name!r} (known: {', '.join(sorted(KNOBS))})")
    raw = raw.strip()
    try:
        if raw == "default":
            return name, None
        if raw in ("true", "false"):
            return name, knob.parse(raw == "true")
        numbers: Sequence[int] = [int(part) for part in raw.split(",")]
        value: object = list(numbers) if knob.many else (numbers[0] if len(numbers) == 1 else list(numbers))
        return name, knob.parse(value)
    except ValueError as exc:
        raise ValueError(f"--knob {text!r}: {exc}") from None


def _acted_on(knob: Knob, service: Service, configs_of: Callable[[str], Sequence[Any]] | None) -> bool:
    """Whether an operator of ``service`` runs a kernel ``knob`` changes (always, for a
    knob that changes the engine rather than some kernels)."""
    if knob.acts_on is None or configs_of is None:
        return True
    return any(knob.acts_on(config.profile) for op in service.operators for config in configs_of(op.family))


def knob_space(written: Mapping[str, object], service: Service,
               configs_of: Callable[[str], Sequence[Any]] | None = None) -> KnobSpace:
    """``service.knobs`` of a problem file, checked against the registry and the service.

    Raises:
        Invalid: at ``service.knobs.NAME`` (or ``[i]``): an unknown knob, one the batching
            lacks, a value it cannot take or given twice, a list that does not start with
            the service's own value, too many combinations, or one the engine cannot run.
    """
    choices = []
    for name, values in written.items():
        key = f"service.knobs.{name}"
        knob = KNOBS.get(name)
        if knob is None:
            raise Invalid(key, f"unknown knob (known: {', '.join(sorted(KNOBS))})")
        if service.batching not in knob.batchings:
            raise Invalid(key, f"an engine knob of batching {' or '.join(sorted(knob.batchings))}, not "
                               f"{service.batching}")
        if not isinstance(values, list) or not values:
            raise Invalid(key, f"expected a list of values, the service's own first, but got {values!r}")
        if not _acted_on(knob, service, configs_of):
            raise Invalid(key, f"changes nothing here: no operator runs {knob.acts_on_what}")
        parsed: list[KnobValue] = []
        for i, value in enumerate(values):
            try:
                parsed.append(knob.parse(value))
            except ValueError as exc:
                raise Invalid(f"{key}[{i}]", str(exc)) from None
            if parsed[-1] in parsed[:-1]:
                raise Invalid(f"{key}[{i}]", f"{show(parsed[-1])} is listed twice")
        own = knob.read(service)
        if parsed[0] != own:
            raise Invalid(f"{key}[0]", f"{show(parsed[0])} is not what the service runs ({show(own)}): each list "
                                       "starts with the engine's own setting, the default every answer is held against")
        choices.append((name, tuple(parsed)))
    space = KnobSpace(tuple(choices))
    if space.size() > MAX_COMBINATIONS:
        raise Invalid("service.knobs", f"{space.size()} combinations; at most {MAX_COMBINATIONS} (each is a "
                                       "deployment simulated per trial's candidates)")
    for combination in space.combinations():
        try:
            space.apply(service, combination)
        except ValueError as exc:
            raise Invalid("service.knobs", f"{settings_text(combination)}: {exc}")
    return space
