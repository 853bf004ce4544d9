"""What a config needs (``tuner.requirements``), the one rule of the families' plans, the
runtime's ``Dispatcher.requirements`` / ``reservation`` and the exports (issue 27 items 1,
2 and 5).

Expected workspace is derived here from each family's documented formula (split-K
partials 4·SPLIT_K·M·NW bytes, split-KV partials 4·B·H·S·(D+2), the materialized score
matrix 4·B·H·L, unfused intermediates e·M·NW, the MoE intermediates and align arrays),
never by calling the code under test, and compared with ``requirements()``, with the
families' ``plan`` and with what the simulator reserves for the committed table's
assignments.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import tuner.runtime as rt
from tests.test_runtime import row, sqlite_table as _sqlite
from tuner.errors import StorageError
from tuner.requirements import RequirementsError, requirements
from tuner.store import SCHEMA_VERSION
from tuner.store.export import export_json, export_vllm

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "results.db.example"
LOGGER = "tuner.runtime"

MATMUL = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3,
          "SPLIT_K": 1, "PERSISTENT": False, "FUSE_EPILOGUE": True}
DECODE = {"VARIANT": "split", "BLOCK_N": 64, "NUM_SPLITS": 4, "num_warps": 4, "num_stages": 2}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --- the formulas, derived by hand -----------------------------------------------------------

@pytest.mark.parametrize("split, fused, epilogue, M, N", [
    (1, True, "none", 64, 4096), (4, True, "none", 1, 4096), (8, True, "gated_silu", 37, 1024),
    (1, False, "silu", 300, 4096), (2, False, "gated_silu", 300, 1024),
])
def test_matmul_workspace_is_split_k_partials_and_the_unfused_intermediate(split, fused, epilogue, M, N):
    config = {**MATMUL, "SPLIT_K": split, "FUSE_EPILOGUE": fused}
    nw = 2 * N if epilogue == "gated_silu" else N
    expected = (4 * split * M * nw if split > 1 else 0) + (2 * M * nw if not fused else 0)
    needs = requirements("matmul", config, {"M": M, "N": N, "K": 4096}, sms=132,
                         options={"epilogue": epilogue, "dtype": "bf16"})
    assert needs.workspace_bytes == expected
    names = ["matmul" if split == 1 else "matmul_partial"] + (["splitk_reduce"] if split > 1 else []) \
        + ([] if fused else ["epilogue"])
    assert [launch.name for launch in needs.launches] == names and needs.launch_count == len(names)
    assert needs.launches[0].grid == cdiv(M, 16) * cdiv(N, 64) * split
    assert all(launch.grid == cdiv(M * N, 1024) for launch in needs.launches[1:])
    assert not needs.persistent and needs.sized_sms == 132


def test_a_persistent_grid_is_the_sized_sms_times_occupancy_or_none_when_occupancy_is_unknown():
    config = {**MATMUL, "PERSISTENT": True, "SM_MARGIN": 16, "BLOCK_M": 128, "BLOCK_N": 128}
    shape = {"M": 8192, "N": 4096, "K": 4096}
    known = requirements("matmul", config, shape, sms=132, ctas_per_sm=2)
    assert known.persistent and known.margin == 16 and known.sized_sms == 116 and known.device_sms == 132
    assert known.launches[0].grid == min((132 - 16) * 2, 64 * 32)  # 232 of 2048 work items
    unknown = requirements("matmul", config, shape, sms=132)
    assert unknown.launches[0].grid is None and unknown.ctas is None
    from_resources = requirements("matmul", config, shape, sms=132,
                                  resources={"matmul": {"shared_bytes": 98304, "registers": 32768, "ctas_per_sm": 1}})
    assert from_resources.launches[0].grid == 116
    assert (from_resources.launches[0].shared_bytes, from_resources.launches[0].registers) == (98304, 32768)


@pytest.mark.parametrize("B, L, splits_asked, splits_run", [(8, 2048, 4, 4), (8, 60, 4, 1), (8, 100, 4, 2),
                                                            (2, 200, 16, 4), (1, 4096, 1, 1)])
def test_decode_workspace_is_the_split_kv_partials_of_the_splits_that_run(B, L, splits_asked, splits_run):
    H, KV, D = 32, 8, 128
    # splits that run: at most one per 64-wide context tile, rounded down to a power of two
    assert splits_run == min(splits_asked, 1 << (cdiv(L, 64).bit_length() - 1))
    needs = requirements("decode_attention", {**DECODE, "NUM_SPLITS": splits_asked},
                         {"B": B, "H": H, "KV": KV, "D": D, "L": L}, sms=132)
    assert needs.workspace_bytes == (4 * B * H * splits_run * (D + 2) if splits_run > 1 else 0)
    assert [(x.name, x.grid) for x in needs.launches] == [("decode_split", B * KV * splits_run)] + (
        [("decode_reduce", B * H)] if splits_run > 1 else [])


def test_decode_materialize_holds_the_score_matrix():
    shape = {"B": 4, "H": 32, "KV": 8, "D": 128, "L": 4096}
    needs = requirements("decode_attention", {**DECODE, "VARIANT": "materialize", "NUM_SPLITS": 1}, shape, sms=132)
    assert dict(needs.workspace) == {"scores": 4 * 4 * 32 * 4096}
    assert [(x.name, x.grid) for x in needs.launches] == [("decode_scores", 4 * 8 * 64), ("decode_softmax_pv", 32)]


def test_fused_moe_workspace_is_the_intermediates_and_the_align_arrays():
    config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "num_warps": 4,
              "num_stages": 3}
    M, N, K, E, top_k = 100, 7168, 4096, 8, 2
    pairs, bound = M * top_k, M * top_k + E * 15
    expected = 2 * pairs * N + 2 * pairs * K + 4 * bound + 4 * cdiv(bound, 16)
    needs = requirements("fused_moe", config, {"M": M, "N": N, "K": K}, sms=132,
                         options={"experts": E, "top_k": top_k, "dtype": "bf16"})
    assert needs.workspace_bytes == expected
    blocks = 8 * cdiv(25, 16)  # 200 pairs spread evenly: 25 per expert
    assert [(x.name, x.grid) for x in needs.launches] == [
        ("fused_moe_gate_up", blocks * cdiv(N, 64)), ("fused_moe_down", blocks * cdiv(K, 64)),
        ("moe_sum", cdiv(M * K, 1024))]


def test_rmsnorm_and_comm_need_no_workspace():
    norm = requirements("rmsnorm", {"FUSE_RESIDUAL": False, "BLOCK_N": 1024, "num_warps": 4}, {"M": 10, "N": 4096},
                        sms=132, options={"residual": True})
    assert norm.workspace_bytes == 0 and [(x.name, x.grid) for x in norm.launches] == [("add", 40), ("rmsnorm", 10)]
    comm = requirements("comm", {"CHANNELS": 16}, {"M": 10, "N": 4096}, sms=132)
    assert comm.workspace_bytes == 0 and comm.ctas == 16


def test_bad_input_is_one_requirements_error():
    with pytest.raises(RequirementsError, match="no requirements are known for kernel family 'nope'"):
        requirements("nope", {}, {"M": 1}, sms=132)
    with pytest.raises(RequirementsError, match="lacks 'N'"):
        requirements("matmul", MATMUL, {"M": 1}, sms=132)


def test_the_families_plans_use_the_same_rule():
    """Every legal config of every family, at shapes of each kind: ``plan``'s workspace,
    launch names, grids and persistence equal ``requirements``' (one rule, two callers)."""
    import itertools

    from tuner.kernels import all_configs, get_family
    from tuner.kernels.family import sized_sms

    cases = [("matmul", {"epilogue": "gated_silu"}, {"M": [1, 37, 4096], "N": [1024], "K": [4096]}),
             ("matmul", {"epilogue": "bias"}, {"M": [300], "N": [4096], "K": [128]}),
             ("decode_attention", {}, {"B": [1, 64], "H": [32], "KV": [8], "D": [128], "L": [100, 32768]}),
             ("rmsnorm", {"residual": True}, {"M": [3], "N": [4096]}),
             ("fused_moe", {"experts": 8, "top_k": 2}, {"M": [1, 1000], "N": [7168], "K": [4096]})]
    checked = 0
    for name, options, dims in cases:
        family = get_family(name, **options)
        for i, config in enumerate(all_configs(family.space)):
            if i % 7:  # a seventh of each space: every parameter value still appears
                continue
            for values in itertools.product(*dims.values()):
                shape = dict(zip(dims, values))
                if family.illegal(config, shape):
                    continue
                sms = sized_sms(config, 132)
                plan = family.plan(config, shape, sms)
                if any(launch.persistent for launch in plan.launches):
                    plan = family.plan(config, shape, sms * 3)  # as the profiler re-plans with occupancy
                needs = requirements(name, config, shape, sms=132, options=options, ctas_per_sm=3)
                assert needs.workspace_bytes == plan.workspace_bytes, (name, config, shape)
                assert [(x.name, x.grid, x.persistent) for x in needs.launches] == \
                    [(x.name, x.grid, x.persistent) for x in plan.launches], (name, config, shape)
                checked += 1
    assert checked > 1000


