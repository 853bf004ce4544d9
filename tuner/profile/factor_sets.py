"""Named sets of the analytic model's efficiency factors, and what each was fitted on.

Why more than one: a factor set says what a kernel costs *under the conditions it was
measured in*, and two conditions matter to a served model. Event-timed single operators
(the vidur A100 cuBLAS profile behind :data:`tuner.profile.model.DEFAULT`) carry a host
launch and an event floor in every time, so their fixed cost per launch is ~5 µs. The
same kernels replayed back to back in a CUDA graph, as vLLM runs a decode step, pay
well under a microsecond each; priced with the event-timed factors, a decode step of
250 to 900 launches comes out milliseconds too long (docs/sim2real.md). A problem file
names its set (``device: {name: h100, factors: h100-vllm-graphs}``); the default is the
A100 set every bundled problem was tuned with.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import DEFAULT, Efficiency


@dataclass(frozen=True)
class FactorSet:
    """Efficiency factors with their provenance.

    Attributes:
        name: what a problem file's ``device.factors`` calls it.
        factors: the factors.
        fitted_on: the measurements, the device and how kernels were timed in them.
    """

    name: str
    factors: Efficiency
    fitted_on: str


#: The cuBLAS fit (benchmarks/bench_model.py): event-timed single GEMMs on an A100.
A100_CUBLAS = FactorSet(
    name="a100-cublas", factors=DEFAULT,
    fitted_on="vidur's cuBLAS medians of Llama-2-7B's GEMMs on an A100-SXM4-80GB, event-timed single "
              "operators (benchmarks/bench_model.py)",
)

#: The serving fit (benchmarks/bench_sim2real.py, "kernel factors"): the model's best
#: configs for each calibration deployment's decode step (Llama-2-7B TP1, CodeLlama-34B
#: TP2, Mixtral-8x7B TP2 without its experts, Llama-2-70B TP4; 1 to 64 sequences of 712
#: tokens) against that step's GPU terms in the engine model fitted on the measured H100
#: vLLM runs (tuner.engine.defaults.H100_VLLM_V1: GEMMs, KV cache read, per-layer cost).
#: Read as: kernels stream at 90% of the H100's DRAM peak (the engine's GEMM term says
#: 88%), 0.13 µs fixed per launch, and an effective memory latency of 0.06 µs: far below
#: the ~0.5 µs a load really waits, so the model's latency-bound regime (Little's law on
#: the tiles a CTA keeps in flight) all but vanishes at decode. Only each step's sum is
#: identified, so the three trade against one another: a description of decode steps
#: under CUDA graphs, not three measurements. Tensor-core factors stay the A100 fit's
#: (decode steps are memory-bound: they cannot tell). A launch's host gap under graphs
#: is the problem's ``launch_overhead`` (tuner init writes 0: the fixed cost is here).
H100_VLLM_GRAPHS = FactorSet(
    name="h100-vllm-graphs",
    factors=Efficiency(dram=0.903, fixed_s=1.3e-7, mem_latency_s=6e-8),
    fitted_on="decode steps of the four shared/data/serving_real calibration deployments on an H100 (vLLM V1, "
              "CUDA graphs), through the engine model's fitted step terms (benchmarks/bench_sim2real.py)",
)

FACTOR_SETS: dict[str, FactorSet] = {s.name: s for s in (A100_CUBLAS, H100_VLLM_GRAPHS)}
