"""benchmarks/gpu_sharing.py on a machine without a GPU (issue 24, item 8).

What a CPU can check of a script meant for a GPU session: it exits 0 with one line when no
CUDA GPU is present (and writes nothing); the model's predictions it stores beside each
measurement compute, and say what issue 24 hand-computes (a persistent full-device grid
beside 16 held SMs runs two rounds, the margin-16 grid one; a priority kernel behind a
persistent full-device grid waits for its end); its holder kernel compiles for sm_90 to a
CTA that holds a whole SM against the GEMM; and its measuring code, fed synthetic timings
in place of CUDA events, produces the JSON and the table it promises.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_sharing.py"


@pytest.fixture(scope="module")
def gs(tmp_path_factory):
    """The script as a module, its compile cache copies kept out of the checkout's results.db."""
    db = tmp_path_factory.mktemp("gpu_sharing") / "cache.db"
    old = os.environ.get("TUNER_STORAGE")
    os.environ["TUNER_STORAGE"] = f"sqlite:///{db}"
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield importlib.import_module("gpu_sharing")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        if old is None:
            os.environ.pop("TUNER_STORAGE", None)
        else:
            os.environ["TUNER_STORAGE"] = old


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "measured.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TUNER_STORAGE": f"sqlite:///{tmp_path / 'c.db'}"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_sharing: no CUDA GPU available"), done.stdout
    assert "nothing measured" in lines[0]
    assert not out.exists()


def test_predicted_ratios_are_issue_24s_rounds(gs) -> None:
    r = gs.predicted_ratios()  # h100, 16 held SMs
    # 132 CTAs on 116 free SMs: two rounds (a little under 2x: the GEMM's DRAM-bound share)
    assert 1.8 < r["persistent_full_beside_over_alone"] <= 2.0
    # 116 CTAs on 116 free SMs: one round, as alone
    assert r["persistent_margin16_beside_over_alone"] == pytest.approx(1.0, abs=1e-6)
    # 2048 tiles: 16 waves of 132 become 18 of 116
    assert 1.0 < r["tiled_beside_over_alone"] < 1.25
    # the margin costs about 132/116 alone, and wins beside the holder
    assert 1.05 < r["margin16_alone_over_full_alone"] < 132 / 116 + 0.02
    assert r["margin16_beside_over_full_alone"] < r["persistent_full_beside_over_alone"]
    # no preemption: behind the full-device persistent grid, the priority kernel starts at its end
    assert r["priority_persistent_full_delay_over_left"] == pytest.approx(1.0, abs=1e-6)
    assert r["priority_persistent_full_light_delay_over_left"] == pytest.approx(1.0, abs=1e-6)
    # 16 SMs left free by the margin: at once; behind tiles: by the next wave's end
    assert r["priority_persistent_margin16_delay_over_left"] == pytest.approx(0.0, abs=1e-9)
    assert r["priority_tiled_delay_over_left"] < 1.0 / 15


def test_predictions_follow_bench_sharings_modeled_path(gs) -> None:
    from bench_sharing import wave_slowdown
    from tuner.profile.devices import H100

    p = gs.predictions(H100)
    assert {name: g["grid"] for name, g in p["gemm"].items()} == {
        "persistent_full": 132, "persistent_margin16": 116, "tiled": 2048}
    for persistent in (True, False):
        phases = gs.modeled_phases(H100, gs.gemm_config(0, persistent))
        assert gs.simulate_beside(H100, phases, 16) == pytest.approx(wave_slowdown(H100, 16, persistent), rel=1e-12)
    # a GPU with fewer SMs gets the preset's constants with its own SM count
    preset, note = gs.preset_for("NVIDIA H100 PCIe", 114)
    assert preset.name == "h100" and preset.sms == 114 and "114" in note
    assert gs.preset_for("NVIDIA H200")[0].name == "h200"
    assert gs.predictions(preset)["gemm"]["persistent_margin16"]["grid"] == 98


def test_predict_option_prints_the_model_without_a_gpu(gs, capsys) -> None:
    assert gs.main(["--predict", "--preset", "h200"]) == 0
    text = capsys.readouterr().out
    assert "h200 (132 SMs)" in text and "persistent_margin16" in text and "1.00x" in text


def test_holder_kernel_holds_a_whole_sm_against_the_gemm(gs) -> None:
    from tuner.profile.compiled import compile_launch
    from tuner.profile.devices import H100

    holder = compile_launch(gs.hold_launch(16, True), H100)
    assert holder.reason is None and holder.ctas_per_sm == 1
    gemm = gs.modeled_resources(H100, gs.gemm_config())
    assert gemm["ctas_per_sm"] == 1
    # no GEMM CTA fits beside a holder CTA (1 KiB reserved per CTA)
    assert holder.smem_bytes + gemm["shared_bytes"] + 2048 > H100.smem_per_sm
    assert 2 * (holder.smem_bytes + 1024) > H100.smem_per_sm  # nor a second holder CTA
    gate = compile_launch(gs.hold_launch(1, False), H100)
    assert gate.reason is None and gate.smem_bytes < 4096


