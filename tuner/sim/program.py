"""Bind an assignment to a service: what a batch launches, and what memory it reserves.

A *program* is the ordered list of kernel launches one batch (or one continuous-batching
iteration) makes: consecutive operators with the same ``repeat`` form a block that runs
``repeat`` times, as the layers of a transformer do.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Mapping
from operator import itemgetter
from dataclasses import dataclass, field
from typing import Any

from ..errors import AssignmentError
from ..phases import WHOLE_DEVICE, Partition, Phase
from ..problem.assignment import Assignment
from ..problem.capabilities import ChannelBound
from ..problem.model import Config, Device, Operator, Problem, Service

Phases = tuple[Phase, ...]
Launch = tuple[str, Phases]
#: What one operator runs in a batch: its name, its shape's dimensions (in the order its
#: ``shape`` lists them), the bucket whose config runs it, and its launches' modeled
#: seconds alone (their phases' times).
Cell = tuple[str, tuple[float, ...], int, float]
#: A program's cells by block: the operators that launch, and how often the block repeats.
Cells = tuple[tuple[tuple[Cell, ...], int], ...]
#: A launch's wait on another lane: it starts once that lane of the same executor has
#: completed ``count`` launches (a CUDA event recorded on one stream, waited on by
#: another). ``NO_WAIT`` (lane -1): nothing to wait for.
Wait = tuple[int, int]
NO_WAIT: Wait = (-1, 0)


@dataclass(frozen=True)
class Program:
    """The launches of one batch, per lane (one stream each, the service's partition
    first; see :meth:`Service.lanes`), the real kernel count, and the largest SM share
    any of its kernels takes (kept exact when launches are merged). A lane may be empty
    (its operators had nothing to do); not all of them are. ``waits``, when set, holds
    each launch's :data:`Wait` (lane by lane, launch by launch): the dependencies of a
    micro-batched overlap (:meth:`BoundService.overlapped`); None when the lanes run
    independently, joined only at the batch's end. ``issue``, when set, holds each
    launch's place in the order the executor's one host thread issues them (lane by lane,
    launch by launch; see ``service.launch: eager``); None when a launch's place is its
    index in its lane (one lane, or a service whose host issues nothing per launch).
    ``host_wait`` is the time a merged launch's phase idles waiting on the host (after its
    first launch, whose wait the service applies), counted as the service's host wait.
    ``cells`` says what the launches compute (each operator's shape and bucket, block by
    block; a micro-batched program's micro-batches one after another): what a replay
    executes for real (:mod:`tuner.replay`), where the simulator needs only the times."""

    lanes: tuple[tuple[Launch, ...], ...]
    kernels: int
    peak_sm: float
    waits: tuple[tuple[Wait, ...], ...] | None = None
    issue: tuple[tuple[int, ...], ...] | None = None
    host_wait: float = 0.0
    cells: Cells = ()


#: What a batch whose every operator has nothing to do launches: nothing but its overhead.
_EMPTY: Launch = ("empty", ((0.0, 0.0, 0.0, 0.0, 0.0),))


def merge(blocks: list[tuple[tuple[Launch, ...], int]], overhead_s: float, host_s: float = 0.0) -> Launch:
    """One launch standing for a whole batch that runs alone on the GPU.

    A stream alone on the GPU runs every kernel at rate 1, so the batch takes the sum of
    its kernels' times and gaps, and the SM-seconds it occupies are Σ s·t; one phase with
    that duration and the time-weighted shares (``s``, ``b`` and ``k`` alike) keeps both
    exact, at a fraction of the events; it is fluid (no waves: nothing shares the GPU with it). The GPU adds one launch overhead itself, so the other gaps go in the phase.
    ``blocks`` are (launches, repeat) pairs, summed once per block, not per repeat.

    With ``host_s`` > 0 (``service.launch: eager``) launch i is issued by the host at
    ``(i + 1)·host_s`` after the batch starts and starts at the later of that and the
    previous launch's end (:func:`eager_span`); the first launch's wait is the GPU's (the
    service delays the merged launch by it), the others' idle gaps go in the phase.
    """
    if host_s > 0.0:
        return _merge_eager(blocks, overhead_s, host_s)
    seconds = sm_seconds = dram_seconds = need_seconds = 0.0
    count = 0
    for launches, repeat in blocks:
        for _, phases in launches:
            for t, s, b, k, _ in phases:
                seconds += t * repeat
                sm_seconds += s * t * repeat
                dram_seconds += b * t * repeat
                need_seconds += k * t * repeat
        count += len(launches) * repeat
    total = seconds + overhead_s * (count - 1)
    if total <= 0.0:
        return ("batch", ((0.0, 0.0, 0.0, 0.0, 0.0),))
    return ("batch", ((total, sm_seconds / total, dram_seconds / total, need_seconds / total, 0.0),))


def eager_span(seconds: list[float], overhead_s: float, host_s: float) -> float:
    """Seconds from a batch's start to its last launch's end when one host thread issues
    launch i at ``(i + 1)·host_s`` and it starts at the later of that and the previous
    launch's end, then takes ``overhead_s`` and its ``seconds[i]`` on one stream alone:
    ``e_i = max((i + 1)·host_s, e_{i-1}) + overhead_s + seconds[i]``, ``e_{-1} = 0``."""
    end = 0.0
    for i, t in enumerate(seconds):
        issued = (i + 1) * host_s
        end = (issued if issued > end else end) + overhead_s + t
    return end


def _merge_eager(blocks: list[tuple[tuple[Launch, ...], int]], overhead_s: float, host_s: float) -> Launch:
    """:func:`merge` under eager launches: the same SM-, DRAM- and need-seconds over the
    span :func:`eager_span` gives, less the first launch's host wait and overhead (the
    GPU applies those to the merged launch)."""
    seconds: list[float] = []
    sm_seconds = dram_seconds = need_seconds = 0.0
    for launches, repeat in blocks:
        for _copy in range(repeat):
            for _, phases in launches:
                total = 0.0
                for t, s, b, k, _ in phases:
                    total += t
                    sm_seconds += s * t
                    dram_seconds += b * t
                    need_seconds += k * t
                seconds.append(total)
    span = eager_span(seconds, overhead_s, host_s) - host_s - overhead_s
    if span <= 0.0:
        return ("batch", ((0.0, 0.0, 0.0, 0.0, 0.0),))
    return ("batch", ((span, sm_seconds / span, dram_seconds / span, need_seconds / span, 0.0),))


def issue_order(lane_of: list[tuple[int, int]], lane_count: int) -> tuple[tuple[int, ...], ...]:
    """Each launch's place in the host's issue order, lane by lane, from ``(lane, count)``
    runs in the order the host issues them."""
    ranks: list[list[int]] = [[] for _ in range(lane_count)]
    k = 0
    for lane, count in lane_of:
        ranks[lane].extend(range(k, k + count))
        k += count
    return tuple(tuple(r) for r in ranks)


_CACHE_LIMIT = 8192

#: How many operators' launch memos a problem keeps between its simulations (least
#: recently bound dropped first; :class:`LaunchMemos`); each holds at most
#: ``_CACHE_LIMIT`` shapes. The limit is per problem, so a process that keeps several
#: problems loaded (a seed worker, the dashboard) keeps up to this many for each: about
#: 4 MB for llm_decode after every regime.
_SHARED_LIMIT = 256

#: The token of "nothing to launch" (a zero dimension), whatever the other variables: a
#: decode-only iteration's prefill operators then key every program alike.
_NOTHING = 0


@dataclass
class LaunchMemo:
    """One operator's launches by shape (and its profiles' direct reads), shared by every
    simulation that binds the same operator to the same profiles on the same partition.

    Launches depend only on that key, so a trial's seeds and capacity rates, and every
    trial that keeps this operator's configs, reuse them. ``entries`` maps the key to
    ``(token, launches, bucket, dims)`` (bucket None when nothing launches); ``by_vars`` maps
    the values of the batch variables the operator reads to the same entry, so a batch
    seen in any earlier simulation costs no shape arithmetic at all; ``pinned`` keeps
    the profiles its identity key names alive, so their ids are never reused meanwhile.
    """

    pinned: tuple[object, ...]
    entries: dict = field(default_factory=dict)
    by_vars: dict = field(default_factory=dict)
    last_token: int = _NOTHING


class LaunchMemos:
    """The launch memos of one problem's operators, by operator, partition, device and
    the identity of its configs' profiles (a profile's launches are its own), the least
    recently bound dropped past :data:`_SHARED_LIMIT`.

    Owned by the problem whose profiles they memoise (:func:`launch_memos`), so that every
    simulation of it in this process, of any assignment, regime or knob variant, shares
    them, and they go with it."""

    def __init__(self) -> None:
        self._memos: OrderedDict[tuple, LaunchMemo] = OrderedDict()

    def of(self, operator: Operator, configs: tuple[Config, ...], partition: Partition, device: Device) -> LaunchMemo:
        """The memo shared by every binding of ``operator`` to these configs' profiles on
        ``partition`` of ``device``."""
        memos = self._memos
        key = (operator, partition, device, tuple([id(config.profile) for config in configs]))
        memo = memos.get(key)
        if memo is None:
            memo = memos[key] = LaunchMemo(tuple([config.profile for config in configs]))
            if len(memos) > _SHARED_LIMIT:
                memos.popitem(last=False)
        else:
            memos.move_to_end(key)
        return memo


def launch_memos(problem: Problem) -> LaunchMemos:
    """The launch memos of ``problem``'s profiles, kept with them (``Problem.profile_caches``,
    which its knob variants share: they keep the same configs)."""
    memos = problem.profile_caches.get("launch_memos")
    if memos is None:
        memos = problem.profile_caches["launch_memos"] = LaunchMemos()
    return memos


@dataclass(frozen=True)
class BoundOperator:
    """An operator with one config per bucket: each launch uses its shape's bucket's.

    Launches are memoised by what they depend on, twice, both in ``shared`` (see
    :class:`LaunchMemo`), which outlives the simulation: first by the batch variables
    the operator reads (its shape's and its profiles', ``reads``), which costs no
    arithmetic on a hit; on a miss by its shape and the profiles' direct reads. A decode step
    and the next differ in context length, which changes no GEMM's shape, and changes
    attention's rounded length only every 16 tokens per sequence. ``reads`` is None
    when a profile does not say what it reads (then every variable, in the batching's
    order, so nothing is shared). Each distinct result gets a *token* (a counter, never
    reused; ``_NOTHING`` for no launch), so a whole batch's program can be memoised by
    its operators' tokens.
    """

    operator: Operator
    configs: tuple[Config, ...]
    reads: tuple[str, ...] | None = None
    direct: tuple[str, ...] | None = None
    partition: Partition = WHOLE_DEVICE
    lane: int = 0
    shared: LaunchMemo = field(default_factory=lambda: LaunchMemo(()), repr=False, compare=False)
    visited: set = field(default_factory=set, repr=False, compare=False)
    _outer: Callable[[Mapping[str, Any]], object] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # the first-level key, read in C: one value, or a tuple of several
        reads = self.reads
        outer = (lambda v: tuple(v.values())) if reads is None else (itemgetter(*reads) if reads else (lambda v: ()))
        object.__setattr__(self, "_outer", outer)

    def keyed(self, variables: Mapping[str, Any], device: Device
              ) -> tuple[int, tuple[Launch, ...], int | None, tuple[float, ...]]:
        """``(token, launches, bucket, dims)`` for a batch with these variables (the bucket is
        recorded in :attr:`visited`); no launch, and no bucket, when a shape dimension is
        zero (a prefill GEMM in a decode-only iteration is not launched)."""
        outer = self._outer(variables)
        memo = self.shared
        entry = memo.by_vars.get(outer)
        if entry is None:
            entry = self._entry(variables, device, outer)
            if len(memo.by_vars) >= _CACHE_LIMIT:
                memo.by_vars.clear()
            memo.by_vars[outer] = entry
        if entry[2] is not None:
            self.visited.add(entry[2])
        return entry

    def _entry(self, variables: Mapping[str, Any], device: Device, outer: object
               ) -> tuple[int, tuple[Launch, ...], int | None, tuple[float, ...]]:
        shape = self.operator.shape
        dims = tuple([expr.evaluate(variables) for _, expr in shape])
        direct = self.direct
        key = dims + (tuple([variables[v] for v in direct]) if direct is not None else (outer,))
        memo = self.shared
        entry = memo.entries.get(key)
        if entry is None:
            if dims and min(dims) <= 0.0:
                entry = (_NOTHING, (), None, dims)
            else:
                values = dict(variables)
                values.update(zip((dim for dim, _ in shape), dims))
                bucket = 0 if len(self.configs) == 1 else self.operator.bucketing.index(values)
                launches = self.configs[bucket].profile.launches(values, device, self.operator.name,
                                                                 self.partition)
                memo.last_token += 1
                entry = (memo.last_token, launches, bucket, dims)
            if len(memo.entries) >= _CACHE_LIMIT:
                memo.entries.clear()
            memo.entries[key] = entry
        return entry

    def reserved_workspace(self, largest: Mapping[str, float]) -> float:
        """The most workspace any of its configs needs in a bucket the service reaches,
        each at its bucket's largest shape (an engine sizes it before its KV cache)."""
        bucketing = self.operator.bucketing
        if not bucketing.key:
            return self.configs[0].profile.workspace_bytes(self.operator.variables(largest), self.partition)
        peak = 0.0
        for bucket, config in zip(bucketing.buckets, self.configs):
            if bucketing.reachable(bucket):
                values = self.operator.bucket_variables(largest, bucket.index)
                peak = max(peak, config.profile.workspace_bytes(values, self.partition))
        return peak


