"""A user's own Triton kernel tuned from a problem file and served under its own names
(issue 26, item 1).

Triton's tutorial matmul kernel (``tests/user_kernels/tutorial_matmul.py``, its own
parameter names ``BLOCK_SIZE_M``…) is named by a problem file as
``tutorial_matmul:matmul_kernel``, resolved from the file's directory. ``tuner tune``
compiles its configs for sm_90 and models them; the exported table is then served by
``tuner.runtime.autotune`` in a child process under ``TRITON_INTERPRET=1`` (it must be
set before Triton is imported), at two batch sizes in two buckets, against
``torch.matmul``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuner.errors import ProblemError
from tuner.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "tests" / "user_kernels" / "tutorial_matmul.py"

PROBLEM = {
    "name": "tutorial_gemm",
    "description": "Triton's tutorial matmul kernel as the projection of a small decoder.",
    "device": {"name": "h100"},
    "service": {
        "batching": "continuous", "max_batch": 64, "max_tokens": 512, "max_context": 4096,
        "memory": {"budget": "80 GiB", "fixed": "16 GiB", "per_request": "(prompt + output) * 128 KiB"},
        "operators": [{"name": "proj", "family": "tutorial", "shape": {"M": "tokens", "N": 4096, "K": 4096},
                       "repeat": 32}],
        "slo": {"ttft": "1 s", "tpot": "100 ms"},
    },
    "families": {"tutorial": {
        "kernel": "tutorial_matmul:matmul_kernel",
        "user": {
            "configs": "tutorial_matmul:CONFIGS", "key": ["M", "N", "K"],
            "arguments": "tutorial_matmul:arguments", "output": "c_ptr",
            "cost": {"gemm": {"M": "M", "N": "N", "K": "K", "tile": {
                "BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K",
                "GROUP_M": "GROUP_SIZE_M"}}},
        },
    }},
    "regimes": {"light": {"arrivals": {"process": "poisson", "rate": 5},
                          "sizes": {"prompt": 512, "output": 64}, "horizon": "10 s"}},
}

#: The batch sizes served: one decode-sized, one larger; they fall in different buckets.
SERVED_M = (8, 100)

CHILD = r'''
import json, logging, sys
import torch
sys.path.insert(0, sys.argv[2])
import tutorial_matmul as t
import tuner.runtime as rt

warned = []
logging.getLogger("tuner.runtime").addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: warned.append(r.getMessage())})())
kernel = rt.autotune(configs=t.CONFIGS, key=["M", "N", "K"], op="proj", table=sys.argv[1])(t.matmul_kernel)
out = []
for M in map(int, sys.argv[3:]):
    args, kwargs, grid = t.arguments({"M": M, "N": 48, "K": 64}, "cpu")
    kernel[grid](*args, **kwargs)
    a, b, c = args[:3]
    cfg = kernel.best_config
    out.append({"M": M, "err": (c.float() - a.float() @ b.float()).abs().max().item(),
                "served": {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}})
print(json.dumps({"calls": out, "warnings": warned}))
'''


@pytest.fixture(scope="module")
def resources(tmp_path_factory):
    """One compile cache for the module's in-process loads (each config compiles once)."""
    from tuner.profile.cache import CompileCache

    return CompileCache(f"sqlite:///{tmp_path_factory.mktemp('compiled') / 'c.db'}")


