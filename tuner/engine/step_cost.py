"""What one engine step costs: a sum of terms, each a roofline figure at the GPU's
nominal peaks (or a count) times a coefficient fitted on measured runs.

Why linear in the coefficients: a serving step's time is the GPU's work (GEMMs reading
their weights or running at tensor-core rate, attention reading the KV cache, prefill
attention's FLOPs, all-reduces between tensor-parallel ranks, a fixed cost per layer for
the small kernels between them) plus the CPU's work the GPU waits for (scheduling,
preparing inputs, sampling, output processing: a fixed cost per step and one per
request). Each term's *shape* comes from the model's config; how far each runs from the
peak is one number per term, shared by every model on that GPU and engine, and a model
linear in those numbers is fitted by least squares on request latencies and can be
checked on deployments it was not fitted on (``benchmarks/bench_sim2real.py``).

The terms (``FEATURES``), for a step of ``T`` tokens padded to ``Tp`` by CUDA graphs:

* ``gemm``: Σ over the layer's linear operators (QKV, O, gate/up, down; an MoE layer's
  router and the experts its tokens touch) of ``max(bytes / DRAM bandwidth, FLOPs /
  tensor peak)`` at ``M = Tp``, times the layers, plus the LM head on the requests that
  sample a token, each sharded over the ``tp`` ranks as vLLM shards them
  (column-parallel QKV and gate/up, row-parallel O and down, vocab-parallel head);
* ``kv_read``: the KV cache bytes the step's attention reads (each request's context) at
  DRAM bandwidth;
* ``prefill_attention``: causal attention FLOPs of the prompt chunks at tensor peak;
* ``layers``: the layer count (a fixed cost per layer: norms, rotary, activation);
* ``allreduce``: all-reduces per step (two per layer and the embedding's) times the
  ``tp - 1`` peers each rank exchanges with: a small all-reduce's time grows with the
  peers (vLLM's one-shot custom all-reduce reads every peer's buffer over NVLink;
  NCCL's ring takes ``2(tp - 1)`` steps);
* ``allreduce_bytes``: their wire bytes at the interconnect's bus bandwidth;
* ``step``: 1 per step; ``requests``: the step's requests.

A request also pays ``request_overhead_s`` once between its arrival at the server and its
first token reaching the client, and the same after its last (the API server's
tokenisation, the engine's input and output processes, streaming): it adds to TTFT and
end-to-end latency alike and leaves TPOT unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..profile.devices import DevicePreset
from ..profile.interconnect import Interconnect, wire_factor
from .model_config import ModelShape
from .scheduler import ScheduledStep

FEATURES = ("gemm", "kv_read", "prefill_attention", "layers", "allreduce", "allreduce_bytes", "step", "requests")
#: Every fitted number: a coefficient per term, and the per-request overhead.
COEFFICIENTS = (*FEATURES, "request_overhead_s")


@dataclass(frozen=True)
class StepCoefficients:
    """One coefficient per term of ``FEATURES`` and the per-request overhead.

    The first three and ``allreduce_bytes`` multiply seconds at peak (1.0: the peak
    itself; 1.25: 80% of it); the others are seconds per count."""

    gemm: float = 1.25               # 80% of the peaks, what tuned GEMM libraries reach
    kv_read: float = 1.25            # 80% of DRAM bandwidth for paged attention's reads
    prefill_attention: float = 2.0   # 50% of the tensor peak (FlashAttention-2's causal forward)
    layers: float = 5e-6             # a few small kernels per layer, replayed from a graph
    allreduce: float = 5e-6          # one small all-reduce on NVLink, per peer (vLLM's custom all-reduce)
    allreduce_bytes: float = 1.0     # NVLink 4's large-message bus bandwidth
    step: float = 1e-3               # the engine's CPU per step (schedule, inputs, sampling, outputs)
    requests: float = 20e-6          # and per request in the step
    request_overhead_s: float = 5e-3  # server to client, once per request
    source: str = "priors: round figures for an H100, before any fit"

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, name) for name in FEATURES], dtype=np.float64)

    def named(self) -> dict[str, float]:
        """Every fitted number by name (``COEFFICIENTS``)."""
        return {name: getattr(self, name) for name in COEFFICIENTS}

    @classmethod
    def from_vector(cls, values: np.ndarray, request_overhead_s: float, source: str) -> StepCoefficients:
        return cls(**{name: float(v) for name, v in zip(FEATURES, values)},
                   request_overhead_s=float(request_overhead_s), source=source)



def _gemm_seconds(m: np.ndarray, n: int, k: int, dtype_bytes: int, device: DevicePreset) -> np.ndarray:
    """Roofline time of ``m x k @ k x n`` at the device's peaks, for each ``m``."""
    nbytes = (m * k + k * n + m * n) * dtype_bytes
    return np.maximum(nbytes / device.dram_bytes_per_s, 2.0 * m * n * k / device.bf16_flops_per_s)


