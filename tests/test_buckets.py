"""Shape buckets: what the loader makes of them, the per-bucket baseline, the simulator's
per-launch choice and reservation, and the runtime serving the same bucket's config.

The small problem here has one GEMM-like operator whose shape is ``M = n`` (the size of
the one request in a batch) and three declared configs whose latencies cross: ``small``
is fastest for tiny M, ``mid`` in the middle, ``big`` for large M. Expectations are
worked out from the formulas by hand (and by a scan here), not read from the code.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import schema_3_fields
import yaml

from tuner.errors import ProblemError
from tuner.problem import load_problem, resolve_assignment
from tuner.problem.assignment import Assignment
from tuner.runtime import Dispatcher, read_table
from tuner.search import ONE_CONFIG, PER_BUCKET, JointSpace
from tuner.sim import simulate
from tuner.store.export import export_json

ROOT = Path(__file__).resolve().parents[1]

# latency in ms as a function of M: the fastest config changes at M = 4 and M = 16
LATENCY_MS = {
    "small": lambda m: 1.0 + 1.0 * m,        # 2 ms at M=1, 17 at 16
    "mid": lambda m: 3.0 + 0.5 * m,          # 3.5 at 1, 5 at 4, 11 at 16
    "big": lambda m: 8.0 + 0.125 * m,        # 8.125 at 1, 10 at 16, 12 at 32
}
LATENCY_TEXT = {"small": "1 ms + 1 ms * M", "mid": "3 ms + 0.5 ms * M", "big": "8 ms + 0.125 ms * M"}
WORKSPACE_MIB = {"small": "0", "mid": "0", "big": "M * 1 MiB"}


def crossing_problem(buckets: object = None, sizes: list[int] | None = None) -> dict:
    op = {"name": "gemm", "family": "gemm", "shape": {"M": "n"}}
    if buckets is not None:
        op["buckets"] = buckets
    configs = [{"name": name, "params": {"v": name},
                "profile": {"latency": LATENCY_TEXT[name], "workspace": WORKSPACE_MIB[name], "sm": 0.1, "dram": 0.1}}
               for name in LATENCY_MS]
    return {
        "name": "crossing",
        "service": {"batching": "dynamic", "max_batch": 1, "max_context": 32, "executors": 1,
                    "memory": {"budget": "8 GiB", "fixed": "1 GiB", "per_request": "1 MiB"},
                    "operators": [op], "slo": {"deadline": "1 s"}},
        "families": {"gemm": {"space": {"v": list(LATENCY_MS)}, "configs": configs}},
        "regimes": {"sparse": {"arrivals": {"process": "poisson", "rate": 2},
                               "sizes": {"n": {"dist": "empirical", "values": sizes or [1, 3, 9, 20, 32]}},
                               "horizon": "20 s"}},
    }


def write(tmp_path: Path, document: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def fastest_by_scan(m: float) -> str:
    return min(LATENCY_MS, key=lambda name: (LATENCY_MS[name](m), list(LATENCY_MS).index(name)))


# --- the loader ----------------------------------------------------------------------------


def test_default_buckets_are_powers_of_two_over_the_reachable_range(tmp_path):
    problem = load_problem(write(tmp_path, crossing_problem()))
    bucketing = problem.operator("gemm").bucketing
    # n ranges over 1..max_context (32): edges 1, 2, 4, 8, 16, 32
    assert bucketing.key == ("M",) and bucketing.edges == ((1, 2, 4, 8, 16, 32),)
    assert [b.label for b in bucketing.buckets] == ["M..1", "M2", "M3..4", "M5..8", "M9..16", "M17..32"]
    assert [bucketing.index({"M": m}) for m in (1, 2, 3, 4, 5, 16, 17, 32, 1000)] == [0, 1, 2, 2, 3, 4, 5, 5, 5]


def test_default_keys_of_the_built_in_families():
    problem = load_problem(ROOT / "search_spaces" / "llm_decode.yaml")
    keys = {op.name: op.bucketing.key for op in problem.service.operators}
    assert keys["qkv"] == ("M",) and keys["input_norm"] == ("M",)
    assert keys["decode_attn"] == ("B", "L")  # split-KV depends on batch and context
    assert keys["prefill_attn"] == ()  # one declared config: nothing to choose per shape
    assert problem.operator("qkv").bucketing.edges == (tuple(2.0 ** k for k in range(14)),)  # M = 1 … 8192
    assert problem.operator("lm_head").bucketing.edges == (tuple(2.0 ** k for k in range(8)),)  # M = batch ≤ 128


def test_explicit_buckets_and_an_opt_out(tmp_path):
    problem = load_problem(write(tmp_path, crossing_problem(buckets={"M": [4, 16, 32]})))
    assert [b.label for b in problem.operator("gemm").bucketing.buckets] == ["M..4", "M5..16", "M17..32"]
    assert problem.warnings == ()
    one = load_problem(write(tmp_path, crossing_problem(buckets={}), "one.yaml"))
    assert one.operator("gemm").bucketing.size == 1


@pytest.mark.parametrize(("buckets", "reason"), [
    ({"M": [16, 4]}, r"buckets\.M: edges must be strictly ascending but 4 follows 16"),
    ({"M": [4, 4, 8]}, r"buckets\.M: edges must be strictly ascending but 4 follows 4"),
    ({"K": [4, 8]}, r"buckets\.K: 'K' is not a shape dimension of operator 'gemm' \(dimensions: M\)"),
    ({"M": []}, r"buckets\.M: lists no edge"),
    ({"M": "many"}, r"buckets\.M"),
])
def test_bad_buckets_are_one_line_errors(tmp_path, buckets, reason):
    path = write(tmp_path, crossing_problem(buckets=buckets))
    with pytest.raises(ProblemError, match=reason) as info:
        load_problem(path)
    message = str(info.value)
    assert message.startswith(f"{path}: service.operators[0].buckets") and "\n" not in message


def test_a_bucket_no_shape_reaches_is_a_warning(tmp_path):
    path = write(tmp_path, crossing_problem(buckets={"M": [4, 32, 64, 128]}))
    problem = load_problem(path)
    # M never exceeds 32 (n ≤ max_context): M33..64 and M65..128 hold no reachable shape
    assert [w.split(": ")[2] for w in problem.warnings] == ["bucket M33..64 of operator 'gemm' holds no shape the "
                                                           "service reaches (M from 1 to 32); it keeps the "
                                                           "family's default config"] + [problem.warnings[1].split(": ")[2]]
    assert problem.warnings[1].startswith(f"{path}: service.operators[0].buckets: bucket M65..128")


# --- the per-bucket baseline and the runtime ---------------------------------------------


def test_per_bucket_baseline_is_the_fastest_config_at_each_bucket_and_the_runtime_serves_it(tmp_path):
    problem = load_problem(write(tmp_path, crossing_problem()))
    space = JointSpace.of(problem)
    baseline = PER_BUCKET.assignment(space)
    bucketing = problem.operator("gemm").bucketing
    # by hand: representative M = the bucket's upper edge: 1, 2, 4, 8, 16, 32
    expected = [fastest_by_scan(m) for m in (1, 2, 4, 8, 16, 32)]
    assert expected == ["small", "small", "small", "mid", "big", "big"]  # 5 = 5 at M=4: file order keeps small
    assert [c.name for c in baseline.configs("gemm")] == expected
    # the one-config baseline judges at the largest batch (M = 32) only: big everywhere
    assert [c.name for c in ONE_CONFIG.assignment(space).configs("gemm")] == ["big"] * 6

    rows = baseline.to_rows(problem, "sparse", _provenance(), baseline=baseline)
    table = read_table(export_json(problem.name, rows, tmp_path / "table.json"))
    dispatcher = Dispatcher(table)
    for bucket, config in zip(bucketing.buckets, baseline.configs("gemm")):
        _, low, high = bucket.bounds[0]
        for m in range(1 if math.isinf(low) else int(low) + 1, int(high) + 1):
            assert dispatcher.config("gemm", {"M": m})["v"] == config.name, (m, bucket.label)
    assert dispatcher.config("gemm", {"M": 4096})["v"] == "big"  # beyond the last edge: the last bucket
    assert Assignment.from_rows(problem, table.regime_rows("sparse"), "t") == baseline


def _provenance() -> dict:
    from datetime import datetime, timezone

    return dict(device="generic", triton_version=None, problem_hash="h", study_name="s", trial_number=0,
                seeds=1, horizon_s=1.0, goodput_rps=1.0, goodput_ci_rps=None, baseline_goodput_rps=1.0,
                delta_ci_rps=None, one_config_goodput_rps=None, oracle_goodput_rps=None, regime_rate_rps=2.0,
                created_at=datetime(2026, 12, 1, tzinfo=timezone.utc), **schema_3_fields())


# --- the simulator --------------------------------------------------------------------------


def test_each_launch_uses_its_buckets_config(tmp_path):
    # every request has n = 3 (bucket M3..4) and arrives alone (2 req/s, 5 ms at most):
    # its latency is exactly the bucket's config's time at M = 3
    problem = load_problem(write(tmp_path, crossing_problem(sizes=[3])))
    for name in LATENCY_MS:
        assignment = resolve_assignment(problem, ["gemm=small", f"gemm@M3..4={name}"])
        result = simulate(problem, assignment, "sparse", seed=0)
        assert result.metrics.latency_p50_s == pytest.approx(LATENCY_MS[name](3) / 1e3)
        assert result.visited == {("gemm", 2)}


def test_reservation_is_the_largest_workspace_over_reachable_buckets(tmp_path):
    # big needs M MiB: in bucket M5..8 that is 8 MiB (its largest shape), in M17..32 32 MiB;
    # an explicit bucket beyond the reach (M33..64) is never reserved for
    problem = load_problem(write(tmp_path, crossing_problem(buckets={"M": [8, 32, 64]})))
    mib = 2**20
    cases = {("small", "big", "small"): 32 * mib, ("big", "small", "small"): 8 * mib,
             ("small", "small", "big"): 0, ("small", "small", "small"): 0}
    for names, reserved in cases.items():
        specs = [f"gemm@{i}={name}" for i, name in enumerate(names)]
        metrics = simulate(problem, resolve_assignment(problem, specs), "sparse", seed=0, horizon_s=1).metrics
        assert metrics.reserved_workspace_bytes == reserved, names


def test_the_text_codec_round_trips_and_runs_merge_buckets(tmp_path):
    problem = load_problem(write(tmp_path, crossing_problem()))
    baseline = PER_BUCKET.assignment(JointSpace.of(problem))
    specs = baseline.specs(problem)
    assert specs == ["gemm@M..1=small", "gemm@M2=small", "gemm@M3..4=small", "gemm@M5..8=mid",
                     "gemm@M9..16=big", "gemm@M17..32=big"]
    assert resolve_assignment(problem, specs) == baseline
    assert resolve_assignment(problem, ["gemm@3=mid"]).configs("gemm")[3].name == "mid"  # by index too
    assert baseline.summary(problem) == "gemm=[M..4:small M5..8:mid M9..32:big]"
    assert baseline.as_dict(problem) == {"gemm": {"M..1": "small", "M2": "small", "M3..4": "small",
                                                  "M5..8": "mid", "M9..16": "big", "M17..32": "big"}}
    uniform = resolve_assignment(problem, ["gemm=mid"])
    assert uniform.specs(problem) == ["gemm=mid"] and uniform.summary(problem) == "gemm=mid"


def test_validate_lists_buckets_and_refuses_bad_edges_in_one_line(tmp_path):
    from click.testing import CliRunner

    from tuner.cli import main

    good = write(tmp_path, crossing_problem(buckets={"M": [4, 32, 64]}), "good.yaml")
    result = CliRunner().invoke(main, ["validate", str(good)])
    assert result.exit_code == 0, result.output
    assert "gemm: key M, 3 buckets: M..4 M5..32 M33..64" in result.stdout
    assert "largest batch: M=32 → M5..32" in result.stdout and "batch of one: M=1 → M..4" in result.stdout
    (warning,) = result.stderr.splitlines()  # M33..64 holds no reachable shape: a warning, exit 0
    assert warning.startswith(f"tuner: warning: {good}: service.operators[0].buckets: bucket M33..64")
    bad = write(tmp_path, crossing_problem(buckets={"M": [32, 8]}), "bad.yaml")
    result = CliRunner().invoke(main, ["validate", str(bad)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [f"tuner: error: {bad}: service.operators[0].buckets.M: edges must be "
                                          "strictly ascending but 8 follows 32"]


# --- buckets the memory budget reaches jointly (issue 28, item 4) --------------------------

def _llm_decode_with(tmp_path: Path, max_batch: int) -> Path:
    """llm_decode.yaml as shipped, with vLLM's usual ``max_num_seqs`` of 256 instead of 128."""
    text = (ROOT / "search_spaces" / "llm_decode.yaml").read_text()
    assert "  max_batch: 128 " in text
    (tmp_path / "traces").symlink_to(ROOT / "search_spaces" / "traces")
    path = tmp_path / "llm_decode.yaml"
    path.write_text(text.replace("  max_batch: 128 ", f"  max_batch: {max_batch} "))
    return path


