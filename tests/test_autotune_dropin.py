"""``tuner.runtime.autotune`` as a drop-in for ``triton.autotune`` (issue 26, items 2-3).

The Triton parts run in one child process under ``TRITON_INTERPRET=1`` (it must be set
before Triton is first imported, and ``@triton.jit`` reads its kernels' source, so the
child is a file): Triton's tutorial matmul kernel (``python/tutorials/03-matrix-
multiplication.py``, with its own parameter names) served from a table for two buckets,
the same with a missing table, stacked under and over ``@triton.heuristics``, a split-K
kernel whose ``Config(pre_hook=...)`` zeroes the output its atomics add into, and each of
``triton.autotune``'s documented arguments. The name checks run here, on stand-ins.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tuner.runtime as rt
from tests.test_runtime import TILES, row
from tuner.store.export import export_json

ROOT = Path(__file__).resolve().parents[1]
LOGGER = "tuner.runtime"

#: Per bucket of M (<= 64, above), in the table's names; planning parameters ride along.
BUCKETS = [
    {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3,
     "SPLIT_K": 1, "PERSISTENT": False, "FUSE_EPILOGUE": True},
    {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "num_warps": 8, "num_stages": 2,
     "SPLIT_K": 1, "PERSISTENT": False, "FUSE_EPILOGUE": True},
]
SPLIT = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 4, "num_warps": 4, "num_stages": 2}


def matmul_table(path: Path) -> Path:
    rows = [row(r, "qkv", bucket=i, bucket_bounds={"M": [None if i == 0 else 64, 64 if i == 0 else 8192]},
                config=f"qkv-{r}-{i}", params=dict(BUCKETS[i])) for r in TILES for i in (0, 1)]
    return export_json("toy", rows, path)


def split_table(path: Path) -> Path:
    return export_json("toy", [row(r, "o", params=dict(SPLIT)) for r in TILES], path)


CHILD = r'''
import json, logging, sys, warnings
import torch
import triton
import triton.language as tl
import tuner.runtime as rt

MM, SPLIT, MISSING = sys.argv[1:4]
records = []


class Catch(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())


logging.getLogger("tuner.runtime").addHandler(Catch())
out = {}


def warnings_since(n):
    return records[n:]


# Triton's tutorial kernel (03-matrix-multiplication.py), its own names.
from tests.user_kernels.tutorial_matmul import matmul_kernel as jitted
KEY = ["M", "N", "K"]
CONFIGS = [triton.Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                         num_warps=4, num_stages=3),
           triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 1},
                         num_warps=8, num_stages=2),
           triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8},
                         num_warps=4, num_stages=4)]


def matmul(kernel, a, b, dtype=torch.float16, **kwargs):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 **kwargs)
    return (c.float() - a.float() @ b.float()).abs().max().item()


def inputs(M, N=48, K=64, dtype=torch.float16):
    torch.manual_seed(M)
    return torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)


def best(kernel):
    cfg = kernel.best_config
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


# 1. served from the table, two buckets; with and without configs=
n = len(records)
served = rt.autotune(key=KEY, op="qkv", table=MM, names="matmul")(jitted)
chosen = rt.autotune(configs=CONFIGS, key=KEY, op="qkv", table=MM, names="matmul")(jitted)
out["served"] = []
for M in (40, 80):
    a, b = inputs(M)
    err = matmul(served, a, b, ACTIVATION="")
    err2 = matmul(chosen, a, b, ACTIVATION="")
    out["served"].append({"M": M, "err": max(err, err2), "best": best(served),
                          "config": CONFIGS.index(chosen.best_config)})
out["served_warnings"] = warnings_since(n)

# 2. a missing table: falls back to the configs (the first, under the interpreter), one warning
n = len(records)
fallback = rt.autotune(configs=CONFIGS, key=KEY, op="qkv", table=MISSING, names="matmul")(jitted)
errs = [matmul(fallback, *inputs(M), ACTIVATION="") for M in (40, 80, 40)]
out["missing"] = {"err": max(errs), "config": CONFIGS.index(fallback.best_config),
                  "warnings": warnings_since(n),
                  "configs": fallback.configs is not CONFIGS and fallback.configs == CONFIGS}
n = len(records)
try:
    bare = rt.autotune(key=KEY, op="qkv", table=MISSING)(jitted)
    matmul(bare, *inputs(40), ACTIVATION="")
    out["bare"] = "launched"
except Exception as exc:
    out["bare"] = f"{type(exc).__name__}: {exc}"
out["bare_warnings"] = warnings_since(n)

# 3. stacked with triton.heuristics, both orders
act = {"ACTIVATION": lambda args: ""}
under = rt.autotune(key=KEY, op="qkv", table=MM, names="matmul")(triton.heuristics(act)(jitted))
over = triton.heuristics(act)(rt.autotune(configs=CONFIGS, key=KEY, op="qkv", table=MM, names="matmul")(jitted))
over_fallback = triton.heuristics(act)(rt.autotune(configs=CONFIGS, key=KEY, op="qkv", table=MISSING)(jitted))
# (Triton's own stack, with one config: with several it benchmarks, which needs a GPU driver)
triton_stack = triton.heuristics(act)(triton.autotune(configs=CONFIGS[1:2], key=KEY)(jitted))
out["stacked"] = {}
for name, kernel in (("under", under), ("over", over), ("over_fallback", over_fallback), ("triton", triton_stack)):
    try:
        out["stacked"][name] = max(matmul(kernel, *inputs(M)) for M in (40, 80))
    except Exception as exc:
        out["stacked"][name] = f"{type(exc).__name__}: {exc}"
out["stacked_best"] = best(under)


# 4. split-K: atomics add into C, a Config(pre_hook=...) zeroes it
@triton.jit
def splitk_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    grid_n = tl.cdiv(N, BLOCK_N)
    offs_m = (pid // grid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % grid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K * SPLIT_K)):
        kk = (k * SPLIT_K + pid_k) * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + offs_m[:, None] * K + kk[None, :], mask=(offs_m[:, None] < M) & (kk[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + offs_n[None, :], mask=(kk[:, None] < K) & (offs_n[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    tl.atomic_add(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
                  mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


zeroed = []


def zero(nargs):
    zeroed.append(1)
    nargs["c_ptr"].zero_()


SPLIT_CONFIGS = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 4}, num_warps=4,
                               num_stages=2, pre_hook=zero),
                 triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 2}, num_warps=4,
                               num_stages=2, pre_hook=zero)]


def split_matmul(kernel, a, b, c, **kwargs):
    M, K = a.shape
    N = b.shape[1]
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]), META["SPLIT_K"])
    kernel[grid](a, b, c, M, N, K, **kwargs)
    return (c - a @ b).abs().max().item()


out["splitk"] = {}
for name, table in (("table", SPLIT), ("fallback", MISSING)):
    kernel = rt.autotune(configs=SPLIT_CONFIGS, key=["M", "N", "K"], op="o", table=table)(splitk_kernel)
    a, b = torch.randn(24, 80), torch.randn(80, 40)
    c = torch.full((24, 40), 7.0)
    del zeroed[:]
    errs = [split_matmul(kernel, a, b, c), split_matmul(kernel, a, b, c)]
    out["splitk"][name] = {"errs": errs, "zeroed": len(zeroed), "config": SPLIT_CONFIGS.index(kernel.best_config)}

# 5. each documented argument of triton.autotune, with Triton's meaning
args = {}


def check(name, fn):
    try:
        args[name] = fn()
    except Exception as exc:
        args[name] = f"{type(exc).__name__}: {exc}"


def fallback_kernel(kernel_fn=splitk_kernel, **kwargs):
    return rt.autotune(key=["M", "N", "K"], op="o", table=MISSING, **kwargs)(kernel_fn)


PLAIN = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": 1}),
         triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": 2})]


def run_split(kernel, c=None, dtype=torch.float32):
    a, b = torch.randn(24, 80, dtype=dtype), torch.randn(80, 40, dtype=dtype)
    c = torch.zeros(24, 40, dtype=torch.float32) if c is None else c
    c0 = c.clone()
    split_matmul(kernel, a, b, c)
    return ((c - c0) - a.float() @ b.float()).abs().max().item()


def configs_arg():
    k = fallback_kernel(configs=PLAIN)
    return {"configs": [PLAIN.index(x) for x in k.configs], "err": run_split(k), "best": PLAIN.index(k.best_config)}


def key_arg():  # the key holds the key arguments' values and the dtypes, as Triton's
    k = fallback_kernel(configs=PLAIN)
    run_split(k), run_split(k), run_split(k, dtype=torch.float16)
    return sorted(map(list, k.cache))


def prune_arg():
    seen = []

    def early(configs, named_args, **kwargs):
        seen.append(sorted(named_args))
        return configs[1:]

    k = fallback_kernel(configs=PLAIN, prune_configs_by={"early_config_prune": early})
    err = run_split(k)
    k2 = fallback_kernel(configs=PLAIN, prune_configs_by={"perf_model": lambda **kw: 1.0 / kw["BLOCK_M"], "top_k": 1})
    err2 = run_split(k2)
    return {"called": bool(seen), "best": PLAIN.index(k.best_config), "perf_best": PLAIN.index(k2.best_config),
            "err": max(err, err2)}


def timed():  # a caller's do_bench: the second config is the faster
    calls = []

    def do_bench(kernel_call, quantiles):
        kernel_call()
        calls.append(1)
        t = 2.0 if len(calls) % 2 else 1.0
        return [t, t, t]

    return do_bench, calls


def do_bench_arg():
    do_bench, calls = timed()
    k = fallback_kernel(configs=PLAIN, do_bench=do_bench, reset_to_zero=["c_ptr"])
    err = run_split(k)  # benchmarked twice into c: reset_to_zero keeps the final result right
    return {"benchmarked": len(calls), "best": PLAIN.index(k.best_config), "err": err}


def restore_arg():
    do_bench, calls = timed()
    k = fallback_kernel(configs=PLAIN, do_bench=do_bench, restore_value=["c_ptr"])
    err = run_split(k, c=torch.full((24, 40), 3.0))  # benchmarked twice into c, restored each time
    return {"benchmarked": len(calls), "err": err}


def hooks_arg():
    do_bench, calls = timed()
    log = []
    k = fallback_kernel(configs=PLAIN, do_bench=do_bench, reset_to_zero=["c_ptr"],
                        pre_hook=lambda kwargs, reset_only=False: (log.append(("pre", reset_only)),
                                                                   kwargs["c_ptr"].zero_()),
                        post_hook=lambda kwargs, exception: log.append(("post", exception is None)))
    err = run_split(k)
    return {"log": log, "err": err}


def warmup_rep_arg():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        k = fallback_kernel(configs=PLAIN, warmup=5, rep=20)
    return {"deprecated": any(issubclass(w.category, DeprecationWarning) for w in caught), "err": run_split(k),
            "num_warmups": k.num_warmups, "num_reps": k.num_reps}


def cache_results_arg():
    k = fallback_kernel(configs=PLAIN, cache_results=True)
    return {"err": run_split(k)}


for name, fn in (("configs", configs_arg), ("key", key_arg), ("prune_configs_by", prune_arg),
                 ("do_bench", do_bench_arg), ("restore_value", restore_arg), ("hooks", hooks_arg),
                 ("warmup_rep", warmup_rep_arg), ("cache_results", cache_results_arg)):
    check(name, fn)
check("bad_reset_to_zero", lambda: fallback_kernel(configs=PLAIN, reset_to_zero=["nope"]) and "accepted")
out["args"] = args
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def child(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("dropin")
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, str(script), str(matmul_table(tmp / "mm.json")),
                           str(split_table(tmp / "split.json")), str(tmp / "missing.json")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def tutorial_names(params: dict) -> dict:
    names = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K", "GROUP_M": "GROUP_SIZE_M"}
    return {names.get(k, k): v for k, v in params.items() if k not in ("SPLIT_K", "PERSISTENT", "FUSE_EPILOGUE")}


def test_the_tutorial_kernel_is_served_the_tables_config_per_bucket_under_its_own_names(child):
    for result, params, config in zip(child["served"], BUCKETS, (0, 1)):
        assert result["err"] < 0.05, result
        assert result["best"] == tutorial_names(params), result
        assert result["config"] == config  # with configs=: the table's choice is that triton.Config
    assert child["served_warnings"] == []


def test_a_missing_table_falls_back_to_the_configs_with_one_warning(child):
    missing = child["missing"]
    assert missing["err"] < 0.05 and missing["config"] == 0 and missing["configs"]
    [warning] = missing["warnings"]
    assert "missing.json" in warning and "3 configs as triton.autotune does" in warning
    assert child["bare"].startswith("RuntimeError") and "no configs=" in child["bare"], child["bare"]
    assert len(child["bare_warnings"]) == 1


def test_it_stacks_under_and_over_triton_heuristics(child):
    for name, err in child["stacked"].items():
        assert isinstance(err, float) and err < 0.05, (name, err)
    assert child["stacked_best"] == tutorial_names(BUCKETS[1])


def test_a_split_k_config_pre_hook_zeroes_the_output_before_every_launch(child):
    for name, result in child["splitk"].items():
        assert max(result["errs"]) < 1e-3, (name, result)
        assert result["zeroed"] == 2 and result["config"] == 0, (name, result)


ARGUMENTS = {
    # argument: what Triton's meaning gives under the interpreter
    "configs": lambda r: r["configs"] == [0, 1] and r["best"] == 0 and r["err"] < 1e-3,
    "key": lambda r: sorted(r) == [[24, 40, 80, "torch.float16", "torch.float16", "torch.float32"],
                                   [24, 40, 80, "torch.float32", "torch.float32", "torch.float32"]],
    "prune_configs_by": lambda r: r["called"] and r["best"] == 1 and r["perf_best"] == 1 and r["err"] < 1e-3,
    "do_bench": lambda r: r["benchmarked"] == 2 and r["best"] == 1 and r["err"] < 1e-3,
    "reset_to_zero": lambda r: r["err"] < 1e-3,  # checked in do_bench's run: benchmarked into the same output
    "restore_value": lambda r: r["benchmarked"] == 2 and r["err"] < 1e-3,
    "pre_hook": lambda r: ("pre", False) in r["log"] and ("pre", True) in r["log"] and r["err"] < 1e-3,
    "post_hook": lambda r: r["log"].count(("post", True)) == 2,
    "warmup": lambda r: r["deprecated"] and r["num_warmups"] == 5 and r["err"] < 1e-3,
    "rep": lambda r: r["num_reps"] == 20,
    "cache_results": lambda r: r["err"] < 1e-3,
}
SOURCE = {"reset_to_zero": "do_bench", "pre_hook": "hooks", "post_hook": "hooks", "warmup": "warmup_rep",
          "rep": "warmup_rep"}


@pytest.mark.parametrize("argument", sorted(ARGUMENTS))
def test_each_documented_argument_of_triton_autotune_has_its_meaning(child, argument):
    result = child["args"][SOURCE.get(argument, argument)]
    if isinstance(result, dict) and "log" in result:
        result = {**result, "log": [tuple(x) for x in result["log"]]}
    assert not isinstance(result, str), result
    assert ARGUMENTS[argument](result), result


def test_argument_names_are_checked_as_triton_checks_them(child):
    assert child["args"]["bad_reset_to_zero"].startswith("ValueError") and "nope" in child["args"]["bad_reset_to_zero"]


def test_the_signature_is_triton_autotunes_plus_op_table_names():
    import inspect

    params = inspect.signature(rt.autotune).parameters
    triton_args = ["configs", "key", "prune_configs_by", "reset_to_zero", "restore_value", "pre_hook", "post_hook",
                   "warmup", "rep", "use_cuda_graph", "do_bench", "cache_results"]
    assert list(params)[:len(triton_args)] == triton_args  # positionally too
    assert {"op", "table", "names"} <= set(params)
    with pytest.raises(TypeError, match="prune_configs_by"):
        rt.autotune(configs=[], key=[], prune_configs_by={"topk": 1})
    with pytest.raises(ValueError, match="registered family"):
        rt.autotune(key=[], names="gemm")
    with pytest.raises(TypeError, match="table must be"):
        rt.autotune(key=[], op="qkv", table=3)


# --- names, on stand-ins --------------------------------------------------------------

class Kernel:
    """A JITFunction's interface over a Python function: ``arg_names``, ``fn``, ``run``."""

    def __init__(self, fn) -> None:
        import inspect

        self.fn = fn
        self.arg_names = list(inspect.signature(fn).parameters)
        self.calls: list[dict] = []

    def run(self, *args, grid, warmup, **kwargs):
        self.calls.append(kwargs)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