def test_requirements_and_the_runtime_import_no_heavy_module():
    code = ("import sys, tuner.requirements, tuner.runtime; "
            "print(sorted(m for m in ('torch', 'triton', 'numpy', 'optuna', 'sqlalchemy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# --- the committed table against the simulator --------------------------------------------

def _fa2_splits(ctas: int, sms: int, tiles: int) -> int:
    """FlashAttention-2's ``num_splits_heuristic`` (csrc/flash_attn/flash_api.cpp), written
    out again from its source: 2 CTA slots per SM; no split when 80% full; else the fewest
    splits within 85% of the best wave efficiency, skipping counts that leave the tiles per
    split unchanged, at most 128."""
    import math

    slots = 2 * sms
    if ctas >= 0.8 * slots:
        return 1
    candidates = [n for n in range(1, min(128, slots, tiles) + 1)
                  if n == 1 or math.ceil(tiles / n) != math.ceil(tiles / (n - 1))]
    efficiency = {n: (ctas * n / slots) / math.ceil(ctas * n / slots) for n in candidates}
    return next(n for n in candidates if efficiency[n] >= 0.85 * max(efficiency.values()))


def _formula_workspace(r) -> float:
    """A row's workspace at its shape by the documented formulas (bf16)."""
    p, s, o = r.params, r.shape, r.family_options or {}
    if r.family == "matmul":
        nw = 2 * s["N"] if o.get("epilogue") == "gated_silu" else s["N"]
        return (4 * p["SPLIT_K"] * s["M"] * nw if p["SPLIT_K"] > 1 else 0) + (0 if p["FUSE_EPILOGUE"] else 2 * s["M"] * nw)
    if r.family == "decode_attention":
        if p["VARIANT"] == "materialize":
            return 4 * s["B"] * s["H"] * s["L"]
        tiles = cdiv(s["L"], p["BLOCK_N"])
        asked = p["NUM_SPLITS"]
        if asked == "auto":
            asked = _fa2_splits(s["B"] * s["KV"], r.sms - p.get("SM_MARGIN", 0), tiles)
        run = min(1 << (asked.bit_length() - 1), 1 << (tiles.bit_length() - 1))
        return 4 * s["B"] * s["H"] * run * (s["D"] + 2) if run > 1 else 0
    if r.family == "fused_moe":
        pairs = s["M"] * o["top_k"]
        bound = pairs + o["experts"] * (p["BLOCK_SIZE_M"] - 1)
        return 2 * pairs * s["N"] + (2 * pairs * s["K"] if o["top_k"] > 1 else 0) + 4 * bound \
            + 4 * cdiv(bound, p["BLOCK_SIZE_M"])
    return 0.0


@pytest.mark.parametrize("name", ["llm_decode", "moe_serving"])
def test_reservation_is_what_the_simulator_reserves_and_what_the_formulas_give(name):
    from tuner.bundled import problem_file
    from tuner.problem.assignment import Assignment
    from tuner.problem.load import load_problem
    from tuner.sim.program import bind

    problem = load_problem(problem_file(name))
    d = rt.load_table(EXAMPLE, problem=name)
    assert d.fallback_reason is None
    largest = problem.service.largest_batch_variables(problem.size_fields)
    shapes = {op.name: {dim: op.variables(largest)[dim] for dim, _ in op.shape} for op in problem.service.operators}
    for regime in d.table.regimes:
        rows = d.table.regime_rows(regime)
        simulated = bind(problem.service, Assignment.from_rows(problem, rows, str(EXAMPLE)), problem.size_fields)
        by_formula = max(_formula_workspace(r) for r in rows
                         if problem.operator(r.op).bucketing.reachable(problem.operator(r.op).bucketing.buckets[r.bucket]))
        assert simulated.reserved_workspace == by_formula
        assert d.reservation(regimes=[regime]) == by_formula
        assert d.reservation(shapes, regimes=[regime]) == by_formula  # recomputed at the engine's largest shapes
    assert d.reservation() == max(d.reservation(regimes=[r]) for r in d.table.regimes)


def test_the_engine_s_largest_shapes_decide_which_buckets_count():
    d = rt.load_table(EXAMPLE, problem="llm_decode")
    d.set_regime("heavy")
    # heavy's down projection splits K in four at M..1: 4·4·M·4096 bytes (M = 1)
    needs = d.requirements("down", {"M": 1})
    assert needs.workspace_bytes == 4 * 4 * 1 * 4096 and [x.name for x in needs.launches] == [
        "matmul_partial", "splitk_reduce"]
    assert needs.launches[0].grid == 1 * cdiv(4096, 64) * 4 and needs.launches[0].shared_bytes == 20480
    assert needs.shape_range == (("M", None, 1),)
    # an engine whose batches stay at one token reserves the largest bucket-0 need of any regime
    small = d.reservation({op: {"M": 1, "B": 1, "L": 1} for op in d.table.ops})
    full = d.reservation()
    assert small is not None and full is not None and small < full


# --- the runtime never raises -------------------------------------------------------------

def test_requirements_and_reservation_on_a_broken_table_are_none_with_one_warning(tmp_path, caplog):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(bad, fallback={"BLOCK_M": 64})
        caplog.clear()
        assert d.requirements("qkv", {"M": 3}) is None and d.requirements("qkv") is None
        assert d.requirements("o", "not a shape") is None  # type: ignore[arg-type]
        assert d.reservation() is None and d.reservation({"qkv": {"M": 8}}) is None
    assert len(caplog.records) == 2  # one for requirements, one for reservation
    assert "requirements() has no table" in caplog.records[0].getMessage()
    assert "reservation() has no table" in caplog.records[1].getMessage()


def _table(tmp_path: Path, rows) -> Path:
    return export_json("toy", rows, tmp_path / "t.json")


def test_unknown_ops_families_and_shapes_give_none_with_one_warning_each(tmp_path, caplog):
    good = {"family": "matmul", "family_options": {"epilogue": "none", "dtype": "bf16"}, "sms": 132,
            "workspace_bytes": 0.0}
    rows = [row(r, "qkv", **good) for r in ("light", "heavy")] + \
           [row(r, "o", family="nope", sms=132, workspace_bytes=0.0) for r in ("light", "heavy")]
    d = rt.load_table(_table(tmp_path, rows))
    with caplog.at_level(logging.WARNING, LOGGER):
        assert d.requirements("qkv", {"M": 64}).workspace_bytes == 0
        assert d.requirements("qkv", {"M": "x", "N": None}).shape == (("M", 64), ("N", 48), ("K", 64))
        assert d.requirements("qkv", [1, 2]) is not None  # type: ignore[arg-type] - not a mapping: the row's shape
        for _ in range(3):
            assert d.requirements("nothere") is None
            assert d.requirements("o", {"M": 8}) is None
        assert d.reservation(["not", "a", "mapping"]) is None  # type: ignore[arg-type]
        assert d.reservation() == 0
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    assert "'nothere' is not in the table" in messages[0]
    assert "no requirements are known for kernel family 'nope'" in messages[1]
    assert "reservation() cannot judge" in messages[2]


def test_an_unbounded_shape_gives_none_with_one_warning(tmp_path, caplog):
    """requirements() with M = inf used to raise OverflowError (a grid of inf CTAs) out of
    the serving path; a NaN is a value that is not a number: the row's shape, as "x" is."""
    good = {"family": "matmul", "family_options": {"epilogue": "none", "dtype": "bf16"}, "sms": 132,
            "workspace_bytes": 0.0}
    d = rt.load_table(_table(tmp_path, [row(r, "qkv", **good) for r in ("light", "heavy")]))
    with caplog.at_level(logging.WARNING, LOGGER):
        assert d.requirements("qkv", {"M": float("inf")}) is None
        for value in (float("nan"), float("-inf")):  # not a positive number: the row's shape
            assert d.requirements("qkv", {"M": value}).shape == (("M", 64), ("N", 48), ("K", 64))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "M=inf is not a finite number" in messages[0]
    with pytest.raises(RequirementsError, match="M=nan is not a finite number"):
        requirements("matmul", MATMUL, {"M": float("nan"), "N": 64, "K": 64}, sms=132)


def test_a_declared_profile_has_no_requirements_but_its_reserved_workspace_counts(tmp_path, caplog):
    rows = [row(r, "qkv", workspace_bytes=1000.0 if r == "heavy" else 10.0) for r in ("light", "heavy")]
    d = rt.load_table(_table(tmp_path, rows))
    with caplog.at_level(logging.WARNING, LOGGER):
        assert d.requirements("qkv") is None and d.requirements("qkv") is None
    assert len(caplog.records) == 1 and "declared profile" in caplog.records[0].getMessage()
    assert d.reservation() == 1000 and d.reservation(regimes=["light"]) == 10
    assert d.reservation(executors=2) == 2000


@pytest.mark.parametrize("kind", ["json", "sqlite"])
def test_a_malformed_requirements_field_is_one_warning_each_and_none_while_the_configs_serve(tmp_path, caplog,
                                                                                            kind):
    """The lookups never read ``sms``: the table serves; ``requirements`` and
    ``reservation``, which do, answer None with one line each naming the row and field."""
    written = [row("light", "qkv", sms=0), row("heavy", "qkv")]
    path = _table(tmp_path, written) if kind == "json" else _sqlite(tmp_path / "t.db", written)
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(path)
        assert d.fallback_reason is None and not caplog.records
        assert d.config("qkv") == written[0].params
        assert d.requirements("qkv") is None and d.requirements("qkv", {"M": 8}) is None
        assert d.reservation() is None
    cause = "row 0 (light/qkv): field 'sms' must be an integer >= 1 or null, found the number 0"
    assert [r.getMessage() for r in caplog.records] == [f"tuner.runtime: requirements() returns None: {path}: {cause}",
                                                        f"tuner.runtime: reservation() returns None: {path}: {cause}"]
    with pytest.raises(StorageError, match=re.escape(cause)):
        d.table.rows


def test_rows_written_since_the_load_are_not_judged_as_the_served_ones(tmp_path, caplog):
    """The full rows of a SQLite table are read when first needed; if the file now holds
    other configs, ``requirements`` says so (None, one warning) until ``reload()``."""
    good = {"family": "matmul", "family_options": {"epilogue": "none", "dtype": "bf16"}, "sms": 132,
            "workspace_bytes": 0.0}
    path = _sqlite(tmp_path / "t.db", [row(r, "qkv", **good) for r in ("light", "heavy")])
    d = rt.load_table(path)
    retuned = [replace(row(r, "qkv", **good), config="other", params={**row(r, "qkv").params, "SPLIT_K": 4})
               for r in ("light", "heavy")]
    _sqlite(path, retuned)
    with caplog.at_level(logging.WARNING, LOGGER):
        assert d.requirements("qkv", {"M": 64}) is None
    [warning] = caplog.records
    assert "the table changed since it was loaded" in warning.getMessage() and "reload() it" in warning.getMessage()
    assert d.reload() and d.requirements("qkv", {"M": 64}).workspace_bytes == 4 * 4 * 64 * 48


def test_a_version_3_table_is_refused_in_one_line(tmp_path, caplog):
    path = tmp_path / "v3.db"
    source = sqlite3.connect(EXAMPLE)
    target = sqlite3.connect(path)
    source.backup(target)
    source.close()
    target.execute("UPDATE tuner_schema SET version = 3")
    target.commit()
    target.close()
    with caplog.at_level(logging.WARNING, LOGGER):
        d = rt.load_table(path, problem="llm_decode")
    [warning] = caplog.records
    assert f"tuner schema version 3 found, this tuner reads and writes version {SCHEMA_VERSION}" in warning.getMessage()
    assert d.requirements("qkv") is None and d.reservation() is None


# --- what the table shows and exports -----------------------------------------------------

def test_table_show_gives_the_workspace_at_the_largest_shape_per_row():
    from click.testing import CliRunner

    from tuner.cli import main

    result = CliRunner().invoke(main, ["table", "show", "--storage", f"sqlite:///{EXAMPLE}", "--problem",
                                       "llm_decode", "--wide"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "workspace at largest" in result.output and "64 KiB" in result.output  # heavy/down at M..1
    shown = json.loads(CliRunner().invoke(main, ["table", "show", "--json", "--storage", f"sqlite:///{EXAMPLE}",
                                                 "--problem", "llm_decode"]).output)
    assert {"family", "family_options", "sms", "workspace_bytes", "resources"} <= set(shown[0])


def test_the_vllm_export_puts_requirements_beside_its_fixed_format(tmp_path):
    rows = [row(r, "qkv", family="matmul", family_options={"epilogue": "none"}, sms=132, workspace_bytes=0.0,
                params={**MATMUL, "SPLIT_K": 2}) for r in ("light", "heavy")]
    files, notes = export_vllm(rows, tmp_path / "out")
    assert "toy_requirements.json" in {f.name for f in files}
    needs = json.loads((tmp_path / "out" / "toy_requirements.json").read_text())
    assert needs["heavy/qkv/0"]["workspace_bytes"] == 4 * 2 * 64 * 48  # at the row's shape, M 64, N 48
    assert any("no place for requirements" in note for note in notes)
    plain = json.loads((tmp_path / "out" / "toy_light_qkv.json").read_text())
    assert "workspace_bytes" not in json.dumps(plain)  # vLLM's files stay its format


def test_the_full_rows_are_read_from_the_loaded_file_whatever_the_working_directory(tmp_path, monkeypatch):
    good = {"family": "matmul", "family_options": {"epilogue": "none", "dtype": "bf16"}, "sms": 132,
            "workspace_bytes": 0.0}
    (tmp_path / "a").mkdir()
    _sqlite(tmp_path / "a" / "t.db", [row(r, "qkv", **good) for r in ("light", "heavy")])
    monkeypatch.chdir(tmp_path / "a")
    d = rt.load_table("t.db")
    monkeypatch.chdir(tmp_path)
    assert d.requirements("qkv", {"M": 64}).workspace_bytes == 0
