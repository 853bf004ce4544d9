"""vLLM V1's scheduling rules (tuner.engine), each step worked by hand from vLLM's code
(vllm/v1/core/sched/scheduler.py, kv_cache_manager.py, block_pool.py; v0.14.1)."""

from __future__ import annotations

import pytest

from tuner.engine.block_pool import BlockPool, KVRequest
from tuner.engine.scheduler import EngineArgs, EngineRequest, Scheduler, default_capture_sizes


def _step(scheduler: Scheduler, now: float = 0.0) -> list[tuple[int, int]]:
    """Run one step: what it scheduled as (request id, new tokens)."""
    step = scheduler.schedule()
    scheduler.finish_step(step, now)
    return [(request.rid, new) for request, new, _ in step.entries]


def test_chunked_prefill_fills_the_budget_left_by_decodes():
    """Budget 2048, three running decodes and a new 3000-token prompt: the decodes take
    3 tokens, the prompt a 2045-token chunk, then the remaining 955 beside the decodes."""
    scheduler = Scheduler(EngineArgs(max_num_batched_tokens=2048, num_gpu_blocks=10_000, enforce_eager=True,
                                     enable_prefix_caching=False))
    for rid in range(3):
        scheduler.add(EngineRequest(rid, 0.0, prompt=10, output=100))
    assert _step(scheduler) == [(0, 10), (1, 10), (2, 10)]
    scheduler.add(EngineRequest(3, 0.0, prompt=3000, output=10))
    assert _step(scheduler) == [(0, 1), (1, 1), (2, 1), (3, 2045)]
    assert _step(scheduler) == [(0, 1), (1, 1), (2, 1), (3, 955)]
    request = scheduler.running[3]
    assert request.generated == 1  # the prompt's last chunk samples its first token