def tutorial_like(a, M, BLOCK_SIZE_M: "tl.constexpr", BLOCK_SIZE_N: "tl.constexpr", BLOCK_SIZE_K: "tl.constexpr",
                  GROUP_SIZE_M: "tl.constexpr"):
    pass


def with_split(a, M, BLOCK_M: "tl.constexpr", BLOCK_N: "tl.constexpr", BLOCK_K: "tl.constexpr",
               GROUP_M: "tl.constexpr", SPLIT_K: "tl.constexpr"):
    pass


def table_of(tmp_path: Path, params: dict) -> rt.Dispatcher:
    return rt.load_table(export_json("toy", [row(r, "qkv", params=dict(params)) for r in TILES], tmp_path / "t.json"))


def test_names_map_table_parameters_onto_the_kernels(tmp_path, caplog):
    d = table_of(tmp_path, BUCKETS[0])
    fn = Kernel(tutorial_like)
    with caplog.at_level(logging.WARNING, LOGGER):
        kernel = rt.autotune(key=["M"], op="qkv", table=d, names="matmul")(fn)
        kernel[(1,)]("a", 8)
    assert caplog.records == []
    assert fn.calls[-1] == {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
                            "num_warps": 4, "num_stages": 3}
    assert rt.autotune(key=["M"], op="qkv", table=d, names={"BLOCK_M": "BLOCK_SIZE_M"})  # a mapping too