class StepCost:
    """The terms of a step on ``tp`` GPUs of ``device`` (see the module docstring);
    :meth:`features` reads a scheduled step, :meth:`seconds` prices them."""

    def __init__(self, model: ModelShape, tp: int, device: DevicePreset, interconnect: Interconnect,
                 max_tokens: int) -> None:
        if tp < 1 or model.heads % tp or model.intermediate % tp:
            raise ValueError(f"tensor parallel size {tp} does not divide the model's heads ({model.heads}) "
                             f"and MLP width ({model.intermediate})")
        self.model, self.tp, self.device = model, tp, device
        b = model.dtype_bytes
        m = np.arange(max_tokens + 1, dtype=np.float64)
        d, hd = model.hidden, model.head_dim
        q_out, kv_out = model.heads * hd, 2 * model.kv_heads * hd
        layer = (_gemm_seconds(m, (q_out + kv_out) // tp, d, b, device)
                 + _gemm_seconds(m, d, q_out // tp, b, device))
        if model.moe:
            layer = layer + _gemm_seconds(m, model.experts, d, b, device) + self._experts(m)
        else:
            layer = layer + (_gemm_seconds(m, 2 * model.intermediate // tp, d, b, device)
                             + _gemm_seconds(m, d, model.intermediate // tp, b, device))
        self._layers_gemm = (layer * model.layers).tolist()
        self._head = _gemm_seconds(m, model.vocab // tp, d, b, device).tolist()
        self._kv_per_token = model.kv_bytes_per_token / tp / device.dram_bytes_per_s
        self._attention_flops = 4.0 * model.heads * hd * model.layers / tp / device.bf16_flops_per_s
        self._allreduces = (2 * model.layers + 1) * (tp - 1)
        self._allreduce_per_token = ((2 * model.layers + 1) * wire_factor("all_reduce", tp) * d * b / interconnect.bus_bw
                                     if tp > 1 else 0.0)
        self.max_tokens = max_tokens

    def _experts(self, m: np.ndarray) -> np.ndarray:
        """An MoE layer's experts: each token goes to ``experts_per_token`` of them; the
        weights of every expert some token reaches are read (expected count of distinct
        experts under uniform routing); FLOPs follow the routed tokens. Every rank holds a
        ``1/tp`` slice of every expert (vLLM's tensor-parallel MoE)."""
        model, device = self.model, self.device
        e, k = model.experts, model.experts_per_token
        touched = e * (1.0 - (1.0 - k / e) ** m)
        per_expert = 3 * model.hidden * model.intermediate // self.tp
        nbytes = touched * per_expert * model.dtype_bytes + m * model.hidden * model.dtype_bytes * (2 + 2 * k)
        flops = 2.0 * m * k * per_expert
        return np.maximum(nbytes / device.dram_bytes_per_s, flops / device.bf16_flops_per_s)

    def features(self, step: ScheduledStep) -> tuple[float, ...]:
        """The step's terms, in ``FEATURES`` order."""
        padded = step.padded_tokens
        if padded > self.max_tokens:
            raise ValueError(f"a step of {padded} tokens exceeds the {self.max_tokens} the cost was built for")
        context = 0
        prefill = 0.0
        sampled = 0
        for request, new, before in step.entries:
            context += before + new
            if new > 1:
                prefill += new * (before + 0.5 * new)
            if before + new == request.prompt + request.generated:
                sampled += 1
        gemm = self._layers_gemm[padded] + self._head[sampled]
        return (gemm, context * self._kv_per_token, prefill * self._attention_flops, float(self.model.layers),
                float(self._allreduces), padded * self._allreduce_per_token, 1.0, float(len(step.entries)))

    @staticmethod
    def seconds(features: tuple[float, ...], coefficients: np.ndarray) -> float:
        return math.fsum(f * c for f, c in zip(features, coefficients))
