"""GPU presets: the datasheet figures the occupancy rules and the analytic model need.

Sources:
  * NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: 2,039 GB/s HBM2e, 312 TFLOP/s
    dense BF16/FP16 Tensor Core, 19.5 TFLOP/s FP32) and the NVIDIA A100 architecture
    whitepaper (108 SMs, 40 MB L2, 164 KB shared memory per SM).
  * NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: 3.35 TB/s HBM3, 989 TFLOP/s dense
    BF16/FP16 Tensor Core, 67 TFLOP/s FP32) and the Hopper architecture whitepaper
    (132 SMs in the SXM5 part, 50 MB L2, 228 KB shared memory per SM).
  * NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: 141 GB HBM3e at 4.8 TB/s; same
    GH100 compute as H100 SXM: 989 TFLOP/s dense BF16).
  * CUDA C++ Programming Guide, "Technical Specifications per Compute Capability":
    64K 32-bit registers per SM, at most 255 per thread, 64 resident warps and 32
    resident blocks per SM on 8.0 and 9.0; up to 163 KB (8.0) / 227 KB (9.0) shared
    memory per block; 1 KB of shared memory reserved per block by the system.
  * CUDA Occupancy Calculator: registers are allocated per warp in units of 256,
    shared memory in units of 128 bytes.
  * ``sm_dram_bytes_per_s`` (what one SM's outstanding loads sustain): fitted by
    ``benchmarks/bench_sharing.py`` on published bandwidth-versus-SM-count measurements
    (NanoFlow's A100 GEMV trace: 32.9 GB/s per SM; an H100 SXM copy benchmark: 40.9 GB/s
    per SM, used for H200 too — same SMs), validated on held-out ones
    (``benchmarks/data/SOURCES-sm_sharing.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024


@dataclass(frozen=True)
class DevicePreset:
    """One GPU model. Rates are peaks; the analytic model applies efficiency factors."""

    name: str
    compute_capability: int          # 80 for sm_80, 90 for sm_90
    sms: int
    dram_bytes_per_s: float
    bf16_flops_per_s: float          # dense tensor-core peak
    fp32_flops_per_s: float          # CUDA-core peak
    memory_bytes: float
    l2_bytes: float
    smem_per_sm: int                 # shared memory per SM usable by blocks
    smem_per_cta_max: int            # opt-in maximum per block
    smem_reserved_per_cta: int = 1 * KIB
    smem_alloc_unit: int = 128
    regs_per_sm: int = 65536
    regs_per_thread_max: int = 255
    reg_alloc_unit: int = 256        # registers per warp, allocation granularity
    warps_per_sm: int = 64
    ctas_per_sm_max: int = 32
    warp_size: int = 32
    launch_overhead_s: float = 4e-6  # host launch to kernel start, back-to-back launches
    sm_dram_bytes_per_s: float = 40.9e9  # DRAM bandwidth one SM sustains at most (Little's law)

    @property
    def saturating_share(self) -> float:
        """The share of its SMs at which a streaming kernel saturates DRAM: peak
        bandwidth over what the SMs sustain together (at most 1)."""
        return min(1.0, self.dram_bytes_per_s / (self.sms * self.sm_dram_bytes_per_s))

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability}"


A100 = DevicePreset(
    name="a100", compute_capability=80, sms=108, dram_bytes_per_s=2.039e12,
    bf16_flops_per_s=312e12, fp32_flops_per_s=19.5e12, memory_bytes=80e9, l2_bytes=40e6,
    smem_per_sm=164 * KIB, smem_per_cta_max=163 * KIB, sm_dram_bytes_per_s=32.9e9,
)
H100 = DevicePreset(
    name="h100", compute_capability=90, sms=132, dram_bytes_per_s=3.35e12,
    bf16_flops_per_s=989e12, fp32_flops_per_s=67e12, memory_bytes=80e9, l2_bytes=50e6,
    smem_per_sm=228 * KIB, smem_per_cta_max=227 * KIB,
)
H200 = DevicePreset(
    name="h200", compute_capability=90, sms=132, dram_bytes_per_s=4.8e12,
    bf16_flops_per_s=989e12, fp32_flops_per_s=67e12, memory_bytes=141e9, l2_bytes=50e6,
    smem_per_sm=228 * KIB, smem_per_cta_max=227 * KIB,
)

PRESETS: dict[str, DevicePreset] = {d.name: d for d in (A100, H100, H200)}

#: The name vLLM files each preset's tuned fused-MoE configs under (the ``device_name=``
#: of ``E=..,N=..,device_name=...json``). vLLM takes ``current_platform.get_device_name()``
#: (vllm/platforms/cuda.py: NVML's ``nvmlDeviceGetName``, the same string as
#: ``torch.cuda.get_device_name()``) with spaces replaced by underscores, and names every
#: H200-family part ``NVIDIA_H200`` (``get_config_file_name`` in
#: vllm/model_executor/layers/fused_moe/fused_moe.py). The SXM parts these presets model
#: report "NVIDIA A100-SXM4-80GB" and "NVIDIA H100 80GB HBM3"; vLLM's bundled
#: ``fused_moe/configs/`` carry files under exactly these three names.
VLLM_DEVICE_NAMES: dict[str, str] = {
    "a100": "NVIDIA_A100-SXM4-80GB",
    "h100": "NVIDIA_H100_80GB_HBM3",
    "h200": "NVIDIA_H200",
}


def get_device(name: str) -> DevicePreset:
    """The preset called ``name`` (case-insensitive).

    Raises:
        KeyError: with a message listing the known presets.
    """
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise KeyError(f"unknown device {name!r} (known: {', '.join(PRESETS)})") from None
