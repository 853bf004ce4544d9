"""The ``vllm`` batching policy: vLLM V1's engine (:mod:`tuner.engine.scheduler`) driving
the service simulator, each step's kernels run on the shared GPU as the assignment makes
them.

What it adds to continuous batching, each rule as :mod:`tuner.engine` documents it:

* the KV cache in blocks, allocated as requests grow, with preemption by recompute; the
  blocks are what the memory budget leaves after the weights and the reserved workspace
  (``service.engine.num_gpu_blocks`` overrides), so a workspace-hungry config costs KV
  blocks, as in vLLM, not admitted requests: requests are admitted on arrival;
* prefix caching: requests with the same ``prompt_id`` size field send the same prompt
  (keyed as :func:`tuner.engine.measured_run.prefix_keys` keys a measured run's); without
  that field no two requests share prompt text and the cache finds nothing;
* the step's tokens padded to the next CUDA-graph capture size: the ``tokens`` the
  operators see (the GEMMs' M) is the padded count;
* async scheduling: a request arriving while step n runs joins step n+2;
* the engine's CPU per step (``step_cpu``, plus ``request_cpu`` per request), before the
  step's kernels, and a per-request overhead between server and client
  (``request_overhead``) added to its first token and its end.

Memory timelines show the fixed part, the workspace and the KV blocks requests hold (vLLM
allocates the whole cache at start-up; the timeline shows the part in use).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine.block_pool import blocks_in
from ..engine.measured_run import prefix_keys
from ..engine.scheduler import MAX_KV_BLOCKS, EngineArgs, EngineRequest, ScheduledStep, Scheduler
from ..errors import ProblemError
from ..traffic.sizes import PROMPT_ID
from .batching import BatchingPolicy, PolicyHost
from .gpu import left_to_right_sum

if TYPE_CHECKING:
    from ..traffic import Workload


def _requests(sizes: Mapping[str, list[Any]], args: EngineArgs) -> list[EngineRequest]:
    """The workload's requests as the engine sees them, each prompt keyed for the prefix
    cache by its ``prompt_id`` where the regime gives one. Requests of one prompt id and
    length share one tuple of keys (a prompt id's keys do not depend on the request):
    built per request, they were a tenth of a simulation's time."""
    prompt, output = sizes["prompt"], sizes["output"]
    ids = sizes.get(PROMPT_ID)
    found = []
    shared: dict[tuple[int, int], tuple[Any, ...]] = {}
    for r in range(len(prompt)):
        p, o = int(prompt[r]), int(output[r])
        prefix: tuple[Any, ...] = ()
        if ids is not None:
            key = (int(ids[r]), args.keyed_blocks(p, o))
            if key not in shared:
                shared[key] = prefix_keys(key[0], key[1], args.block_size, {}, r)
            prefix = shared[key]
        found.append(EngineRequest(r, 0.0, p, o, prefix))
    return found


class VllmBatching(BatchingPolicy):
    """vLLM V1's scheduling on one executor (see the module docstring)."""

    def __init__(self, host: PolicyHost, executors: int, workload: Workload, sizes: Mapping[str, list[Any]],
                 size_fields: frozenset[str]) -> None:
        super().__init__(host, executors)
        service = host.bound.service
        engine = service.engine
        assert engine is not None, "the problem loader gives a vllm service its engine settings"
        self.settings = engine
        blocks = engine.num_gpu_blocks or blocks_in(host.memory_capacity(),
                                                    engine.kv_bytes_per_token * engine.block_size)
        if blocks > MAX_KV_BLOCKS:
            raise ProblemError(f"service.engine: the budget leaves {blocks:,} KV blocks, more than the "
                               f"{MAX_KV_BLOCKS:,} the simulator holds; set engine.num_gpu_blocks or a larger "
                               "block_size")
        self.scheduler = Scheduler(EngineArgs(
            max_num_seqs=service.max_batch, max_num_batched_tokens=service.max_tokens,
            max_model_len=service.max_context, block_size=engine.block_size, num_gpu_blocks=max(blocks, 2),
            enable_prefix_caching=engine.prefix_caching, cudagraph_capture_sizes=engine.capture_sizes,
            enforce_eager=not engine.cuda_graphs, async_scheduling=engine.async_scheduling))
        self.queue = self.scheduler.waiting  # type: ignore[assignment]  # its length is the queue depth
        self.requests = _requests(sizes, self.scheduler.args)
        self.pending: deque[tuple[float, int]] = deque()  # admitted, not yet seen by a schedule
        self.scheduled_at: float | None = None  # when the running step was scheduled (async: what the next sees)
        self.step: ScheduledStep | None = None
        self.ready_at: float | None = None  # the step's CPU ends then; its kernels start
        self.routing = workload.routing
        self.routing_rng = np.random.default_rng(workload.routing_seed) if workload.routing is not None else None
        self.block_bytes = engine.kv_bytes_per_token * engine.block_size

    def admitted(self, request: int, now: float) -> None:
        self.pending.append((now, request))

    def dispatch(self, now: float) -> None:
        if self.step is not None:  # scheduled: its CPU runs, or its kernels do
            if self.ready_at is not None and now >= self.ready_at:
                self.ready_at = None
                self._launch(now)
            return
        if not self.idle:
            return
        step = self._schedule(now)
        if step is None:
            return
        self.step = step
        self.idle.pop()
        settings = self.settings
        cpu = settings.step_cpu_s + settings.request_cpu_s * len(step.entries)
        if cpu > 0.0:
            self.ready_at = now + cpu
            self.host.wake_at(self.ready_at)
        else:
            self._launch(now)

    def _see(self, until: float) -> None:
        """Hand the scheduler what arrived by ``until`` (what it refuses never finishes:
        counted as missed)."""
        pending, scheduler, requests = self.pending, self.scheduler, self.requests
        while pending and pending[0][0] <= until:
            scheduler.add(requests[pending.popleft()[1]])

    def _schedule(self, now: float) -> ScheduledStep | None:
        """The next step: what the scheduler saw when it ran (async: at the last step's
        launch; an idle engine schedules at once), or None when there is nothing to run."""
        scheduler = self.scheduler
        visible = self.scheduled_at if self.settings.async_scheduling and self.scheduled_at is not None else now
        self._see(visible)
        step = scheduler.schedule()
        while not step.entries:
            if visible < now and self.pending:
                visible = now
                self._see(now)
            elif not scheduler.waiting:
                self.scheduled_at = None
                return None
            # else a step that only preempted or refused: schedule again
            step = scheduler.schedule()
        self.scheduled_at = now
        self._show_memory()
        start_t = self.times.start_t
        for request, _, _ in step.entries:
            if start_t[request.rid] != start_t[request.rid]:
                start_t[request.rid] = now
        return step

    def _launch(self, now: float) -> None:
        step = self.step
        assert step is not None
        jitter = self.times.jitter
        entries = step.entries
        scale = left_to_right_sum([jitter[request.rid] for request, _, _ in entries]) / len(entries)
        self.host.start_program(0, self.host.bound.program(self._variables(step)), scale, now)

    def _variables(self, step: ScheduledStep) -> dict[str, Any]:
        decode = prefill = context = max_context = 0
        for request, new, before in step.entries:
            if new == 1 and before >= request.prompt:
                decode += 1
            else:
                prefill += new
            seq_context = before + new
            context += seq_context
            if seq_context > max_context:
                max_context = seq_context
        variables: dict[str, Any] = {"batch": len(step.entries), "tokens": step.padded_tokens,
                                     "prefill_tokens": prefill, "decode_seqs": decode, "context": context,
                                     "max_context": max_context}
        if self.routing is not None and self.routing_rng is not None:
            # padded tokens run the whole graph, the router included
            variables["expert_counts"] = self.routing.counts(self.routing_rng, step.padded_tokens)
        return variables

    def program_done(self, executor: int, now: float) -> None:
        step = self.step
        assert step is not None
        self.step = None
        overhead = self.settings.request_overhead_s
        end = self.scheduler.finish_step(step, now)
        first_t = self.times.first_t
        for request in end.first:
            first_t[request.rid] = now + overhead
        for request in end.finished:
            self.host.finish(request.rid, now + overhead)
        self._show_memory()
        self.idle.append(executor)

    def _show_memory(self) -> None:
        """The KV blocks requests hold, as memory in use (vLLM allocates the whole cache at
        start-up; this is the part requests fill)."""
        pool = self.scheduler.pool
        self.host.hold((len(pool.ref) - 1 - pool.free_blocks) * self.block_bytes)
