"""``tuner profile``: one query as JSON, filling a problem's cache, and bad input."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from tuner.cli import main

KEYS = {"family", "shape", "device", "config", "latency_s", "workspace_bytes", "smem_bytes", "regs_per_thread",
        "ctas", "ctas_per_sm", "persistent", "source"}


def run(*args: str):
    return CliRunner().invoke(main, ["profile", *args])


def test_one_query_answers_json_with_the_documented_keys(tmp_path):
    storage = f"sqlite:///{tmp_path / 'cache.db'}"
    result = run("--family", "rmsnorm", "--shape", "M=4,N=4096", "--device", "a100", "--storage", storage, "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert KEYS <= set(answer)
    assert answer["family"] == "rmsnorm" and answer["device"] == "a100" and answer["source"] == "modeled"
    assert answer["latency_s"] > 0 and answer["ctas_per_sm"] >= 1 and answer["regs_per_thread"] > 0
    again = run("--family", "rmsnorm", "--shape", "M=4,N=4096", "--device", "a100", "--storage", storage, "--json")
    assert json.loads(again.output) == answer  # served from the cache, same numbers


NORMS = {
    "name": "norms", "device": {"name": "h200"},
    "service": {"batching": "dynamic", "max_batch": 4, "memory": {"budget": "1 GiB", "per_request": "1 MiB"},
                "operators": [{"name": "norm", "family": "norm", "shape": {"M": "batch", "N": 4096}}],
                "slo": {"deadline": "1 s"}},
    "families": {"norm": {"kernel": "rmsnorm", "space": {"FUSE_RESIDUAL": [True, False]}}},
    "regimes": {"r": {"arrivals": {"process": "poisson", "rate": 1}}},
}


def test_filling_a_problem_reports_legal_configs(tmp_path):
    path = tmp_path / "norms.yaml"
    path.write_text(yaml.safe_dump(NORMS))
    result = run(str(path), "--storage", f"sqlite:///{tmp_path / 'cache.db'}", "--workers", "1", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["device"] == "h200"
    assert report["families"] == [{"family": "norm", "kernel": "rmsnorm", "configs": 2, "legal": 2, "illegal": 0,
                                   "illegal_reasons": {}}]


@pytest.mark.parametrize("quiet", [False, True])
def test_compiling_logs_progress_lines_on_a_non_terminal_and_none_with_quiet(monkeypatch, tmp_path, quiet):
    """A cold cache compiles for minutes: in a log (stderr no terminal) a line every few
    seconds (here every compile) says how many of how many, and -q silences it."""
    from tuner.cli.progress import TerminalProgress

    monkeypatch.setattr(TerminalProgress, "INTERVAL_S", 0.0)
    path = tmp_path / "norms.yaml"
    path.write_text(yaml.safe_dump(NORMS))
    result = run(str(path), "--storage", f"sqlite:///{tmp_path / 'cache.db'}", "--workers", "1",
                 *(["-q"] if quiet else []))
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("tuner profile: compiling: ")]
    if quiet:
        assert not result.stderr
    else:
        assert lines[-1] == "tuner profile: compiling: 3/3 kernels", result.stderr  # 3 distinct compiles


@pytest.mark.parametrize("args, needle", [
    (["--family", "matmull", "--shape", "M=1,N=1,K=1"], "unknown kernel family"),
    (["--family", "matmul", "--shape", "M=1,N=1"], "'K' is missing"),
    (["--family", "matmul", "--shape", "M=1,N=1,K=1,Q=2"], "'Q' is not one"),
    (["--family", "matmul", "--shape", "M=0,N=1,K=1"], "positive integers"),
    (["--family", "matmul", "--shape", "M=1,N=1,K=1", "--config", "BLOCK_M=48"], "outside the space"),
    (["--family", "matmul", "--shape", "M=1,N=1,K=1", "--config", "BLOCK_Q=1"], "not a parameter"),
    (["--family", "matmul", "--shape", "M=8,N=8,K=8", "--config", "FUSE_EPILOGUE=false"], "needs an epilogue"),
    (["--family", "matmul", "--option", "epilogue=tanh", "--shape", "M=1,N=1,K=1"], "tanh"),
    (["--shape", "M=1"], "go with --family"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    result = run(*args, "--storage", f"sqlite:///{tmp_path / 'c.db'}")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tuner: error: ") and needle in lines[0], result.stderr


def test_cuda_without_a_gpu_says_so(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    result = run("--device", "cuda", "--storage", f"sqlite:///{tmp_path / 'c.db'}")
    assert result.exit_code == 2 and "no CUDA GPU" in result.stderr
