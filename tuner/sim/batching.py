"""Batching policies: how admitted requests become batches on executors.

A policy is told when requests are admitted and when an executor's program ends, and
starts programs through the run (:class:`tuner.sim.service.ServiceRun`). Contract:

* ``dispatch(now)`` starts work on every idle executor that can take some, and may ask
  for a wake-up (``run.wake_at``) when a batch is worth waiting for;
* ``program_done(executor, now)`` settles the requests of the finished batch (calling
  ``run.finish`` for the completed ones); the run then admits and dispatches again;
* ``queue`` is the deque of admitted requests that are not running yet (queue depth).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from .gpu import left_to_right_sum

if TYPE_CHECKING:
    from .program import Program
    from .service import ServiceRun


class DynamicBatching:
    """Request-level batching: a batch closes at ``max_batch`` requests or when its
    oldest request has waited ``max_wait_s``; all its requests finish together."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        self.queue: deque[int] = deque()  # admitted, waiting for a batch
        self.batches: list[list[int]] = [[] for _ in range(run.executors)]
        service = run.bound.service
        self.max_batch = service.max_batch
        self.max_wait = service.max_wait_s
        self.fields = [(name, run.sizes[name]) for name in sorted(run.size_fields)]
        self._by_size: dict[int, Program] = {}  # programs by batch size, when sizes don't matter
        self._bound = run.bound

    def admitted(self, request: int) -> None:
        self.queue.append(request)

    def dispatch(self, now: float) -> None:
        run, queue, idle, max_batch = self.run, self.queue, self.run.idle, self.max_batch
        jitter, start_t = run.jitter, run.start_t
        while queue and idle:
            if len(queue) < max_batch:
                oldest_admitted_at = run.admit_t[queue[0]]
                if now < oldest_admitted_at + self.max_wait:
                    run.wake_at(oldest_admitted_at + self.max_wait)
                    return
            executor = idle.pop()
            size = min(max_batch, len(queue))
            if size == 1:
                r = queue.popleft()
                batch = [r]
                scale = jitter[r]
                start_t[r] = now
            else:
                batch = [queue.popleft() for _ in range(size)]
                scale = left_to_right_sum([jitter[r] for r in batch]) / size
                for r in batch:
                    start_t[r] = now
            self.batches[executor] = batch
            run.start_program(executor, self._program(batch, size), scale, now)

    def _program(self, batch: list[int], size: int) -> Program:
        if self._bound is not self.run.bound:  # the assignment was switched: new programs
            self._bound, self._by_size = self.run.bound, {}
        if not self.fields:
            program = self._by_size.get(size)
            if program is None:
                program = self._by_size[size] = self.run.bound.program({"batch": size})
            return program
        variables: dict[str, float] = {"batch": size}
        for name, values in self.fields:
            sizes = [values[r] for r in batch]
            variables[name] = max(sizes)
            variables[f"{name}_total"] = sum(sizes)
        return self.run.bound.program(variables)

    def program_done(self, executor: int, now: float) -> None:
        for r in self.batches[executor]:
            self.run.finish(r, now)
        self.batches[executor] = []


