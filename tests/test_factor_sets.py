"""Named kernel-model factor sets: a problem file picks one, ``tuner init`` picks the
serving fit for H100s, and that fit prices a decode step near the engine model that was
fitted on measured vLLM runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.engine.defaults import H100_VLLM_V1
from tuner.engine.init_problem import Deployment, problem_text
from tuner.engine.model_config import model_shape
from tuner.engine.step_cost import StepCost
from tuner.problem.load import load_problem
from tuner.profile.devices import A100, H100
from tuner.profile.factor_sets import A100_CUBLAS, FACTOR_SETS, H100_VLLM_GRAPHS
from tuner.profile.interconnect import NVLINK4, NVLINK4_VLLM, wire_factor
from tuner.search import PER_BUCKET, JointSpace
from tuner.sim.program import bind

from test_engine_replay import LLAMA2_7B


def _llama(tmp_path: Path, device=H100, tp: int = 1) -> Path:
    deployment = Deployment(model_shape(LLAMA2_7B), device, tp=tp, max_num_seqs=64, max_num_batched_tokens=2048,
                            rates=(1.0,), name="llama7b")
    path = tmp_path / "llama7b.yaml"
    path.write_text(problem_text(deployment))
    return path


def _profiles(problem):
    return [config.profile for family in problem.families.values() for config in family.configs
            if hasattr(config.profile, "factors")]


def test_init_picks_the_serving_fit_on_h100_and_the_event_timed_fit_elsewhere(tmp_path: Path):
    h100 = load_problem(_llama(tmp_path))
    assert h100.service.launch_overhead_s == 0.0
    assert {p.factors for p in _profiles(h100)} == {H100_VLLM_GRAPHS.factors}
    a100_dir = tmp_path / "a100"
    a100_dir.mkdir()
    a100 = load_problem(_llama(a100_dir, A100))
    assert a100.service.launch_overhead_s == pytest.approx(4e-6)
    assert {p.factors for p in _profiles(a100)} == {A100_CUBLAS.factors}


@pytest.mark.parametrize("base", ["llama", "seed_example"])
def test_an_unknown_factor_set_is_one_line_naming_the_key(tmp_path: Path, base: str):
    """With built-in kernel families and without (seed_example declares its profiles: the
    name was not checked there at first)."""
    import yaml
    from click.testing import CliRunner

    from tuner.bundled import problem_file
    from tuner.cli import main

    if base == "llama":
        path = _llama(tmp_path)
        path.write_text(path.read_text().replace("factors: h100-vllm-graphs", "factors: h100-fast"))
    else:
        document = yaml.safe_load(problem_file("seed_example").read_text())
        document["device"]["factors"] = "h100-fast"
        path = tmp_path / "seed.yaml"
        path.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "device.factors" in result.stderr and "h100-fast" in result.stderr
    assert all(name in result.stderr for name in FACTOR_SETS)


def test_vllm_all_reduce_is_the_engine_models_per_all_reduce_cost():
    """The preset's constants are the engine fit's: per all-reduce, 6.441 us per peer plus
    wire bytes at NVLink 4's bus bandwidth / 1.16 (StepCost's allreduce terms)."""
    assert NVLINK4_VLLM.latency_per_peer_s == H100_VLLM_V1.allreduce
    assert NVLINK4_VLLM.bus_bw == pytest.approx(NVLINK4.bus_bw / H100_VLLM_V1.allreduce_bytes, rel=1e-12)
    tokens, hidden, ranks = 8, 8192, 4
    nbytes = tokens * hidden * 2
    engine = H100_VLLM_V1.allreduce * (ranks - 1) + H100_VLLM_V1.allreduce_bytes * (
        wire_factor("all_reduce", ranks) * nbytes / NVLINK4.bus_bw)
    assert NVLINK4_VLLM.seconds("all_reduce", nbytes, ranks, 16) == pytest.approx(engine, rel=1e-9)
    assert NVLINK4.seconds("all_reduce", nbytes, ranks, 16) > 2 * engine  # NCCL's fixed cost


def test_serving_fit_prices_a_decode_step_near_the_fitted_engine(tmp_path: Path):
    """Llama-2-7B on one H100, 8 sequences of 712 tokens decoding: the service simulator's
    step (the isolated-fastest configs per bucket, launch gaps included) against the GPU
    terms of the engine model fitted on measured runs (GEMMs, KV read, per-layer cost).
    The serving fit lands within 10% (the event-timed factors with 4 us launches: 1.7x)."""
    problem = load_problem(_llama(tmp_path))
    bound = bind(problem.service, PER_BUCKET.assignment(JointSpace.of(problem)), frozenset())
    batch, context = 8, 712
    variables = {"batch": batch, "tokens": batch, "prefill_tokens": 0, "decode_seqs": batch,
                 "context": batch * context, "max_context": context}
    program = bound.program(variables)
    step = sum(phase[0] for launch in program.lanes[0] for phase in launch[1])
    step += problem.service.launch_overhead_s * program.kernels
    model = model_shape(LLAMA2_7B)
    cost = StepCost(model, 1, H100, NVLINK4, 2048)
    engine = (H100_VLLM_V1.gemm * (cost._layers_gemm[batch] + cost._head[batch])
              + H100_VLLM_V1.kv_read * batch * context * cost._kv_per_token + H100_VLLM_V1.layers * model.layers)
    assert step == pytest.approx(engine, rel=0.10)


def _seed_with_sizes(tmp_path: Path, sizes: dict, batching: str | None = None) -> Path:
    import yaml

    from tuner.bundled import problem_file

    document = yaml.safe_load(problem_file("toy_llm").read_text())
    for regime in document["regimes"].values():
        regime["arrivals"] = {"process": "poisson", "rate": 5}
        regime["sizes"] = sizes
    path = tmp_path / "sized.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_prompt_id_is_refused_where_no_prefix_cache_reads_it(tmp_path: Path):
    """toy_llm runs continuous batching: a prompt id there was silently ignored."""
    from tuner.errors import ProblemError

    with pytest.raises(ProblemError, match=r"sizes\.prompt_id: a prompt id only means something to an engine's "
                                           r"prefix cache \(batching: vllm\), not to batching: continuous"):
        load_problem(_seed_with_sizes(tmp_path, {"prompt": 600, "output": 50, "prompt_id": 3}))


def test_a_size_beyond_int64_is_refused_at_load(tmp_path: Path):
    """numpy draws int64: a uniform high of 1e20 passed validation and crashed simulate."""
    from tuner.errors import ProblemError

    huge = {"dist": "uniform", "low": 1, "high": 10**20}
    with pytest.raises(ProblemError, match=r"sizes\.output.*less than or equal to 9223372036854775807"):
        load_problem(_seed_with_sizes(tmp_path, {"prompt": 600, "output": huge}))