@dataclass(frozen=True)
class BoundService:
    """A service with one config per operator: the unit the simulator evaluates."""

    service: Service
    blocks: tuple[tuple[tuple[BoundOperator, ...], int], ...]
    reserved_workspace: float
    merged: bool = False
    lane_count: int = 1
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def visited(self) -> frozenset[tuple[str, int]]:
        """The (operator, bucket) cells whose configs any launch so far has used."""
        return frozenset((op.operator.name, b) for ops, _ in self.blocks for op in ops for b in op.visited)

    def program(self, variables: Mapping[str, Any]) -> Program:
        """The launches of one batch with these variables, memoised by its operators'
        launch tokens (batches whose every operator launches the same share a program).

        When :attr:`merged`, the batch is one launch (see :func:`merge`).
        """
        device = self.service.device
        parts = [op.keyed(variables, device) for ops, _ in self.blocks for op in ops]
        key = tuple([part[0] for part in parts])
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        lanes: list[tuple[Launch, ...]] = []
        kernels = 0
        peak = 0.0
        host_wait = 0.0
        for lane in range(self.lane_count):
            launched = iter(parts)
            blocks = [(tuple(launch for op in ops for launch in next(launched)[1] if op.lane == lane), repeat)
                      for ops, repeat in self.blocks]
            count = sum(len(launches) * repeat for launches, repeat in blocks)
            kernels += count
            peak = max(peak, max((s for launches, _ in blocks for _, phases in launches for _, s, _, _, _ in phases),
                                 default=0.0))
            if self.merged and count > 1:
                lanes.append((merge(blocks, self.service.launch_overhead_s, self.service.host_launch_s),))
                if self.service.host_launch_s > 0.0:  # the phase's idle gaps: its span less its work and gaps
                    work = 0.0  # a loop, not sum(): see NeighborStreams.close_window (service.py)
                    for launches, repeat in blocks:
                        for _, phases in launches:
                            for phase in phases:
                                work += phase[0] * repeat
                    host_wait = lanes[-1][0][1][0][0] - work - self.service.launch_overhead_s * (count - 1)
            else:
                lanes.append(tuple(launch for launches, repeat in blocks for launch in launches * repeat))
        if not any(lanes):
            lanes[0] = (_EMPTY,)
        issue: tuple[tuple[int, ...], ...] | None = None
        if self.lane_count > 1 and self.service.host_launch_s > 0.0 and kernels:
            # the host issues the batch in program order, each operator's launches on its lane
            counted = iter(parts)
            paired = [([(op.lane, len(next(counted)[1])) for op in ops], times) for ops, times in self.blocks]
            issue = issue_order([run for block, times in paired for _copy in range(times) for run in block],
                                self.lane_count)
        program = Program(tuple(lanes), kernels, peak, None, issue, host_wait, self._cells(parts))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = program
        return program

    def _cells(self, parts: list[tuple[int, tuple[Launch, ...], int | None, tuple[float, ...]]]) -> Cells:
        """What each block's operators compute, from their keyed entries (in block order)."""
        keyed = iter(parts)
        cells: list[tuple[tuple[Cell, ...], int]] = []
        for ops, repeat in self.blocks:
            block: list[Cell] = []
            for op in ops:
                _, launches, bucket, dims = next(keyed)
                if bucket is not None:
                    seconds = 0.0
                    for _, phases in launches:
                        for phase in phases:
                            seconds += phase[0]
                    block.append((op.operator.name, dims, bucket, seconds))
            cells.append((tuple(block), repeat))
        return tuple(cells)

    def overlapped(self, micro_batches: list[dict[str, Any]]) -> Program:
        """The launches of one iteration split into micro-batches with these variables,
        with the waits between lanes of a two-batch overlap (see :func:`interleave`);
        memoised by the micro-batches' launch tokens, as :meth:`program` is."""
        device = self.service.device
        parts = [[op.keyed(variables, device) for ops, _ in self.blocks for op in ops] for variables in micro_batches]
        key = (len(parts),) + tuple([part[0] for keyed in parts for part in keyed])
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        segmented: list[list[tuple[int, tuple[Launch, ...]]]] = []
        for keyed in parts:
            launched = iter(keyed)
            blocks = [([(op.lane, next(launched)[1]) for op in ops], repeat) for ops, repeat in self.blocks]
            runs: list[tuple[int, list[Launch]]] = []
            for block, repeat in blocks:
                for _ in range(repeat):
                    for lane, launches in block:
                        if runs and runs[-1][0] == lane:
                            runs[-1][1].extend(launches)
                        else:
                            runs.append((lane, list(launches)))
            segmented.append([(lane, tuple(launches)) for lane, launches in runs])
        lanes, waits = interleave(segmented, self.lane_count)
        kernels = sum(len(launches) for launches in lanes)
        peak = max((s for launches in lanes for _, phases in launches for _, s, _, _, _ in phases), default=0.0)
        issue: tuple[tuple[int, ...], ...] | None = None
        if not kernels:
            lanes, waits = ((_EMPTY,),) + lanes[1:], ((NO_WAIT,),) + waits[1:]
        elif self.service.host_launch_s > 0.0:  # the host issues them in interleave's order
            issue = issue_order([(segments[j][0], len(segments[j][1])) for j in range(len(segmented[0]))
                                 for segments in segmented], self.lane_count)
        program = Program(lanes, kernels, peak, waits, issue,
                          cells=tuple([block for keyed in parts for block in self._cells(keyed)]))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = program
        return program