def test_a_parameter_the_kernel_lacks_warns_once_at_decoration_naming_it(tmp_path, caplog):
    d = table_of(tmp_path, {**BUCKETS[0], "SWIZZLE": 2})
    fn = Kernel(tutorial_like)
    with caplog.at_level(logging.WARNING, LOGGER):
        kernel = rt.autotune(key=["M"], op="qkv", table=d, names="matmul")(fn)
        kernel[(1,)]("a", 8)
        kernel[(1,)]("a", 80)
    [warning] = caplog.records
    assert "'SWIZZLE'" in warning.getMessage() and "tutorial_like" in warning.getMessage()
    assert "SWIZZLE" not in fn.calls[-1]


def test_a_split_k_the_kernel_cannot_take_is_an_error_at_decoration(tmp_path):
    d = table_of(tmp_path, {**BUCKETS[0], "SPLIT_K": 4})
    with pytest.raises(ValueError, match="SPLIT_K=4") as raised:
        rt.autotune(key=["M"], op="qkv", table=d, names="matmul")(Kernel(tutorial_like))
    assert "\n" not in str(raised.value)
    fn = Kernel(with_split)  # a kernel that declares it takes it
    rt.autotune(key=["M"], op="qkv", table=d)(fn)[(1,)]("a", 8)
    assert fn.calls[-1]["SPLIT_K"] == 4


