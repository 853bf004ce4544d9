"""The ``fused_moe`` family: numerics of its kernels against PyTorch (under the Triton
interpreter, in a child process as ``tests/test_kernels.py`` runs them), its routing
arithmetic worked by hand, and how the analytic model prices a routing.

Numerics use fp16: the interpreter's ``tl.dot`` multiplies bf16 bit patterns
(triton-lang/triton#11584).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tuner.errors import IllegalConfigError
from tuner.families import family_spec
from tuner.kernels import KernelError, get_family
from tuner.families.fused_moe.kernel import FusedMoeFamily, GroupedGemmLaunch, padded_blocks, uniform_counts
from tuner.profile.devices import get_device
from tuner.profile.modeled import ModeledProfile
from tuner.profile.resources import CompiledResources

ROOT = Path(__file__).resolve().parents[1]


def config(**overrides: Any) -> dict[str, Any]:
    return {**{name: values[0] for name, values in FusedMoeFamily.space.items()}, **overrides}


# --- numerics, in a child process under TRITON_INTERPRET=1 --------------------------------

#: (family options, shape, config overrides, expert_counts or None for random routing)
CASES: list[tuple[dict, dict, dict, list[int] | None]] = [
    ({"experts": 4, "top_k": 2}, {"M": 5, "N": 48, "K": 40}, {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32}, None),
    ({"experts": 4, "top_k": 2}, {"M": 9, "N": 32, "K": 64},
     {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "GROUP_SIZE_M": 1, "BLOCK_SIZE_K": 64}, [9, 9, 0, 0]),
    ({"experts": 3, "top_k": 1}, {"M": 7, "N": 40, "K": 24},
     {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "num_stages": 2}, None),
    ({"experts": 8, "top_k": 2}, {"M": 20, "N": 64, "K": 96}, {"BLOCK_SIZE_M": 16}, None),
]
TOLERANCE = (2e-3, 1e-2)  # fp16: a few units in the last place


def _numerics() -> list[dict]:
    import torch

    results = []
    for options, shape, overrides, counts in CASES:
        family = get_family("fused_moe", **options)
        cfg = config(**overrides)
        assert family.illegal(cfg, shape) is None, family.illegal(cfg, shape)
        inputs = family.make_inputs(shape, seed=1, dtype="fp16", expert_counts=counts)
        got, want = family.run(inputs, cfg, shape), family.reference(inputs, shape)
        atol, rtol = TOLERANCE
        excess = ((got.float() - want.float()).abs() / (atol + rtol * want.float().abs())).max().item()
        finite = bool(torch.isfinite(got.float()).all())
        results.append({"case": [options, shape, overrides], "excess": excess if finite else math.inf,
                        "scale": want.float().abs().mean().item()})
    # inputs made for 20 tokens serve a launch of 7 (a replay makes them once, at the
    # largest shape): the first 7 tokens' routing and activations, as the reference sees them
    family, big, small = get_family("fused_moe", experts=8, top_k=2), {"M": 20, "N": 64, "K": 96}, {"M": 7, "N": 64,
                                                                                                   "K": 96}
    inputs = family.make_inputs(big, seed=2, dtype="fp16")
    first = {k: (v[:7] if k in ("a", "topk_ids", "topk_weights") else v) for k, v in inputs.items()}
    got, want = family.run(inputs, config(BLOCK_SIZE_M=16), small), family.reference(first, small)
    atol, rtol = TOLERANCE
    excess = ((got.float() - want.float()).abs() / (atol + rtol * want.float().abs())).max().item()
    results.append({"case": "larger inputs", "excess": excess, "scale": want.float().abs().mean().item()})
    return results


def test_kernels_match_the_reference_under_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, __file__, "numerics"], check=False, capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(CASES) + 1
    bad = [r for r in results if not r["excess"] <= 1.0]
    assert not bad, f"outside tolerance (excess > 1): {bad}"
    assert all(r["scale"] > 0.05 for r in results)  # the outputs are not trivially zero


# --- routing arithmetic -------------------------------------------------------------------

def test_uniform_counts_and_padded_blocks() -> None:
    assert uniform_counts(64, 8, 2) == (16,) * 8
    assert uniform_counts(5, 4, 2) == (3, 3, 2, 2)
    assert sum(uniform_counts(7, 3, 2)) == 14
    assert padded_blocks((16,) * 8, 16) == 8
    assert padded_blocks((17, 0, 1), 16) == 3
    assert padded_blocks((0, 0), 64) == 0


def test_registry_options_and_limits() -> None:
    assert family_spec("fused_moe").kernel_class() is FusedMoeFamily
    family = get_family("fused_moe", experts=16, top_k=4)
    assert (family.experts, family.top_k, family.dtype) == (16, 4, "bf16")
    assert family.bucket_key == ("M",) and family.shape_keys == ("M", "N", "K")
    with pytest.raises(KernelError, match="top_k=3 needs at least 3 experts"):
        get_family("fused_moe", experts=2, top_k=3)
    shape = {"M": 64, "N": 1024, "K": 2048}
    assert family.illegal(config(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256), shape) is not None
    assert family.illegal(config(BLOCK_SIZE_M=64, BLOCK_SIZE_N=256), shape) is None
    assert "64-bit" in family.illegal(config(), {"M": 1, "N": 65536, "K": 8192})
    with pytest.raises(KernelError, match="sum to 3"):
        family.plan(config(), {"M": 1, "N": 128, "K": 128}, 132, expert_counts=(1, 2) + (0,) * 14)
    with pytest.raises(KernelError, match="has 2 entries"):
        family.plan(config(), {"M": 1, "N": 128, "K": 128}, 132, expert_counts=(2, 2))


# --- the hand-worked decode batch -----------------------------------------------------------

class FakeResources:
    """Every launch compiles to 64 KiB of shared memory, 2 CTAs per SM."""

    def get_or_compile(self, launch, device) -> CompiledResources:
        return CompiledResources(arch=device.arch, smem_bytes=64 * 1024, regs_per_thread=128,
                                 num_warps=launch.num_warps, ctas_per_sm=2, limiter="shared memory")


SHAPE = {"M": 64, "N": 1024, "K": 2048}
CONCENTRATED = (64, 64, 0, 0, 0, 0, 0, 0)
EVEN = (16,) * 8


def profile(device: str = "h100", **overrides: Any) -> ModeledProfile:
    cfg = config(**{"BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "num_stages": 4, **overrides})
    return ModeledProfile(FusedMoeFamily(experts=8, top_k=2), tuple(cfg.items()), get_device(device),
                          FakeResources())


def seconds(p: ModeledProfile, counts: tuple[int, ...]) -> float:
    """The two grouped GEMMs (the moe_sum does not depend on the routing or BLOCK_SIZE_M)."""
    timing = p.at(SHAPE, extras=(("expert_counts", counts),))
    return sum(t.latency_s for l, t in zip(timing.plan.launches, timing.timings) if l.name != "moe_sum")


def test_hand_worked_decode_batch() -> None:
    """M = 64 tokens, top_k = 2, E = 8 experts: 128 (token, expert) pairs; N = 1024,
    K = 2048, BLOCK_SIZE_N = 64 (gate_up: 1024 / 64 = 16 N tiles; down: 2048 / 64 = 32).

    Routing A, *concentrated*: every token picks the same two experts (top_k = 2 must be
    distinct, so "all on one expert" is all on two): counts (64, 64, 0, ..., 0).
      BLOCK_SIZE_M = 16: 64/16 + 64/16 = 4 + 4 = 8 blocks, 8·16 = 128 rows, 0 padding.
      BLOCK_SIZE_M = 64: 64/64 + 64/64 = 1 + 1 = 2 blocks, 128 rows, 0 padding.
    Routing B, *even*: 16 pairs on each of the 8 experts.
      BLOCK_SIZE_M = 16: 8 · ceil(16/16) = 8 blocks, 128 rows, 0 padding.
      BLOCK_SIZE_M = 64: 8 · ceil(16/64) = 8 blocks, 512 rows, 384 of them padding (75%).
    Grids (blocks × N tiles): A/16: 8·16 = 128 and 8·32 = 256; A/64: 32 and 64;
    B/16 and B/64: 128 and 256.

    Weight bytes (bf16): gate_up reads 2·N·K·2 = 8 MiB per touched expert, down N·K·2
    = 4 MiB: 24 MiB under A (2 experts), 96 MiB under B (8). Activations are at most
    128 · (2048 + 1024) · 2 bytes ≈ 0.75 MiB: the batch streams weights, so

    * A is cheaper than B for every config (a quarter of the weight bytes);
    * under B, BLOCK_SIZE_M 16 and 64 launch the same grid and read the same bytes, and
      64 spends 75% of its MMA rows on padding: 16 is favoured (or tied, when the
      padded MMA work hides under the weight streaming, as it does here: the tensor
      cores of an H100 do a 64-row block's K step in less time than the DRAM needs to
      stream the wave's weight tiles);
    * under A neither pads and both read the same 24 MiB, but 16 splits each expert's 64
      rows into 4 blocks, each loading the same weight tile into shared memory again
      (4× the L2 → shared traffic) on 16-row tiles that use the tensor cores worse: 64
      is favoured.
    """
    family = FusedMoeFamily(experts=8, top_k=2)
    assert padded_blocks(CONCENTRATED, 16) == 8 and padded_blocks(CONCENTRATED, 64) == 2
    assert padded_blocks(EVEN, 16) == 8 and padded_blocks(EVEN, 64) == 8
    grids = {}
    for bm in (16, 64):
        for label, counts in (("A", CONCENTRATED), ("B", EVEN)):
            plan = family.plan(config(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=64), SHAPE, 132, expert_counts=counts)
            grids[label, bm] = tuple(l.grid for l in plan.launches)
            gate_up, down = plan.launches[:2]
            assert isinstance(gate_up, GroupedGemmLaunch) and isinstance(down, GroupedGemmLaunch)
            touched = 2 if label == "A" else 8
            assert gate_up.experts_touched == down.experts_touched == touched
            weights = touched * 2 * 1024 * 2048 * 2
            assert gate_up.dram_bytes >= weights and gate_up.dram_bytes < weights + 2**20
    assert grids["A", 16][:2] == (128, 256) and grids["A", 64][:2] == (32, 64)
    assert grids["B", 16][:2] == grids["B", 64][:2] == (128, 256)

    for device in ("h100", "a100"):
        t = {(label, bm): seconds(profile(device, BLOCK_SIZE_M=bm), counts)
             for bm in (16, 64) for label, counts in (("A", CONCENTRATED), ("B", EVEN))}
        for bm in (16, 64):
            assert t["A", bm] < 0.8 * t["B", bm], (device, t)
        assert t["B", 16] <= t["B", 64], (device, t)
        assert t["A", 64] < t["A", 16], (device, t)


def test_profile_reads_expert_counts_and_keys_on_them() -> None:
    p = profile(BLOCK_SIZE_M=64)
    assert p.variables_read == {"M", "N", "K", "expert_counts"}
    plain = {"M": 64.0, "N": 1024.0, "K": 2048.0}
    assert p.launches(plain, None, "moe") == p.launches({**plain, "expert_counts": EVEN}, None, "moe")
    concentrated = p.launches({**plain, "expert_counts": CONCENTRATED}, None, "moe")
    assert concentrated != p.launches(plain, None, "moe")
    assert [name for name, _ in concentrated] == ["moe:fused_moe_gate_up", "moe:fused_moe_down", "moe:moe_sum"]
    # the memo keys on the counts: asking again in the other order gives the same answers
    assert p.launches({**plain, "expert_counts": CONCENTRATED}, None, "moe") == concentrated
    assert p.workspace_bytes({**plain, "expert_counts": CONCENTRATED}) == p.workspace_bytes(plain)
    with pytest.raises(KernelError):
        p.launches({**plain, "expert_counts": (1,) * 8}, None, "moe")


def test_other_families_read_only_their_shape() -> None:
    matmul = ModeledProfile(get_family("matmul"), tuple(config_of("matmul").items()), get_device("h100"),
                            FakeResources())
    assert matmul.variables_read == {"M", "N", "K"}
    assert matmul.extras_of({"M": 1, "expert_counts": (1, 2)}) == ()


def config_of(name: str) -> dict[str, Any]:
    return {k: v[0] for k, v in family_spec(name).kernel_class().space.items()}


def test_illegal_config_is_refused_by_the_profile() -> None:
    p = profile(BLOCK_SIZE_M=128, BLOCK_SIZE_N=256)
    with pytest.raises(IllegalConfigError):
        p.at(SHAPE)


if __name__ == "__main__" and sys.argv[1:] == ["numerics"]:
    print(json.dumps(_numerics()))