def write(directory: Path, document: dict) -> Path:
    shutil.copy(KERNEL, directory / "tutorial_matmul.py")
    path = directory / "problem.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[Path, dict]:
    """The tutorial problem tuned (a short run: the point is the path, not the search)
    and its table exported as JSON."""
    tmp = tmp_path_factory.mktemp("user_kernel")
    problem = write(tmp, PROBLEM)
    storage = f"sqlite:///{tmp / 'r.db'}"
    done = cli("tune", str(problem), "--trials", "2", "--seeds", "1", "--horizon", "3", "-q",
               "--storage", storage, cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    table = tmp / "table.json"
    done = cli("table", "export", str(table), "--format", "json", "--storage", storage, cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp, json.loads(table.read_text())


def bucket_row(table: dict, m: int) -> dict:
    """The table's row for ``proj`` at M = ``m`` (its bucket's bounds, inclusive above)."""
    rows = [r for r in table["rows"] if r["op"] == "proj"]
    for r in rows:
        low, high = r["bucket_bounds"]["M"]
        if (low is None or m > low) and (high is None or m <= high):
            return r
    raise AssertionError(f"no bucket holds M={m}: {[r['bucket_bounds'] for r in rows]}")


def bucket_params(table: dict, m: int) -> dict:
    return bucket_row(table, m)["params"]


def test_the_table_keeps_the_users_own_parameter_names(tuned):
    _, table = tuned
    params = bucket_params(table, 8)
    assert set(params) == {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"}
    import importlib.util

    spec = importlib.util.spec_from_file_location("tutorial_configs", KERNEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    listed = [{**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages} for c in module.CONFIGS]
    for m in SERVED_M:
        assert bucket_params(table, m) in listed


def test_the_tuned_tutorial_kernel_is_served_per_bucket_and_matches_torch(tuned):
    tmp, table = tuned
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(script), str(tmp / "table.json"), str(tmp), *map(str, SERVED_M)],
                          capture_output=True, text=True, env=env, cwd=tmp, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["warnings"] == []  # served from the table, no fallback
    for call in result["calls"]:
        assert call["err"] < 0.1, call  # fp16 output of a K=64 dot product
        assert call["served"] == bucket_params(table, call["M"])
    assert len({bucket_row(table, m)["bucket"] for m in SERVED_M}) == len(SERVED_M)


def test_configs_compile_for_the_target_and_time_by_the_gemm_model(tmp_path, resources):
    """Each config is compiled for sm_90 (its own occupancy) and timed as a GEMM: the
    model's launch reads the user's tile through the mapping, so a 128×128 tile makes
    32×32 = 1024 CTAs at M = N = 4096 while 16×32 makes 256×128 = 32768."""
    problem = load_problem(write(tmp_path, PROBLEM), resources=resources)
    configs = problem.families["tutorial"].configs
    assert len(configs) == 3
    grids = {}
    for config in configs:
        timing = config.profile.at({"M": 4096, "N": 4096, "K": 4096})
        launch = timing.plan.launches[0]
        assert launch.modeled_constexprs["BLOCK_M"] == config.profile.config["BLOCK_SIZE_M"]
        assert timing.latency_s > 2 * 4096**3 / 989e12  # not faster than the H100's dense bf16 peak
        grids[config.profile.config["BLOCK_SIZE_M"]] = launch.grid
    assert grids == {16: 256 * 128, 64: 64 * 64, 128: 32 * 32}
    assert configs[0].profile.source == "modeled"


def _autotuned(**user) -> dict:
    """PROBLEM naming the kernel under @triton.autotune and @triton.heuristics, its
    ``user`` block without configs and key (the decorator's), with ``user`` changes."""
    document = json.loads(json.dumps(PROBLEM))
    family = document["families"]["tutorial"]
    family["kernel"] = "tutorial_matmul:autotuned_kernel"
    del family["user"]["configs"], family["user"]["key"]
    family["user"]["arguments"] = "tutorial_matmul:arguments_without_activation"
    family["user"].update(user)
    return document


def test_a_kernel_under_triton_autotune_brings_its_configs_key_and_heuristics(tmp_path, resources):
    """The decorator's configs (as the tutorial's CONFIGS) and key serve where the file
    names none; the heuristic computes ACTIVATION, which the builder leaves out (without
    it the kernel would not compile: a constexpr without a value)."""
    sys.path.insert(0, str(KERNEL.parent))
    try:
        import tutorial_matmul as t
    finally:
        sys.path.remove(str(KERNEL.parent))
    problem = load_problem(write(tmp_path, _autotuned()), resources=resources)
    configs = problem.families["tutorial"].configs
    assert [c.profile.config for c in configs] == [
        {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages} for c in t.CONFIGS]
    assert problem.operator("proj").bucketing.key == ("M",)  # the decorator's M, N, K; N and K are fixed
    timing = configs[0].profile.at({"M": 64, "N": 4096, "K": 4096})
    assert timing.plan.launches[0].grid == 4 * 128  # BLOCK_SIZE 16 x 32: 4 x 128 tiles


def test_profile_lists_a_user_familys_configs_in_every_bucket(tmp_path):
    """Issue 38, item 2: `tuner profile --family my_splitk` said "unknown kernel family";
    with the problem file it lists, per bucket of every operator in the family, each
    config's modeled latency, workspace and legality, which the search keeps and which
    THE baseline picks (the fastest legal one)."""
    from click.testing import CliRunner

    from tuner.cli import main

    path = write(tmp_path, PROBLEM)
    done = CliRunner().invoke(main, ["profile", str(path), "--family", "tutorial", "--json"])
    assert done.exit_code == 0, done.output
    listed = json.loads(done.stdout)
    assert listed["family"] == "tutorial" and listed["cells"] and {c["op"] for c in listed["cells"]} == {"proj"}
    for cell in listed["cells"]:
        assert [c["config"] for c in cell["configs"]] == [c.name for c in load_problem(path).families["tutorial"].configs]
        legal = [c for c in cell["configs"] if c["legal"]]
        [picked] = [c for c in cell["configs"] if c["baseline"]]
        assert picked["latency_s"] == min(c["latency_s"] for c in legal) and picked["searched"]
    alone = CliRunner().invoke(main, ["profile", "--family", "tutorial"])
    assert alone.exit_code == 2 and "tuner profile PROBLEM --family NAME" in alone.stderr


def test_a_jit_kernel_needs_its_configs_and_key_in_the_file(tmp_path):
    document = json.loads(json.dumps(PROBLEM))
    del document["families"]["tutorial"]["user"]["configs"]
    with pytest.raises(ProblemError, match=r"families\.tutorial\.user\.configs: required"):
        load_problem(write(tmp_path, document))
    document = json.loads(json.dumps(PROBLEM))
    del document["families"]["tutorial"]["user"]["key"]
    with pytest.raises(ProblemError, match=r"families\.tutorial\.user\.key: required"):
        load_problem(write(tmp_path, document))


def test_tuner_autotune_over_triton_autotune_is_refused_at_decoration() -> None:
    """The reverse mistake used to pass decoration and fail at the first launch with
    Triton's "Conflicting meta-parameters"."""
    import tuner.runtime as rt

    sys.path.insert(0, str(KERNEL.parent))
    try:
        import tutorial_matmul as t
    finally:
        sys.path.remove(str(KERNEL.parent))
    with pytest.raises(TypeError, match="matmul_kernel is already wrapped by @triton.autotune.*remove "
                                        r"@triton.autotune and give its configs and key to tuner.runtime.autotune"):
        rt.autotune(configs=t.CONFIGS, key=["M", "N", "K"], op="proj")(t.autotuned_kernel)


def test_a_memory_bound_cost_prices_the_bytes_moved(tmp_path, resources):
    """``memory_bound`` times the kernel on the roofline of the bytes it moves: doubling
    them roughly doubles a large launch's time."""
    doc = json.loads(json.dumps(PROBLEM))
    doc["families"]["tutorial"]["user"]["cost"] = {"memory_bound": {"bytes": "2 * (M * K + K * N + M * N)"}}
    profile = load_problem(write(tmp_path, doc), resources=resources).families["tutorial"].configs[0].profile
    small, large = (profile.at({"M": m, "N": 4096, "K": 4096}).latency_s for m in (4096, 12288))
    bytes_small, bytes_large = (2 * (m * 4096 * 2 + 4096 * 4096) for m in (4096, 12288))
    assert large / small == pytest.approx(bytes_large / bytes_small, rel=0.25)


@pytest.mark.parametrize("change, key, reason", [
    ({"kernel": "no_such_module:matmul_kernel"}, "families.tutorial.kernel", "cannot import 'no_such_module'"),
    ({"kernel": "tutorial_matmul:no_kernel"}, "families.tutorial.kernel", "has no 'no_kernel'"),
    ({"kernel": "tutorial_matmul:arguments"}, "families.tutorial.kernel", "not a @triton.jit kernel"),
    ({"user.arguments": "tutorial_matmul:broken"}, "families.tutorial.user", "RuntimeError: no GPU buffers here"),
    ({"user.configs": [{"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
                        "BLOCK_Q": 2, "num_warps": 4, "num_stages": 3}]},
     "families.tutorial.user", "configs[0] sets BLOCK_Q, which tutorial_matmul:matmul_kernel does not take"),
    ({"user.configs": [{"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "num_warps": 4}],
      "user.cost": {"memory_bound": {"bytes": "M * N"}}},
     "families.tutorial.user", "constexpr GROUP_SIZE_M has no value"),
    ({"user.cost": {"gemm": {"M": "M", "N": "N", "K": "K", "tile": {"BLOCK_M": "BLOCK_SIZE_M"}}}},
     "families.tutorial.user.cost.gemm.tile", "BLOCK_N is missing"),
    ({"user.cost": {"memory_bound": {"bytes": "M * Q"}}},
     "families.tutorial.user.cost.memory_bound.bytes", "unknown variable 'Q'"),
    ({"user": None}, "families.tutorial", "module:function"),
    # the second fuzz round: a 4-dimensional grid and 2**40 CTAs were accepted, a grid
    # function raising KeyError was a traceback
    ({"user.arguments": "tutorial_matmul:four_dimensional"}, "families.tutorial", "one to three positive integers"),
    ({"user.arguments": "tutorial_matmul:beyond_cuda"}, "families.tutorial", "beyond CUDA's limits: x=1,099,511,627,776"),
    ({"user.arguments": "tutorial_matmul:grid_raises"}, "families.tutorial", "raised KeyError: 'NO_SUCH_PARAMETER'"),
    ({"user.cost": {"memory_bound": {"bytes": "0 - M * N"}}}, "families.tutorial", "must be a finite number >= 0"),
    ({"user.configs": [{"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
                        "num_warps": 4, "num_stages": 3}] * 2},
     "families.tutorial.user.configs", "configs 0 and 1 are the same config"),
    ({"user.configs": "tutorial_matmul:LIST_VALUE_CONFIGS"},
     "families.tutorial.user.configs", "configs 0 sets BLOCK_SIZE_M to [16, 32]"),
    ({"user.configs": "tutorial_matmul:NO_WARPS_CONFIGS"},
     "families.tutorial.user.configs", "configs 0 sets num_warps to None"),
    ({"user.workspace": "0 - M"}, "families.tutorial", "the workspace of tutorial_matmul:matmul_kernel at M="),
    # cost expressions that divide by zero or leave their domain were tracebacks
    ({"user.cost": {"memory_bound": {"bytes": "M / (N - N)"}}}, "families.tutorial",
     "cannot be evaluated: ZeroDivisionError"),
    ({"user.cost": {"memory_bound": {"bytes": "M * N", "flops": "sqrt(0 - M)"}}}, "families.tutorial",
     "the cost's flops of tutorial_matmul:matmul_kernel at M=1, N=4096, K=4096 cannot be evaluated: ValueError"),
    ({"user.cost": {"gemm": {"M": "M // (K - K)", "N": "N", "K": "K", "tile": {
        "BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K"}}}},
     "families.tutorial", "the gemm cost's M of tutorial_matmul:matmul_kernel at M="),
])
def test_user_code_that_cannot_work_is_one_line_naming_the_key(tmp_path, resources, change, key, reason):
    doc = json.loads(json.dumps(PROBLEM))
    family = doc["families"]["tutorial"]
    for path, value in change.items():
        *parents, last = path.split(".")
        target = family
        for p in parents:
            target = target[p]
        if value is None:
            del target[last]
        else:
            target[last] = value
    with pytest.raises(ProblemError) as info:
        load_problem(write(tmp_path, doc), resources=resources)
    message = str(info.value)
    assert "\n" not in message and key in message and reason in message, message


def test_validate_exits_2_with_one_line(tmp_path):
    doc = json.loads(json.dumps(PROBLEM))
    doc["families"]["tutorial"]["user"]["arguments"] = "tutorial_matmul:broken"
    write(tmp_path, doc)
    done = cli("validate", "problem.yaml", cwd=tmp_path, env={"TUNER_STORAGE": f"sqlite:///{tmp_path / 'r.db'}"})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "problem.yaml: families.tutorial.user" in done.stderr


def test_traceback_shows_the_users_own_exception_after_the_one_line(tmp_path, monkeypatch):
    """The one line names the user's exception; --traceback (or TUNER_DEBUG=1) adds the
    trace of every link down to it, the user's module first, the one line still last."""
    from click.testing import CliRunner

    from tuner.cli import main

    doc = json.loads(json.dumps(PROBLEM))
    doc["families"]["tutorial"]["user"]["arguments"] = "tutorial_matmul:grid_raises"
    path = write(tmp_path, doc)
    monkeypatch.setenv("TUNER_DEBUG", "0")  # restored after, though --traceback sets it in this process
    plain = CliRunner().invoke(main, ["validate", str(path)])
    assert plain.exit_code == 2 and plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    traced = CliRunner().invoke(main, ["--traceback", "validate", str(path)])
    assert traced.exit_code == 2
    lines = traced.stderr.splitlines()
    assert lines[-1] == plain.stderr.strip() and lines[0] == "Traceback (most recent call last):"
    user = lines.index("KeyError: 'NO_SUCH_PARAMETER'")
    assert any("tutorial_matmul.py" in line for line in lines[:user])


def test_user_code_that_prints_or_exits_is_fenced(tmp_path, resources, capsys):
    """The second fuzz round: a kernel module printing at import corrupted `simulate
    --json`, and `sys.exit()` in a builder ended tuner silently with its code. Prints go
    to stderr; an exit is one line naming the family."""
    (tmp_path / "noisy_module.py").write_text(
        'print("hello from a user module")\n'
        "from tutorial_matmul import matmul_kernel, arguments, CONFIGS  # noqa: F401\n\n\n"
        "def exits(shape, device):\n    raise SystemExit(3)\n")
    doc = json.loads(json.dumps(PROBLEM))
    family = doc["families"]["tutorial"]
    family["kernel"] = "noisy_module:matmul_kernel"
    load_problem(write(tmp_path, doc), resources=resources)
    captured = capsys.readouterr()
    assert "hello from a user module" not in captured.out and "hello from a user module" in captured.err
    family["user"]["arguments"] = "noisy_module:exits"
    with pytest.raises(ProblemError) as info:
        load_problem(write(tmp_path, doc), resources=resources)
    message = str(info.value)
    assert "\n" not in message and "families.tutorial" in message and "SystemExit: 3" in message, message