def test_a_table_config_lacking_a_constexpr_falls_back_and_never_launches_without_it(tmp_path, caplog):
    d = table_of(tmp_path, BUCKETS[0])  # table names, no names= map: the kernel's are all missing
    fn = Kernel(tutorial_like)
    with caplog.at_level(logging.WARNING, LOGGER):
        kernel = rt.autotune(key=["M"], op="qkv", table=d)(fn)
        with pytest.raises(RuntimeError, match="BLOCK_SIZE_M"):
            kernel[(1,)]("a", 8)
    assert fn.calls == []
    assert any("lacks BLOCK_SIZE_M" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("case", ["unknown op", "not among configs"])
def test_an_unusable_table_is_one_warning_naming_the_cause(tmp_path, caplog, case):
    d = table_of(tmp_path, BUCKETS[0])

    class Config:  # triton.Config's shape, without importing Triton here
        def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None):
            self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
            self.num_ctas, self.maxnreg, self.pre_hook = num_ctas, maxnreg, pre_hook

    configs = [Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8})]
    op = "gemm" if case == "unknown op" else "qkv"
    fn = Kernel(tutorial_like)
    fn.fn = None  # a stand-in: Triton's autotuner is not built at decoration
    with caplog.at_level(logging.WARNING, LOGGER):
        rt.autotune(configs=configs, key=["M"], op=op, table=d, names="matmul")(fn)
    [warning] = caplog.records
    assert ("'gemm' is not in the table" if case == "unknown op" else "is not among configs=") in warning.getMessage()


