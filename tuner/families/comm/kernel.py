"""Collectives of a tensor- or expert-parallel engine (NCCL's kernels), as a kernel family.

Not a Triton kernel: NCCL's, modeled (``tuner.profile.interconnect``). What matters to the
service is what the collective takes from the GPU while it runs: one CTA per channel, each
on its own SM for the whole collective (NCCL's CTAs do not share an SM with compute
kernels: nccl#689), and HBM traffic for every byte it sends. Its time falls with more
channels until the link saturates, and more channels leave fewer SMs to the GEMMs beside
it: the channel count is the searchable parameter, as ``NCCL_MIN_CTAS``/``NCCL_MAX_CTAS``
(``NCCL_MIN_NCHANNELS``) are in a real engine.

Shape: ``M`` rows of ``N`` elements (the tokens of a batch by the hidden size: an
all-reduce of a row-parallel GEMM's output). The buffer is sized as nccl-tests sizes it:
an all-reduce's and an all-to-all's per-rank buffer, an all-gather's gathered output, a
reduce-scatter's unscattered input. Options: ``collective`` (all_reduce,
all_gather, reduce_scatter, all_to_all), ``ranks``, ``interconnect`` (a preset of
``tuner.profile.interconnect``, which prices it: ``tuner.profile.collective``), ``dtype``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import KernelError
from ...kernels._common import config_problem, shape_problem
from ...kernels.family import ConfigParams, LaunchPlan, Shape

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}

#: Channels (CTAs, one SM each): NCCL's 16 on Hopper NVLS first (its default), then fewer
#: (a carve-out leaving SMs to compute: 8, 4) and more (DeepSeek-V3 gave communication 20
#: SMs, DeepEP 24; 32 as NCCL_MAX_CTAS allows).
SPACE: dict[str, tuple[Any, ...]] = {"CHANNELS": (16, 4, 8, 24, 32)}


class CommFamily:
    """A collective over ``ranks`` GPUs on ``interconnect``; see the module docstring."""

    name = "comm"
    #: Not run where tuner runs kernels (a replay, the GPU check): a collective needs its
    #: ranks; a replay waits out its modeled time instead.
    runnable = False
    shape_keys = ("M", "N")
    bucket_key = ("M",)
    space = SPACE

    def __init__(self, collective: str = "all_reduce", ranks: int = 8, interconnect: str = "nvlink4",
                 dtype: str = "bf16") -> None:
        if collective not in COLLECTIVES:
            raise KernelError(f"collective {collective!r} is not one of {', '.join(COLLECTIVES)}")
        if not isinstance(ranks, int) or ranks < 2:
            raise KernelError(f"ranks must be an integer of at least 2, got {ranks!r}")
        if dtype not in _DTYPE_BYTES:
            raise KernelError(f"dtype {dtype!r} is not one of {', '.join(_DTYPE_BYTES)}")
        self.collective, self.ranks, self.interconnect, self.dtype = collective, ranks, interconnect, dtype

    def __repr__(self) -> str:
        return (f"CommFamily(collective={self.collective!r}, ranks={self.ranks}, "
                f"interconnect={self.interconnect!r}, dtype={self.dtype!r})")

    def nbytes(self, shape: Shape) -> float:
        """Bytes of the buffer each rank contributes."""
        return float(shape["M"] * shape["N"] * _DTYPE_BYTES[self.dtype])

    def illegal(self, config: ConfigParams, shape: Shape) -> str | None:
        return shape_problem(shape, self.shape_keys) or config_problem(config, self.space)

    def plan(self, config: ConfigParams, shape: Shape, persistent_ctas: int) -> LaunchPlan:
        raise KernelError("collectives are modeled, not compiled: they have no Triton launch plan")

    def make_inputs(self, shape: Shape, *, seed: int, dtype: Any, device: str) -> dict[str, Any]:
        raise KernelError("collectives are modeled, not run: they need several GPUs")

    def reference(self, inputs: Mapping[str, Any], shape: Shape) -> Any:
        raise KernelError("collectives are modeled, not run: they need several GPUs")

    def run(self, inputs: Mapping[str, Any], config: ConfigParams, shape: Shape) -> Any:
        raise KernelError("collectives are modeled, not run: they need several GPUs")
