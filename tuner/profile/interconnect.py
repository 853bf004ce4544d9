"""Interconnects for collectives: what a NCCL all-reduce costs on a link, and its fit.

A collective of ``S`` bytes per rank on ``n`` ranks moves ``f(n) · S`` bytes through each
rank's link (nccl-tests' doc/PERFORMANCE.md: ``busbw = algbw · 2(n-1)/n`` for all-reduce,
``(n-1)/n`` for all-gather, reduce-scatter and all-to-all), so its time is::

    t = α + f(n) · S / min(bus_bw, channels · per_channel_bw)

``α`` is the fixed cost (launch, handshakes, the first chunk's latency), ``bus_bw`` the bus
bandwidth the link sustains for large messages, and ``per_channel_bw`` what one NCCL
channel — one CTA on one SM — can drive, so few channels cannot fill the link. Constants
come from published measurements (``benchmarks/data/comm_measurements.json``): ``α`` and
``bus_bw`` are fitted on one source (:func:`fit_alpha_beta`), and checked on others by
``benchmarks/bench_comm.py``; ``per_channel_bw`` is NCCL's own tuning constant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

def wire_factor(collective: str, ranks: int) -> float:
    """``f(n)``, bytes through each rank's link per byte of the buffer: 2(n-1)/n for
    all-reduce, (n-1)/n for the others (nccl-tests doc/PERFORMANCE.md, "bus bandwidth")."""
    if collective == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


#: HBM bytes a rank reads and writes per byte it sends: a reducing collective reads its
#: own data and the incoming chunk and writes the sum (3); a copying one reads what it
#: sends and writes what it receives (2). NCCL's maintainer on nccl#1428: link traffic
#: "needs to be multiplied by at least 2x for memory bandwidth".
HBM_PER_WIRE_BYTE = {"all_reduce": 3.0, "reduce_scatter": 3.0, "all_gather": 2.0, "all_to_all": 2.0}


@dataclass(frozen=True)
class Interconnect:
    """A link between the ranks of one node, for NCCL's default algorithms.

    Attributes:
        name: what problem files call it.
        link_bw: per-direction bandwidth per GPU from the datasheet (bytes/s), for reference.
        bus_bw: large-message bus bandwidth of all-reduce (bytes/s): fitted.
        copy_bus_bw: the same for all-gather, reduce-scatter and all-to-all, which cannot
            use NVLink SHARP (NVLS) reductions: measured.
        latency_s: ``α``, the fixed cost of one collective: fitted.
        per_channel_bw: bus bandwidth one channel (one CTA, one SM) drives at most.
        default_channels: NCCL's channel count on this fabric.
        source: where each number comes from.
        latency_per_peer_s: a fixed cost per peer on top of ``latency_s``, for a
            collective whose small-message time grows with the ranks it reads from.
    """

    name: str
    link_bw: float
    bus_bw: float
    copy_bus_bw: float
    latency_s: float
    per_channel_bw: float
    default_channels: int
    source: str
    latency_per_peer_s: float = 0.0

    def bandwidth(self, collective: str, channels: int) -> float:
        """Bus bandwidth with ``channels`` channels."""
        top = self.bus_bw if collective == "all_reduce" else self.copy_bus_bw
        return min(top, channels * self.per_channel_bw)

    def seconds(self, collective: str, nbytes: float, ranks: int, channels: int) -> float:
        """Time of one collective of ``nbytes`` per rank on ``ranks`` ranks."""
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        return (self.latency_s + self.latency_per_peer_s * (ranks - 1)
                + wire_factor(collective, ranks) * nbytes / self.bandwidth(collective, channels))


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float], factor: float) -> tuple[float, float]:
    """``(α, bus_bw)`` minimising the squared *relative* error of ``α + factor·S/bus_bw``
    over the points: linear least squares in (α, 1/bus_bw) with rows scaled by 1/t, so a
    32 KiB point weighs as much as a 16 GiB one."""
    t = np.asarray(seconds, dtype=float)
    s = np.asarray(nbytes, dtype=float)
    rows = np.column_stack([1.0 / t, factor * s / t])
    (alpha, inverse), *_ = np.linalg.lstsq(rows, np.ones_like(t), rcond=None)
    return float(alpha), float(1.0 / inverse)


#: NVLink 4 through NVSwitch, 8 H100/H200 SXM GPUs.
#: - link_bw: 450 GB/s per direction (900 GB/s bidirectional; nccl-tests#212, nccl#1442).
#: - bus_bw, latency_s: fit_alpha_beta on the 8x H200 all-reduce sweep 32 KiB - 16 GiB
#:   (stas00/ml-engineering, network/benchmarks/results; NCCL 2.27.7, its default
#:   algorithm: NVLS for large messages), benchmarks/bench_comm.py, 2026-12-02.
#: - copy_bus_bw: all-gather and reduce-scatter at 16 GiB on the same machine, 361.4 and
#:   362.9 GB/s (same source; mean).
#: - per_channel_bw: NCCL's tuning constant for Hopper ring LL128, 36.7 GB/s per channel
#:   (NVIDIA/nccl src/graph/tuning.cc); a prior, not measured.
#: - default_channels: 16, NCCL's NVLS channel count on sm_90 (src/transport/nvls.cc).
NVLINK4 = Interconnect(
    name="nvlink4", link_bw=450e9, bus_bw=443.9e9, copy_bus_bw=362.15e9, latency_s=41.4e-6,
    per_channel_bw=36.7e9, default_channels=16,
    source="fit on stas00/ml-engineering 8xH200 all-reduce sweep; NCCL tuning.cc; nccl-tests#212",
)

#: NCCL's ring efficiency on an NVSwitch fabric: large-message bus bandwidth over the
#: per-direction link rate, from the calibration machine (8x H200, stas00/ml-engineering,
#: nccl-tests at 16 GiB): ring all-reduce 367.2 GB/s (NCCL_NVLS_ENABLE=0) and all-gather /
#: reduce-scatter 362.15 GB/s (mean of 361.4 and 362.9), over 450 GB/s. nccl-tests#212
#: calls the gap "~20% protocol overhead". Used to carry the calibration to links without
#: a sweep of their own (below); NVLS, which beats it, exists only on Hopper's NVSwitch.
RING_EFFICIENCY = 367.2 / 450.0
COPY_EFFICIENCY = 362.15 / 450.0

#: NVLink 3 through NVSwitch, 8 A100 SXM GPUs (DGX/HGX A100). Nothing fitted on A100:
#: - link_bw: 300 GB/s per direction (stas00/ml-engineering network/README.md, NVLink 3).
#: - bus_bw, copy_bus_bw: link_bw x the ring efficiencies above (A100 has no NVLS, so
#:   all-reduce is NCCL's ring): 244.8 and 241.4 GB/s. Checked, not fitted, against the
#:   8x A100 nccl-tests sweep of the same source (benchmarks/bench_comm.py, validation).
#: - latency_s: NVLINK4's fitted alpha, carried over (2026-12-02).
#: - per_channel_bw: NCCL's tuning constant for Ampere ring LL128, 20.0 GB/s per channel
#:   (NVIDIA/nccl src/graph/tuning.cc, perChMaxRingLL128Bws); a prior.
#: - default_channels: 24, NCCL's 2 CTAs per NVLink (nccl#1703) x A100's 12 NVLinks, the
#:   24 CTAs a DGX A100 all-reduce is reported to launch (nccl#1225).
NVLINK3 = Interconnect(
    name="nvlink3", link_bw=300e9, bus_bw=300e9 * RING_EFFICIENCY, copy_bus_bw=300e9 * COPY_EFFICIENCY,
    latency_s=NVLINK4.latency_s, per_channel_bw=20.0e9, default_channels=24,
    source="NVLink 3 spec (stas00/ml-engineering) x NVLink 4 ring efficiency; NCCL tuning.cc; nccl#1703",
)

#: PCIe Gen5 x16, each GPU on its own x16 link to a non-blocking switch (H100 PCIe, or SXM
#: parts with NVLink off). No published NCCL collective on such a machine was found
#: (benchmarks/data/comm_measurements.md, Gaps), so this preset is unvalidated:
#: - link_bw: 63 GB/s per direction ("Gen5 x16 tops out at 63GBps", stas00/ml-engineering
#:   network/README.md; nvbandwidth measures 55.4 GB/s host-to-device on an 8x H200).
#: - bus_bw, copy_bus_bw: link_bw x the ring efficiencies above (51.4, 50.7 GB/s); an upper
#:   bound: a shared switch uplink or a CPU root complex between the GPUs lowers it.
#: - latency_s: NVLINK4's fitted alpha, carried over (2026-12-02).
#: - per_channel_bw: 36.7 GB/s (Hopper, as NVLINK4); default_channels: 2, NCCL's maintainer
#:   on nccl#689: a PCI system "should just launch 2 SMs".
PCIE5 = Interconnect(
    name="pcie5", link_bw=63e9, bus_bw=63e9 * RING_EFFICIENCY, copy_bus_bw=63e9 * COPY_EFFICIENCY,
    latency_s=NVLINK4.latency_s, per_channel_bw=36.7e9, default_channels=2,
    source="PCIe Gen5 x16 spec (stas00/ml-engineering) x NVLink 4 ring efficiency; nccl#689; unvalidated",
)

#: NVLink 4 as vLLM's all-reduce uses it on one H100 node: the engine's own custom
#: all-reduce for the small messages of a decode or chunked-prefill step (a one-shot read
#: of every peer's buffer over NVLink; vllm/distributed/device_communicators/
#: custom_all_reduce.py), not NCCL, whose ~41 us fixed cost (NVLINK4) is 2-3x what the
#: measured runs allow. Both constants are the engine model's, fitted on the four H100
#: calibration runs of shared/data/serving_real (tuner.engine.defaults.H100_VLLM_V1,
#: ``allreduce`` and ``allreduce_bytes``; a test holds them equal): 6.441 us per peer, and
#: wire bytes at NVLINK4's bus bandwidth / 1.16.
NVLINK4_VLLM = Interconnect(
    name="nvlink4_vllm", link_bw=NVLINK4.link_bw, bus_bw=NVLINK4.bus_bw / 1.16, copy_bus_bw=NVLINK4.copy_bus_bw,
    latency_s=0.0, per_channel_bw=NVLINK4.per_channel_bw, default_channels=NVLINK4.default_channels,
    source="fit: benchmarks/bench_sim2real.py on shared/data/serving_real's H100 vLLM V1 runs (engine step terms)",
    latency_per_peer_s=6.441e-6,
)

PRESETS: dict[str, Interconnect] = {link.name: link for link in (NVLINK4, NVLINK3, PCIE5, NVLINK4_VLLM)}
