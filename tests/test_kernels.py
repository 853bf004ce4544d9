"""Kernel families: numerics of the real kernels against PyTorch, launch plans, shape
limits, and compiling the planned launches for sm_90 and sm_80.

Triton chooses between compiling and interpreting when a kernel is decorated — at import,
for Triton's own library as much as ours — so one process cannot do both. The kernels
therefore run in child processes of this file (``python tests/test_kernels.py numerics
matmul`` under ``TRITON_INTERPRET=1``; ``... compile`` without it), one per family, and
the tests here judge what the children report. Plans are checked in this process.

Numerics use fp16 for the GEMM families: the interpreter's ``tl.dot`` multiplies bf16 bit
patterns (triton-lang/triton#11584, not supported upstream). rmsnorm, which only loads,
stores and converts bf16, is checked in both.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tuner import kernels
from tuner.families import family_names, family_spec
from tuner.families.decode_attention.kernel import DecodeAttentionFamily
from tuner.families.matmul.kernel import MatmulFamily
from tuner.families.rmsnorm.kernel import RmsNormFamily
from tuner.kernels import KernelError, all_configs, get_family

ROOT = Path(__file__).resolve().parents[1]


def defaults(space: dict[str, tuple[Any, ...]]) -> dict[str, Any]:
    return {name: values[0] for name, values in space.items()}


# --- numerics cases: (family options, shape, config overrides, dtype) ------------------

S_TINY = {"M": 1, "N": 40, "K": 20}      # M = 1, K < BLOCK_K, N not a multiple of a tile
S_ODD = {"M": 37, "N": 70, "K": 150}
S_LONG_K = {"M": 50, "N": 100, "K": 300}  # ten 32-wide K tiles: room for SPLIT_K = 8
S_BIG_TILES = {"M": 130, "N": 260, "K": 140}

MATMUL_CASES: list[tuple[dict, dict, dict, str]] = [
    ({"epilogue": "none"}, S_TINY, {}, "fp16"),
    ({"epilogue": "bias"}, S_ODD, {"BLOCK_M": 32}, "fp16"),
    ({"epilogue": "silu"}, S_ODD, {"BLOCK_M": 64, "GROUP_M": 1}, "fp16"),
    ({"epilogue": "gelu"}, S_BIG_TILES, {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "num_warps": 8}, "fp16"),
    ({"epilogue": "gated_silu"}, S_ODD, {"BLOCK_N": 64, "num_warps": 2, "num_stages": 2}, "fp16"),
    ({"epilogue": "none"}, S_ODD, {"BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 4}, "fp16"),
    ({"epilogue": "bias"}, S_LONG_K, {"SPLIT_K": 8, "num_stages": 5}, "fp16"),
    ({"epilogue": "silu"}, S_LONG_K, {"SPLIT_K": 4, "PERSISTENT": True, "SM_MARGIN": 8}, "fp16"),
    ({"epilogue": "gelu"}, S_ODD, {"SPLIT_K": 2, "FUSE_EPILOGUE": False}, "fp16"),
    ({"epilogue": "gated_silu"}, S_LONG_K,
     {"SPLIT_K": 2, "PERSISTENT": True, "FUSE_EPILOGUE": False, "GROUP_M": 1, "SM_MARGIN": 16}, "fp16"),
    ({"epilogue": "gated_silu"}, S_LONG_K, {"SPLIT_K": 4, "BLOCK_M": 32}, "fp16"),
    ({"epilogue": "none"}, S_BIG_TILES, {"PERSISTENT": True, "BLOCK_M": 32, "BLOCK_N": 64, "SM_MARGIN": 24}, "fp16"),
    ({"epilogue": "bias"}, S_ODD, {"PERSISTENT": True, "SPLIT_K": 2, "SM_MARGIN": 48}, "fp16"),
    ({"epilogue": "silu"}, {"M": 1, "N": 33, "K": 100}, {"SPLIT_K": 2}, "fp16"),
    *[({"epilogue": e}, S_TINY, {"FUSE_EPILOGUE": False}, "fp16") for e in ("bias", "silu", "gelu", "gated_silu")],
    *[({"epilogue": e}, S_TINY, {}, "fp16") for e in ("bias", "silu", "gelu", "gated_silu")],
]

D_GQA = {"B": 2, "H": 8, "KV": 2, "D": 64, "L": 77}     # groups of 4, L not a multiple of BLOCK_N
D_MHA = {"B": 1, "H": 4, "KV": 4, "D": 64, "L": 5}      # one head per group, L < BLOCK_N
D_MQA = {"B": 3, "H": 6, "KV": 1, "D": 32, "L": 300}    # a group of 6 (padded to 16 rows)
D_WIDE = {"B": 1, "H": 16, "KV": 2, "D": 128, "L": 200}

DECODE_CASES: list[tuple[dict, dict, dict, str]] = [
    ({}, D_GQA, {}, "fp16"),
    ({}, D_GQA, {"NUM_SPLITS": 2, "BLOCK_N": 32, "num_warps": 2}, "fp16"),
    ({}, D_MQA, {"NUM_SPLITS": 4, "BLOCK_N": 64, "num_stages": 1}, "fp16"),
    ({}, D_MQA, {"NUM_SPLITS": 16, "num_warps": 8}, "fp16"),
    ({}, D_WIDE, {"NUM_SPLITS": 8, "num_stages": 3}, "fp16"),
    ({}, D_WIDE, {"BLOCK_N": 128}, "fp16"),
    ({}, D_MHA, {"BLOCK_N": 64}, "fp16"),
    ({}, D_GQA, {"NUM_SPLITS": 16, "BLOCK_N": 32}, "fp16"),  # 3 tiles: 2 of the 16 splits run
    ({}, D_MQA, {"NUM_SPLITS": "auto", "BLOCK_N": 32}, "fp16"),  # 4 interpreter SMs: FA-2 picks 5, runs 4
    # a margin as large as the interpreter's 4 SMs leaves it sized to 1 SM
    ({}, D_MQA, {"NUM_SPLITS": "auto", "BLOCK_N": 32, "SM_MARGIN": 8}, "fp16"),
    ({}, D_GQA, {"NUM_SPLITS": "auto", "SM_MARGIN": 16}, "fp16"),
    ({}, D_WIDE, {"NUM_SPLITS": "auto", "SM_MARGIN": 24}, "fp16"),
    ({}, D_MHA, {"NUM_SPLITS": "auto", "SM_MARGIN": 48}, "fp16"),
    ({}, D_MHA, {}, "fp16"),
    ({}, D_GQA, {"VARIANT": "materialize", "BLOCK_N": 32}, "fp16"),
    ({}, D_MHA, {"VARIANT": "materialize"}, "fp16"),
    ({}, D_MQA, {"VARIANT": "materialize", "BLOCK_N": 128, "num_warps": 8}, "fp16"),
    ({}, D_WIDE, {"VARIANT": "materialize", "BLOCK_N": 64, "num_stages": 3, "num_warps": 2}, "fp16"),
]

RMSNORM_CASES: list[tuple[dict, dict, dict, str]] = [
    ({"residual": True}, {"M": 3, "N": 1000}, {}, "fp16"),
    ({"residual": True}, {"M": 3, "N": 1000}, {"FUSE_RESIDUAL": False}, "bf16"),
    ({"residual": True}, {"M": 1, "N": 300}, {"FUSE_RESIDUAL": False, "BLOCK_N": 256, "num_warps": 1}, "fp16"),
    ({"residual": True}, {"M": 2, "N": 5000}, {"BLOCK_N": 8192, "num_warps": 16}, "bf16"),
    ({"residual": True}, {"M": 2, "N": 5000}, {"BLOCK_N": 2048, "num_warps": 8}, "fp16"),
    ({"residual": True}, {"M": 5, "N": 96}, {"FUSE_RESIDUAL": False, "BLOCK_N": 256, "num_warps": 16}, "fp16"),
    ({"residual": False}, {"M": 4, "N": 3000}, {"BLOCK_N": 4096, "num_warps": 2}, "fp16"),
    ({"residual": False}, {"M": 1, "N": 700}, {"BLOCK_N": 512}, "bf16"),
    ({"residual": False}, {"M": 2, "N": 1000}, {"BLOCK_N": 256, "num_warps": 8}, "fp16"),
]

CASES = {"matmul": MATMUL_CASES, "decode_attention": DECODE_CASES, "rmsnorm": RMSNORM_CASES}
#: (atol, rtol) per output dtype: a few units in the last place of the output.
TOLERANCE = {"fp16": (2e-3, 1e-2), "bf16": (1.6e-2, 2e-2)}

# A handful of launches per family to compile for each architecture (each 0.1–2 s).
COMPILE_CASES: dict[str, list[tuple[dict, dict, dict]]] = {
    "matmul": [
        ({"epilogue": "gated_silu"}, {"M": 512, "N": 1024, "K": 4096},
         {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64}),
        ({"epilogue": "bias"}, {"M": 100, "N": 1000, "K": 4000},
         {"SPLIT_K": 4, "PERSISTENT": True, "FUSE_EPILOGUE": False, "num_warps": 8}),
    ],
    "decode_attention": [
        ({}, {"B": 8, "H": 32, "KV": 8, "D": 128, "L": 4096}, {"NUM_SPLITS": 8, "BLOCK_N": 64}),
        ({}, {"B": 8, "H": 32, "KV": 8, "D": 128, "L": 4096}, {"VARIANT": "materialize", "BLOCK_N": 64}),
    ],
    "rmsnorm": [
        ({}, {"M": 64, "N": 4096}, {"FUSE_RESIDUAL": False, "BLOCK_N": 1024}),
        ({}, {"M": 64, "N": 4096}, {"BLOCK_N": 4096, "num_warps": 8}),
    ],
    "fused_moe": [   # Mixtral's expert shape on one TP-2 rank (search_spaces/moe_serving.yaml)
        ({"experts": 8, "top_k": 2}, {"M": 256, "N": 7168, "K": 4096},
         {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "num_stages": 4}),
        ({"experts": 8, "top_k": 2}, {"M": 16, "N": 7168, "K": 4096},
         {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "num_warps": 8}),
    ],
}
ARCHS = (90, 80)


# --- child processes --------------------------------------------------------------------

def _numerics(family_name: str) -> list[dict]:
    import torch

    results = []
    for options, shape, overrides, dtype in CASES[family_name]:
        family = get_family(family_name, **options)
        config = {**defaults(family.space), **overrides}
        reason = family.illegal(config, shape)
        if reason is not None:
            results.append({"case": [options, shape, overrides, dtype], "illegal": reason})
            continue
        inputs = family.make_inputs(shape, seed=0, dtype=dtype, device="cpu")
        got, want = family.run(inputs, config, shape), family.reference(inputs, shape)
        got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
        atol, rtol = TOLERANCE[dtype]
        excess = max(
            ((g.float() - w.float()).abs() / (atol + rtol * w.float().abs())).max().item()
            for g, w in zip(got, want)
        )
        finite = all(bool(torch.isfinite(g.float()).all()) for g in got)
        results.append({"case": [options, shape, overrides, dtype], "excess": excess if finite else math.inf})
    return results


def _compile(family_name: str) -> list[dict]:
    import triton
    from triton.backends.compiler import GPUTarget

    results = []
    for options, shape, overrides in COMPILE_CASES[family_name]:
        family = get_family(family_name, **options)
        config = {**defaults(family.space), **overrides}
        assert family.illegal(config, shape) is None, family.illegal(config, shape)
        for launch in family.plan(config, shape, persistent_ctas=132).launches:
            for arch in ARCHS:
                compiled = triton.compile(
                    kernels.ast_source(launch), target=GPUTarget("cuda", arch, 32),
                    options={"num_warps": launch.num_warps, "num_stages": launch.num_stages},
                )
                results.append({"config": overrides, "launch": launch.name, "arch": arch,
                                "shared": compiled.metadata.shared, "num_warps": compiled.metadata.num_warps})
    return results


def _child(mode: str, family: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if mode == "numerics":
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    done = subprocess.run([sys.executable, __file__, mode, family], check=False, capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- numerics and compiling -------------------------------------------------------------

@pytest.mark.parametrize("family", sorted(CASES))
def test_every_case_matches_the_reference_under_the_interpreter(family: str) -> None:
    results = _child("numerics", family)
    illegal = [r for r in results if "illegal" in r]
    assert not illegal, f"cases meant to be legal were refused: {illegal}"
    bad = [r for r in results if not r["excess"] <= 1.0]
    assert not bad, f"outside tolerance (excess > 1): {bad}"
    assert len(results) == len(CASES[family])


@pytest.mark.parametrize("family", sorted(CASES))
def test_cases_cover_every_value_of_every_parameter(family: str) -> None:
    space = family_spec(family).kernel_class().space
    seen = {name: set() for name in space}
    for _, _, overrides, _ in CASES[family]:
        for name, value in {**defaults(space), **overrides}.items():
            seen[name].add(value)
    missing = {name: set(values) - seen[name] for name, values in space.items() if set(values) - seen[name]}
    assert not missing


def test_cases_cover_every_epilogue_fused_and_unfused_and_both_residual_modes() -> None:
    covered = {(o["epilogue"], {**defaults(MatmulFamily.space), **c}["FUSE_EPILOGUE"])
               for o, _, c, _ in MATMUL_CASES}
    epilogues = ("none", "bias", "silu", "gelu", "gated_silu")
    assert covered == {(e, f) for e in epilogues for f in (True, False)} - {("none", False)}
    assert {o["residual"] for o, _, _, _ in RMSNORM_CASES} == {True, False}


@pytest.mark.parametrize("family", sorted(COMPILE_CASES))
def test_planned_launches_compile_for_sm90_and_sm80(family: str) -> None:
    results = _child("compile", family)
    expected = sum(len(get_family(family, **o).plan({**defaults(family_spec(family).kernel_class().space), **c}, s, 132).launches)
                   for o, s, c in COMPILE_CASES[family]) * len(ARCHS)
    assert len(results) == expected
    by = {(json.dumps(r["config"], sort_keys=True), r["launch"], r["arch"]): r for r in results}
    for r in results:
        assert r["num_warps"] > 0
    if family == "matmul":
        # The pipelined GEMM buffers num_stages tiles of A and both B halves on sm_90
        # (num_stages - 1 on sm_80): evidence that the divisibility hints reached the
        # compiler, without which the loads do not pipeline and one stage remains.
        gated = json.dumps(COMPILE_CASES["matmul"][0][2], sort_keys=True)
        stage = 2 * (64 * 64 + 2 * 64 * 128)
        assert by[(gated, "matmul", 90)]["shared"] >= 3 * stage
        assert by[(gated, "matmul", 80)]["shared"] >= 2 * stage


# --- plans --------------------------------------------------------------------------------

def matmul_config(**overrides: Any) -> dict[str, Any]:
    return {**defaults(MatmulFamily.space), **overrides}


def names(plan) -> list[str]:
    return [launch.name for launch in plan.launches]


def test_split_k_workspace_grows_with_split_k_and_launches_a_reduction() -> None:
    family, shape = MatmulFamily("silu"), {"M": 64, "N": 256, "K": 4096}
    spaces = []
    for split in (1, 2, 4, 8):
        plan = family.plan(matmul_config(SPLIT_K=split), shape, persistent_ctas=132)
        spaces.append(plan.workspace_bytes)
        assert plan.workspace_bytes == (4 * split * 64 * 256 if split > 1 else 0)
        assert names(plan) == (["matmul"] if split == 1 else ["matmul_partial", "splitk_reduce"])
    assert spaces == sorted(spaces) and len(set(spaces)) == 4
    reduce = family.plan(matmul_config(SPLIT_K=4), shape, 132).launches[1]
    assert dict(reduce.constexprs)["SPLITS"] == 4 and dict(reduce.constexprs)["APPLY_EPILOGUE"] is True


def test_gated_partials_hold_both_halves_and_unfused_adds_an_intermediate_and_an_epilogue() -> None:
    M, N, K = 32, 128, 1024
    gated = MatmulFamily("gated_silu", dtype="fp16")
    plan = gated.plan(matmul_config(SPLIT_K=2, FUSE_EPILOGUE=False), {"M": M, "N": N, "K": K}, 132)
    assert names(plan) == ["matmul_partial", "splitk_reduce", "epilogue"]
    assert plan.workspace_bytes == 4 * 2 * M * 2 * N + 2 * M * 2 * N
    plan = MatmulFamily("gelu").plan(matmul_config(FUSE_EPILOGUE=False), {"M": M, "N": N, "K": K}, 132)
    assert names(plan) == ["matmul", "epilogue"] and plan.workspace_bytes == 2 * M * N
    assert dict(plan.launches[0].constexprs)["APPLY_EPILOGUE"] is False


def test_flops_and_compulsory_bytes() -> None:
    M, N, K = 48, 96, 512
    shape = {"M": M, "N": N, "K": K}
    (gemm,) = MatmulFamily("none").plan(matmul_config(), shape, 132).launches
    assert gemm.flops == 2 * M * N * K
    assert gemm.dram_bytes == 2 * (M * K + K * N + M * N)
    fused = MatmulFamily("silu").plan(matmul_config(), shape, 132)
    unfused = MatmulFamily("silu").plan(matmul_config(FUSE_EPILOGUE=False), shape, 132)
    assert fused.launches[0].flops > gemm.flops
    assert sum(l.flops for l in unfused.launches) == fused.launches[0].flops
    # The intermediate is written and read once more.
    assert sum(l.dram_bytes for l in unfused.launches) == fused.launches[0].dram_bytes + 2 * (2 * M * N)
    split = MatmulFamily("none").plan(matmul_config(SPLIT_K=4), shape, 132)
    assert sum(l.dram_bytes for l in split.launches) == gemm.dram_bytes + 2 * 4 * 4 * M * N


def test_persistent_grid_is_persistent_ctas_and_only_the_gemm_is_persistent() -> None:
    family, shape = MatmulFamily("bias"), {"M": 512, "N": 1024, "K": 1024}
    tiles = (512 // 16) * (1024 // 32)
    plan = family.plan(matmul_config(PERSISTENT=True), shape, persistent_ctas=264)
    assert plan.launches[0].grid == 264 and plan.launches[0].persistent
    assert family.plan(matmul_config(), shape, 264).launches[0].grid == tiles
    split = family.plan(matmul_config(PERSISTENT=True, SPLIT_K=2, FUSE_EPILOGUE=False), shape, 132)
    assert [l.persistent for l in split.launches] == [True, False, False] and split.launches[0].grid == 132
    # Fewer work items than CTAs: the grid is the work.
    small = family.plan(matmul_config(PERSISTENT=True), {"M": 16, "N": 64, "K": 64}, 132)
    assert small.launches[0].grid == 2


def test_compile_key_ignores_the_grid_but_sees_divisibility() -> None:
    family = MatmulFamily()
    a = family.plan(matmul_config(PERSISTENT=True), {"M": 512, "N": 1024, "K": 1024}, 132).launches[0]
    b = family.plan(matmul_config(PERSISTENT=True), {"M": 512, "N": 1024, "K": 1024}, 264).launches[0]
    c = family.plan(matmul_config(PERSISTENT=True), {"M": 512, "N": 1024, "K": 1000}, 132).launches[0]
    assert a.compile_key() == b.compile_key() and a.grid != b.grid
    assert "K" in a.divisible_by_16 and "K" not in c.divisible_by_16 and a.compile_key() != c.compile_key()
    # Launches that do not apply the epilogue share a binary across the ungated epilogues.
    shape = {"M": 64, "N": 256, "K": 4096}
    silu, gelu = (MatmulFamily(e).plan(matmul_config(SPLIT_K=2), shape, 132).launches for e in ("silu", "gelu"))
    assert silu[0].compile_key() == gelu[0].compile_key() and silu[1].compile_key() != gelu[1].compile_key()


def test_decode_workspaces() -> None:
    family = DecodeAttentionFamily()
    shape = {"B": 4, "H": 32, "KV": 8, "D": 128, "L": 1024}
    split = {**defaults(family.space), "NUM_SPLITS": 8, "BLOCK_N": 64}
    plan = family.plan(split, shape, 132)
    assert names(plan) == ["decode_split", "decode_reduce"]
    assert plan.workspace_bytes == 4 * 32 * 8 * (128 + 2) * 4
    assert plan.launches[0].grid == 4 * 8 * 8 and plan.launches[1].grid == 4 * 32
    one = family.plan({**split, "NUM_SPLITS": 1}, shape, 132)
    assert names(one) == ["decode_split"] and one.workspace_bytes == 0
    materialize = {**defaults(family.space), "VARIANT": "materialize", "BLOCK_N": 64}
    sizes = [family.plan(materialize, {**shape, "L": L}, 132).workspace_bytes for L in (512, 1024, 2048)]
    assert sizes == [4 * 4 * 32 * L for L in (512, 1024, 2048)]  # linear in L
    assert names(family.plan(materialize, shape, 132)) == ["decode_scores", "decode_softmax_pv"]
    assert dict(plan.launches[0].constexprs)["BLOCK_H"] == 16  # a group of 4 padded to 16 rows


def test_rmsnorm_plans() -> None:
    family, shape = RmsNormFamily(), {"M": 8, "N": 4096}
    fused = family.plan({"FUSE_RESIDUAL": True, "BLOCK_N": 4096, "num_warps": 8}, shape, 132)
    separate = family.plan({"FUSE_RESIDUAL": False, "BLOCK_N": 1024, "num_warps": 8}, shape, 132)
    assert names(fused) == ["rmsnorm"] and names(separate) == ["add", "rmsnorm"]
    assert fused.workspace_bytes == separate.workspace_bytes == 0
    # h is read back once more: M·N elements.
    assert sum(l.dram_bytes for l in separate.launches) == fused.launches[0].dram_bytes + 2 * 8 * 4096
    assert dict(fused.launches[0].constexprs)["ONE_PASS"] is True
    assert dict(separate.launches[1].constexprs)["ONE_PASS"] is False


@pytest.mark.parametrize("family, config, shape, reason", [
    (MatmulFamily(), {"FUSE_EPILOGUE": False}, {"M": 8, "N": 8, "K": 8}, "needs an epilogue"),
    (MatmulFamily("silu"), {"SPLIT_K": 4, "BLOCK_K": 64}, {"M": 8, "N": 8, "K": 192}, "a K slice would be empty"),
    (MatmulFamily(), {}, {"M": 0, "N": 8, "K": 8}, "M must be a positive integer"),
    (MatmulFamily(), {}, {"M": 8, "N": 8}, "no K"),
    (MatmulFamily(), {"BLOCK_M": 48}, {"M": 8, "N": 8, "K": 8}, "BLOCK_M=48 is not in the space"),
    (MatmulFamily(), {}, {"M": 65536, "N": 65536, "K": 8}, "64-bit indexing"),
    (DecodeAttentionFamily(), {}, {"B": 1, "H": 6, "KV": 4, "D": 64, "L": 8}, "H % KV"),
    (DecodeAttentionFamily(), {}, {"B": 1, "H": 4, "KV": 4, "D": 96, "L": 8}, "power of two"),
    (DecodeAttentionFamily(), {"VARIANT": "materialize", "NUM_SPLITS": 2},
     {"B": 1, "H": 4, "KV": 4, "D": 64, "L": 512}, "no splits"),
    (RmsNormFamily(residual=False), {"FUSE_RESIDUAL": False}, {"M": 1, "N": 8}, "needs a residual"),
])
def test_illegal_says_why(family, config, shape, reason) -> None:
    assert reason in family.illegal({**defaults(family.space), **config}, shape)


def test_a_short_context_runs_fewer_splits() -> None:
    # 16 splits of a 129-token context in 64-token tiles: 3 tiles, so 2 splits run (a power of two).
    family = DecodeAttentionFamily()
    shape = {"B": 2, "H": 8, "KV": 2, "D": 64, "L": 129}
    plan = family.plan({**defaults(family.space), "NUM_SPLITS": 16, "BLOCK_N": 64}, shape, 132)
    assert dict(plan.launches[0].constexprs)["NUM_SPLITS"] == 2
    assert plan.workspace_bytes == 4 * 2 * 8 * 2 * (64 + 2)


@pytest.mark.parametrize("family, config, shape", [
    (MatmulFamily(), {"BLOCK_K": 128}, {"M": 1, "N": 1, "K": 1}),  # K < BLOCK_K: masked
    (MatmulFamily("silu"), {"SPLIT_K": 4, "BLOCK_K": 64}, {"M": 8, "N": 8, "K": 193}),  # four tiles, the last partial
    (DecodeAttentionFamily(), {"NUM_SPLITS": 4, "BLOCK_N": 64}, {"B": 1, "H": 4, "KV": 4, "D": 64, "L": 193}),
    (DecodeAttentionFamily(), {"NUM_SPLITS": 16, "BLOCK_N": 64}, {"B": 1, "H": 4, "KV": 4, "D": 64, "L": 1}),
    (RmsNormFamily(), {"BLOCK_N": 256}, {"M": 1, "N": 5000}),  # rows longer than a block loop
])
def test_awkward_shapes_are_legal(family, config, shape) -> None:
    assert family.illegal({**defaults(family.space), **config}, shape) is None


@pytest.mark.parametrize("family", [MatmulFamily("gated_silu"), MatmulFamily("bias"), DecodeAttentionFamily(),
                                    RmsNormFamily(), RmsNormFamily(residual=False)], ids=repr)
def test_every_legal_plan_names_each_argument_once(family) -> None:
    shapes = {
        "matmul": [{"M": 1, "N": 4096, "K": 4096}, {"M": 300, "N": 1000, "K": 200}],
        "decode_attention": [{"B": 16, "H": 32, "KV": 8, "D": 128, "L": 1000}],
        "rmsnorm": [{"M": 7, "N": 3000}],
    }[family.name]
    configs = list(all_configs(family.space))
    if len(configs) > 400:
        configs = random.Random(0).sample(configs, 400)
    planned = 0
    for shape in shapes:
        for config in configs:
            if family.illegal(config, shape) is not None:
                continue
            plan = family.plan(config, shape, 132)
            planned += 1
            assert plan.launches and plan.workspace_bytes >= 0
            for launch in plan.launches:
                assert [n for n, _ in launch.signature] == launch.fn.arg_names
                assert {n for n, t in launch.signature if t == "constexpr"} == {n for n, _ in launch.constexprs}
                assert launch.grid >= 1 and launch.flops > 0 and launch.dram_bytes > 0
                assert launch.persistent == (launch is plan.launches[0] and bool(config.get("PERSISTENT")))
    assert planned > 0


def test_registry_and_public_api() -> None:
    assert set(family_names()) == {"matmul", "decode_attention", "rmsnorm", "comm", "fused_moe"}
    assert family_spec("rmsnorm").kernel_class() is RmsNormFamily
    assert get_family("matmul", epilogue="gated_silu").epilogue == "gated_silu"
    assert set(kernels.__all__) == {
        "Buffer", "Step", "allocate", "make_launch", "run_steps", "KernelError", "KernelFamily", "KernelLaunch",
        "LaunchPlan", "all_configs", "ast_source", "get_family",
    }
    with pytest.raises(KernelError, match="unknown kernel family 'conv'"):
        get_family("conv")
    with pytest.raises(KernelError, match="epilogue must be one of"):
        get_family("matmul", epilogue="relu")
    with pytest.raises(KernelError, match="does not take options"):
        get_family("rmsnorm", epilogue="silu")
    with pytest.raises(KernelError, match="dtype must be bf16 or fp16"):
        MatmulFamily(dtype="fp8")


if __name__ == "__main__":
    mode, family_name = sys.argv[1], sys.argv[2]
    print(json.dumps({"numerics": _numerics, "compile": _compile}[mode](family_name)))
