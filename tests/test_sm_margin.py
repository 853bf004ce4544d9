"""SM_MARGIN (issue 24): the SMs a kernel leaves to another stream, as PyTorch's
sm_carveout, FlashAttention-3's sm_margin and DeepGEMM's num_sms do.

Expectations are counted by hand: a persistent grid sized to 132 - 16 SMs at one CTA per
SM launches 116 CTAs and holds 116/132 of the device; FlashAttention-2's split heuristic
sized to fewer SMs picks fewer splits.
"""

from __future__ import annotations

import pytest

from tuner.errors import IllegalConfigError
from tuner.kernels import get_family
from tuner.kernels.family import sized_sms
from tuner.profile.devices import PRESETS
from tuner.profile.modeled import LazyCompileCache, ModeledProfile
from tuner.profile.resources import CompiledResources

H100 = PRESETS["h100"]
SHAPE = {"M": 8192, "N": 8192, "K": 8192}
GEMM = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
        "SPLIT_K": 1, "FUSE_EPILOGUE": True, "PERSISTENT": True}


class OnePerSm:
    """Compiled resources of one CTA per SM, whatever the launch (no compile)."""

    def get_or_compile(self, launch, device) -> CompiledResources:
        return CompiledResources(arch=device.arch, smem_bytes=200 * 1024, regs_per_thread=128,
                                 num_warps=launch.num_warps, ctas_per_sm=1, limiter="shared memory")


def gemm(margin: int | None) -> ModeledProfile:
    config = dict(GEMM) if margin is None else {**GEMM, "SM_MARGIN": margin}
    return ModeledProfile(get_family("matmul"), tuple(config.items()), H100, OnePerSm())


def test_the_margin_is_subtracted_from_the_sms_a_config_is_told() -> None:
    assert sized_sms({"SM_MARGIN": 16}, 132) == 116
    assert sized_sms({}, 132) == 132          # optional: a config without it leaves none
    assert sized_sms({"SM_MARGIN": 24}, 20) == 1


def test_a_persistent_grid_with_a_margin_of_16_holds_116_of_132_sms() -> None:
    timing = gemm(16).at(SHAPE)
    assert [launch.grid for launch in timing.plan.launches] == [116]
    ((_, phases),) = gemm(16).launches(SHAPE, None, "g")
    assert [(p[1], p[4]) for p in phases] == [(pytest.approx(116 / 132), 1.0)]
    # without a margin it is sized to every SM, exactly as before the parameter existed
    assert [launch.grid for launch in gemm(None).at(SHAPE).plan.launches] == [132]
    assert gemm(0).at(SHAPE).modeled_latency_s == gemm(None).at(SHAPE).modeled_latency_s
    # alone, fewer SMs do the same 2048 tiles: slower (ceil(2048/116) = 18 rounds, not 16)
    assert gemm(16).at(SHAPE).modeled_latency_s > gemm(0).at(SHAPE).modeled_latency_s


def test_a_margin_that_changes_nothing_or_leaves_no_sm_is_illegal() -> None:
    matmul = get_family("matmul")
    reason = matmul.illegal({**GEMM, "PERSISTENT": False, "SM_MARGIN": 16}, SHAPE)
    assert reason is not None and "PERSISTENT=False" in reason
    attention = get_family("decode_attention")
    config = {"VARIANT": "split", "BLOCK_N": 64, "NUM_SPLITS": 4, "num_warps": 4, "num_stages": 2, "SM_MARGIN": 8}
    reason = attention.illegal(config, {"B": 8, "H": 32, "KV": 8, "D": 128, "L": 4096})
    assert reason is not None and "NUM_SPLITS" in reason
    small = ModeledProfile(get_family("matmul"), tuple({**GEMM, "SM_MARGIN": 24}.items()),
                           H100, OnePerSm())
    with pytest.raises(IllegalConfigError, match="leaves no SM"):
        small.at(SHAPE, sms=20, sizing_sms=20)


def test_auto_splits_size_themselves_to_the_sms_left() -> None:
    # FlashAttention-2's heuristic (two CTA slots per SM) for 8 sequences x 8 KV heads =
    # 64 CTAs. Told 132 SMs (264 slots): 4 splits fill 256/264 = 0.97 of a wave, the best.
    # Told 132 - 24 = 108 (216 slots): 3 splits fill 192/216 = 0.89, 4 only 256/432 = 0.59;
    # 3 is rounded down to a power of two: 2 splits, 128 CTAs, half the workspace.
    attention = get_family("decode_attention")
    shape = {"B": 8, "H": 32, "KV": 8, "D": 128, "L": 8192}
    config = {"VARIANT": "split", "BLOCK_N": 64, "NUM_SPLITS": "auto", "num_warps": 4, "num_stages": 2}
    told_all = attention.plan(config, shape, sized_sms(config, 132))
    margin = {**config, "SM_MARGIN": 24}
    told_less = attention.plan(margin, shape, sized_sms(margin, 132))
    assert (told_all.launches[0].grid, told_less.launches[0].grid) == (256, 128)
    assert told_less.workspace_bytes == told_all.workspace_bytes / 2


def test_problem_files_that_do_not_name_it_keep_their_configs(write_problem) -> None:
    problem = write_problem({
        "name": "m", "device": {"name": "h100"},
        "service": {"batching": "dynamic", "max_batch": 8, "memory": {"budget": "80 GiB"},
                    "operators": [{"name": "g", "family": "gemm", "shape": {"M": "batch * 64", "N": 1024, "K": 1024}}],
                    "slo": {"deadline": "1 s"}},
        "families": {"gemm": {"kernel": "matmul", "space": {"BLOCK_M": [64], "BLOCK_N": [64], "PERSISTENT": [True]}},
                     "gemm_margin": {"kernel": "matmul", "space": {"BLOCK_M": [64], "BLOCK_N": [64], "PERSISTENT": [True],
                                                                  "SM_MARGIN": [0, 16]}}},
        "regimes": {"r": {"arrivals": {"process": "poisson", "rate": 1.0}}},
    })
    plain, = problem.families["gemm"].configs
    assert "SM_MARGIN" not in dict(plain.params) and "sm" not in plain.name.split("_")[-1]
    assert [dict(c.params)["SM_MARGIN"] for c in problem.families["gemm_margin"].configs] == [0, 16]
