"""The shipped step coefficients per (GPU, engine), and where they come from.

H100 with vLLM V1: fitted by ``benchmarks/bench_sim2real.py`` (:func:`tuner.engine.calibrate.fit`)
on the four calibration runs of ``shared/data/serving_real`` (Llama-2-7B TP1,
CodeLlama-34B TP2, Mixtral-8x7B TP2, Llama-2-70B TP4, each at 5 and 10 requests/s;
measured by others with an instrumented vLLM V1, base v0.14-v0.15, inference-sim/training
at ed5c1d26), rounded to four significant digits. The benchmark refits them and says
whether these still match. Read as: GEMMs run at 1/1.13 of the H100's peaks (88%) and
attention reads the KV cache at its DRAM peak (0.995); 5.4 µs per layer per step for the
small kernels; 6.4 µs per all-reduce per peer, and wire bytes at 1/1.16 of NVLink 4's bus
bandwidth; the engine's CPU 1.24 ms per step and 19 µs per request in it; 8.0 ms between
the server and the client per request. Prefill attention keeps its prior (50% of peak):
nearly every prompt of these runs comes from the prefix cache, so they cannot tell it
apart from the other terms.
"""

from __future__ import annotations

from ..errors import RunError
from .step_cost import StepCoefficients

SOURCE = ("fit: benchmarks/bench_sim2real.py on shared/data/serving_real's four H100 vLLM V1 calibration runs "
          "(inference-sim/training@ed5c1d26), 2026-12-04")

H100_VLLM_V1 = StepCoefficients(
    gemm=1.13, kv_read=0.9951, prefill_attention=2.001, layers=5.445e-06, allreduce=6.441e-06, allreduce_bytes=1.16,
    step=0.00124, requests=1.922e-05, request_overhead_s=0.008028, source=SOURCE,
)

#: (GPU preset, engine) -> coefficients. Another GPU uses its engine's H100 figures
#: (efficiencies against that GPU's own peaks) and :func:`coefficients_for` says so.
DEFAULTS: dict[tuple[str, str], StepCoefficients] = {("h100", "vllm"): H100_VLLM_V1}


def coefficients_for(gpu: str, engine: str = "vllm") -> tuple[StepCoefficients, str | None]:
    """The shipped coefficients for ``gpu`` (a preset name) and ``engine``, and a warning
    when they were calibrated on another GPU."""
    if (gpu, engine) in DEFAULTS:
        return DEFAULTS[(gpu, engine)], None
    for (other, name), coefficients in DEFAULTS.items():
        if name == engine:
            return coefficients, f"no calibration for {gpu} with {engine}: using {other}'s ({coefficients.source})"
    raise RunError(f"engine {engine!r} has no calibrated step costs (known: "
                   f"{', '.join(sorted({name for _, name in DEFAULTS}))})")