def test_a_cached_prompt_recomputes_its_last_block():
    """A 592-token prompt fully cached (block 16): the hit stops before the last token
    ((592 - 1) // 16 = 36 blocks, 576 tokens), so 16 tokens are computed."""
    scheduler = Scheduler(EngineArgs(num_gpu_blocks=1000, block_size=16, enforce_eager=True))
    prefix = tuple(("p", 7, j) for j in range(592 // 16))
    scheduler.add(EngineRequest(0, 0.0, prompt=592, output=1, prefix=prefix))
    assert _step(scheduler) == [(0, 592)]  # finishes at once (one output token), blocks stay cached
    scheduler.add(EngineRequest(1, 0.0, prompt=592, output=1, prefix=prefix))
    assert _step(scheduler) == [(1, 16)]
    assert scheduler.cached_tokens == 576


def test_a_partial_hit_computes_the_rest():
    """Two prompts share a 100-token system prompt: 6 whole blocks (96 tokens) hit."""
    pool = BlockPool(100, 16)
    first = KVRequest(0, tuple(("g", 0, j) if j < 6 else ("p", 0, j) for j in range(10)))
    assert pool.allocate(first, 0, 170, (), 170)
    second = KVRequest(1, tuple(("g", 0, j) if j < 6 else ("p", 1, j) for j in range(10)))
    hits = pool.computed_blocks(second, 170)
    assert hits == first.blocks[:6]
    assert pool.allocate(second, 0, 170 - 96, hits, 170)
    assert [pool.ref[b] for b in first.blocks[:6]] == [2] * 6 and pool.ref[first.blocks[6]] == 1


def test_freed_blocks_are_evicted_tail_first():
    """A freed request's blocks join the free queue last block first, so its prefix
    outlives its tail; an unreferenced cached block still counts as free."""
    pool = BlockPool(4, 4)  # three usable blocks
    request = KVRequest(0, (("p", 0, 0), ("p", 0, 1), ("p", 0, 2)))
    assert pool.allocate(request, 0, 12, (), 12)
    head, middle, tail = request.blocks
    pool.release(request)
    assert pool.free_blocks == 3 and list(pool.free) == [tail, middle, head]
    other = KVRequest(1)
    assert pool.allocate(other, 0, 4, (), 4)  # takes the tail block, evicting its hash
    assert other.blocks == [tail] and ("p", 0, 2) not in pool.cached and ("p", 0, 0) in pool.cached


def test_preemption_takes_the_last_joined_request_and_it_recomputes_later():
    """Block 4, six usable blocks, three 4-token prompts. When the first request needs a
    third block and none is free, the last to join (2) is preempted, its blocks freed (and
    evicted by the two allocations that follow), no waiting request is scheduled in that
    step, and request 2 recomputes its prompt and 5 generated tokens once blocks free up."""
    scheduler = Scheduler(EngineArgs(block_size=4, num_gpu_blocks=7, enforce_eager=True))
    scheduler.add(EngineRequest(0, 0.0, prompt=4, output=6, prefix=(("p", 0, 0),)))
    scheduler.add(EngineRequest(1, 0.0, prompt=4, output=20, prefix=(("p", 1, 0),)))
    scheduler.add(EngineRequest(2, 0.0, prompt=4, output=20, prefix=(("p", 2, 0),)))
    assert _step(scheduler) == [(0, 4), (1, 4), (2, 4)]
    for _ in range(4):  # tokens 5..8 of each: one more block each, then none free
        assert _step(scheduler) == [(0, 1), (1, 1), (2, 1)]
    assert scheduler.pool.free_blocks == 0
    victim = scheduler.running[2]
    assert _step(scheduler) == [(0, 1), (1, 1)]  # request 0 needs a block: request 2 goes
    assert victim.preemptions == 1 and victim.computed == 0 and scheduler.waiting[0] is victim
    assert victim.generated == 5  # what it generated is kept: 4 + 5 = 9 tokens to recompute
    # request 0 finished in that step (6 tokens) and freed three blocks: request 2 returns
    # and recomputes all it knew (its freed blocks were evicted: no hit)
    assert _step(scheduler) == [(1, 1), (2, 9)]
    assert victim.generated == 6  # the recompute's last token samples the next one


def test_waiting_requests_stop_at_max_num_seqs():
    scheduler = Scheduler(EngineArgs(max_num_seqs=2, num_gpu_blocks=100, enforce_eager=True))
    for rid in range(3):
        scheduler.add(EngineRequest(rid, 0.0, prompt=8, output=5))
    assert _step(scheduler) == [(0, 8), (1, 8)]
    assert [r.rid for r in scheduler.waiting] == [2]


def test_a_decode_step_is_padded_to_the_next_capture_size():
    """13 decodes with capture sizes 1, 2, 4, 8, 16 run as 16; beyond 16, eager."""
    scheduler = Scheduler(EngineArgs(num_gpu_blocks=1000, cudagraph_capture_sizes=(1, 2, 4, 8, 16)))
    for rid in range(13):
        scheduler.add(EngineRequest(rid, 0.0, prompt=1, output=3))
    first = scheduler.schedule()
    assert first.tokens == 13 and first.padded_tokens == 16
    assert scheduler.padded(17) == 17 and scheduler.padded(5) == 8


def test_vllm_default_capture_sizes():
    """vLLM 0.14: [1, 2, 4] + every 8 below 256 + every 16 from 256 up to
    min(2 max_num_seqs, 512, max_num_batched_tokens)."""
    sizes = default_capture_sizes(128, 2048)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-2:] == (248, 256) and len(sizes) == 35
    assert default_capture_sizes(1024, 8192)[-1] == 512
    assert default_capture_sizes(8, 2048)[-1] == 16
    assert default_capture_sizes(128, 64)[-1] == 64


def test_engine_args_refuse_nonsense():
    with pytest.raises(ValueError, match="max_num_seqs"):
        EngineArgs(max_num_seqs=0)