def interleave(micro_batches: list[list[tuple[int, tuple[Launch, ...]]]], lane_count: int
               ) -> tuple[tuple[tuple[Launch, ...], ...], tuple[tuple[Wait, ...], ...]]:
    """The lanes, and each launch's wait, of micro-batches run as two-batch overlap does.

    Each micro-batch is its segments in program order, ``(lane, launches)``: the runs of
    consecutive operators on one lane (every micro-batch has the same segments, some
    perhaps empty). Segment j of every micro-batch goes on its lane in micro-batch order
    (the first micro-batch's attention, then the second's), and the first launch of a
    segment waits for its own micro-batch's latest launch when that ran on another lane: a
    layer's all-reduce after its GEMM, the next GEMM after that all-reduce. So one
    micro-batch's collective runs while the other's GEMMs do, as SGLang's two-batch
    overlap and NanoFlow schedule them.
    """
    lanes: list[list[Launch]] = [[] for _ in range(lane_count)]
    waits: list[list[Wait]] = [[] for _ in range(lane_count)]
    latest: list[Wait] = [NO_WAIT] * len(micro_batches)
    for j in range(len(micro_batches[0])):
        for m, segments in enumerate(micro_batches):
            lane, launches = segments[j]
            if not launches:
                continue
            wait = latest[m] if latest[m][0] not in (-1, lane) else NO_WAIT
            lanes[lane].extend(launches)
            waits[lane].extend([wait] + [NO_WAIT] * (len(launches) - 1))
            latest[m] = (lane, len(lanes[lane]))
    return tuple(tuple(launches) for launches in lanes), tuple(tuple(w) for w in waits)


