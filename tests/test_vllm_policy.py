"""The ``vllm`` batching policy in the service simulator (tuner.sim.vllm_batching): its
limit case is continuous batching, its KV cache is what the budget leaves, its CUDA
graphs pad what the kernels run, and its registry matches the problem layer's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from tuner.bundled import problem_file
from tuner.errors import ProblemError
from tuner.problem import resolve_assignment
from tuner.problem.batching import BATCHING
from tuner.problem.load import load_problem
from tuner.sim.policies import POLICIES
from tuner.sim.program import bind
from tuner.sim.service import ServiceRun, simulate

#: vLLM with everything continuous batching lacks switched off.
PLAIN_ENGINE = {"kv_bytes_per_token": "kv_bytes_per_token", "num_gpu_blocks": 1_000_000, "prefix_caching": False,
                "cuda_graphs": False, "async_scheduling": False, "step_cpu": 0, "request_cpu": 0,
                "request_overhead": 0}


def _toy_llm(tmp_path: Path, name: str, context_free: bool = False, **service) -> Path:
    """toy_llm with a budget that never binds (80 GiB), no neighbour, and ``service`` keys;
    ``context_free``: attention priced on the batch size instead of the context read."""
    document = yaml.safe_load(problem_file("toy_llm").read_text())
    if context_free:
        attention = next(op for op in document["service"]["operators"] if op["name"] == "attn")
        attention["shape"]["L"] = "1024 * batch"
    document["service"]["memory"]["budget"] = "80 GiB"
    document["service"].pop("neighbors")
    document["service"].update(service)
    for regime in document["regimes"].values():
        regime["arrivals"]["file"] = str(problem_file("toy_llm").parent / regime["arrivals"]["file"])
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_the_registries_name_the_same_policies():
    assert set(POLICIES) == set(BATCHING)


def _run(problem, regime: str, seed: int = 3, horizon_s: float = 20.0) -> ServiceRun:
    assignment = resolve_assignment(problem)
    bound = bind(problem.service_for(regime), assignment, problem.size_fields)
    workload = problem.regimes[regime].workload(seed, problem.service.jitter, horizon_s)
    run = ServiceRun(bound, workload, problem.memory_budget(regime), problem.size_fields)
    run.run()
    return run


@pytest.mark.parametrize("regime", ["light", "heavy"])
def test_vllm_without_its_engine_features_is_continuous_batching(tmp_path: Path, regime: str):
    """No prefix sharing, no graphs, no CPU cost, synchronous scheduling and KV blocks to
    spare: every request starts, gives its first token and ends when continuous batching
    has it do so, in as many iterations.

    One difference, and it is continuous batching's: its decode of a sequence with P
    prompt and g generated tokens counts P + g + 1 tokens of context, where the query
    token is the g-th generated one and attention reads P + g (vLLM's
    ``num_computed_tokens`` + 1). Attention is priced here on the batch size, so that
    difference does not move the steps (priced on the context it would, by about a
    thousandth)."""
    continuous = _run(load_problem(_toy_llm(tmp_path, "plain", context_free=True)), regime)
    vllm = _run(load_problem(_toy_llm(tmp_path, "engine", context_free=True, batching="vllm",
                                      engine=PLAIN_ENGINE)), regime)
    assert continuous.iterations == vllm.iterations > 100
    finished = [t for t in continuous.times.finish_t if t == t]
    assert len(finished) > 10
    assert continuous.times.finish_t == pytest.approx(vllm.times.finish_t, rel=1e-12, nan_ok=True)
    assert continuous.times.first_t == pytest.approx(vllm.times.first_t, rel=1e-12, nan_ok=True)
    assert continuous.times.start_t == pytest.approx(vllm.times.start_t, rel=1e-12, nan_ok=True)


def test_the_kv_cache_is_what_the_budget_leaves(tmp_path: Path):
    """Blocks = 1 (vLLM's null block) + (budget - fixed - reserved workspace) // (KV bytes
    per token x block size)."""
    engine = {**PLAIN_ENGINE}
    engine.pop("num_gpu_blocks")
    problem = load_problem(_toy_llm(tmp_path, "blocks", batching="vllm", engine=engine))
    assignment = resolve_assignment(problem)
    bound = bind(problem.service_for("light"), assignment, problem.size_fields)
    workload = problem.regimes["light"].workload(0, problem.service.jitter, 5.0)
    run = ServiceRun(bound, workload, problem.memory_budget("light"), problem.size_fields)
    left = 80 * 2**30 - 16 * 2**30 - bound.reserved_workspace
    assert len(run.batching.scheduler.pool.ref) == 1 + math.floor(left / (131072 * 16))


def test_cuda_graphs_pad_what_the_kernels_run(tmp_path: Path):
    """One request decoding alone: captured only at 64 tokens, each decode step's GEMMs
    run M = 64, slower than the one token eager mode runs."""
    eager = load_problem(_toy_llm(tmp_path, "eager", batching="vllm", engine=PLAIN_ENGINE))
    graphs = load_problem(_toy_llm(tmp_path, "graphs", batching="vllm",
                                   engine={**PLAIN_ENGINE, "cuda_graphs": True, "capture_sizes": [64]}))
    a = simulate(eager, resolve_assignment(eager), "light", seed=0, horizon_s=5.0).metrics
    b = simulate(graphs, resolve_assignment(graphs), "light", seed=0, horizon_s=5.0).metrics
    assert b.tpot_p99_s > a.tpot_p99_s


def test_engine_settings_belong_to_an_engine_policy(tmp_path: Path):
    with pytest.raises(ProblemError, match="service.engine: only applies to an engine's batching"):
        load_problem(_toy_llm(tmp_path, "stray", engine=PLAIN_ENGINE))
    with pytest.raises(ProblemError, match="service.engine: batching: vllm needs an engine block"):
        load_problem(_toy_llm(tmp_path, "bare", batching="vllm"))
    with pytest.raises(ProblemError, match="service.executors: batching: vllm runs one engine"):
        load_problem(_toy_llm(tmp_path, "two", batching="vllm", engine=PLAIN_ENGINE, executors=2))


def test_the_memory_timeline_shows_the_kv_blocks_in_use(tmp_path: Path):
    """Peak memory = fixed + workspace + the most KV blocks requests held at once, each
    131,072 x 16 bytes; no more than the budget, more than the fixed part."""
    problem = load_problem(_toy_llm(tmp_path, "memory", batching="vllm", engine={**PLAIN_ENGINE,
                                                                                 "num_gpu_blocks": None}))
    run = _run(problem, "heavy")
    extra = run.batching.block_bytes
    assert extra == 131072 * 16
    peak = run.usage.memory_peak - run.admission.base_memory
    assert peak > 0 and peak % extra == 0 and run.usage.memory_peak <= 80 * 2**30


def test_workspace_costs_kv_blocks_and_so_preemptions(tmp_path: Path):
    """The memory mechanism under vLLM's engine: with 2 GiB beside 16 GiB of weights, split-K
    GEMMs reserving their fp32 partials leave fewer KV blocks (1 + (2 GiB - workspace) //
    2 MiB), and the heavy regime then preempts and recomputes more and serves less."""
    engine = {**PLAIN_ENGINE}
    engine.pop("num_gpu_blocks")
    problem = load_problem(_toy_llm(tmp_path, "pressure", batching="vllm", engine=engine))
    results = []
    for spec in ([], [f"{op}=tile64_splitk4" for op in ("qkv", "o", "up", "down")]):
        bound = bind(problem.service_for("heavy"), resolve_assignment(problem, spec), problem.size_fields)
        workload = problem.regimes["heavy"].workload(0, problem.service.jitter, 30.0)
        run = ServiceRun(bound, workload, 18 * 2**30, problem.size_fields)
        metrics = run.run().metrics
        blocks = len(run.batching.scheduler.pool.ref)
        assert blocks == 1 + math.floor((2 * 2**30 - bound.reserved_workspace) / (131072 * 16))
        results.append((bound.reserved_workspace, blocks, run.batching.scheduler.preemptions, metrics.goodput_rps))
    (plain_ws, plain_blocks, plain_pre, plain_good), (split_ws, split_blocks, split_pre, split_good) = results
    assert split_ws > plain_ws and split_blocks < plain_blocks
    assert split_pre > plain_pre and split_good < plain_good


def test_a_request_beyond_max_context_is_refused_and_the_rest_served(tmp_path: Path):
    """vLLM's API server refuses a request longer than max_model_len; one admitted anyway
    would sit in the running list forever holding a sequence slot and its blocks."""
    problem = load_problem(_toy_llm(tmp_path, "short", batching="vllm", engine=PLAIN_ENGINE, max_context=1024,
                                    max_batch=4))
    run = _run(problem, "heavy")
    finished = sum(1 for t in run.times.finish_t if t == t)
    assert run.batching.scheduler.refused > 0
    assert finished == run.requests.n - run.batching.scheduler.refused


def _llama_with_prompts(tmp_path: Path, prompt_id: str | None) -> Path:
    """Llama-2-7B on one H100 as ``tuner init`` writes it, lone 592-token requests (0.5
    per second, 4 tokens out), all sending prompt ``prompt_id`` (None: no prompt identity)."""
    from tuner.engine.init_problem import Deployment, problem_text
    from tuner.engine.model_config import model_shape
    from tuner.profile.devices import H100

    from test_engine_replay import LLAMA2_7B

    sizes = "{prompt: 592, output: 4" + ("" if prompt_id is None else f", prompt_id: {prompt_id}") + "}"
    regimes = ("regimes:\n  lone:\n    arrivals: {process: poisson, rate: 0.5}\n"
               f"    sizes: {sizes}\n    horizon: 40 s\n    warmup: 0 s\n")
    deployment = Deployment(model_shape(LLAMA2_7B), H100, tp=1, max_num_seqs=16, max_num_batched_tokens=2048,
                            name="prompts")
    path = tmp_path / f"prompts_{prompt_id}.yaml"
    path.write_text(problem_text(deployment, regimes))
    return path


def test_requests_with_one_prompt_id_share_its_cached_blocks(tmp_path: Path):
    """vLLM's rule (tuner.engine): a 592-token prompt found whole in the cache (block 16:
    37 full blocks) reuses 36 of them, never its last token, so every request after the
    first finds 576 tokens cached; with no prompt identity, none."""
    shared = load_problem(_llama_with_prompts(tmp_path, "7"))
    run = _run(shared, "lone", horizon_s=40.0)
    started = sum(1 for t in run.times.start_t if t == t)
    assert started > 5
    assert run.batching.scheduler.cached_tokens == 576 * (started - 1)
    alone = load_problem(_llama_with_prompts(tmp_path, None))
    assert _run(alone, "lone", horizon_s=40.0).batching.scheduler.cached_tokens == 0
