"""Replays through the engine model (tuner.engine): step costs checked against figures
derived by hand from the model's shapes, the engine loop against hand-worked schedules,
the measured-run reader's errors, and the fit recovering coefficients it was given."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tuner.engine.calibrate import fit, replay_run, stage_figures
from tuner.engine.measured_run import read_run
from tuner.engine.model_config import model_shape, read_model_config
from tuner.engine.replay import TraceRequest, replay
from tuner.engine.scheduler import EngineArgs, EngineRequest, ScheduledStep
from tuner.engine.step_cost import FEATURES, StepCoefficients, StepCost
from tuner.errors import RunError
from tuner.profile.devices import H100
from tuner.profile.interconnect import NVLINK4

#: Llama-2-7B's config.json (meta-llama/Llama-2-7b-hf), the fields the engine reads.
LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "torch_dtype": "float16", "model_type": "llama"}
MIXTRAL = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
           "torch_dtype": "bfloat16"}


def test_llama2_7b_shapes_by_hand():
    """6.74 B parameters (Hugging Face's model card) and 2 (K, V) x 32 layers x 32 heads x
    128 x 2 bytes = 524,288 bytes of fp16 KV cache per token."""
    shape = model_shape(LLAMA2_7B)
    assert shape.parameters == 6_738_415_616
    assert shape.kv_bytes_per_token == 524_288
    mixtral = model_shape(MIXTRAL)
    assert round(mixtral.parameters / 1e9, 1) == 46.7  # Mixtral-8x7B: 46.7 B (its model card)
    assert mixtral.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


def test_model_config_errors_name_the_key(tmp_path: Path):
    with pytest.raises(RunError, match="key 'num_hidden_layers' is missing"):
        model_shape({k: v for k, v in LLAMA2_7B.items() if k != "num_hidden_layers"})
    with pytest.raises(RunError, match="key 'hidden_size': expected an integer"):
        model_shape({**LLAMA2_7B, "hidden_size": "4096"})
    bad = tmp_path / "config.json"
    bad.write_text("{")
    with pytest.raises(RunError, match="config.json: not JSON"):
        read_model_config(bad)


def _cost(config=LLAMA2_7B, tp: int = 1, max_tokens: int = 4096) -> StepCost:
    return StepCost(model_shape(config), tp, H100, NVLINK4, max_tokens)


def test_a_batch_one_decode_reads_every_weight_once():
    """At M = 1 every linear layer is memory-bound: the gemm term is the linear weights
    (all parameters but the embedding table and the norms) in fp16 over 3.35 TB/s."""
    cost = _cost()
    request = EngineRequest(0, 0.0, prompt=100, output=10)
    step = ScheduledStep([(request, 1, 100)], tokens=1, padded_tokens=1)
    request.computed = 100  # a decode of token 101: prompt + 1 generated
    request.generated = 1
    features = dict(zip(FEATURES, cost.features(step)))
    shape = cost.model
    linear = shape.parameters - shape.vocab * shape.hidden - (2 * shape.layers + 1) * shape.hidden
    assert features["gemm"] == pytest.approx(linear * 2 / 3.35e12, rel=2e-3)
    assert features["kv_read"] == pytest.approx(101 * 524_288 / 3.35e12)
    assert features["allreduce"] == 0 and features["step"] == 1 and features["requests"] == 1


def test_a_lone_request_is_its_prefill_then_its_decode_steps():
    """Alone, a request's TTFT is its prefill step (plus the request overhead) and its
    e2e that plus one decode step per further token, each priced by hand from the terms."""
    cost = _cost()
    coefficients = StepCoefficients(step=1e-3, requests=2e-5, request_overhead_s=5e-3)
    args = EngineArgs(num_gpu_blocks=1000, max_num_batched_tokens=4096, enforce_eager=True)
    result = replay([TraceRequest(1.0, 300, 5)], args, cost, coefficients)
    theta = coefficients.vector()
    request = EngineRequest(0, 1.0, 300, 5)
    times = []
    for before, new in [(0, 300), (300, 1), (301, 1), (302, 1), (303, 1)]:
        request.computed, request.generated = before, max(0, before - 299)
        times.append(float(np.dot(cost.features(ScheduledStep([(request, new, before)], new, new)), theta)))
    assert result.ttft_s[0] == pytest.approx(times[0] + 5e-3, rel=1e-12)
    assert result.e2e_s[0] == pytest.approx(sum(times) + 5e-3, rel=1e-12)
    assert result.tpot_s[0] == pytest.approx(sum(times[1:]) / 4, rel=1e-12)


@pytest.mark.parametrize("async_scheduling, joins", [(True, 2), (False, 1)])
def test_a_request_arriving_mid_step_joins_one_step_later_with_async_scheduling(async_scheduling, joins):
    """Request 1 arrives during step 0 (request 0's long prefill). With async scheduling
    step 1 was scheduled when step 0 was launched, so request 1 runs first in step 2."""
    cost = _cost()
    args = EngineArgs(num_gpu_blocks=1000, max_num_batched_tokens=4096, async_scheduling=async_scheduling)
    result = replay([TraceRequest(0.0, 4000, 5), TraceRequest(1e-4, 10, 5)], args, cost, StepCoefficients(),
                    record=True)
    assert result.first_step.tolist()[1] == joins


def test_an_oversized_request_is_refused_not_hung():
    args = EngineArgs(num_gpu_blocks=4, block_size=16, max_model_len=4096, enforce_eager=True)
    result = replay([TraceRequest(0.0, 200, 5), TraceRequest(0.0, 10, 5), TraceRequest(0.0, 5000, 5)],
                    args, _cost(), StepCoefficients())
    assert result.refused == 2  # 200 tokens never fit in 3 blocks; 5005 > max_model_len
    assert math.isnan(result.e2e_s[0]) and result.e2e_s[1] > 0


def _write_run(tmp_path: Path, requests: int = 160, measured: dict | None = None, **engine) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA2_7B))
    rng = np.random.default_rng(1)
    arrivals = np.cumsum(rng.exponential(0.2, requests))
    lines = ["index,stage,arrival_s,input_tokens,output_tokens,prompt_id"]
    for i, a in enumerate(arrivals):
        lines.append(f"{i},{int(i >= requests // 2)},{a:.6f},{300 + i % 7},{20 + i % 5},{i % 10}")
    (tmp_path / "trace.csv").write_text("\n".join(lines) + "\n")
    stages = [{"index": k, "rate_qps": 5.0, **({"measured": measured[k]} if measured else {})} for k in (0, 1)]
    run = {"format": "measured-run/1", "name": "tiny", "model": {"config": "config.json", "dtype": "float16"},
           "gpu": {"name": "NVIDIA H100 80GB HBM3"}, "parallel": {"tensor": 1},
           "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": 4096, "block_size": 16,
                      "num_gpu_blocks": 4000, **engine},
           "workload": {"trace": "trace.csv", "prompts": {"system_prompt_len": 100, "prompts_per_group": 5}},
           "stages": stages}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    return path


def test_run_errors_are_one_line_naming_the_key(tmp_path: Path):
    path = _write_run(tmp_path, block_size=0)
    with pytest.raises(RunError, match=r"run.json: key 'engine.block_size': must be between 1 and 4,096, got 0"):
        read_run(path)
    data = json.loads(path.read_text())
    data["format"] = "other"
    path.write_text(json.dumps(data))
    with pytest.raises(RunError, match="key 'format': expected 'measured-run/1'"):
        read_run(path)


def test_the_fit_recovers_the_coefficients_that_made_the_measurements(tmp_path: Path):
    """Stage means 'measured' by the replay itself under known coefficients: the fit,
    started from the priors and not pulled toward them, reproduces them."""
    truth = StepCoefficients(gemm=1.4, kv_read=1.1, step=2.5e-3, requests=4e-5, request_overhead_s=12e-3)
    plan = read_run(_write_run(tmp_path))
    measured = {s.index: s.predicted for s in stage_figures(plan, replay_run(plan, truth))}
    run = read_run(_write_run(tmp_path, measured=measured))
    def worst(coefficients: StepCoefficients) -> float:
        return max(abs(stage.error_pct[metric]["mean"]) for stage in stage_figures(run, replay_run(run, coefficients))
                   for metric in ("e2e_ms", "ttft_ms", "tpot_ms"))

    assert worst(StepCoefficients()) > 10.0  # the priors are far off: the fit has work to do
    assert worst(fit([run], rounds=8, prior_weight=1e-6)) < 1.0


def test_check_run_prints_predicted_beside_measured(tmp_path: Path):
    """``tuner check-run --json`` in the issue's shape; a plan (no measured figures) gets
    predictions only; a broken run file is one line and exit code 2."""
    from click.testing import CliRunner

    from tuner.cli import main

    plan = _write_run(tmp_path)
    done = CliRunner().invoke(main, ["check-run", str(plan), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["run"] == "tiny" and [s["index"] for s in report["stages"]] == [0, 1]
    assert report["stages"][0]["measured"] is None and report["stages"][0]["error_pct"] is None
    assert set(report["stages"][0]["predicted"]) == {"e2e_ms", "ttft_ms", "tpot_ms"}
    assert set(report["stages"][0]["predicted"]["e2e_ms"]) == {"mean", "p50", "p90", "p99"}
    measured = {k: {m: {s: 100.0 for s in ("mean", "p50", "p90", "p99")} for m in ("e2e_ms", "ttft_ms", "tpot_ms")}
                for k in (0, 1)}
    run = _write_run(tmp_path, measured=measured)
    done = CliRunner().invoke(main, ["check-run", str(run)])
    assert done.exit_code == 0 and "predicted / measured (error)" in done.output
    stage = json.loads(CliRunner().invoke(main, ["check-run", str(run), "--json"]).output)["stages"][1]
    assert stage["error_pct"]["e2e_ms"]["mean"] == pytest.approx(stage["predicted"]["e2e_ms"]["mean"] - 100.0)
    ignored = CliRunner().invoke(main, ["check-run", str(run), "--tp", "2"])
    assert ignored.exit_code == 2 and "names its own deployment; --tp applies" in ignored.output
    (tmp_path / "config.json").write_text("[]")
    done = CliRunner().invoke(main, ["check-run", str(run)])
    assert done.exit_code == 2 and done.output.count("\n") == 1 and "expected a JSON object" in done.output


def test_check_run_reads_a_vllm_bench_serve_result(tmp_path: Path):
    """A `vllm bench serve --save-detailed` result: the deployment from the options, the
    arrivals drawn from its rate; figures it did not save (e2el, p90) are null."""
    from click.testing import CliRunner

    from tuner.cli import main

    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA2_7B))
    result = {"backend": "vllm", "model_id": "meta-llama/Llama-2-7b-hf", "request_rate": 2.0, "burstiness": 1.0,
              "max_concurrency": None, "completed": 40, "input_lens": [300 + i for i in range(40)],
              "output_lens": [30] * 40, "mean_ttft_ms": 30.0, "median_ttft_ms": 28.0, "p99_ttft_ms": 60.0,
              "mean_tpot_ms": 7.5, "median_tpot_ms": 7.4, "p99_tpot_ms": 9.0}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result))
    runner = CliRunner()
    done = runner.invoke(main, ["check-run", str(path), "--json", "--model", str(config),
                                "--max-num-seqs", "128", "--max-num-batched-tokens", "2048"])
    assert done.exit_code == 0, done.output
    stage = json.loads(done.output)["stages"][0]
    assert stage["requests"] == 40 and stage["measured"]["e2e_ms"]["mean"] is None
    assert stage["measured"]["ttft_ms"]["mean"] == 30.0 and stage["error_pct"]["ttft_ms"]["p90"] is None
    assert stage["predicted"]["tpot_ms"]["mean"] > 0
    text = runner.invoke(main, ["check-run", str(path), "--model", str(config)]).output
    assert "/ –" in text  # a figure the run did not report
    missing = runner.invoke(main, ["check-run", str(path)])
    assert missing.exit_code == 2 and "pass --model CONFIG.json" in missing.output
    path.write_text(json.dumps({**result, "max_concurrency": 8}))
    closed = runner.invoke(main, ["check-run", str(path), "--model", str(config)])
    assert closed.exit_code == 2 and "closed-loop" in closed.output


def _inference_perf_folder(tmp_path: Path) -> tuple[Path, list[float]]:
    """A report folder as inference-perf writes it: two stage files and the per-request
    file, in the v0.4 layout (info.input_tokens ...) and the v0.6 one (request_metrics,
    response_metrics), with one failed request. Returns the e2e times of stage 0."""
    folder = tmp_path / "reports-20260101-000000"
    folder.mkdir()
    entries, stage0 = [], []
    for i in range(40):
        start = 1000.0 + 0.5 * i
        e2e = 0.3 + 0.01 * i
        times = [start + 0.02 + 0.01 * k for k in range(20)]
        payload = json.dumps({"prompt": f"question {i % 5}", "max_tokens": 20})
        if i % 2:
            info = {"input_tokens": 200, "output_tokens": 20, "output_token_times": times}
        else:
            info = {"request_metrics": {"text": {"input_tokens": 200}},
                    "response_metrics": {"output_tokens": 20, "output_token_times": times}}
        entries.append({"start_time": start, "end_time": start + e2e, "request": payload, "response": "",
                        "info": info, "error": None})
        if i < 20:
            stage0.append(e2e)
    entries.append({"start_time": 999.0, "end_time": 999.5, "request": "{}", "response": "", "info": {},
                    "error": {"error_type": "timeout", "error_msg": "x"}})
    (folder / "per_request_lifecycle_metrics.json").write_text(json.dumps(entries))
    for index, count in ((0, 21), (1, 20)):  # inference-perf's count includes failures: stage 0's one
        (folder / f"stage_{index}_lifecycle_metrics.json").write_text(
            json.dumps({"load_summary": {"count": count, "requested_rate": 2.0}, "successes": {"count": 20}}))
    return folder, stage0


def test_check_run_reads_an_inference_perf_report(tmp_path: Path):
    """Stages split by the stage files' counts (failures included) in start order; measured
    e2e from each request's end - start (seconds -> ms); the failed request left out."""
    from click.testing import CliRunner

    from tuner.cli import main

    folder, stage0 = _inference_perf_folder(tmp_path)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA2_7B))
    done = CliRunner().invoke(main, ["check-run", str(folder), "--json", "--model", str(config)])
    assert done.exit_code == 0, done.output
    stages = json.loads(done.output)["stages"]
    assert [s["requests"] for s in stages] == [20, 20]
    assert stages[0]["measured"]["e2e_ms"]["mean"] == pytest.approx(1e3 * sum(stage0) / 20)
    assert stages[0]["measured"]["ttft_ms"]["mean"] == pytest.approx(20.0)
    assert stages[0]["predicted"]["e2e_ms"]["mean"] > 0
    bare = CliRunner().invoke(main, ["check-run", str(folder)])
    assert bare.exit_code == 2 and "names no deployment" in bare.output
    (folder / "per_request_lifecycle_metrics.json").unlink()
    missing = CliRunner().invoke(main, ["check-run", str(folder), "--model", str(config)])
    assert missing.exit_code == 2 and "per_request: true" in missing.output
