"""Triton's tutorial matmul kernel (``python/tutorials/03-matrix-multiplication.py``), with
its own parameter names, as a user's module: the kernel, its ``triton.Config`` list, and
the argument builder a problem file names (``tutorial_matmul:arguments``)."""

import torch
import triton
import triton.language as tl


@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


#: Small tiles, so the interpreter runs them on small shapes.
CONFIGS = [
    triton.Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}, num_warps=8, num_stages=3),
]


def arguments(shape, device):
    """The kernel's arguments for ``shape``: positional arguments, keyword arguments (the
    constexprs no config sets) and the grid, as the tutorial's ``matmul`` wrapper builds them."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    a = torch.randn((M, K), device=device, dtype=torch.float16)
    b = torch.randn((K, N), device=device, dtype=torch.float16)
    c = torch.empty((M, N), device=device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    return ((a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)),
            {"ACTIVATION": ""}, grid)


#: The same kernel as users often have it (issue 38, item 2): under ``@triton.autotune``
#: (its configs and key) and ``@triton.heuristics`` (``ACTIVATION`` computed from the
#: arguments, as Triton's own kernels compute ``EVEN_K``).
autotuned_kernel = triton.autotune(configs=CONFIGS, key=["M", "N", "K"])(
    triton.heuristics({"ACTIVATION": lambda args: ""})(matmul_kernel))


def arguments_without_activation(shape, device):
    """``arguments`` leaving ``ACTIVATION`` to the kernel's ``@triton.heuristics``."""
    args, _, grid = arguments(shape, device)
    return args, {}, grid


def broken(shape, device):
    """An argument builder that fails, as one that needs a GPU would on the meta device."""
    raise RuntimeError("no GPU buffers here")


def _with_grid(grid):
    """An argument builder like ``arguments`` whose grid is ``grid`` (the fuzz round's bad grids)."""
    def build(shape, device):
        args, kwargs, _ = arguments(shape, device)
        return args, kwargs, grid
    return build


four_dimensional = _with_grid((1, 1, 1, 1))
beyond_cuda = _with_grid((2**40,))
grid_raises = _with_grid(lambda META: (META["NO_SUCH_PARAMETER"],))

#: Configs the loader must refuse in one line (the second fuzz round: tracebacks later).
LIST_VALUE_CONFIGS = [triton.Config({"BLOCK_SIZE_M": [16, 32], "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32,
                                     "GROUP_SIZE_M": 8}, num_warps=4, num_stages=3)]
NO_WARPS_CONFIGS = [triton.Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                                  num_warps=None, num_stages=3)]
