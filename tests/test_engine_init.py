"""``tuner init``: problem files written from a model's config.json, checked by hand
against the model's figures, loaded by the problem loader and simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tuner.cli import main
from tuner.engine.init_problem import Deployment, problem_text
from tuner.engine.model_config import model_shape
from tuner.problem import resolve_assignment
from tuner.problem.load import load_problem
from tuner.profile.devices import H100
from tuner.sim.service import simulate

from test_engine_replay import LLAMA2_7B, MIXTRAL

GIB = 1 << 30


def _write(tmp_path: Path, deployment: Deployment) -> Path:
    path = tmp_path / f"{deployment.name}.yaml"
    path.write_text(problem_text(deployment))
    return path


def test_llama2_7b_on_one_h100_by_hand(tmp_path: Path):
    """KV 524,288 bytes per token; weights 6,738,415,616 x 2 bytes = 12.55 GiB; budget
    0.9 x the 81,559 MiB an H100 80GB reports; vLLM's H100 defaults 1024 sequences and
    8192 tokens."""
    deployment = Deployment(model_shape(LLAMA2_7B), H100, tp=1, rates=(1.0,), name="llama7b")
    assert deployment.kv_bytes_per_token == 524_288
    assert deployment.weights_bytes == 2 * 6_738_415_616
    assert (deployment.seqs, deployment.batched_tokens) == (1024, 8192)
    path = _write(tmp_path, deployment)
    problem = load_problem(path)
    assert yaml.safe_load(path.read_text())["constants"]["kv_bytes_per_token"] == 524_288
    service = problem.service
    assert service.memory.budget == pytest.approx(0.9 * 81_559 * 2**20, rel=1e-3)
    assert service.memory.fixed > 12.55 * GIB
    names = [op.name for op in service.operators]
    assert names == ["input_norm", "qkv", "decode_attn", "prefill_attn", "o_proj", "post_norm", "gate_up", "down",
                     "lm_head"]  # one rank, no all-reduce at TP 1
    result = simulate(problem, resolve_assignment(problem), "rate_1", seed=0, horizon_s=8.0)
    assert result.metrics.completed > 0


def test_the_one_config_baseline_is_judged_at_a_batch_the_kv_cache_holds(tmp_path: Path):
    """vLLM's H100 default of 1024 sequences at the model length is millions of tokens
    of context, where the KV cache holds (0.9 x 81,559 MiB - 12.55 GiB - the activation
    peak of 0.4-2 GiB) / (16 x 512 KiB) = 7,300-7,600 blocks of 16 tokens: the baseline
    batch is the cache's tokens. With 8 sequences of 256 tokens the cache holds them all."""
    deployment = Deployment(model_shape(LLAMA2_7B), H100, tp=1, rates=(1.0,), name="llama7b")
    problem = load_problem(_write(tmp_path, deployment))
    context = problem.service.baseline_batch_variables(problem.size_fields)["context"]
    assert context == deployment.kv_blocks * 16 and 7_300 * 16 < context < 7_600 * 16
    small = Deployment(model_shape(LLAMA2_7B), H100, tp=1, rates=(1.0,), name="small", max_num_seqs=8,
                       max_model_len=256)
    problem = load_problem(_write(tmp_path, small))
    assert problem.service.baseline_batch_variables(problem.size_fields)["context"] == 8 * 256


def test_mixtral_on_two_ranks_shards_and_all_reduces(tmp_path: Path):
    """TP 2: 16 heads and 4 KV heads per rank, 7168 of each expert's 14336, the router and
    experts in place of the dense MLP, two all-reduces per layer."""
    deployment = Deployment(model_shape(MIXTRAL), H100, tp=2, max_num_seqs=128, max_num_batched_tokens=2048,
                            name="mixtral")
    path = _write(tmp_path, deployment)
    problem = load_problem(path)
    constants = yaml.safe_load(path.read_text())["constants"]
    assert (constants["heads"], constants["kv_heads"], constants["ff"], constants["vocab"]) == (16, 4, 7168, 16000)
    assert constants["kv_bytes_per_token"] == 2 * 32 * 4 * 128 * 2
    names = [op.name for op in problem.service.operators]
    assert {"router_gate", "experts", "o_allreduce", "mlp_allreduce"} <= set(names) and "gate_up" not in names
    assert problem.service.max_batch == 128 and problem.service.max_tokens == 2048


