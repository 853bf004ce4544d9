"""A table's engine knob values as the command line that starts each engine.

Issue 40: the rows of a problem with ``service.knobs`` carry the knob values the regime
was tuned with (``engine_args``); ``tuner table export --format vllm-args|sglang-args``
writes them as one command line per regime. Each engine is an :class:`EngineDialect`,
registered by name, that says how it spells each knob, with the place in its source
that defines the argument:

* vLLM (``vllm serve``): ``EngineArgs`` in ``vllm/engine/arg_utils.py`` turns each field
  into a flag, ``max_num_seqs`` into ``--max-num-seqs`` and ``max_num_batched_tokens``
  into ``--max-num-batched-tokens`` (both ``SchedulerConfig`` fields,
  ``vllm/config/scheduler.py``); the capture sizes are ``CompilationConfig``'s
  ``cudagraph_capture_sizes`` (``vllm/config/compilation.py``), passed as JSON through
  ``--compilation-config``, which every vLLM since the V1 engine accepts.
* SGLang (``python -m sglang.launch_server``): ``ServerArgs`` in
  ``python/sglang/srt/server_args.py``: ``--max-running-requests`` (the most requests
  in a batch), ``--chunked-prefill-size`` (the tokens one chunked-prefill step takes,
  vLLM's chunk size), ``--cuda-graph-bs`` (the batch sizes captured, one argument each)
  and ``--enable-two-batch-overlap`` (a switch: two micro-batches per step, one's
  communication overlapping the other's compute; documented for MoE under expert
  parallelism). vLLM's counterpart, ``--enable-dbo``, requires data and expert
  parallelism, so a vLLM line refuses the knob when it is on.

NCCL's channel count (``nccl_channels``) is no engine argument: NCCL reads
``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS`` from the environment, so a line sets both
before the command. A null value is the engine's own default and writes no argument. The knobs are start-up
settings, the same in every regime's line (:mod:`tuner.search.deployment`).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import TunerError
from ..registry import register_named
from .row import TableRow

#: Arguments for one knob value (never called with None: the engine's default writes none).
Spelling = Callable[[Any], list[str]]


@dataclass(frozen=True)
class EngineDialect:
    """How one engine is started with knob values: its command and each knob's argument."""

    name: str
    command: str
    spellings: Mapping[str, Spelling]
    source: str
    #: knobs the engine has no argument for, and why (said when one is set)
    lacking: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: knobs read from the environment rather than the command line (NCCL's), each as
    #: ``NAME=VALUE`` assignments written before the command
    environment: Mapping[str, Spelling] = dataclasses.field(default_factory=dict)

    def arguments(self, values: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """The environment assignments and the arguments for ``values``: none for a knob
        at the engine's default (None, or a switch left off); a knob set that this engine
        cannot take is refused.

        Raises:
            TunerError: a knob set that the dialect has no argument for.
        """
        assignments: list[str] = []
        arguments: list[str] = []
        for name, value in values.items():
            if value is None or value is False:
                continue
            if name in self.environment:
                assignments += self.environment[name](value)
                continue
            spelling = self.spellings.get(name)
            if spelling is None:
                known = ", ".join([*self.spellings, *self.environment])
                why = self.lacking.get(name, f"it has arguments for {known} only")
                raise TunerError(f"knob {name}={json.dumps(value)} has no {self.name} argument: {why}")
            arguments += spelling(value)
        return assignments, arguments

    def line(self, values: Mapping[str, Any]) -> str:
        assignments, arguments = self.arguments(values)
        return " ".join([*assignments, self.command, *(shlex.quote(argument) for argument in arguments)])


#: The dialects by the name ``--format`` takes.
DIALECTS: dict[str, EngineDialect] = {}


def register(dialect: EngineDialect) -> EngineDialect:
    """Make an engine's command line known to ``tuner table export``."""
    return register_named(DIALECTS, dialect, "engine dialect")


def _flag(flag: str) -> Spelling:
    return lambda value: [flag, str(value)]


#: NCCL's channel bounds, read from the environment when a communicator is created (NCCL
#: user guide, Environment Variables): both set to one count hold every collective to it.
#: Engines run small all-reduces on NVLink with their own kernel instead of NCCL (vLLM's
#: and SGLang's custom all-reduce), which these do not reach.
_NCCL_ENVIRONMENT: dict[str, Spelling] = {
    "nccl_channels": lambda channels: [f"NCCL_MIN_NCHANNELS={channels}", f"NCCL_MAX_NCHANNELS={channels}"]}

register(EngineDialect(
    "vllm-args", 'vllm serve "$MODEL"',
    {"max_num_seqs": _flag("--max-num-seqs"), "max_num_batched_tokens": _flag("--max-num-batched-tokens"),
     "cudagraph_capture_sizes": lambda sizes: ["--compilation-config",
                                               json.dumps({"cudagraph_capture_sizes": list(sizes)})]},
    "vllm/engine/arg_utils.py EngineArgs; vllm/config/compilation.py CompilationConfig.cudagraph_capture_sizes",
    {"two_batch_overlap": "vLLM's dual-batch overlap (--enable-dbo) runs only with data and expert parallelism "
                          "(docs/design/dbo.md), not beside a tensor-parallel all-reduce"},
    _NCCL_ENVIRONMENT))
register(EngineDialect(
    "sglang-args", 'python -m sglang.launch_server --model-path "$MODEL"',
    {"max_num_seqs": _flag("--max-running-requests"), "max_num_batched_tokens": _flag("--chunked-prefill-size"),
     "cudagraph_capture_sizes": lambda sizes: ["--cuda-graph-bs", *map(str, sizes)],
     "two_batch_overlap": lambda on: ["--enable-two-batch-overlap"]},
    "python/sglang/srt/server_args.py ServerArgs", environment=_NCCL_ENVIRONMENT))


def engine_lines(problem: str, rows: Sequence[TableRow], dialect: EngineDialect) -> str:
    """The text ``--format vllm-args|sglang-args`` writes: a header saying what it is,
    then per regime (in file order) a comment naming it and its command line.

    Raises:
        TunerError: the rows carry no engine arguments (a problem without
            ``service.knobs``), regimes disagree on them (a table written by hand:
            start-up knobs cannot switch with the regime), or a knob has no argument.
    """
    by_regime: dict[str, dict[str, Any] | None] = {}
    for row in sorted(rows, key=lambda r: r.regime_index):
        by_regime.setdefault(row.regime, row.engine_args)
    if not any(values is not None for values in by_regime.values()):
        raise TunerError(f"{problem}: its rows carry no engine arguments (the problem lists no service.knobs; "
                         "see docs/problem-files.md#engine-knobs)")
    distinct = {json.dumps(values, sort_keys=True) for values in by_regime.values()}
    if len(distinct) > 1:
        raise TunerError(f"{problem}: the regimes' engine arguments differ ({' vs '.join(sorted(distinct))}); "
                         "start-up knobs are one setting for every regime: tune the problem again")
    lines = [f"# {dialect.name} for {problem}, written by `tuner table export` ({dialect.source}).",
             "# One command line per regime; the engine reads these knobs at start-up, so every line is the same.",
             '# MODEL: the model the problem describes; other arguments (parallelism, memory) are yours.']
    if any(dialect.arguments(values or {})[0] for values in by_regime.values()):
        lines.append("# NCCL_*: NCCL's channel bounds; an all-reduce the engine runs on its own kernel (its custom "
                     "all-reduce, small messages on NVLink) ignores them: --disable-custom-all-reduce hands it to NCCL.")
    for regime, values in by_regime.items():
        lines += [f"# regime {regime}", dialect.line(values or {})]
    return "\n".join(lines) + "\n"