def _reads(configs: tuple[Config, ...], op: Operator) -> tuple[str, ...] | None:
    """Batch variables the configs' profiles read besides the operator's shape (None:
    a profile that does not say)."""
    names: set[str] = set()
    for config in configs:
        read = config.profile.variables_read
        if "*" in read:
            return None
        names |= set(read)
    return tuple(sorted(names - {dim for dim, _ in op.shape}))


def _held_to_channels(configs: tuple[Config, ...], channels: int) -> tuple[Config, ...]:
    """The configs with each collective's profile held to ``channels`` (the knob
    ``nccl_channels``: NCCL reads its channel bounds once, at start-up, for every
    collective alike); a profile that is not a collective's has no ``with_channels``."""
    out = []
    for config in configs:
        profile = config.profile
        out.append(dataclasses.replace(config, profile=profile.with_channels(channels))
                   if isinstance(profile, ChannelBound) else config)
    return tuple(out)


def bind(service: Service, assignment: Assignment, size_fields: frozenset[str],
         allow_merge: bool = True, memos: LaunchMemos | None = None) -> BoundService:
    """Pair each operator with its configs and compute the workspace the engine reserves.

    The reservation is the assignment's peak workspace over every reachable bucket of
    every operator, each at its bucket's shape at the largest batch (one operator runs
    at a time per executor), once per executor, as an engine profiles it before sizing
    its request state. A service whose one executor has the GPU to itself
    (no neighbours) runs each batch as one merged launch, exactly (see :func:`merge`),
    unless ``allow_merge`` is off (a recorded timeline shows every kernel) or jitter
    would also stretch the merged launch gaps. Launches are memoised in ``memos`` (the
    problem's, :func:`launch_memos`, for a simulation), else for this binding alone.

    Raises:
        AssignmentError: an operator has no config, or a config of another family.
    """
    bound = []
    lanes = service.lanes()
    for op in service.operators:
        try:
            configs = assignment.configs(op.name)
        except KeyError:
            raise AssignmentError(f"operator {op.name!r} has no config in the assignment") from None
        if len(configs) != op.bucketing.size:
            raise AssignmentError(f"operator {op.name!r} has {op.bucketing.size} buckets but the assignment "
                                  f"gives {len(configs)} configs")
        for config in configs:
            if config.family != op.family:
                raise AssignmentError(f"operator {op.name!r} is family {op.family!r} but config "
                                      f"{config.name!r} is of {config.family!r}")
        if service.collective_channels is not None:
            configs = _held_to_channels(configs, service.collective_channels)
        direct = _reads(configs, op)
        reads = None if direct is None else tuple(sorted(set(direct).union(*(e.names for _, e in op.shape))))
        partition = op.partition or service.partition
        shared = LaunchMemo(()) if reads is None or memos is None else memos.of(op, configs, partition, service.device)
        bound.append(BoundOperator(op, configs, reads, direct, partition, lanes.index(partition), shared))
    blocks: list[tuple[tuple[BoundOperator, ...], int]] = []
    for item in bound:
        if blocks and blocks[-1][1] == item.operator.repeat:
            blocks[-1] = (blocks[-1][0] + (item,), item.operator.repeat)
        else:
            blocks.append(((item,), item.operator.repeat))
    largest = service.largest_batch_variables(size_fields)
    peak = max(op.reserved_workspace(largest) for op in bound)
    merged = (allow_merge and service.executors == 1 and not service.neighbors and len(lanes) == 1
              and service.partition.share >= 1.0 and service.jitter.kind == "deterministic")
    return BoundService(service, tuple(blocks), peak * service.executors, merged, len(lanes))
