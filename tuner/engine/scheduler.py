"""vLLM V1's scheduler, step by step (vllm/v1/core/sched/scheduler.py, ``schedule`` and
``update_from_output``), over the KV cache of :mod:`tuner.engine.block_pool`.

One step, as the engine runs it:

1. **Running requests first, in the order they joined**: each asks for the tokens it has
   not computed (one for a decode, the rest of its prompt for a chunked prefill), capped
   by the step's token budget left (``max_num_batched_tokens``) and by
   ``max_model_len - 1 - computed``. When the KV cache cannot grow it, the request that
   joined last is preempted (its blocks freed, its computed tokens forgotten: it
   recomputes later) until it can, or until it is itself the one preempted.
2. **Then waiting requests, first come first served**, unless a preemption happened in
   this step, while the budget lasts and fewer than ``max_num_seqs`` run: each takes its
   longest cached prefix (whole blocks, never its last token) and as much of the rest as
   the budget allows; the first that cannot get blocks stops the loop.
3. The step's tokens are padded to the next CUDA-graph capture size when the largest
   covers them (``padded_tokens``); beyond it the step runs eager.

A request whose computed tokens reach its known tokens samples one token at the step's
end; it finishes when it has ``output`` tokens and frees its blocks.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from .block_pool import BlockPool, KVRequest


def default_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes: 1, 2, 4, then every 8 below 256, then every
    16 from 256, up to ``min(2 · max_num_seqs, 512, max_num_batched_tokens)``
    (vllm/config/vllm.py, ``VllmConfig._set_cudagraph_sizes``, v0.14.1)."""
    largest = min(2 * max_num_seqs, 512, max_num_batched_tokens)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, largest + 1, 16)]
    return tuple(s for s in sizes if s <= largest)


#: The most KV blocks a simulated engine holds (its pool is allocated whole; 4 M blocks of
#: 16 tokens is 64 M tokens of context, beyond any one GPU's cache).
MAX_KV_BLOCKS = 1 << 22


@dataclass(frozen=True)
class EngineArgs:
    """The engine arguments that shape scheduling, under vLLM's names."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    block_size: int = 16
    num_gpu_blocks: int = 10_000
    enable_prefix_caching: bool = True
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # None: vLLM's default for max_num_seqs
    enforce_eager: bool = False
    async_scheduling: bool = True  # step n+1 is scheduled while step n runs (see tuner.engine.replay)

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def keyed_blocks(self, prompt: int, output: int) -> int:
        """The full blocks of a prompt worth a prefix-cache key: none for a request the
        engine refuses (longer than ``max_model_len``), which would only cost memory."""
        return prompt // self.block_size if prompt + output <= self.max_model_len else 0

    @property
    def capture_sizes(self) -> tuple[int, ...]:
        if self.enforce_eager:
            return ()
        sizes = self.cudagraph_capture_sizes
        return tuple(sorted(sizes)) if sizes is not None else default_capture_sizes(self.max_num_seqs, self.max_num_batched_tokens)


class EngineRequest(KVRequest):
    """One request's scheduling state."""

    __slots__ = ("arrival", "prompt", "output", "generated", "computed", "first_t", "finish_t", "preemptions")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int,
                 prefix: Sequence[Hashable] = ()) -> None:
        super().__init__(rid, prefix)
        self.arrival = arrival
        self.prompt = max(prompt, 1)
        self.output = max(output, 1)
        self.generated = 0
        self.computed = 0
        self.first_t = float("nan")
        self.finish_t = float("nan")
        self.preemptions = 0


@dataclass(frozen=True)
class StepEnd:
    """What a step's end settled: the requests that gave their first token, and those
    that gave their last (and freed their blocks)."""

    first: list[EngineRequest]
    finished: list[EngineRequest]


@dataclass
class ScheduledStep:
    """What one step runs: ``(request, new tokens, tokens computed before)`` in the
    scheduler's order, and the padded token count its graphs run."""

    entries: list[tuple[EngineRequest, int, int]] = field(default_factory=list)
    tokens: int = 0
    padded_tokens: int = 0
    preempted: int = 0


