"""The config table store, parameterised over SQLite and PostgreSQL (PostgreSQL is
skipped when unreachable), and its exports."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tuner.errors import SchemaMismatchError, StorageError
from tuner.store import SCHEMA_VERSION, Store, TableRow
from tuner.store.export import export_json, export_vllm, read_json, vllm_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "results.db.example"
def row(regime: str = "heavy", op: str = "qkv", config: str = "tile128", **changes) -> TableRow:
    values = dict(
        problem="toy", regime=regime, op=op, regime_index={"light": 0, "heavy": 1}.get(regime, 2),
        op_index={"qkv": 0, "attn": 1, "o": 2}.get(op, 3), config=config,
        params={"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
        shape={"M": 2048, "N": 6144, "K": 4096}, device="h100", source="declared", triton_version="3.9.0",
        kernel_source_hash=None, problem_hash="ab" * 32, study_name=f"tuner:toy:{regime}", trial_number=7,
        seeds=3, horizon_s=60.0, goodput_rps=3.5, goodput_ci_rps=0.25, baseline_goodput_rps=2.0,
        oracle_goodput_rps=None, created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    )
    values.update(changes)
    return TableRow(**values)


def test_rows_round_trip_in_file_order(storage_url):
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", [row("heavy", "o"), row("heavy", "qkv")])
        store.replace_regime("toy", "light", [row("light", "qkv", oracle_goodput_rps=4.0)])
        rows = store.rows()
    assert [(r.regime, r.op) for r in rows] == [("light", "qkv"), ("heavy", "qkv"), ("heavy", "o")]
    assert rows[1] == row("heavy", "qkv")
    assert rows[0].oracle_goodput_rps == 4.0


def test_replacing_a_regime_replaces_only_its_rows(storage_url):
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", [row("heavy", "qkv"), row("heavy", "o")])
        store.replace_regime("toy", "light", [row("light", "qkv")])
        store.replace_regime("toy", "heavy", [row("heavy", "qkv", config="splitk", goodput_rps=9.0)])
        rows = store.rows("toy")
    assert [(r.regime, r.op, r.config) for r in rows] == [("light", "qkv", "tile128"), ("heavy", "qkv", "splitk")]


def test_a_failed_replacement_changes_nothing(storage_url):
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", [row("heavy", "qkv")])
        with pytest.raises(StorageError, match="cannot write the rows of toy/heavy"):
            store.replace_regime("toy", "heavy", [row("heavy", "o"), row("heavy", "o")])  # duplicate key
        assert [r.op for r in store.rows()] == ["qkv"]


def test_other_tables_may_share_the_database(storage_url):
    engine = create_engine(Store(storage_url, create=True).engine.url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE tuner_compiled (key VARCHAR(64) PRIMARY KEY, blob TEXT)"))
        connection.execute(text("CREATE TABLE studies (x INTEGER)"))
    engine.dispose()
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", [row()])
        assert len(store.rows()) == 1


@pytest.mark.parametrize("found", [SCHEMA_VERSION - 1, SCHEMA_VERSION + 1])
def test_another_schema_version_is_refused_and_untouched(storage_url, found):
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", [row()])
        with store.engine.begin() as connection:
            connection.execute(text("UPDATE tuner_schema SET version = :v"), {"v": found})
    for create in (True, False):
        with pytest.raises(SchemaMismatchError) as info:
            Store(storage_url, create=create)
        message = str(info.value)
        assert f"version {found} found" in message and f"version {SCHEMA_VERSION}" in message
        assert "\n" not in message
    engine = create_engine(_engine_url(storage_url))
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM tuner_configs")).scalar() == 1
        assert connection.execute(text("SELECT version FROM tuner_schema")).scalar() == found
    engine.dispose()


def _engine_url(url: str) -> str:
    from tuner.store.store import resolve_url

    return resolve_url(url)


def test_reading_needs_an_existing_table(tmp_path):
    missing = tmp_path / "none.db"
    with pytest.raises(StorageError, match="no such database file"):
        Store(f"sqlite:///{missing}")
    assert not missing.exists()
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    create_engine(empty).connect().close()
    with pytest.raises(StorageError, match=r"holds no tuner table \(run `tuner tune"):
        Store(empty)


@pytest.mark.parametrize("url, message", [
    ("not a url", "not a database URL"),
    ("http://example.com/x", "cannot load a database driver"),
    ("postgresql+psycopg://nobody@127.0.0.1:1/none", "cannot open the database"),
])
def test_unusable_urls_are_one_line_errors(url, message):
    with pytest.raises(StorageError, match=message) as info:
        Store(url, create=True)
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_sqlite_is_refused_and_kept(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes\n")
    with pytest.raises(StorageError, match="is not a SQLite database"):
        Store(f"sqlite:///{path}", create=True)
    assert path.read_text() == "these are my notes\n"


def test_json_export_round_trips_without_sqlalchemy(tmp_path):
    rows = [row("light", "qkv"), row("heavy", "qkv", oracle_goodput_rps=3.6)]
    path = export_json("toy", rows, tmp_path / "table.json")
    document = json.loads(path.read_text())
    assert document["schema_version"] == SCHEMA_VERSION and document["problem"] == "toy"
    assert document["rows"][0]["config"] == {"name": "tile128", "params": rows[0].params}
    assert read_json(path) == ("toy", rows)
    document["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(document))
    with pytest.raises(SchemaMismatchError):
        read_json(path)


def test_vllm_export_renames_tile_params_and_says_what_is_not_vllm(tmp_path):
    plain = row("heavy", "qkv")
    split = row("heavy", "o", params={**plain.params, "SPLIT_K": 4})
    declared = row("heavy", "attn", config="split8", params={"splits": 8}, shape={"B": 64, "L": 524288})
    files, notes = export_vllm([plain, split, declared], tmp_path / "out")
    assert [f.name for f in files] == ["toy_heavy_qkv.json", "toy_heavy_o.json", "toy_heavy_attn.json"]
    assert json.loads(files[0].read_text()) == {"2048": {
        "BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
        "num_warps": 4, "num_stages": 3}}
    assert json.loads(files[1].read_text())["2048"]["SPLIT_K"] == 4
    assert json.loads(files[2].read_text()) == {"1": {"splits": 8}}
    assert len(notes) == 2 and "SPLIT_K" in notes[0] and "no vLLM tile parameters" in notes[1]
    assert vllm_config(plain)[1] is None


def test_results_db_example_loads_with_the_current_schema(tmp_path):
    copy = tmp_path / "results.db"
    shutil.copy(EXAMPLE, copy)  # read a copy: opening must not be able to touch the shipped file
    with Store(f"sqlite:///{copy}") as store:
        rows = store.rows()
        problems = store.problems()
    assert {"seed_example", "toy_llm", "toy_embedder"} <= set(problems)
    seed = {(r.regime, r.op): r.config for r in rows if r.problem == "seed_example"}
    assert seed[("light", "stage")] == "fast" and seed[("heavy", "stage")] == "lean"
    for r in rows:  # every shipped problem, every regime: tuned ≥ isolated-fastest within the CI
        assert r.goodput_rps + (r.goodput_ci_rps or 0.0) >= r.baseline_goodput_rps, r
        if r.oracle_goodput_rps is not None:
            assert r.goodput_rps >= 0.99 * r.oracle_goodput_rps, r