class _FakeEvent:
    pass


class _FakeBench:
    """Bench's interface with synthetic timings: the model's times, as a GPU would obey it."""

    def __init__(self, gs, args) -> None:
        from bench_sharing import WAVE_GEMM
        from tuner.kernels import get_family
        from tuner.profile.devices import H100

        self.args, self.shape, self.family, self.sms = args, dict(WAVE_GEMM), get_family("matmul"), 132
        self.model = gs.predictions(H100)
        self.compiled = {"holder": SimpleNamespace(metadata=SimpleNamespace(shared=147456, num_warps=8), n_regs=164)}

    def gemm_sample(self, case, beside, hold_s):
        g = self.model["gemm"][case]
        sample = {"ms": 1e3 * (g["beside_s"] if beside else g["alone_s"])}
        if beside:
            sample.update(holder_sms=16, holder_outlived_gemm=True)
        return sample

    def priority_alone_ms(self, light):
        return [0.025] * self.args.reps

    def priority_sample(self, case, gemm_ms, light):
        name = "persistent_full_light" if light else case
        r = self.model["priority"][name]
        return {"submit_ms": 1e3 * r["submit_s"], "gemm_left_ms": 1e3 * r["gemm_left_s"],
                "p_ms": 0.025 + 1e3 * r["start_delay_s"], "gemm_ms": gemm_ms}


def test_measuring_code_writes_the_promised_json(gs, monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(gs, "cuda_unavailable", lambda: None)
    monkeypatch.setattr(gs, "environment", lambda: {
        "device": "NVIDIA H100 80GB HBM3", "sms": 132, "compute_capability": "9.0", "memory_gib": 79.1,
        "driver": "550.54.15", "cuda": "12.4", "torch": "2.x", "triton": "3.x", "python": "3.11",
        "stream_priority_range": [0, -5]})
    monkeypatch.setattr(gs, "Bench", lambda args: _FakeBench(gs, args))
    monkeypatch.setattr(gs, "check_output", lambda bench: {"max_abs_error_over_max_abs": {}, "ok": True})
    out = tmp_path / "data" / "measured.json"
    assert gs.main(["--out", str(out), "--reps", "3", "--warmup", "1"]) == 0
    result = json.loads(out.read_text())
    for key in ("date", "environment", "model", "settings", "kernels", "checks", "gemm_sharing", "priority"):
        assert key in result
    assert {"device", "driver", "cuda", "torch", "triton"} <= set(result["environment"])
    assert result["kernels"]["holder_leaves_no_room_for_a_gemm_cta"] is True
    rows = {r["case"]: r for r in result["gemm_sharing"]}
    assert set(rows) == {"persistent_full", "persistent_margin16", "tiled"}
    for r in rows.values():  # the synthetic GPU obeys the model: measured ratio = modeled ratio
        assert r["measured_ratio"] == pytest.approx(r["modeled"]["ratio"], rel=1e-9)
        assert r["grid"] == r["modeled"]["grid"] and r["holder_outlived_gemm"]
    prio = {r["case"]: r for r in result["priority"]}
    assert set(prio) == {"persistent_full", "persistent_margin16", "tiled", "persistent_full_light"}
    assert prio["persistent_full"]["measured_delay_over_left"] == pytest.approx(1.0, rel=1e-6)
    assert prio["persistent_full"]["modeled"]["delay_over_left"] == pytest.approx(1.0, rel=1e-6)
    assert prio["persistent_margin16"]["measured_delay_over_left"] == pytest.approx(0.0, abs=1e-6)
    text = capsys.readouterr().out
    assert "(a) 8192^3 bf16 matmul" in text and "(b) high-priority kernel" in text and "wrote" in text


def test_a_failing_case_keeps_the_others_and_exits_1(gs, monkeypatch, tmp_path: Path) -> None:
    class Broken(_FakeBench):
        def priority_sample(self, case, gemm_ms, light):
            if case == "tiled":
                raise RuntimeError("launch failed")
            return super().priority_sample(case, gemm_ms, light)

    monkeypatch.setattr(gs, "cuda_unavailable", lambda: None)
    monkeypatch.setattr(gs, "environment", lambda: {
        "device": "NVIDIA H200", "sms": 132, "compute_capability": "9.0", "memory_gib": 139.8, "driver": None,
        "cuda": "12.4", "torch": "2.x", "triton": "3.x", "python": "3.11", "stream_priority_range": [0, -5]})
    monkeypatch.setattr(gs, "Bench", lambda args: Broken(gs, args))
    monkeypatch.setattr(gs, "check_output", lambda bench: {"max_abs_error_over_max_abs": {}, "ok": True})
    out = tmp_path / "measured.json"
    assert gs.main(["--out", str(out), "--reps", "2", "--warmup", "0"]) == 1
    result = json.loads(out.read_text())
    assert len(result["gemm_sharing"]) == 3 and len(result["priority"]) == 3
    assert result["errors"] == ["(b) tiled: RuntimeError: launch failed"]
    assert result["model"]["preset"] == "h200"
