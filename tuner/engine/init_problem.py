"""A problem file written from a model's ``config.json`` (``tuner init``): every operator of
a layer with its tensor-parallel shard and its all-reduces, decode and prefill attention,
the KV bytes per token, the weights and memory budget, the engine's limits, and regimes
from a trace at given rates; each number with a comment naming its source.

Why generated: the file a user writes by hand from the docs validates while being wrong
(decode attention keyed on the wrong context, no prefill attention, weights guessed). Here
every shape follows from the config (:class:`~tuner.engine.model_config.ModelShape`) and
every engine figure from vLLM's own defaults, so the user edits a correct file instead.
One rank of the tensor-parallel group is written (every rank runs the same shapes), as
the bundled TP problems do.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..profile.devices import PRESETS, DevicePreset
from ..traffic.sizes import PROMPT_ID
from ..units import gib_text
from .model_config import ModelShape
from .block_pool import blocks_in
from .measured_run import MeasuredRun, gpu_preset_name
from .scheduler import MAX_KV_BLOCKS, EngineArgs
from .step_cost import StepCoefficients

GIB = 1 << 30
MIB = 1 << 20
#: The memory each GPU reports (what vLLM multiplies by ``gpu_memory_utilization``), not
#: the marketing figure: nvidia-smi's total on an H100 80GB HBM3 SXM (81,559 MiB; the
#: calibration runs' KV block counts agree with it within the activation estimate), on
#: this project's lent H200 (143,771 MiB, .library/device/KINDS.md, 2026-10-27) and on an
#: A100-SXM4-80GB (81,920 MiB).
GPU_MEMORY_BYTES = {"h100": 81_559 * MIB, "h200": 143_771 * MIB, "a100": 81_920 * MIB}
#: The bundled trace a regime replays unless told otherwise.
BUNDLED_TRACE = Path(__file__).resolve().parents[1] / "search_spaces" / "traces" / "azure_llm_conv_2023.csv"


@dataclass(frozen=True)
class Deployment:
    """What ``tuner init`` is told: the model, where and how it is served, and the traffic."""

    model: ModelShape
    device: DevicePreset
    tp: int = 1
    max_num_seqs: int | None = None            # None: vLLM's default for the GPU
    max_num_batched_tokens: int | None = None  # likewise
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 8192
    rates: tuple[float, ...] = (1.0, 4.0)
    trace: Path = BUNDLED_TRACE
    time_column: str = "TIMESTAMP"
    prompt_column: str = "ContextTokens"
    output_column: str = "GeneratedTokens"
    prompt_id_column: str | None = None  # None: no prompt identity (no prefix sharing)
    name: str = "deployment"
    num_gpu_blocks: int | None = None  # None: what the budget leaves (as vLLM computes it)

    def __post_init__(self) -> None:
        model, tp = self.model, self.tp
        if tp < 1 or model.heads % tp or model.intermediate % tp or model.vocab % tp:
            raise ValueError(f"--tp {tp} must divide the attention heads ({model.heads}), the MLP width "
                             f"({model.intermediate}) and the vocabulary ({model.vocab})")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"--gpu-memory-utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if not self.rates or any(not (r > 0 and math.isfinite(r)) for r in self.rates):
            raise ValueError(f"--rate must be positive request rates, got {self.rates}")
        if self.num_gpu_blocks is None:
            left = self.memory_bytes - self.weights_bytes - self.activation_bytes
            if left < 2 * self.kv_bytes_per_token * self.block_size:
                raise ValueError(
                    f"{self.model.name} does not fit: {self.weights_bytes / GIB:.1f} GiB of weights and "
                    f"{self.activation_bytes / GIB:.1f} GiB of activations per rank leave no KV cache in "
                    f"{self.memory_bytes / GIB:.1f} GiB ({self.gpu_memory_utilization:g} of a "
                    f"{self.device.name.upper()}); use more ranks (--tp) or set --num-gpu-blocks")
            if self.kv_blocks > MAX_KV_BLOCKS:
                raise ValueError(f"{self.kv_blocks:,} KV blocks exceed the {MAX_KV_BLOCKS:,} the simulator "
                                 "holds; use a larger --block-size or set --num-gpu-blocks")

    @property
    def large_gpu(self) -> bool:
        """vLLM's batch defaults differ on GPUs of 70 GiB or more other than the A100."""
        return self.device.memory_bytes >= 70 * GIB and self.device.name != "a100"

    @property
    def seqs(self) -> int:
        return self.max_num_seqs or (1024 if self.large_gpu else 256)

    @property
    def batched_tokens(self) -> int:
        return self.max_num_batched_tokens or (8192 if self.large_gpu else 2048)

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads on each rank: replicated when there are fewer than ranks (vLLM's
        QKVParallelLinear)."""
        return max(1, self.model.kv_heads // self.tp)

    @property
    def kv_bytes_per_token(self) -> int:
        m = self.model
        return 2 * m.layers * self.kv_heads_per_rank * m.head_dim * m.dtype_bytes

    @property
    def weights_bytes(self) -> int:
        m = self.model
        return math.ceil(m.parameters * m.dtype_bytes / self.tp)

    @property
    def activation_bytes(self) -> int:
        """vLLM's profile run at ``max_num_batched_tokens`` (what it subtracts before the KV
        cache): estimated as the hidden states, QKV, the MLP's intermediate and the
        logits of one layer at that many tokens."""
        m, t = self.model, self.batched_tokens
        per_token = (4 * m.hidden + (m.heads + 2 * self.kv_heads_per_rank) * m.head_dim
                     + 2 * m.intermediate // self.tp) * m.dtype_bytes
        return t * per_token + t * m.vocab // self.tp * 4


    @property
    def memory_bytes(self) -> float:
        """``gpu_memory_utilization`` of what the GPU reports (``GPU_MEMORY_BYTES``)."""
        total = GPU_MEMORY_BYTES.get(self.device.name, self.device.memory_bytes)
        return self.gpu_memory_utilization * total

    @property
    def kv_blocks(self) -> int:
        """The KV blocks vLLM would allocate: what ``gpu_memory_utilization`` of the GPU
        leaves after the weights and the activation peak, in blocks, plus the null block."""
        left = self.memory_bytes - self.weights_bytes - self.activation_bytes
        return max(2, blocks_in(left, self.kv_bytes_per_token * self.block_size))

    @property
    def engine_args(self) -> EngineArgs:
        """The engine arguments it runs with (KV blocks as given, else as vLLM computes them)."""
        return EngineArgs(max_num_seqs=self.seqs, max_num_batched_tokens=self.batched_tokens,
                          max_model_len=self.max_model_len, block_size=self.block_size,
                          num_gpu_blocks=self.num_gpu_blocks or self.kv_blocks)


def deployment_of(run: MeasuredRun, **extra: Any) -> Deployment:
    """The deployment a measured run served: its model, GPU and tensor parallelism, and the
    engine arguments it recorded (``extra`` sets any other field of :class:`Deployment`)."""
    engine = run.engine
    return Deployment(model=run.model, device=PRESETS[gpu_preset_name(run.gpu)], tp=run.tp,
                      max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=engine.max_num_batched_tokens,
                      block_size=engine.block_size, max_model_len=engine.max_model_len, **extra)


def problem_text(deployment: Deployment, regimes: str | None = None) -> str:
    """The YAML of the problem file (see the module docstring); ``regimes`` replaces its
    regimes block (:func:`poisson_regimes`)."""
    return "\n".join([_header(deployment), _constants(deployment), _service(deployment), _families(deployment),
                      regimes or _regimes(deployment)]) + "\n"


def poisson_regimes(rates: dict[str, float], prompt: int, output: int, horizon_s: float, warmup_s: float,
                    prompts: int | None = None) -> str:
    """A regimes block of Poisson arrivals at each named rate, every request ``prompt``
    tokens in and ``output`` out (a measured run's shape, for comparing with it), sending
    one of ``prompts`` distinct prompts at random when given (None: all distinct)."""
    lines = ["regimes:"]
    shared = "" if prompts is None else f", {PROMPT_ID}: {{dist: uniform, low: 1, high: {prompts}}}"
    for name, rate in rates.items():
        lines += [f"  {name}:", f"    description: Poisson at {rate:g} req/s, {prompt} tokens in, {output} out",
                  f"    arrivals: {{process: poisson, rate: {rate:g}}}",
                  f"    sizes: {{prompt: {prompt}, output: {output}{shared}}}",
                  f"    horizon: {horizon_s:g} s", f"    warmup: {warmup_s:g} s"]
    return "\n".join(lines)


def _header(dep: Deployment) -> str:
    m = dep.model
    kind = f"MoE, {m.experts} experts, top-{m.experts_per_token}" if m.moe else "dense"
    return f"""# Written by `tuner init` from {m.name}'s config.json: {m.parameters / 1e9:.2f} B parameters ({kind}),
# served by vLLM V1 on {dep.tp} x {dep.device.name.upper()} (tensor parallel; one rank simulated: every
# rank runs the same shapes). Edit it: the numbers below name their sources.
#  [CFG]  the model's config.json (hidden_size, num_attention_heads, num_key_value_heads,
#         intermediate_size, num_hidden_layers, vocab_size{', num_local_experts, num_experts_per_tok' if m.moe else ''}).
#  [TP]   vLLM's tensor parallelism (Megatron-LM's split): column-parallel QKV and gate/up,
#         row-parallel O and down, each followed by an all-reduce; vocabulary-parallel LM head.
#  [VLLM] vLLM V1 defaults (v0.14): engine/arg_utils.py get_batch_defaults (max_num_seqs,
#         max_num_batched_tokens per GPU), config/cache.py (gpu_memory_utilization 0.9,
#         block_size 16), worker/gpu_worker.py determine_available_memory (KV cache =
#         utilization x memory - weights - activation peak).
#  [FIT]  tuner's H100/vLLM step-cost calibration (docs/sim2real.md).
name: {json.dumps(dep.name)}
description: >
  {m.name} on {dep.tp} x {dep.device.name.upper()}, vLLM V1 defaults, continuous batching with chunked
  prefill; written by tuner init.

{_device(dep)}
"""


#: The kernel-model factors and all-reduce a served deployment gets per GPU: fitted on H100
#: vLLM runs, so sm_90 parts take them (an H200 carried over: same SMs, its own bandwidth
#: peak); others keep the event-timed A100 fit and NCCL on their own fabric.
SERVING_FACTORS = {"h100": "h100-vllm-graphs", "h200": "h100-vllm-graphs"}
SERVING_INTERCONNECT = {"h100": "nvlink4_vllm", "h200": "nvlink4_vllm"}
#: (interconnect, NCCL's channels, why) where no serving fit applies.
NCCL_INTERCONNECT = {"a100": ("nvlink3", 24, "NCCL on NVLink 3, 24 channels (2 per NVLink)")}
NCCL_DEFAULT = ("nvlink4", 16, "NCCL on NVLink 4, its NVLS default of 16 channels on sm_90")


def _device(dep: Deployment) -> str:
    name = dep.device.name
    if name in SERVING_FACTORS:
        carried = "" if name == "h100" else f", carried over from H100 runs to {name.upper()}"
        return (f"# [FIT] the kernel model's factors for decode steps under CUDA graphs{carried} "
                f"(docs/sim2real.md)\ndevice: {{name: {name}, factors: {SERVING_FACTORS[name]}}}")
    return (f"# assumption: no serving fit for {name}; the kernel model's event-timed A100 factors\n"
            f"device: {{name: {name}, factors: a100-cublas}}")


def _constants(dep: Deployment) -> str:
    m, tp = dep.model, dep.tp
    lines = ["constants:",
             f"  d: {m.hidden}            # [CFG] hidden_size",
             f"  heads: {m.heads // tp}           # [CFG] {m.heads} attention heads / {tp} ranks [TP]",
             f"  kv_heads: {dep.kv_heads_per_rank}        # [CFG] {m.kv_heads} KV heads / {tp} ranks, at least 1 [TP]",
             f"  head_dim: {m.head_dim}      # [CFG] hidden_size / num_attention_heads",
             f"  ff: {m.intermediate // tp}           # [CFG] intermediate_size {m.intermediate} / {tp} ranks"
             + (" (per expert)" if m.moe else ""),
             f"  vocab: {m.vocab // tp}        # [CFG] vocab_size {m.vocab} / {tp} ranks",
             f"  kv_bytes_per_token: {dep.kv_bytes_per_token}   # K and V x {m.layers} layers x "
             f"{dep.kv_heads_per_rank} KV heads x {m.head_dim} x {m.dtype_bytes} bytes, per rank"]
    if m.moe:
        lines.append(f"  experts: {m.experts}        # [CFG] num_local_experts")
    return "\n".join(lines) + "\n"


def _operators(dep: Deployment) -> list[str]:
    m = dep.model
    layers = m.layers
    size = dep.block_size
    ops = [
        f"    - {{name: input_norm,   family: norm,      shape: {{M: tokens, N: d}}, repeat: {layers}}}",
        f"    - {{name: qkv,          family: gemm,      shape: {{M: tokens, N: (heads + 2 * kv_heads) * head_dim, K: d}},"
        f" repeat: {layers}, buckets: {{M: [64, 1024]}}}}",
        "    # decode attention reads each decoding sequence's whole context, in KV blocks of "
        f"{size} tokens [VLLM]",
        f"    - {{name: decode_attn,  family: attention, shape: {{B: \"max(decode_seqs, 1)\", H: heads, KV: kv_heads, "
        f"D: head_dim, L: \"{size} * ceil(max(context / batch, 1) / {size})\"}}, repeat: {layers},",
        "       buckets: {B: [16, 128], L: [2048, 8192]}}",
        "    # prefill attention: the step's prompt tokens against the longest context in the step",
        f"    - {{name: prefill_attn, family: prefill,   shape: {{T: prefill_tokens, C: max_context}}, repeat: {layers}}}",
        f"    - {{name: o_proj,       family: gemm,      shape: {{M: tokens, N: d, K: heads * head_dim}}, repeat: {layers},"
        " buckets: {M: [64, 1024]}}",
    ]
    if dep.tp > 1:
        ops.append(f"    - {{name: o_allreduce,  family: allreduce, shape: {{M: tokens, N: d}}, repeat: {layers},"
                   " buckets: {M: [64, 1024]}}")
    ops.append(f"    - {{name: post_norm,    family: norm,      shape: {{M: tokens, N: d}}, repeat: {layers}}}")
    if m.moe:
        ops += [f"    - {{name: router_gate,  family: gemm,      shape: {{M: tokens, N: experts, K: d}}, repeat: {layers},"
                " buckets: {M: [64, 1024]}}",
                f"    - {{name: experts,      family: moe,       shape: {{M: tokens, N: ff, K: d}}, repeat: {layers},"
                " buckets: {M: [16, 64, 256, 1024, 8192]}}"]
    else:
        ops += [f"    - {{name: gate_up,      family: gated_gemm, shape: {{M: tokens, N: ff, K: d}}, repeat: {layers},"
                " buckets: {M: [64, 1024]}}",
                f"    - {{name: down,         family: gemm,      shape: {{M: tokens, N: d, K: ff}}, repeat: {layers},"
                " buckets: {M: [64, 1024]}}"]
    if dep.tp > 1:
        ops.append(f"    - {{name: mlp_allreduce, family: allreduce, shape: {{M: tokens, N: d}}, repeat: {layers},"
                   " buckets: {M: [64, 1024]}}")
    ops.append("    - {name: lm_head,      family: gemm,      shape: {M: batch, N: vocab, K: d}, buckets: {M: [64, 1024]}}")
    return ops


def _service(dep: Deployment) -> str:
    m, device = dep.model, dep.device
    budget = dep.memory_bytes
    fixed = dep.weights_bytes + dep.activation_bytes
    kv = budget - fixed
    blocks = int(kv // (dep.kv_bytes_per_token * dep.block_size)) if kv > 0 else 0
    router = f"\n  router: {{experts: {m.experts}, top_k: {m.experts_per_token}}}   # [CFG]" if m.moe else ""
    source = "default for the GPU" if dep.max_num_seqs is None else "as given"
    tokens_source = "default for the GPU" if dep.max_num_batched_tokens is None else "as given"
    overhead = ("0 us    # [FIT] under CUDA graphs a launch's fixed cost is in the kernel factors"
                if device.name in SERVING_FACTORS else "4 us    # assumption: a launch under CUDA graphs")
    blocks_line = "" if dep.num_gpu_blocks is None else f"\n    num_gpu_blocks: {dep.num_gpu_blocks}   # as given"
    return f"""service:
  batching: vllm           # vLLM V1's scheduler (docs/sim2real.md)
  max_batch: {dep.seqs}           # [VLLM] max_num_seqs ({source})
  max_tokens: {dep.batched_tokens}          # [VLLM] max_num_batched_tokens ({tokens_source}; the chunked-prefill budget)
  max_context: {dep.max_model_len}         # max_model_len
{_baseline_batch(dep)}
  launch_overhead: {overhead}{router}
  engine:
    kv_bytes_per_token: kv_bytes_per_token
    block_size: {dep.block_size}          # [VLLM]
    prefix_caching: true   # [VLLM] on by default in V1
    cuda_graphs: true      # [VLLM] capture sizes: vLLM's defaults for max_num_seqs
    async_scheduling: true # [VLLM] on by default{blocks_line}
    # step_cpu, request_cpu, request_overhead: the engine's CPU per step and per request, and
    # server-to-client time per request; unset, [FIT]'s H100 figures (tuner.engine.defaults)
{_knobs(dep)}  memory:
    # [VLLM] gpu_memory_utilization {dep.gpu_memory_utilization:g} x the {budget / dep.gpu_memory_utilization / MIB:,.0f} MiB the GPU reports
    budget: {budget / GIB:.2f} GiB
    # weights: {m.parameters:,} parameters x {m.dtype_bytes} bytes / {dep.tp} ranks = {gib_text(dep.weights_bytes)}; the
    # activation peak of vLLM's profile run at {dep.batched_tokens} tokens, estimated: {gib_text(dep.activation_bytes)}
    fixed: {fixed / GIB:.2f} GiB
    # what is left, less the workspace the configs reserve, holds the KV cache: {gib_text(max(kv, 0))}
    # without workspace, about {blocks:,} blocks of {dep.block_size} tokens
  operators:
""" + "\n".join(_operators(dep)) + """
  slo:
    # assumption: chatbot targets (DistServe, Sarathi-Serve): edit to your service's
    ttft: 2 s
    tpot: 100 ms
"""


def _baseline_batch(dep: Deployment) -> str:
    """The batch the one-config baseline is judged at: ``max_num_seqs`` sequences at
    ``max_model_len``, unless the KV cache holds fewer tokens (Llama-2-7B on an H100:
    128 x 4096 = 524,288 against 119,392), when a batch holds what the cache does; beyond
    it, the decode-attention tensor of such a batch outgrew the kernels' int32 indexing."""
    kv_tokens = dep.engine_args.num_gpu_blocks * dep.block_size
    if kv_tokens < dep.seqs * dep.max_model_len:
        return (f"  baseline_batch: {{context: {kv_tokens}}}   # the KV cache's tokens "
                "(num_gpu_blocks x block_size): the most context a batch can hold")
    return (f"  baseline_batch: {{context: {dep.seqs * dep.max_model_len}}}   # max_num_seqs x max_model_len "
            "(the KV cache holds them all)")


def _knobs(dep: Deployment) -> str:
    """``service.knobs``: the engine's own batch limits first, then half and a quarter of its
    sequences (vllm#33168 measured 512 beating 1024 on a B200) and half and twice its
    tokens per step; token budgets below the most sequences are left out (every sequence
    needs a token of the step)."""
    seqs = [n for n in dict.fromkeys((dep.seqs, dep.seqs // 2, dep.seqs // 4)) if n >= 1]
    tokens = [n for n in dict.fromkeys((dep.batched_tokens, dep.batched_tokens // 2, dep.batched_tokens * 2))
              if n >= max(seqs)]
    return f"""  knobs:                   # what `tuner knobs` tries with the configs; the first of each is the engine's own
    max_num_seqs: [{', '.join(map(str, seqs))}]           # [VLLM] fixed at start-up (config/scheduler.py)
    max_num_batched_tokens: [{', '.join(map(str, tokens))}]  # [VLLM] fixed at start-up (config/scheduler.py)
"""


def _gemm_family(name: str, epilogue: str) -> str:
    """A GEMM family on the project's matmul kernel: the tile, warp, stage and split-K
    choices of the bundled llm_decode problem, and split-K 8, which a decode step's
    skinny GEMMs at two ranks or more need to spread over the SMs (without it the model
    priced Mixtral-8x7B's TP2 projections 30-50% above the measured engine's;
    docs/sim2real.md)."""
    return f"""  {name}:
    kernel: matmul
    options: {{epilogue: {epilogue}}}
    space:
      BLOCK_M: [16, 64, 128]
      BLOCK_N: [64, 128]
      BLOCK_K: [64]
      num_warps: [4, 8]
      num_stages: [3, 4]
      SPLIT_K: [1, 4, 8]
"""


def _families(dep: Deployment) -> str:
    m = dep.model
    text = "families:\n" + _gemm_family("gemm", "none")
    if not m.moe:
        text += _gemm_family("gated_gemm", "gated_silu") + "      FUSE_EPILOGUE: [true, false]\n"
    else:
        text += f"""  moe:
    kernel: fused_moe
    options: {{experts: {m.experts}, top_k: {m.experts_per_token}}}   # [CFG]
    space:
      BLOCK_SIZE_M: [16, 32, 64, 128]
      BLOCK_SIZE_N: [64, 128]
      BLOCK_SIZE_K: [64, 128]
      GROUP_SIZE_M: [1, 16]
      num_warps: [4, 8]
      num_stages: [4]
"""
    text += """  attention:
    kernel: decode_attention
    space:
      VARIANT: [split, materialize]
      BLOCK_N: [32, 64]
      NUM_SPLITS: [1, 4, 16]
  norm:
    kernel: rmsnorm
    space:
      FUSE_RESIDUAL: [true, false]
"""
    if dep.tp > 1:
        if dep.device.name in SERVING_INTERCONNECT:
            link, channels, why = SERVING_INTERCONNECT[dep.device.name], 16, "[FIT] vLLM's custom all-reduce on NVLink 4"
        else:
            link, channels, why = NCCL_INTERCONNECT.get(dep.device.name, NCCL_DEFAULT)
            why = f"assumption: {why}"
        text += f"""  allreduce:
    kernel: comm
    # {why}
    options: {{collective: all_reduce, ranks: {dep.tp}, interconnect: {link}, dtype: bf16}}
    space:
      CHANNELS: [{channels}]
"""
    efficiency = 1.0 / StepCoefficients().prefill_attention
    rate = efficiency * dep.device.bf16_flops_per_s
    text += f"""  prefill:
    space: {{kernel: [flash]}}
    configs:
      - name: flash
        params: {{kernel: flash}}
        # causal attention over the chunk: 4 * T * C/2 * heads * head_dim FLOPs at
        # {efficiency:.0%} of the {dep.device.name.upper()}'s {dep.device.bf16_flops_per_s / 1e12:g} TFLOP/s (the prior of [FIT]; the
        # calibration runs could not fit it: their prompts were cached); declared
        profile: {{latency: 5 us + 2 * T * C * heads * head_dim / {rate:.3g}, sm: 1.0, dram: 0.3}}
"""
    return text


def _regimes(dep: Deployment) -> str:
    lines = ["regimes:"]
    shared = "" if dep.prompt_id_column is None else f", {PROMPT_ID}: {json.dumps(dep.prompt_id_column)}"
    for rate in dep.rates:
        name = f"rate_{rate:g}".replace(".", "_")
        lines += [f"  {name}:",
                  f"    description: {dep.trace.name} replayed at {rate:g} req/s",
                  f"    arrivals: {{process: trace, file: {json.dumps(str(dep.trace))}, rate: {rate:g},"
                  + ("" if dep.time_column == "TIMESTAMP" else f" time_column: {json.dumps(dep.time_column)},"),
                  f"               columns: {{prompt: {json.dumps(dep.prompt_column)}, "
                  f"output: {json.dumps(dep.output_column)}{shared}}}}}",
                  "    horizon: 30 s",
                  "    warmup: 5 s"]
    return "\n".join(lines)