class Scheduler:
    """The scheduler and its KV cache; :meth:`add`, then :meth:`schedule` and
    :meth:`finish_step` in turn."""

    def __init__(self, args: EngineArgs) -> None:
        self.args = args
        self.pool = BlockPool(args.num_gpu_blocks, args.block_size, args.enable_prefix_caching)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.capture = args.capture_sizes
        self.preemptions = 0
        self.cached_tokens = 0
        self.refused = 0

    def add(self, request: EngineRequest) -> bool:
        """Queue ``request``; one longer than ``max_model_len`` is refused, as vLLM's API
        server refuses it (False; it never runs)."""
        if request.prompt + request.output > self.args.max_model_len:
            self.refused += 1
            return False
        self.waiting.append(request)
        return True

    def schedule(self) -> ScheduledStep:
        step = ScheduledStep()
        budget = self._schedule_running(step, self.args.max_num_batched_tokens)
        if not step.preempted:
            self._schedule_waiting(step, budget)
        step.padded_tokens = self.padded(step.tokens)
        return step

    def padded(self, tokens: int) -> int:
        """``tokens`` padded to the next capture size; unchanged beyond the largest."""
        capture = self.capture
        if not capture or tokens > capture[-1] or tokens == 0:
            return tokens
        return capture[bisect.bisect_left(capture, tokens)]

    def _schedule_running(self, step: ScheduledStep, budget: int) -> int:
        running, pool, limit = self.running, self.pool, self.args.max_model_len - 1
        size, caching = self.args.block_size, self.args.enable_prefix_caching
        entries = step.entries
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            before = request.computed
            new = request.prompt + request.generated - before
            if new > budget:
                new = budget
            if new > limit - before:
                new = limit - before
            if new <= 0:
                index += 1
                continue
            total = before + new
            if total <= len(request.blocks) * size:  # its blocks hold the step's tokens: nothing to allocate
                if caching and total // size > request.cached_blocks:
                    pool.cache_full(request, min(total, request.prompt + request.generated) // size)
            else:
                while not pool.allocate(request, before, new, (), request.prompt + request.generated):
                    victim = running.pop()
                    self._preempt(victim)
                    step.preempted += 1
                    if victim is request:
                        return budget
            entries.append((request, new, before))
            request.computed = total
            step.tokens += new
            budget -= new
            index += 1
        return budget

    def _preempt(self, request: EngineRequest) -> None:
        self.pool.release(request)
        request.computed = 0
        request.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(request)

    def _schedule_waiting(self, step: ScheduledStep, budget: int) -> None:
        waiting, running, pool, args = self.waiting, self.running, self.pool, self.args
        size = args.block_size
        while waiting and budget > 0 and len(running) < args.max_num_seqs:
            request = waiting[0]
            known = request.prompt + request.generated
            hits = pool.computed_blocks(request, known)
            cached = len(hits) * size
            new = min(known - cached, budget, args.max_model_len - 1 - cached)
            if new <= 0:
                break
            if not pool.allocate(request, 0, new, hits, known):
                if running:
                    break  # blocks free up as running requests finish
                waiting.popleft()  # nothing holds a block, so it can never get them: refused
                self.refused += 1
                continue
            waiting.popleft()
            running.append(request)
            self.cached_tokens += cached
            step.entries.append((request, new, cached))
            request.computed = cached + new
            step.tokens += new
            budget -= new

    def finish_step(self, step: ScheduledStep, now: float) -> StepEnd:
        """The step ended at ``now``: requests that computed all their known tokens
        sample one; those with all their output finish and free their blocks."""
        first, finished = [], []
        for request, _, _ in step.entries:
            if request.computed != request.prompt + request.generated:
                continue  # a prefill chunk that is not the prompt's last
            request.generated += 1
            if request.generated == 1 and request.first_t != request.first_t:
                request.first_t = now
                first.append(request)
            if request.generated >= request.output:
                request.finish_t = now
                finished.append(request)
        if finished:
            done = set(id(r) for r in finished)
            self.running = [r for r in self.running if id(r) not in done]
            for request in finished:
                self.pool.release(request)
        return StepEnd(first, finished)