def test_decode_attention_buckets_are_reached_where_the_kv_cache_fits_them_together(tmp_path):
    """llm_decode keeps 24 − 16 = 8 GiB for the KV cache at 128 KiB per token: 65,536
    tokens, 4,096 of vLLM's 16-token blocks, a sequence holding whole blocks. 256 sequences
    and 8,192 tokens of context are each reachable, not together: B129..256 meets L129..256
    (256 × 16 blocks = 4,096) but not L513..1024 (129 × 33 blocks > 4,096); B65..128 ×
    L513..1024 is reached at 117 sequences of 35 blocks (4,095), L = 560 (120 sequences of
    546 tokens would take 120 × 35 = 4,200 blocks; 118 get 34 blocks, L = 544, a smaller
    product)."""
    problem = load_problem(_llm_decode_with(tmp_path, 256))
    bucketing = problem.operator("decode_attn").bucketing
    by_label = {b.label: b for b in bucketing.buckets}
    reached = {label for label, b in by_label.items() if bucketing.reachable(b)}
    assert {"B129..256/L129..256", "B..1/L4097..8192", "B65..128/L513..1024"} <= reached
    assert not reached & {"B129..256/L513..1024", "B129..256/L4097..8192", "B65..128/L1025..2048",
                          "B33..64/L2049..4096"}
    assert bucketing.representative(by_label["B65..128/L513..1024"]) == {"B": 117.0, "L": 560.0}
    assert bucketing.representative(by_label["B129..256/L129..256"]) == {"B": 256.0, "L": 256.0}
    # a bucket the service does not reach keeps the family default in every baseline
    space = JointSpace.of(problem)
    index = space.cells.index(("decode_attn", by_label["B129..256/L4097..8192"].index))
    assert space.choices[index] == (space.costs[index][0].config.name,)
    assert PER_BUCKET.assignment(space).config("decode_attn", index - space.cells.index(("decode_attn", 0))) \
        == space.costs[index][0].config


def test_max_batch_256_validates_and_tunes(tmp_path):
    """vLLM's usual max_num_seqs (256) on llm_decode: decode attention at B = 256 and
    L = 8192 would need 64-bit indexing, a batch of ~256 GiB of KV cache that the 8 GiB
    budget never admits; the file validates, and a short tune writes its table."""
    import subprocess
    import sys

    path = _llm_decode_with(tmp_path, 256)
    storage = f"sqlite:///{tmp_path / 'r.db'}"
    done = subprocess.run([sys.executable, "-m", "tuner", "validate", str(path)], capture_output=True, text=True,
                          cwd=tmp_path, env={**__import__("os").environ, "TUNER_STORAGE": storage}, timeout=300)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())  # lines wrap at the terminal's width
    assert "B=256, L=8192 → B129..256/L4097..8192 (no batch the memory budget admits falls here)" in said
    done = subprocess.run([sys.executable, "-m", "tuner", "tune", str(path), "--regimes", "heavy", "--trials", "1",
                           "--seeds", "1", "--horizon", "2", "-q", "--storage", storage],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows written" in done.stdout