class ContinuousBatching:
    """Iteration-level batching (LLM serving): each iteration runs every active sequence;
    decodes take one token each, prefills fill the rest of the ``max_tokens`` budget in
    chunks (chunked prefill); new requests join at iteration boundaries."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        self.queue: deque[int] = deque()  # admitted, not yet running
        service = run.bound.service
        self.max_batch = service.max_batch
        self.max_tokens = service.max_tokens
        self.running: list[list[int]] = [[] for _ in range(run.executors)]
        self.plans: list[list[tuple[int, int]]] = [[] for _ in range(run.executors)]
        # MoE routing: a fresh generator per simulation from the workload's routing seed,
        # so every assignment draws the same counts in the same iteration order
        workload = run.workload
        self.routing = workload.routing
        self.routing_rng = np.random.default_rng(workload.routing_seed) if workload.routing is not None else None
        self.prompt = run.sizes["prompt"]
        self.output = run.sizes["output"]
        self.prefill_left = [max(p, 1) for p in self.prompt]  # a request carries at least one token
        self.generated = [0] * len(self.prompt)

    def admitted(self, request: int) -> None:
        self.queue.append(request)

    def dispatch(self, now: float) -> None:
        run = self.run
        for executor in sorted(run.idle, reverse=True):
            running = self.running[executor]
            while self.queue and len(running) < self.max_batch:
                r = self.queue.popleft()
                running.append(r)
            if not running:
                continue
            run.idle.remove(executor)
            self._start_iteration(executor, running, now)

    def _start_iteration(self, executor: int, running: list[int], now: float) -> None:
        run = self.run
        prefill_left = self.prefill_left
        plan: list[tuple[int, int]] = []
        # Decodes first (one token each), as vLLM's scheduler does; prefills share the rest.
        for r in running:
            if prefill_left[r] == 0:
                plan.append((r, 1))
        decode = len(plan)
        room = self.max_tokens - decode
        for r in running:
            if room <= 0:
                break
            left = prefill_left[r]
            if left > 0:
                chunk = min(left, room)
                room -= chunk
                plan.append((r, chunk))
        start_t = run.start_t
        for r, _ in plan:
            if start_t[r] != start_t[r]:  # NaN: scheduled for the first time
                start_t[r] = now
        jitter = run.jitter
        scale = left_to_right_sum([jitter[r] for r, _ in plan]) / len(plan)
        self.plans[executor] = plan
        if run.bound.service.overlap == "two_batch" and len(plan) > 1:
            cut = _balanced_cut(plan)
            program = run.bound.overlapped([self._variables(plan[:cut]), self._variables(plan[cut:])])
        elif run.bound.service.overlap == "two_batch":
            program = run.bound.overlapped([self._variables(plan)])
        else:
            program = run.bound.program(self._variables(plan))
        run.start_program(executor, program, scale, now)

    def _variables(self, plan: list[tuple[int, int]]) -> dict[str, Any]:
        """The batch variables of an iteration (or micro-batch) running ``plan``, with its
        tokens' per-expert counts (``expert_counts``) where the service routes to experts."""
        prefill_left, generated, prompt = self.prefill_left, self.generated, self.prompt
        decode = prefill = context = max_context = 0
        for r, chunk in plan:
            if prefill_left[r] == 0:
                decode += 1
            else:
                prefill += chunk
            seq_context = max(prompt[r], 1) - prefill_left[r] + chunk + generated[r]
            context += seq_context
            if seq_context > max_context:
                max_context = seq_context
        variables: dict[str, Any] = {
            "batch": len(plan), "tokens": decode + prefill, "prefill_tokens": prefill,
            "decode_seqs": decode, "context": context, "max_context": max_context,
        }
        if self.routing is not None and self.routing_rng is not None:
            variables["expert_counts"] = self.routing.counts(self.routing_rng, decode + prefill)
        return variables

    def program_done(self, executor: int, now: float) -> None:
        run = self.run
        prefill_left, generated, output = self.prefill_left, self.generated, self.output
        done = []
        for r, chunk in self.plans[executor]:
            if prefill_left[r] > 0:
                prefill_left[r] -= chunk
                if prefill_left[r] == 0:
                    run.first_t[r] = now
                    generated[r] = 1
            else:
                generated[r] += 1
            if prefill_left[r] == 0 and generated[r] >= output[r]:
                done.append(r)
        if done:
            finished = set(done)
            self.running[executor] = [r for r in self.running[executor] if r not in finished]
            for r in done:
                run.finish(r, now)
        self.plans[executor] = []


def _balanced_cut(plan: list[tuple[int, int]]) -> int:
    """Where two-batch overlap splits an iteration's sequences (in the scheduler's order,
    decodes first): the cut, leaving a sequence on each side, that makes the two
    micro-batches' token counts closest, as SGLang's two-batch overlap balances them
    (``compute_split_seq_index``). Sequences are not split: a lone long prefill stays
    on one side."""
    total = sum(chunk for _, chunk in plan)
    best, best_gap, running = 1, total, 0
    for i in range(1, len(plan)):
        running += plan[i - 1][1]
        gap = abs(total - 2 * running)
        if gap < best_gap:
            best, best_gap = i, gap
    return best
