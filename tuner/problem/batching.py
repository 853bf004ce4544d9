"""The batching policies a problem file may name (``service.batching``), as the problem
layer sees them: what a policy's iterations expose to expressions and whether a request
is judged by its tokens (TTFT and TPOT) or end to end.

Why a registry here: the problem layer validates and compiles a file before any simulator
exists, and must not import the simulator; :mod:`tuner.sim.policies` registers the
policy that runs each name, and a test holds the two registries to the same names. A new
policy is one :func:`register` here and one class there, not a string compared in seven
modules.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import register_named

#: Variables a token-level iteration exposes to shape and cost expressions.
TOKEN_VARIABLES = frozenset({"batch", "tokens", "prefill_tokens", "decode_seqs", "context", "max_context"})


@dataclass(frozen=True)
class BatchingKind:
    """One batching policy's contract with problem files."""

    name: str
    #: iterations of tokens (prompt and output sizes, TTFT/TPOT, chunked prefill, routing
    #: per iteration); otherwise whole requests batched together, judged end to end
    token_level: bool
    summary: str
    #: runs a vLLM-style engine (``service.engine``: KV blocks, prefix caching, graphs)
    engine: bool = False
    #: can split an iteration into two micro-batches (``service.overlap: two_batch``)
    two_batch: bool = False

    def variables(self, size_fields: frozenset[str]) -> frozenset[str]:
        """The batch variables its batches expose to expressions."""
        if self.token_level:
            return TOKEN_VARIABLES
        return frozenset({"batch"} | set(size_fields) | {f"{name}_total" for name in size_fields})


BATCHING: dict[str, BatchingKind] = {}


def register(kind: BatchingKind) -> BatchingKind:
    return register_named(BATCHING, kind, "batching policy")


DYNAMIC = register(BatchingKind(
    "dynamic", token_level=False,
    summary="request-level: a batch closes at max_batch requests or after max_wait; all finish together"))
CONTINUOUS = register(BatchingKind(
    "continuous", token_level=True, two_batch=True,
    summary="iteration-level: decodes first, prefills chunked into the max_tokens budget; memory reserved per "
            "request at admission"))
VLLM = register(BatchingKind(
    "vllm", token_level=True, engine=True,
    summary="vLLM V1's scheduler: KV cache in blocks with prefix caching and preemption, CUDA-graph padding, "
            "async scheduling, the engine's CPU per step (service.engine)"))


def batching_kind(name: str) -> BatchingKind:
    """The registered policy ``name`` (the schema has already refused any other)."""
    return BATCHING[name]
