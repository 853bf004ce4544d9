"""Built-in kernel families in problem files: configs from the narrowed space, modeled
profiles through compiled resources, and measurements that win over the model.

Compiled resources come from a stand-in here (compiling is tested in test_compiled.py),
so these tests run in milliseconds.
"""

from __future__ import annotations

import pytest
import yaml

from tuner.errors import ProblemError
from tuner.phases import Partition
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


ATTENTION_PROBLEM = {
    "name": "attention_service",
    "device": {"name": "h100"},
    "service": {
        "batching": "dynamic", "max_batch": 8, "max_context": 4096,
        "memory": {"budget": "2 GiB", "fixed": "1 GiB", "per_request": "64 MiB"},
        "operators": [{"name": "attn", "family": "attention",
                       "shape": {"B": "batch", "H": 32, "KV": 8, "D": 128, "L": 4096}}],
        "slo": {"deadline": "100 ms"},
    },
    "families": {"attention": {"kernel": "decode_attention", "space": {
        "VARIANT": ["split"], "BLOCK_N": [64], "NUM_SPLITS": [1, 16, "auto"], "num_warps": [4], "num_stages": [2]}}},
    "regimes": {"steady": {"arrivals": {"process": "poisson", "rate": 50}, "horizon": "5 s"}},
}
#: Two sequences × 8 KV heads = 16 CTAs without splits, 64 context tiles of 64.
ATTENTION_SHAPE = {"B": 2, "H": 32, "KV": 8, "D": 128, "L": 4096}


@pytest.fixture
def attention_configs(tmp_path):
    path = tmp_path / "attention.yaml"
    path.write_text(yaml.safe_dump(ATTENTION_PROBLEM))
    problem = load_problem(path, resources=FakeResources())
    return {c.param_dict["NUM_SPLITS"]: c.profile for c in problem.families["attention"].configs}


def test_split_counts_degrade_differently_on_a_quarter_of_the_sms(attention_configs) -> None:
    """Without splits, 16 CTAs fit in 33 SMs as in 132: the same time. With 16 splits,
    256 CTAs need ~4 waves of the 66 slots of 33 SMs instead of one of 264: far slower."""
    one, sixteen = attention_configs[1], attention_configs[16]
    assert one.at(ATTENTION_SHAPE, 33).modeled_latency_s == pytest.approx(one.at(ATTENTION_SHAPE).modeled_latency_s)
    assert sixteen.at(ATTENTION_SHAPE, 33).modeled_latency_s > 2 * sixteen.at(ATTENTION_SHAPE).modeled_latency_s


def test_auto_splits_size_themselves_to_the_sms_they_are_told(attention_configs) -> None:
    """FlashAttention-2's rule, by hand: on 132 SMs (264 slots) 16 CTAs × n splits fill a
    wave best at n = 16 (256/264); on 33 SMs (66 slots) n = 4 (64/66) is the fewest within
    85 % of the best. Told the device while running on 33 SMs, the kernel launches the
    device's 16 splits, and is slower there than the 4 it would pick if told."""
    auto = attention_configs["auto"]
    told_device = auto.at(ATTENTION_SHAPE, 33, 132)
    told_partition = auto.at(ATTENTION_SHAPE, 33, 33)
    assert told_device.plan.launches[0].grid == 16 * 16
    assert told_partition.plan.launches[0].grid == 16 * 4
    assert told_partition.modeled_latency_s < told_device.modeled_latency_s
    # the partition, as the simulator asks for it: shares of the whole device
    partition = Partition("quarter", 0.25, sized_to_partition=False)
    ((_, phases), _) = auto.launches(ATTENTION_SHAPE, None, "attn", partition)
    assert all(s <= 33 / 132 + 1e-12 and k <= s for _, s, _, k, _ in phases)