def test_kv_heads_are_replicated_below_one_per_rank():
    llama = model_shape({**LLAMA2_7B, "num_key_value_heads": 8, "num_attention_heads": 32})
    assert Deployment(llama, H100, tp=16 // 2).kv_heads_per_rank == 1
    with pytest.raises(ValueError, match="--tp 3 must divide"):
        Deployment(llama, H100, tp=3)


def test_init_cli_writes_validates_and_never_overwrites(tmp_path: Path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA2_7B))
    out = tmp_path / "mine.yaml"
    runner = CliRunner()
    done = runner.invoke(main, ["init", "--model", str(config), "--out", str(out), "--rate", "2,5"])
    assert done.exit_code == 0, done.output
    assert load_problem(out).name == "mine" and set(load_problem(out).regimes) == {"rate_2", "rate_5"}
    before = out.read_text()
    again = runner.invoke(main, ["init", "--model", str(config), "--out", str(out), "--max-num-seqs", "8"])
    assert again.exit_code == 2 and "exists; pass --force" in again.output and out.read_text() == before
    bad = runner.invoke(main, ["init", "--model", str(config), "--tp", "3"])
    assert bad.exit_code == 2 and bad.output.count("\n") == 1 and "--tp 3 must divide" in bad.output
    import os
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    forced = runner.invoke(main, ["init", "--model", str(config), "--out", str(fifo), "--force"])
    assert forced.exit_code == 2 and "is not a regular file" in forced.output and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    monkeypatch.chdir(tmp_path)  # `--out -` is standard output, as without --out: no file named '-'
    dashed = runner.invoke(main, ["init", "--model", str(config), "--out", "-"])
    assert dashed.exit_code == 0 and dashed.stdout.startswith("# Written by `tuner init`")
    assert not (tmp_path / "-").exists()


def test_init_replays_a_trace_with_prompt_ids_into_the_prefix_cache(tmp_path: Path):
    """A trace numbering its prompts from 0 (as shared/data/serving_real's do): `tuner init
    --prompt-id-column` maps the column to the `prompt_id` size field, ids of 0 are
    accepted (an identity, not a size) and repeated prompts find their blocks cached:
    60 requests cycling over 3 prompts of 592 tokens, one every 2 s, so every request
    after the first three finds 36 blocks of 16 tokens (vLLM keeps the last token)."""
    from tuner.sim.service import ServiceRun
    from tuner.sim.program import bind

    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA2_7B))
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens,prompt_id\n"
                     + "".join(f"{2.0 * i},592,4,{i % 3}\n" for i in range(60)))
    out = tmp_path / "replay.yaml"
    done = CliRunner().invoke(main, ["init", "--model", str(config), "--trace", str(trace), "--time-column",
                                     "arrival_s", "--prompt-column", "input_tokens", "--output-column",
                                     "output_tokens", "--prompt-id-column", "prompt_id", "--rate", "0.5",
                                     "--max-num-seqs", "16", "--max-num-batched-tokens", "2048", "--out", str(out)])
    assert done.exit_code == 0, done.output
    problem = load_problem(out)
    regime = "rate_0_5"
    bound = bind(problem.service_for(regime), resolve_assignment(problem), problem.size_fields)
    run = ServiceRun(bound, problem.regimes[regime].workload(0, problem.service.jitter, 30.0),
                     problem.memory_budget(regime), problem.size_fields)
    run.run()
    started = sum(1 for t in run.times.start_t if t == t)
    assert started > 6
    assert run.batching.scheduler.cached_tokens == 576 * (started - 3)
