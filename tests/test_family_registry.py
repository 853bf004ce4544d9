"""Kernel families as registered specs (issue 42, item 1).

A family from outside tuner — ``tests/user_kernels/axpy_family.py``, a Triton kernel, its
family class and its :class:`~tuner.families.FamilySpec` — is registered without any file
of tuner naming it: in this process with :func:`tuner.families.register`, and in tuner's
CLI and a serving process through a ``tuner.families`` entry point (a ``.dist-info``
folder on ``PYTHONPATH``, as an installed package would have). It is then tuned, served
(under ``TRITON_INTERPRET=1``, against PyTorch) and exported. The bundled families'
declared cost kinds are checked against the model's old rule of guessing from names, so
declaring them changed no number.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuner.errors import KernelError
from tuner.families import FamilySpec, family_names, family_spec, get_family, register, unregister
from tuner.kernels.family import all_configs
from tuner.profile.model import cost_kind
from tuner.requirements import RequirementsError, requirements

ROOT = Path(__file__).resolve().parents[1]
FAMILY_MODULE = ROOT / "tests" / "user_kernels" / "axpy_family.py"
SERVED_M = (8, 100)
N = 64

PROBLEM = {
    "name": "axpy_service",
    "description": "A family registered from outside tuner, as the scaling step of a small decoder.",
    "device": {"name": "h100"},
    "service": {
        "batching": "continuous", "max_batch": 64, "max_tokens": 512, "max_context": 4096,
        "memory": {"budget": "80 GiB", "fixed": "16 GiB", "per_request": "(prompt + output) * 128 KiB"},
        "operators": [{"name": "scale", "family": "ax", "shape": {"M": "tokens", "N": N}, "repeat": 32}],
        "slo": {"ttft": "1 s", "tpot": "100 ms"},
    },
    "families": {"ax": {"kernel": "axpy"}},
    "regimes": {"light": {"arrivals": {"process": "poisson", "rate": 5},
                          "sizes": {"prompt": 512, "output": 64}, "horizon": "10 s"}},
}

SERVE = r'''
import json, logging, sys
import torch, triton
sys.path.insert(0, sys.argv[2])
import axpy_family as a
import tuner.runtime as rt

warned = []
logging.getLogger("tuner.runtime").addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: warned.append(r.getMessage())})())
configs = [triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in a.SPACE["BLOCK"] for w in a.SPACE["num_warps"]]
kernel = rt.autotune(configs=configs, key=["M"], op="scale", table=sys.argv[1], names="axpy")(a.axpy_kernel)
dispatcher = rt.load_table(sys.argv[1])
out = []
for M in map(int, sys.argv[3:]):
    x, y = torch.randn(M, 64).half(), torch.randn(M, 64).half()
    o = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(M * 64, meta["BLOCK_SIZE"]),)](x, y, o, a.ALPHA, M, 64)
    cfg = kernel.best_config
    needs = dispatcher.requirements("scale", {"M": M, "N": 64})
    out.append({"M": M, "err": (o.float() - (a.ALPHA * x.float() + y.float())).abs().max().item(),
                "served": {**cfg.kwargs, "num_warps": cfg.num_warps},
                "launches": [[l.name, l.grid] for l in needs.launches]})
print(json.dumps({"calls": out, "warnings": warned}))
'''


# --- the registry in this process ----------------------------------------------------------------

@pytest.fixture
def axpy():
    """The axpy family registered here for one test, and taken out after it."""
    sys.path.insert(0, str(FAMILY_MODULE.parent))
    import axpy_family

    register(axpy_family.SPEC)
    yield axpy_family
    unregister("axpy")
    sys.path.remove(str(FAMILY_MODULE.parent))


def test_a_registered_family_is_found_built_and_judged_like_a_bundled_one(axpy) -> None:
    assert "axpy" in family_names()
    family = get_family("axpy")
    assert isinstance(family, axpy.AxpyFamily)
    needs = requirements("axpy", {"BLOCK": 256, "num_warps": 2}, {"M": 3, "N": 1000}, sms=132)
    assert [(l.name, l.grid) for l in needs.launches] == [("axpy", 12)]  # ceil(3000 / 256)
    assert needs.workspace_bytes == 0
    with pytest.raises(ValueError, match="kernel family 'axpy' is registered twice"):
        register(axpy.SPEC)


def test_a_family_the_registry_does_not_know_is_one_line() -> None:
    with pytest.raises(KernelError, match="unknown kernel family 'axpy'; the registered families are"):
        get_family("axpy")
    with pytest.raises(RequirementsError, match="no requirements are known for kernel family 'axpy'"):
        requirements("axpy", {}, {"M": 1}, sms=132)
    with pytest.raises(KernelError, match="cost 'flops' is not one of"):
        FamilySpec(name="x", kernel=object, cost="flops")
    with pytest.raises(KernelError, match="letters, digits"):
        FamilySpec(name="mod:fn", kernel=object, cost="memory")
    broken = FamilySpec(name="broken", kernel="no_such_module:Family", cost="memory")
    with pytest.raises(KernelError, match="its kernel 'no_such_module:Family' does not import"):
        broken.build()


# --- the bundled families' cost kinds --------------------------------------------------------------

SHAPES = {
    "matmul": ({"M": 64, "N": 4096, "K": 4096}, {"M": 3, "N": 1024, "K": 512}),
    "decode_attention": ({"B": 8, "H": 32, "KV": 8, "D": 128, "L": 4096}, {"B": 1, "H": 8, "KV": 8, "D": 64, "L": 100}),
    "fused_moe": ({"M": 64, "N": 7168, "K": 4096}, {"M": 1, "N": 512, "K": 256}),
    "rmsnorm": ({"M": 64, "N": 4096}, {"M": 1, "N": 100}),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_declared_cost_kinds_price_every_launch_as_the_name_rule_did(name: str) -> None:
    """Each bundled launch says its cost kind; the model's old rule (guessing a GEMM from
    ``BLOCK_M``/``BLOCK_N``/``BLOCK_K``, attention from a ``BLOCK_H`` × ``BLOCK_N`` tile,
    a grouped GEMM from ``expert_blocks``) reads the same kind from its constexprs, so
    the declaration changes no timing. 300 configs per family, drawn with a fixed seed."""
    family = get_family(name)
    configs = list(all_configs(family.space))
    drawn = random.Random(0).sample(configs, min(300, len(configs)))
    seen = set()
    for shape in SHAPES[name]:
        for config in drawn:
            if family.illegal(config, shape) is not None:
                continue
            for launch in family.plan(config, shape, 132).launches:
                assert launch.cost is not None, (name, launch.name)
                assert cost_kind(dataclasses.replace(launch, cost=None)) == launch.cost, (name, launch.name)
                seen.add(launch.cost)
    assert seen >= {family_spec(name).cost}


# --- tuned, served and exported from outside tuner ---------------------------------------------------

def _installed(directory: Path) -> None:
    """``axpy_family`` and an entry point naming its spec, as ``pip install`` would leave them."""
    shutil.copy(FAMILY_MODULE, directory / FAMILY_MODULE.name)
    info = directory / "axpy_family-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: axpy-family\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tuner.families]\naxpy = axpy_family:SPEC\n")


def _env(directory: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(directory), str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def _cli(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=directory, env=_env(directory),
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("axpy")
    _installed(tmp)
    (tmp / "problem.yaml").write_text(yaml.safe_dump(PROBLEM, sort_keys=False))
    storage = f"sqlite:///{tmp / 'r.db'}"
    done = _cli(tmp, "tune", "problem.yaml", "--trials", "2", "--seeds", "1", "--horizon", "3", "-q",
                "--storage", storage)
    assert done.returncode == 0, done.stderr[-3000:]
    for args in (("table.json", "--format", "json"), ("vllm", "--format", "vllm")):
        done = _cli(tmp, "table", "export", *args, "--storage", storage)
        assert done.returncode == 0, done.stderr[-3000:]
    return tmp, json.loads((tmp / "table.json").read_text())


def test_the_registered_family_is_tuned_and_exported_with_its_requirements(tuned) -> None:
    tmp, table = tuned
    rows = [(r, d) for r, d in zip(table["rows"], table["details"], strict=True) if r["op"] == "scale"]
    assert rows and {d["family"] for _, d in rows} == {"axpy"}
    assert all(set(r["params"]) == {"BLOCK", "num_warps"} for r, _ in rows)
    assert sorted(p.name for p in (tmp / "vllm").iterdir()) == ["axpy_service_light_scale.json",
                                                                 "axpy_service_requirements.json"]
    needs = json.loads((tmp / "vllm" / "axpy_service_requirements.json").read_text())
    assert len(needs) == len(rows)
    for (row, detail), entry in zip(rows, needs.values()):
        grid = -(-detail["shape"]["M"] * N // row["params"]["BLOCK"])
        assert [(l["name"], l["grid"]) for l in entry["launches"]] == [("axpy", grid)]


def test_the_registered_family_is_served_from_its_table_and_matches_torch(tuned) -> None:
    tmp, table = tuned
    script = tmp / "serve.py"
    script.write_text(SERVE)
    done = subprocess.run([sys.executable, str(script), str(tmp / "table.json"), str(tmp), *map(str, SERVED_M)],
                          capture_output=True, text=True, env=_env(tmp, TRITON_INTERPRET="1"), cwd=tmp,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["warnings"] == []
    for call in result["calls"]:
        row = next(r for r in table["rows"] if r["op"] == "scale" and _holds(r["bucket_bounds"], call["M"]))
        assert call["served"] == {"BLOCK_SIZE": row["params"]["BLOCK"], "num_warps": row["params"]["num_warps"]}
        assert call["err"] < 1e-2
        grid = -(-call["M"] * N // row["params"]["BLOCK"])
        assert call["launches"] == [["axpy", grid]]


def _holds(bounds: dict | None, m: int) -> bool:
    """Whether a row's bucket holds M = ``m`` (no bounds: the operator's one bucket)."""
    low, high = (bounds or {}).get("M", (None, None))
    return (low is None or m > low) and (high is None or m <= high)


def test_tuner_families_shows_where_each_family_came_from(tuned) -> None:
    tmp, _ = tuned
    done = _cli(tmp, "families", "--json")
    assert done.returncode == 0, done.stderr
    listed = {entry["name"]: entry for entry in json.loads(done.stdout)}
    assert listed["matmul"]["origin"] == "bundled" and listed["matmul"]["cost"] == "gemm"
    assert listed["axpy"] == {"name": "axpy", "origin": "entry point axpy_family:SPEC (axpy-family 1.0)",
                              "kernel": "axpy_family:AxpyFamily", "cost": "memory", "requirements": True,
                              "runtime_names": {"BLOCK": "BLOCK_SIZE"}}


def test_a_broken_entry_point_fails_only_the_problems_that_name_it(tmp_path) -> None:
    info = tmp_path / "broken_family-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-family\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tuner.families]\nbroken = no_such_module:SPEC\n")
    listed = _cli(tmp_path, "families")
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith("broken "))
    assert line.split(None, 1)[1].startswith("not registered: entry point 'broken' (no_such_module:SPEC) of "
                                             "tuner.families does not load: ModuleNotFoundError"), line
    assert _cli(tmp_path, "validate", "seed_example").returncode == 0  # a problem that does not name it
    (tmp_path / "problem.yaml").write_text(yaml.safe_dump({**PROBLEM, "families": {"ax": {"kernel": "broken"}}}))
    named = _cli(tmp_path, "validate", "problem.yaml")
    assert named.returncode == 2 and "Traceback" not in named.stderr
    assert len(named.stderr.strip().splitlines()) == 1 and "no_such_module" in named.stderr, named.stderr


def test_every_launch_cost_kind_has_a_path_in_the_model_and_others_are_refused() -> None:
    from tuner.kernels import make_launch
    from tuner.kernels.family import LAUNCH_COSTS
    from tuner.profile.model import COST_PATHS

    assert set(COST_PATHS) == set(LAUNCH_COSTS)
    sys.path.insert(0, str(FAMILY_MODULE.parent))
    try:
        import axpy_family
    finally:
        sys.path.remove(str(FAMILY_MODULE.parent))
    with pytest.raises(KernelError, match="launch 'axpy': cost 'flops' is not one of gemm, grouped_gemm"):
        make_launch("axpy", axpy_family.axpy_kernel, {}, {}, num_warps=1, num_stages=1, grid_dims=(1,),
                    persistent=False, flops=0.0, dram_bytes=0.0, bindings={}, cost="flops")
