"""``scripts/gpu-check.sh --dry-run``: every step of the prepared GPU check run on the CPU
through the ``torch.cuda`` stand-in, so the script cannot break before a GPU is lent.

Each step must end ok, leave its record in the check's JSON as it ends, and make the CUDA
calls its GPU run makes (the stand-in counts them): CUDA-graph capture and replay, timing
events and the family launches for (a); streams, spin kernels, device allocations and the
free-memory query for (c), kernel launches where the problem has kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The calls each step's GPU path must have reached (a subset of what it made).
REACHED = {
    "family_latency": {"CUDAGraph", "graph", "CUDAGraph.replay", "Event.record", "Event.elapsed_time",
                       "Stream.wait_stream", "stream", "family.make_inputs(device=cuda)", "family.run",
                       "get_device_properties"},
    "replay_seed_example_heavy_lean": {"Stream", "stream", "Stream.synchronize", "spin kernel", "Event.record",
                                       "get_device_properties", "mem_get_info", "torch.empty(device=cuda)", "is_available"},
    "replay_llm_decode_heavy_table": {"Stream", "stream", "Stream.synchronize", "family.make_inputs(device=cuda)",
                                      "family.run", "spin kernel", "mem_get_info", "torch.empty(device=cuda)"},
}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("gpu-check")
    env = {**os.environ, "TUNER_PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    records = list(out.glob("gpu_check_dry-run_*.json"))
    assert len(records) == 1, (done.stdout, done.stderr)
    return done, json.loads(records[0].read_text())


def test_every_step_runs_on_the_stand_in_and_is_recorded(dry_run) -> None:
    done, record = dry_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from benchmarks.gpu_check import STEPS

    assert list(record["steps"]) == [step.name for step in STEPS]
    assert all(step["status"] == "ok" and step["rc"] == 0 for step in record["steps"].values())
    assert record["dry_run"] is True and record["date"]
    assert {"device", "driver", "torch", "triton", "python", "sms"} <= set(record["environment"])
    from benchmarks.gpu_check import ENVIRONMENT_LIMIT_S, TOTAL_LIMIT_S

    assert ENVIRONMENT_LIMIT_S + sum(step.limit_s for step in STEPS) <= TOTAL_LIMIT_S == 480  # 8 minutes


def test_each_step_reaches_its_cuda_calls(dry_run) -> None:
    _, record = dry_run
    for name, calls in REACHED.items():
        made = record["steps"][name]["standin_calls"]
        assert calls <= set(made), (name, sorted(calls - set(made)))


def test_the_steps_results_are_what_their_gpu_runs_write(dry_run) -> None:
    """(a) rows with a modeled and a measured time per case, several families; (c) the
    replay's JSON with the simulated figures beside, on the requested assignment."""
    _, record = dry_run
    family = record["steps"]["family_latency"]["result"]
    assert {row["family"] for row in family["rows"]} >= {"matmul", "rmsnorm", "decode_attention"}
    assert all(row["modeled_us"] > 0 and row["measured_us"] >= 0 for row in family["rows"])
    for name in ("replay_seed_example_heavy_fast", "replay_llm_decode_light_isolated_fastest"):
        result = record["steps"][name]["result"]
        assert result["replay"]["device"] == "cuda" and "simulated" in result
        assert "issue_share" in result["replay"]  # the host-bound diagnosis a GPU run needs (None: no batch ran)
    assert 0 < record["steps"]["replay_seed_example_heavy_fast"]["result"]["replay"]["issue_share"] <= 1
    assert record["steps"]["replay_seed_example_heavy_fast"]["result"]["assignment"]["stage"] == "fast"
    assert record["steps"]["replay_seed_example_heavy_lean"]["trace"].endswith("_lean.trace.json.gz")


def test_the_readme_summary_reads_a_record(dry_run) -> None:
    from benchmarks.gpu_check import render

    _, record = dry_run
    text = render([record])
    assert "8 of 8 steps ok" in text and "(a) matmul" in text
    assert "(c) seed_example_heavy_fast" in text and "(c) llm_decode_heavy_table" in text
    assert render([]).startswith("No run of scripts/gpu-check.sh has been recorded yet")
