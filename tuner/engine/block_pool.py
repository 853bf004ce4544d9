"""vLLM V1's KV cache: ``num_gpu_blocks`` blocks of ``block_size`` tokens, a request's
blocks allocated as it grows, full blocks cached by the hash of their prefix, shared
blocks reference-counted, unreferenced ones kept for reuse until evicted LRU.

Modelled on vllm/v1/core/block_pool.py (``BlockPool``: a free queue whose head is evicted
first, ``get_new_blocks`` popping it and dropping an evicted block's hash,
``free_blocks`` appending released blocks at the tail, ``touch`` taking a cached block
out of the queue) and vllm/v1/core/kv_cache_manager.py (``get_computed_blocks``,
``allocate_slots``, ``free``). A block's hash here is any hashable key naming the tokens
up to its end (a prompt's id and the block's index): the engine chains token hashes, the
replay knows which requests share which prompts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


def blocks_in(free_bytes: float, block_bytes: float) -> int:
    """``num_gpu_blocks`` as vLLM counts it from the memory left for the KV cache: whole
    blocks, plus the null block (vllm/v1/core/kv_cache_utils.py, ``get_num_blocks``)."""
    return 1 + int(max(free_bytes, 0.0) // block_bytes)


class KVRequest:
    """What the KV cache keeps per request: its blocks and how many are cached.

    ``prefix`` holds a key per full block of its prompt (equal keys: equal tokens up to
    that block's end); blocks past it (generated tokens, a prompt's partial tail) get keys
    of their own, so a preempted request finds its own blocks again when they survived."""

    __slots__ = ("rid", "prefix", "blocks", "cached_blocks")

    def __init__(self, rid: int, prefix: Sequence[Hashable] = ()) -> None:
        self.rid = rid
        self.prefix = prefix
        self.blocks: list[int] = []
        self.cached_blocks = 0

    def block_key(self, index: int) -> Hashable:
        return self.prefix[index] if index < len(self.prefix) else (-1, self.rid, index)


class BlockPool:
    """Blocks, their reference counts and the prefix cache (see the module docstring).

    Block 0 is vLLM's null block, never handed out, so ``num_blocks - 1`` are usable."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be at least 2, got {num_blocks}")
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.ref = [0] * num_blocks
        self.key: list[Hashable | None] = [None] * num_blocks
        self.cached: dict[Hashable, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self.evictions = 0

    @property
    def free_blocks(self) -> int:
        return len(self.free)

    def computed_blocks(self, request: KVRequest, num_tokens: int) -> list[int]:
        """The longest run of the request's leading blocks found in the cache, at most
        ``(num_tokens - 1) // block_size`` blocks: a fully cached prompt still computes
        its last token for the logits, and a hit is whole blocks (vLLM's
        ``get_computed_blocks``: ``max_cache_hit_length = request.num_tokens - 1``)."""
        if not self.prefix_caching:
            return []
        hits: list[int] = []
        cached = self.cached
        for index in range((num_tokens - 1) // self.block_size):
            block = cached.get(request.block_key(index))
            if block is None:
                break
            hits.append(block)
        return hits

    def allocate(self, request: KVRequest, computed_tokens: int, new_tokens: int, hits: Sequence[int] = (),
                 known_tokens: int | None = None) -> bool:
        """Give ``request`` the blocks for ``computed_tokens`` (already in its blocks) +
        ``len(hits)`` cached blocks + ``new_tokens``; False, changing nothing, when the
        free queue is short (vLLM's ``allocate_slots`` returning None). A cached hit that
        no request holds counts against the free blocks, as taking it removes it from the
        queue. Full blocks of the ``known_tokens`` are then cached."""
        size = self.block_size
        total = computed_tokens + len(hits) * size + new_tokens
        needed = -(-total // size) - len(request.blocks) - len(hits)
        ref = self.ref
        idle_hits = sum(1 for b in hits if ref[b] == 0)
        if max(needed, 0) + idle_hits > len(self.free):
            return False
        blocks = request.blocks
        free = self.free
        for b in hits:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1
            blocks.append(b)
        for _ in range(needed):
            b, _ = free.popitem(last=False)
            old = self.key[b]
            if old is not None:
                self.evictions += 1
                if self.cached.get(old) == b:
                    del self.cached[old]
                self.key[b] = None
            ref[b] = 1
            blocks.append(b)
        if self.prefix_caching:
            self.cache_full(request, min(total, total if known_tokens is None else known_tokens) // size)
        return True

    def cache_full(self, request: KVRequest, full: int) -> None:
        """Cache the request's first ``full`` blocks (those not cached yet)."""
        cached, key = self.cached, self.key
        for index in range(request.cached_blocks, full):
            b = request.blocks[index]
            k = request.block_key(index)
            if k not in cached:
                cached[k] = b
                key[b] = k
        if full > request.cached_blocks:
            request.cached_blocks = full

    def release(self, request: KVRequest) -> None:
        """Free the request's blocks, last first, so its tail is evicted before its
        prefix (vLLM's ``free``: ``reversed(blocks)``)."""
        ref, free = self.ref, self.free
        for b in reversed(request.blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None
        request.blocks = []
        request.cached_blocks = 0
