"""Batching policies: how admitted requests become batches on executors.

A policy owns the scheduling state: the queue of admitted requests not running yet, the
idle executors, and its own progress through each request (prompt left, tokens made).
Each request's timeline is kept once for the run, in :class:`RequestTimes`, which the
host and its policy share: the host writes admission and finish, the policy start and
first token. A policy reaches the run that hosts it only through :class:`PolicyHost`'s calls,
its current assignment and those times, so the service layer sits above the policies.
Contract:

* ``admitted(request, now)`` queues a request the run admitted (its memory is held);
* ``dispatch(now)`` starts work on every idle executor that can take some, and may ask
  for a wake-up (``host.wake_at``) when a batch is worth waiting for;
* ``program_done(executor, now)`` settles the requests of the finished batch (calling
  ``host.finish`` for the completed ones) and marks the executor idle; the run then
  admits and dispatches again;
* ``queue`` is the deque of admitted requests that are not running yet (queue depth).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .gpu import left_to_right_sum

if TYPE_CHECKING:
    from ..traffic import Workload
    from .program import BoundService, Program


class RequestTimes:
    """Each request's timeline, one list per event indexed by request, NaN until it
    happens: arrived (the workload's), admitted (its memory held), started (first
    scheduled), first token, finished; and ``jitter``, the factor its batches' kernel work
    is scaled by. One per run: the host, its policy and the metrics read the same lists."""

    def __init__(self, workload: Workload) -> None:
        n = len(workload)
        self.arrival_t: list[float] = workload.arrivals_s.tolist()
        self.admit_t: list[float] = [math.nan] * n
        self.start_t: list[float] = [math.nan] * n
        self.first_t: list[float] = [math.nan] * n
        self.finish_t: list[float] = [math.nan] * n
        self.jitter: list[float] = workload.jitter.tolist()


class PolicyHost:
    """What a batching policy may ask of the run that hosts it: the assignment in force
    and three calls (the *policy's* host, not the CPU host thread that issues launches).
    :class:`tuner.sim.service.ServiceRun` is the simulator's, :class:`RelayPolicyHost` a
    replay's; ServiceRun derives from this class (rather than matching a protocol) so that the compiled core calls
    it directly, as it would call its own methods."""

    bound: BoundService  # the assignment in force (a switch replaces it between batches)
    times: RequestTimes  # each request's timeline, shared with the policy

    def memory_capacity(self) -> float:
        """Bytes the budget leaves for request state beside the fixed part and the reserved
        workspace (an engine policy sizes its KV cache by it)."""
        raise NotImplementedError

    def wake_at(self, t: float) -> None:
        """Call the policy's ``dispatch`` again at ``t``."""
        raise NotImplementedError

    def start_program(self, executor: int, program: Program, scale: float, now: float) -> None:
        """Run ``program`` (its kernels' work times ``scale``) on ``executor`` from ``now``."""
        raise NotImplementedError

    def finish(self, request: int, now: float) -> None:
        """``request`` completed at ``now``: release its memory and judge it."""
        raise NotImplementedError

    def hold(self, nbytes: float) -> None:
        """The policy now holds ``nbytes`` of memory itself (an engine's KV blocks in use)."""
        raise NotImplementedError


class RelayPolicyHost(PolicyHost):
    """A host whose calls go to ``target``, a plain Python object with the same four
    methods: how code outside the compiled core hosts a policy (a class of its own
    cannot derive from :class:`PolicyHost` once the core is compiled). ``tuner.replay`` runs
    the simulator's policies this way, on a wall clock and real executors."""

    def __init__(self, bound: BoundService, capacity: float, times: RequestTimes, target: Any) -> None:
        self.bound = bound
        self.capacity = capacity
        self.times = times
        self.target = target

    def memory_capacity(self) -> float:
        return self.capacity

    def wake_at(self, t: float) -> None:
        self.target.wake_at(t)

    def start_program(self, executor: int, program: Program, scale: float, now: float) -> None:
        self.target.start_program(executor, program, scale, now)

    def finish(self, request: int, now: float) -> None:
        self.target.finish(request, now)

    def hold(self, nbytes: float) -> None:
        self.target.hold(nbytes)


class BatchingPolicy:
    """The scheduling state every policy keeps (see the module's contract)."""

    def __init__(self, host: PolicyHost, executors: int) -> None:
        self.host = host
        self.queue: deque[int] = deque()  # admitted, waiting to run
        self.idle: list[int] = list(range(executors - 1, -1, -1))  # popped from the end: executor 0 first
        self.times = host.times

    def admitted(self, request: int, now: float) -> None:
        """Queue ``request``, admitted at ``now`` (its memory is held from now on)."""
        self.queue.append(request)

    def dispatch(self, now: float) -> None:
        """Start work on every idle executor that can take some (or ask for a wake-up)."""
        raise NotImplementedError

    def program_done(self, executor: int, now: float) -> None:
        """Settle the finished batch of ``executor`` and mark it idle."""
        raise NotImplementedError


class DynamicBatching(BatchingPolicy):
    """Request-level batching: a batch closes at ``max_batch`` requests or when its
    oldest request has waited ``max_wait_s``; all its requests finish together.

    ``sizes`` are the requests' size fields as lists; ``size_fields`` those the programs
    read (a batch's variables are their maximum and total over its requests)."""

    def __init__(self, host: PolicyHost, executors: int, workload: Workload, sizes: Mapping[str, list[Any]],
                 size_fields: frozenset[str]) -> None:
        super().__init__(host, executors)
        self.batches: list[list[int]] = [[] for _ in range(executors)]
        service = host.bound.service
        self.max_batch = service.max_batch
        self.max_wait = service.max_wait_s
        self.fields = [(name, sizes[name]) for name in sorted(size_fields)]
        self._by_size: dict[int, Program] = {}  # programs by batch size, when sizes don't matter
        self._bound = host.bound

    def dispatch(self, now: float) -> None:
        times = self.times
        host, queue, admit_t, idle, max_batch = self.host, self.queue, times.admit_t, self.idle, self.max_batch
        jitter, start_t = times.jitter, times.start_t
        while queue and idle:
            if len(queue) < max_batch:
                oldest_admitted_at = admit_t[queue[0]]
                if now < oldest_admitted_at + self.max_wait:
                    host.wake_at(oldest_admitted_at + self.max_wait)
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
            host.start_program(executor, self._program(batch, size), scale, now)

    def _program(self, batch: list[int], size: int) -> Program:
        bound = self.host.bound
        if self._bound is not bound:  # the assignment was switched: new programs
            self._bound, self._by_size = bound, {}
        if not self.fields:
            program = self._by_size.get(size)
            if program is None:
                program = self._by_size[size] = bound.program({"batch": size})
            return program
        variables: dict[str, float] = {"batch": size}
        for name, values in self.fields:
            sizes = [values[r] for r in batch]
            variables[name] = max(sizes)
            variables[f"{name}_total"] = sum(sizes)
        return bound.program(variables)

    def program_done(self, executor: int, now: float) -> None:
        for r in self.batches[executor]:
            self.host.finish(r, now)
        self.batches[executor] = []
        self.idle.append(executor)


class ContinuousBatching(BatchingPolicy):
    """Iteration-level batching (LLM serving): each iteration runs every active sequence;
    decodes take one token each, prefills fill the rest of the ``max_tokens`` budget in
    chunks (chunked prefill); new requests join at iteration boundaries."""

    def __init__(self, host: PolicyHost, executors: int, workload: Workload, sizes: Mapping[str, list[Any]]) -> None:
        super().__init__(host, executors)
        service = host.bound.service
        self.max_batch = service.max_batch
        self.max_tokens = service.max_tokens
        self.running: list[list[int]] = [[] for _ in range(executors)]
        self.plans: list[list[tuple[int, int]]] = [[] for _ in range(executors)]
        # MoE routing: a fresh generator per simulation from the workload's routing seed,
        # so every assignment draws the same counts in the same iteration order
        self.routing = workload.routing
        self.routing_rng = np.random.default_rng(workload.routing_seed) if workload.routing is not None else None
        self.prompt = sizes["prompt"]
        self.output = sizes["output"]
        self.prefill_left = [max(p, 1) for p in self.prompt]  # a request carries at least one token
        self.generated = [0] * len(self.prompt)

    def dispatch(self, now: float) -> None:
        idle = self.idle
        for executor in sorted(idle, reverse=True):
            running = self.running[executor]
            while self.queue and len(running) < self.max_batch:
                r = self.queue.popleft()
                running.append(r)
            if not running:
                continue
            idle.remove(executor)
            self._start_iteration(executor, running, now)

    def _start_iteration(self, executor: int, running: list[int], now: float) -> None:
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
        start_t = self.times.start_t
        for r, _ in plan:
            if start_t[r] != start_t[r]:  # NaN: scheduled for the first time
                start_t[r] = now
        jitter = self.times.jitter
        scale = left_to_right_sum([jitter[r] for r, _ in plan]) / len(plan)
        self.plans[executor] = plan
        bound = self.host.bound
        if bound.service.overlap == "two_batch" and len(plan) > 1:
            cut = _balanced_cut(plan)
            program = bound.overlapped([self._variables(plan[:cut]), self._variables(plan[cut:])])
        elif bound.service.overlap == "two_batch":
            program = bound.overlapped([self._variables(plan)])
        else:
            program = bound.program(self._variables(plan))
        self.host.start_program(executor, program, scale, now)

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
        prefill_left, generated, output, first_t = self.prefill_left, self.generated, self.output, self.times.first_t
        done = []
        for r, chunk in self.plans[executor]:
            if prefill_left[r] > 0:
                prefill_left[r] -= chunk
                if prefill_left[r] == 0:
                    first_t[r] = now
                    generated[r] = 1
            else:
                generated[r] += 1
            if prefill_left[r] == 0 and generated[r] >= output[r]:
                done.append(r)
        if done:
            finished = set(done)
            self.running[executor] = [r for r in self.running[executor] if r not in finished]
            for r in done:
                self.host.finish(r, now)
        self.plans[executor] = []
        self.idle.append(executor)


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