def with_runtime_k(a, M, N, K, BLOCK_M: "tl.constexpr", BLOCK_N: "tl.constexpr"):
    pass


def test_a_table_parameter_naming_a_runtime_argument_is_refused_and_the_fallback_serves(tmp_path, caplog):
    """A table whose config carries ``K`` (a runtime argument the caller passes) made every
    launch raise "got multiple values for argument 'K'": now it is refused with one
    warning naming it, and ``fallback=`` launches."""
    path = export_json("toy", [row(r, "qkv", params={"BLOCK_M": 16, "BLOCK_N": 32, "K": 64, "num_warps": 4})
                               for r in TILES], tmp_path / "t.json")
    d = rt.load_table(path, fallback={"BLOCK_M": 64, "BLOCK_N": 64})
    fn = Kernel(with_runtime_k)
    with caplog.at_level(logging.WARNING, LOGGER):
        kernel = rt.autotune(key=["M"], op="qkv", table=d)(fn)
        for m in (8, 80, 800):
            kernel[(1,)]("a", m, 8, 8)
    assert fn.calls == [{"BLOCK_M": 64, "BLOCK_N": 64}] * 3
    [warning] = caplog.records
    assert "K=64" in warning.getMessage() and "runtime argument of 'with_runtime_k'" in warning.getMessage()


