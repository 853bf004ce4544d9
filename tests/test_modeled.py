"""Built-in kernel families in problem files: configs from the narrowed space, modeled
profiles through compiled resources, and measurements that win over the model.

Compiled resources come from a stand-in here (compiling is tested in test_compiled.py),
so these tests run in milliseconds.
"""

from __future__ import annotations

import pytest

from tuner.errors import ProblemError
from tuner.problem import load_problem, resolve_assignment
from tuner.profile.resources import CompiledResources
from tuner.sim import simulate

GEMM_PROBLEM = {
    "name": "gemm_service",
    "device": {"name": "h100"},
    "service": {
        "batching": "dynamic", "max_batch": 8, "max_context": 512, "executors": 1,
        "memory": {"budget": "2 GiB", "fixed": "1 GiB", "per_request": "64 MiB"},
        "operators": [{"name": "proj", "family": "gemm", "shape": {"M": "batch * 128", "N": 4096, "K": 4096},
                       "repeat": 4}],
        "slo": {"deadline": "100 ms"},
    },
    "families": {"gemm": {"kernel": "matmul", "options": {"epilogue": "none"},
                          "space": {"BLOCK_M": [64, 128], "SPLIT_K": [1, 4]}}},
    "regimes": {"steady": {"arrivals": {"process": "poisson", "rate": 50}, "horizon": "5 s"}},
}


class FakeResources:
    """Every launch compiles to 64 KiB of shared memory and 128 registers: 2 CTAs per SM."""

    def __init__(self) -> None:
        self.calls = 0

    def get_or_compile(self, launch, device) -> CompiledResources:
        self.calls += 1
        return CompiledResources(arch=device.arch, smem_bytes=64 * 1024, regs_per_thread=128,
                                 num_warps=launch.num_warps, ctas_per_sm=2, limiter="shared memory")


class FakeMeasurements:
    def __init__(self, latencies):
        self._latencies = latencies

    def latencies(self, family, options, config, device, triton_version):
        return self._latencies if config["SPLIT_K"] == 1 and config["BLOCK_M"] == 64 else {}


def gemm_problem(write_problem, **edits):
    document = {**GEMM_PROBLEM, **edits}
    return write_problem(document)


def test_configs_are_the_narrowed_space_with_defaults_and_short_names(write_problem):
    path_problem = gemm_problem(write_problem)
    family = path_problem.families["gemm"]
    assert len(family.configs) == 4
    assert {c.param_dict["BLOCK_M"] for c in family.configs} == {64, 128}
    assert all(c.param_dict["num_warps"] == 4 for c in family.configs)  # the family default
    assert family.configs[0].name == "bm64_bn32_bk32_gm8_nw4_ns3_sk1_p0_fe1"
    assert path_problem.service.device.sms == 132  # from the h100 preset


@pytest.mark.parametrize("edit, key, reason", [
    ({"families": {"gemm": {"kernel": "matmull"}}}, "families.gemm.kernel", "unknown kernel family"),
    ({"families": {"gemm": {"kernel": "matmul", "space": {"BLOCK_Q": [1]}}}}, "families.gemm.space.BLOCK_Q",
     "not a parameter"),
    ({"families": {"gemm": {"kernel": "matmul", "space": {"BLOCK_M": [48]}}}}, "families.gemm.space.BLOCK_M",
     "outside the family's space"),
    ({"families": {"gemm": {"kernel": "matmul", "options": {"epilogue": "tanh"}}}}, "families.gemm.options", "tanh"),
    ({"device": {"name": "rtx9090"}}, "device.name", "device preset"),
])
def test_bad_kernel_families_name_the_key(write_problem, edit, key, reason):
    with pytest.raises(ProblemError) as info:
        gemm_problem(write_problem, **edit)
    assert f": {key}: " in str(info.value) and reason in str(info.value)


def test_an_operator_must_give_every_shape_dimension(write_problem):
    service = {**GEMM_PROBLEM["service"], "operators": [{"name": "proj", "family": "gemm", "shape": {"M": 1, "N": 2}}]}
    with pytest.raises(ProblemError, match=r"service.operators\[0\].shape: .*'K' is missing"):
        gemm_problem(write_problem, service=service)


def test_modeled_profiles_drive_the_simulator(write_problem, tmp_path):
    resources = FakeResources()
    problem = load_problem(gemm_problem(write_problem).path, resources=resources)
    small = resolve_assignment(problem, ["proj=BLOCK_M=64,SPLIT_K=1"])
    split = resolve_assignment(problem, ["proj=BLOCK_M=64,SPLIT_K=4"])
    m_small = simulate(problem, small, "steady", seed=1).metrics
    m_split = simulate(problem, split, "steady", seed=1).metrics
    assert m_small.arrivals == m_split.arrivals > 0
    assert m_small.reserved_workspace_bytes == 0
    # split-K partials at the largest batch: 4 bytes x 4 splits x (8·128) x 4096
    assert m_split.reserved_workspace_bytes == 4 * 4 * (8 * 128) * 4096
    assert small.config("proj").profile.source == "modeled"
    assert resources.calls > 0


def test_measurements_win_over_the_model(write_problem):
    problem = load_problem(gemm_problem(write_problem).path, resources=FakeResources())
    profile = resolve_assignment(problem, ["proj=BLOCK_M=64,SPLIT_K=1"]).config("proj").profile
    measured_shape = {"M": 128, "N": 4096, "K": 4096}
    modeled = profile.at(measured_shape).latency_s
    steered = type(profile)(profile.family, profile.params, profile.device, profile.resources,
                            measured=FakeMeasurements({tuple(sorted(measured_shape.items())): 2 * modeled}))
    assert steered.source == "measured"
    assert steered.at(measured_shape).latency_s == pytest.approx(2 * modeled)
    # Elsewhere the model is scaled by the ratio at the nearest measured shape.
    other = {"M": 256, "N": 4096, "K": 4096}
    assert steered.at(other).latency_s == pytest.approx(2 * profile.at(other).latency_s)
