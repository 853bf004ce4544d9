"""benchmarks/gpu_gemm_decode.py on a machine without a GPU: the one-line exit, and the
model's side, checked against the DRAM roofline it is reported beside."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_gemm_decode.py"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TUNER_STORAGE": f"sqlite:///{tmp_path / 'c.db'}"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "measured.json"
    done = _run(tmp_path, "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_gemm_decode: no CUDA GPU available"), done.stdout
    assert not out.exists()


def test_the_model_is_never_faster_than_the_roofline(tmp_path: Path) -> None:
    """Every shape gets a modeled time, and none beats DRAM bandwidth and tensor peak:
    o_proj at M=1 reads 4096 x 4096 bf16 weights, 33.5 MB, 7.0 us at 4.8 TB/s (H200)."""
    done = _run(tmp_path, "--predict", "--preset", "h200")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.strip().splitlines()]
    assert len(rows) == 20
    for row in rows:
        roofline, modeled = float(row[3]), float(row[7])
        assert modeled >= roofline, row
    o_proj = next(r for r in rows if r[0] == "o_proj" and r[1] == "M=1")
    assert float(o_proj[3]) == 7.0