def test_configs_given_as_a_generator_are_read_once_and_kept(tmp_path):
    """A generator was spent by the argument checks, leaving no configs, so a table config
    outside the list was launched; now the list is kept and such a config is refused."""

    class Config:  # triton.Config's interface, as the checks and the matching read it
        def __init__(self, kwargs, num_warps=4):
            self.kwargs, self.num_warps, self.num_stages, self.pre_hook = kwargs, num_warps, 3, None

        def all_kwargs(self):
            return {**self.kwargs, "num_warps": self.num_warps}

    d = table_of(tmp_path, {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4})
    kernel = rt.autotune(configs=(Config({"BLOCK_M": m, "BLOCK_N": 64}) for m in (16, 32)), key=["M"], op="qkv",
                         table=d)(Kernel(with_runtime_k))
    assert [c.kwargs["BLOCK_M"] for c in kernel.configs] == [16, 32]
    assert "is not among configs=" in kernel._served_for(d.config("qkv", {"M": 8})).reason


@pytest.mark.parametrize("target", [lambda a, M: None, 3, None], ids=["plain function", "number", "None"])
def test_what_is_no_kernel_is_refused_at_decoration(target):
    """Issue 39's fuzz round: decorating a plain function was accepted and failed at the
    first launch, inside Triton's autotuner ("key contains names that are not kernel
    arguments"); now it is one TypeError at decoration."""
    with pytest.raises(TypeError, match=r"autotune: decorates a @triton.jit kernel .*, not ") as raised:
        rt.autotune(configs=None, key=["M"], op="qkv")(target)
    assert "\n" not in str(raised.value)
