"""The config table store (schema version 3: rows keyed by shape bucket, with capacity at
the SLO, realised rates, the warm-up and overload counts), parameterised
over SQLite and PostgreSQL (PostgreSQL is skipped when unreachable), and its exports:
the project JSON and vLLM-style files whose nearest-M lookup serves every bucket."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import (JSON, Column, DateTime, Float, Integer, MetaData, String, Table, create_engine, insert,
                        inspect, text)

from tests.conftest import schema_3_fields
from tuner.errors import SchemaMismatchError, StorageError
from tuner.store import SCHEMA_VERSION, Store, TableRow
from tuner.store.export import export_json, export_vllm, nearest_keys, read_json, vllm_config
from tuner.store.row import SERVED_FIELDS, bucket_label

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "results.db.example"
TILE = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
POWERS_OF_TWO = [2 ** k for k in range(14)]  # 1 .. 8192: 14 buckets


def row(regime: str = "heavy", op: str = "qkv", config: str = "tile128", **changes) -> TableRow:
    values = dict(
        problem="toy", regime=regime, op=op, bucket=0, bucket_bounds=None,
        regime_index={"light": 0, "heavy": 1}.get(regime, 2), op_index={"qkv": 0, "attn": 1, "o": 2}.get(op, 3),
        config=config, params=dict(TILE), shape={"M": 2048, "N": 6144, "K": 4096}, device="h100",
        source="declared", triton_version="3.9.0", kernel_source_hash=None, problem_hash="ab" * 32,
        study_name=f"tuner:toy:{regime}", trial_number=7, seeds=3, horizon_s=60.0, goodput_rps=3.5,
        goodput_ci_rps=0.25, baseline_config="tile64", baseline_goodput_rps=2.0, delta_ci_rps=0.125,
        one_config_goodput_rps=1.5, oracle_goodput_rps=None, regime_rate_rps=4.0, **schema_3_fields(),
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    )
    values.update(changes)
    return TableRow(**values)


def bucket_rows(edges, regime: str = "heavy", op: str = "qkv", dim: str = "M", **changes) -> list[TableRow]:
    """One row per bucket ``(edges[i-1], edges[i]]``, each with its own config (``BUCKET``
    tells them apart, even in a vLLM file)."""
    rows = []
    for i, high in enumerate(edges):
        bounds = {dim: [None if i == 0 else edges[i - 1], high]}
        rows.append(row(regime, op, config=f"{op}@{bucket_label(bounds)}", bucket=i, bucket_bounds=bounds,
                        params={**TILE, "BLOCK_M": 16 << (i % 4), "BUCKET": i}, shape={dim: high, "N": 64, "K": 64},
                        baseline_config=f"fastest@{i}", **changes))
    return rows


def bucket_of(value: float, edges) -> int:
    """The bucket a value falls in, by a linear scan: the first whose upper edge is at least
    the value; above the last edge, the last."""
    for i, edge in enumerate(edges):
        if value <= edge:
            return i
    return len(edges) - 1


# --- the database ----------------------------------------------------------------------

# A regime whose study maximised capacity, and one with an overloaded seed whose capacity
# was not measured: the schema-3 fields that differ from the defaults.
CAPACITY_STUDY = dict(objective="capacity", attainment_target=0.95, baseline_overloaded_seeds=2)
NO_CAPACITY = dict(realized_rates_rps=[0.95, 1.05, 1.0], warmup_s=12.5, overloaded_seeds=1, capacity_rps=None,
                   capacity_ci_rps=None, baseline_capacity_rps=None, capacity_delta_ci_rps=None,
                   one_config_capacity_rps=None)


def assert_schema_3_fields(got: TableRow, expected: dict) -> None:
    """The fields schema version 3 added, as read back: the realised rates a list of floats."""
    assert {name: getattr(got, name) for name in expected} == expected
    assert isinstance(got.realized_rates_rps, list) and all(type(r) is float for r in got.realized_rates_rps)


def test_rows_round_trip_in_file_order(storage_url):
    heavy = bucket_rows([16, 64, 8192], "heavy", "qkv", **CAPACITY_STUDY) + [
        row("heavy", "o", delta_ci_rps=None, **CAPACITY_STUDY)]
    light = bucket_rows([16, 64, 8192], "light", "qkv", oracle_goodput_rps=4.0, regime_rate_rps=1.0, **NO_CAPACITY)
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", heavy[::-1])  # written in any order
        store.replace_regime("toy", "light", light)
        rows = store.rows()
    assert [(r.regime, r.op, r.bucket) for r in rows] == (
        [("light", "qkv", b) for b in range(3)] + [("heavy", "qkv", b) for b in range(3)] + [("heavy", "o", 0)])
    assert rows == light + heavy  # every field, bucket bounds (open low end: None) and created_at included
    assert rows[1].bucket_bounds == {"M": [16, 64]} and rows[0].bucket_bounds == {"M": [None, 16]}
    assert rows[-1].bucket_bounds is None and rows[-1].delta_ci_rps is None
    assert rows[0].oracle_goodput_rps == 4.0 and rows[0].regime_rate_rps == 1.0
    assert_schema_3_fields(rows[0], schema_3_fields(**NO_CAPACITY))
    assert_schema_3_fields(rows[-1], schema_3_fields(**CAPACITY_STUDY))


def test_rows_of_a_two_dimensional_key_round_trip(storage_url):
    cells = [(b, l) for b in ([None, 1], [1, 8]) for l in ([None, 1024], [1024, 65536])]
    rows = [row("heavy", "attn", config=f"split{i}", bucket=i, bucket_bounds={"B": b, "L": l}, params={"splits": i})
            for i, (b, l) in enumerate(cells)]
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", rows)
        assert store.rows("toy") == rows
    assert [bucket_label(r.bucket_bounds) for r in rows] == ["B..1/L..1024", "B..1/L1025..65536",
                                                             "B2..8/L..1024", "B2..8/L1025..65536"]


def test_replacing_a_regime_replaces_only_its_rows(storage_url):
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", bucket_rows([16, 64], "heavy") + [row("heavy", "o")])
        store.replace_regime("toy", "light", [row("light", "qkv")])
        store.replace_regime("toy", "heavy", [row("heavy", "qkv", config="splitk", goodput_rps=9.0)])
        rows = store.rows("toy")
    assert [(r.regime, r.op, r.bucket, r.config) for r in rows] == [
        ("light", "qkv", 0, "tile128"), ("heavy", "qkv", 0, "splitk")]


def test_a_failed_replacement_changes_nothing(storage_url):
    with Store(storage_url, create=True) as store:
        store.replace_regime("toy", "heavy", [row("heavy", "qkv")])
        with pytest.raises(StorageError, match="cannot write the rows of toy/heavy"):  # the same bucket twice
            store.replace_regime("toy", "heavy", bucket_rows([16, 64], "heavy", "o") + [row("heavy", "o", bucket=1)])
        assert [(r.op, r.bucket) for r in store.rows()] == [("qkv", 0)]
        with pytest.raises(ValueError, match="is not of toy/heavy"):
            store.replace_regime("toy", "heavy", [row("light", "qkv")])


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
        assert ("upgrade tuner" if found > SCHEMA_VERSION else "tune again into a new database") in message
        assert "\n" not in message
    engine = create_engine(_engine_url(storage_url))
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM tuner_configs")).scalar() == 1
        assert connection.execute(text("SELECT version FROM tuner_schema")).scalar() == found
    engine.dispose()


def version_1_tables(metadata: MetaData) -> tuple[Table, Table]:
    """The tuner tables as schema version 1 defined them: one config per (problem, regime,
    operator), no bucket columns, no paired CI, no one-config baseline, no regime rate."""
    schema = Table("tuner_schema", metadata, Column("id", Integer, primary_key=True),
                   Column("version", Integer, nullable=False))
    configs = Table(
        "tuner_configs", metadata,
        Column("problem", String(200), primary_key=True), Column("regime", String(200), primary_key=True),
        Column("op", String(200), primary_key=True), Column("regime_index", Integer, nullable=False),
        Column("op_index", Integer, nullable=False), Column("config", String(500), nullable=False),
        Column("params", JSON, nullable=False), Column("shape", JSON), Column("device", String(200), nullable=False),
        Column("source", String(20), nullable=False), Column("triton_version", String(50)),
        Column("kernel_source_hash", String(128)), Column("problem_hash", String(128), nullable=False),
        Column("study_name", String(500), nullable=False), Column("trial_number", Integer, nullable=False),
        Column("seeds", Integer, nullable=False), Column("horizon_s", Float, nullable=False),
        Column("goodput_rps", Float, nullable=False), Column("goodput_ci_rps", Float),
        Column("baseline_goodput_rps", Float, nullable=False), Column("oracle_goodput_rps", Float),
        Column("created_at", DateTime(timezone=True), nullable=False),
    )
    return schema, configs


VERSION_1_ROW = dict(
    problem="toy", regime="heavy", op="qkv", regime_index=1, op_index=0, config="tile128", params=TILE,
    shape={"M": 2048}, device="h100", source="declared", triton_version=None, kernel_source_hash=None,
    problem_hash="ab" * 32, study_name="tuner:toy:heavy", trial_number=7, seeds=3, horizon_s=60.0,
    goodput_rps=3.5, goodput_ci_rps=0.25, baseline_goodput_rps=2.0, oracle_goodput_rps=None,
    created_at=datetime(2026, 1, 2, tzinfo=timezone.utc),
)


def write_version_1_database(url: str) -> None:
    """A database as a version-1 tuner wrote it (the real DDL of that schema, one row)."""
    engine = create_engine(url)
    metadata = MetaData()
    schema, configs = version_1_tables(metadata)
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(insert(schema).values(id=1, version=1))
        connection.execute(insert(configs).values(**VERSION_1_ROW))
    engine.dispose()


def version_1_export(path: Path) -> Path:
    """A project JSON export as a version-1 tuner wrote it (``config`` an object)."""
    record = {**VERSION_1_ROW, "config": {"name": "tile128", "params": TILE},
              "created_at": VERSION_1_ROW["created_at"].isoformat()}
    del record["params"]
    path.write_text(json.dumps({"schema_version": 1, "problem": "toy", "rows": [record]}))
    return path


def test_a_version_1_database_is_refused_with_one_line_naming_the_fix(storage_url):
    write_version_1_database(_engine_url(storage_url))
    for create in (False, True):
        with pytest.raises(SchemaMismatchError) as info:
            Store(storage_url, create=create)
        message = str(info.value)
        assert "\n" not in message
        assert f"tuner schema version 1 found, this tuner reads and writes version {SCHEMA_VERSION}" in message
        assert "tuner tune --storage" in message and "nothing was changed" in message
    engine = create_engine(_engine_url(storage_url))  # untouched: no bucket column added, the row kept
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM tuner_configs")).scalar() == 1
        assert connection.execute(text("SELECT version FROM tuner_schema")).scalar() == 1
        columns = {c["name"] for c in inspect(connection).get_columns("tuner_configs")}
    engine.dispose()
    assert "bucket" not in columns


def test_a_version_1_export_is_refused_with_one_line_naming_the_fix(tmp_path):
    path = version_1_export(tmp_path / "old.json")
    with pytest.raises(SchemaMismatchError) as info:
        read_json(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert f"tuner schema version 1 found, this tuner reads and writes version {SCHEMA_VERSION}" in message
    assert "tuner table export --format json" in message


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


# --- the project JSON --------------------------------------------------------------------

def test_an_export_respects_the_umask(tmp_path):
    import os
    import stat

    previous = os.umask(0o022)
    try:
        path = export_json("toy", [row("heavy", "qkv")], tmp_path / "table.json")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600


def test_json_export_round_trips(tmp_path):
    rows = bucket_rows([16, 64, 8192], "light", **NO_CAPACITY) + [
        row("heavy", "qkv", oracle_goodput_rps=3.6, **CAPACITY_STUDY)]
    path = export_json("toy", rows, tmp_path / "table.json")
    document = json.loads(path.read_text())
    assert document["schema_version"] == SCHEMA_VERSION == 6 and document["problem"] == "toy"
    first, details = document["rows"][0], document["details"][0]
    assert first["config"] == "qkv@M..16" and first["params"] == rows[0].params
    assert first["bucket"] == 0 and first["bucket_bounds"] == {"M": [None, 16]}
    assert details["baseline_config"] == "fastest@0" and details["delta_ci_rps"] == 0.125
    assert [{**r, **x} for r, x in zip(document["rows"], document["details"])] == [r.to_dict() for r in rows]
    assert set(first) == set(SERVED_FIELDS) and not set(first) & set(details)  # each field once
    assert details["realized_rates_rps"] == [0.95, 1.05, 1.0] and details["capacity_rps"] is None
    assert path.read_text().count("\n") == 4 + 2 * (len(rows) + 2)  # one row, one row's details, per line
    assert read_json(path) == ("toy", rows)
    _, read = read_json(path)
    assert_schema_3_fields(read[0], schema_3_fields(**NO_CAPACITY))
    assert_schema_3_fields(read[-1], schema_3_fields(**CAPACITY_STUDY))
    document["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(document))
    with pytest.raises(SchemaMismatchError, match="upgrade tuner"):
        read_json(path)


def test_the_documented_export_is_what_the_code_writes(tmp_path):
    """docs/tuning.md shows an export: its schema version, its top-level keys and every
    row key it names must be what export_json writes (the "..." stands for the rest)."""
    import re

    text = (ROOT / "docs" / "tuning.md").read_text()
    shown = json.loads(re.search(r"```json\n(\{\s*\"schema_version\".*?)\n```", text, re.S).group(1))
    written = json.loads(export_json("toy", [row()], tmp_path / "t.json").read_text())
    assert shown["schema_version"] == written["schema_version"] == SCHEMA_VERSION
    assert set(shown) == set(written)
    for block in ("rows", "details"):
        assert set(shown[block][0]) - {"..."} <= set(written[block][0]), block


def test_an_export_saved_with_a_bom_or_as_utf16_reads_as_the_runtime_reads_it(tmp_path):
    """Editors save JSON with a UTF-8 BOM or as UTF-16; JSON allows both, and the runtime
    reads both: so does the store."""
    rows = bucket_rows([16, 64])
    text = export_json("toy", rows, tmp_path / "table.json").read_text()
    for name, data in (("bom.json", b"\xef\xbb\xbf" + text.encode()), ("utf16.json", text.encode("utf-16"))):
        (tmp_path / name).write_bytes(data)
        assert read_json(tmp_path / name) == ("toy", rows), name


def test_reading_an_export_needs_no_sqlalchemy(tmp_path):
    path = export_json("toy", bucket_rows([16, 64]), tmp_path / "table.json")
    code = (f"import sys; from tuner.store.export import read_json; problem, rows = read_json({str(path)!r}); "
            "print(len(rows), 'sqlalchemy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.split() == ["2", "False"]


@pytest.mark.parametrize("document, message", [
    ("[]", "not a tuner table export"),
    ('{"problem": "toy", "rows": []}', "no schema_version"),
    (json.dumps({"schema_version": SCHEMA_VERSION, "problem": "toy", "rows": [{"problem": "toy"}]}), "malformed row"),
    (json.dumps({"schema_version": SCHEMA_VERSION, "problem": "toy", "rows": [{"seeds": 3}], "details": [{"seeds": 3}]}),
     "row 0: field 'seeds' is both in 'rows' and in 'details'"),
    (json.dumps({"schema_version": SCHEMA_VERSION, "problem": "toy", "rows": [{}], "details": []}),
     "'details' must be a list of one object per row"),
    ("{", "cannot read the exported table"),
])
def test_a_bad_export_is_one_line(tmp_path, document, message):
    path = tmp_path / "bad.json"
    path.write_text(document)
    with pytest.raises(StorageError, match=message) as info:
        read_json(path)
    assert "\n" not in str(info.value)


# --- vLLM-style files --------------------------------------------------------------------

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


def vllm_lookup(path: Path, m: int) -> dict:
    """vLLM's lookup of a tuned-config file, as its fused MoE layer does it
    (vllm-project/vllm, vllm/model_executor/layers/fused_moe/fused_moe.py, commit
    000d1458098ebf47491dad470d164d443ab18a9c): ``get_moe_configs`` reads the file as
    ``{int(key): val for key, val in json.load(f).items()}`` and
    ``try_get_optimal_moe_config`` serves ``configs[min(configs.keys(), key=lambda x: abs(x - M))]``
    (the same line serves its w8a8 block-quantised matmuls)."""
    with open(path) as f:
        configs = {int(key): val for key, val in json.load(f).items()}
    return configs[min(configs.keys(), key=lambda x: abs(x - m))]


@pytest.mark.parametrize("edges, one_key_each", [
    (POWERS_OF_TWO, True),                       # 1, 2, 4, …, 8192: TensorRT-LLM's token buckets
    ([16, 64, 8192], True),                      # an uneven explicit list (problem file `buckets: {M: …}`)
    ([3, 5, 1000, 1001, 1002, 4096], False),     # too uneven for one key per bucket: two keys each
    ([8192], True),                              # one bucket
])
def test_vllm_nearest_m_lookup_serves_each_buckets_config_for_every_m(tmp_path, edges, one_key_each):
    rows = bucket_rows(edges, "heavy", "qkv")
    files, notes = export_vllm(rows, tmp_path / "vllm")
    assert [f.name for f in files] == ["toy_heavy_qkv.json"]
    keys = len(json.loads(files[0].read_text()))
    assert keys == len(edges) if one_key_each else keys > len(edges)
    assert any("too uneven" in n for n in notes) != one_key_each
    where = "heavy/qkv (every bucket)" if len(edges) > 1 else "heavy/qkv"
    assert f"{where}: parameters BUCKET have no vLLM key; kept in the file as they are" in notes  # once a file
    expected = [vllm_config(r)[0] for r in rows]
    wrong = [m for m in range(1, 2 * edges[-1] + 2) if vllm_lookup(files[0], m) != expected[bucket_of(m, edges)]]
    assert not wrong, f"M {wrong[:5]}… get another bucket's config"


def test_nearest_keys_for_power_of_two_edges_are_one_per_bucket():
    pairs, one_each = nearest_keys([float(e) for e in POWERS_OF_TWO])
    assert one_each and [b for _, b in pairs] == list(range(14))
    assert [k for k, _ in pairs] == [1, 2, 3, 6, 11, 22, 43, 86, 171, 342, 683, 1366, 2731, 5462]


def test_vllm_export_of_a_two_dimensional_key_is_one_file_per_bucket_of_the_others(tmp_path):
    b_edges, l_edges = [1, 8, 64], [1024, 65536]
    rows = []
    for i, b in enumerate(b_edges):
        for j, l in enumerate(l_edges):
            bounds = {"B": [None if i == 0 else b_edges[i - 1], b], "L": [None if j == 0 else l_edges[j - 1], l]}
            rows.append(row("heavy", "attn", config=f"split{i}{j}", bucket=i * 2 + j, bucket_bounds=bounds,
                            params={"splits": 10 * i + j}))
    files, _ = export_vllm(rows, tmp_path / "vllm")
    assert sorted(f.name for f in files) == ["toy_heavy_attn_L..1024.json", "toy_heavy_attn_L1025..65536.json"]
    for j, name in enumerate(["toy_heavy_attn_L..1024.json", "toy_heavy_attn_L1025..65536.json"]):
        for m in range(1, 130):
            assert vllm_lookup(tmp_path / "vllm" / name, m) == {"splits": 10 * bucket_of(m, b_edges) + j}


# --- the shipped example -------------------------------------------------------------------

def test_results_db_example_loads_with_the_current_schema(tmp_path):
    copy = tmp_path / "results.db"
    shutil.copy(EXAMPLE, copy)  # read a copy: opening must not be able to touch the shipped file
    with Store(f"sqlite:///{copy}") as store:
        rows = store.rows()
        problems = store.problems()
    assert {"seed_example", "toy_llm", "toy_embedder"} <= set(problems)
    seed = {(r.regime, r.op, r.bucket): r.config for r in rows if r.problem == "seed_example"}
    assert seed[("light", "stage", 0)] == "fast" and seed[("heavy", "stage", 0)] == "lean"
    heavy = next(r for r in rows if (r.problem, r.regime) == ("seed_example", "heavy"))
    # lean: 8 servers of 10 ms (800 req/s of service); fast: 4 of 8 ms (500): a paired gain
    assert 750 < heavy.capacity_rps < 800 and 450 < heavy.baseline_capacity_rps < 500
    assert heavy.capacity_rps - heavy.baseline_capacity_rps > heavy.capacity_delta_ci_rps
    assert heavy.baseline_overloaded_seeds == heavy.seeds and heavy.overloaded_seeds == 0
    for r in rows:  # every shipped problem, every regime: tuned ≥ the per-bucket baseline within the paired CI
        assert r.goodput_rps - r.baseline_goodput_rps + (r.delta_ci_rps or 0.0) >= 0, r
        assert len(r.realized_rates_rps) == r.seeds and r.capacity_rps is not None and r.objective == "goodput"
        assert r.goodput_rps <= sum(r.realized_rates_rps) / r.seeds + 1e-9  # goodput ≤ throughput ≤ arrivals
        if r.oracle_goodput_rps is not None:
            assert r.goodput_rps >= 0.99 * r.oracle_goodput_rps, r


def test_a_read_only_database_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """Read-only as the file's or its directory's permissions say (root ignores them, so
    they are faked here), or as a ``mode=ro`` URI says; SQLite's own refusal, which Optuna
    reports as "invalid data in the commit", is recognised through the wrapping."""
    import hashlib
    import os

    from tuner.store import store as store_module
    from tuner.store.store import is_read_only

    path = tmp_path / "ro" / "results.db"
    path.parent.mkdir()
    shutil.copy(EXAMPLE, path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    expected = r"read-only database \({}\): tuner tune writes its studies and rows there$"
    with pytest.raises(StorageError, match=expected.format("opened with mode=ro")):
        Store(f"sqlite:///file:{path}?mode=ro&uri=true", create=True)
    real = os.access
    for denied, why in ((path, "the file is not writable"), (path.parent, f"its directory {path.parent} is not writable")):
        monkeypatch.setattr(store_module.os, "access", lambda p, mode, d=denied: Path(p) != d and real(p, mode))
        with pytest.raises(StorageError, match=expected.format(why)) as info:
            Store(f"sqlite:///{path}", create=True)
        assert str(info.value).startswith(f"{path}: ")
    monkeypatch.undo()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    Store(f"sqlite:///{path}").close()  # reading needs no write access

    class Wrapped(Exception):
        pass

    try:
        try:
            raise OSError("attempt to write a readonly database")
        except OSError as cause:
            raise Wrapped("(sqlite3.OperationalError) invalid data in the commit") from cause
    except Wrapped as exc:
        assert is_read_only(exc)
    assert not is_read_only(ValueError("database is locked"))


def test_a_damaged_sqlite_file_is_refused_by_a_writer_and_left_as_it_is(tmp_path):
    """Issue 39: a database with zeroed pages (PRAGMA integrity_check fails) was accepted
    and written to. A writer now checks the file first: one line, nothing written."""
    import hashlib

    from click.testing import CliRunner

    from tuner.cli import main

    path = tmp_path / "results.db"
    data = bytearray((ROOT / "results.db.example").read_bytes())
    page = 4096
    data[100 * page:104 * page] = bytes(4 * page)  # four pages of tables zeroed, the header intact
    path.write_bytes(bytes(data))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = CliRunner().invoke(main, ["tune", str(ROOT / "search_spaces" / "seed_example.yaml"), "--storage",
                                       f"sqlite:///{path}", "--trials", "1", "--seeds", "1", "--horizon", "1"])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert "the SQLite file is damaged" in line and "tuner writes nothing to it" in line
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
