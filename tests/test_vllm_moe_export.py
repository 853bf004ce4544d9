"""`tuner table export --format vllm` for fused_moe operators: the files vLLM's fused MoE
layer actually reads (GitHub issue 25, item 4).

vLLM (vllm-project/vllm, vllm/model_executor/layers/fused_moe/fused_moe.py) looks a
layer's tuned configs up in ``get_moe_configs(E, N, dtype, …)``: the file named by
``get_config_file_name(E, N, dtype, block_shape)``, first in the folder
``VLLM_TUNED_CONFIG_FOLDER``, then in its bundled ``configs/``; it turns the keys into ints
and ``try_get_optimal_moe_config`` serves, for M tokens, the entry whose key is nearest M.
The rows here are built directly (no tune runs): the lookup is re-implemented below.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import schema_3_fields
from tuner.cli import main
from tuner.errors import StorageError
from tuner.store import Store
from tuner.store.export import export_vllm, export_vllm_moe, vllm_config, vllm_moe_file_name
from tuner.store.row import TableRow

POWERS_OF_TWO = [1 << i for i in range(14)]  # 1 … 8192: TensorRT-LLM's token buckets

# Per bucket a different config from the family's space (index i picks one of 48).
_M, _N, _S = (16, 32, 64, 128), (32, 64, 128, 256), (2, 3, 4)


def moe_params(i: int) -> dict[str, int]:
    return {"BLOCK_SIZE_M": _M[i % 4], "BLOCK_SIZE_N": _N[(i // 4) % 4], "BLOCK_SIZE_K": 64,
            "GROUP_SIZE_M": 1 if i % 2 else 8, "num_warps": 4 if i % 3 else 8, "num_stages": _S[(i // 16) % 3]}


def table_row(problem: str = "moe", regime: str = "heavy", op: str = "experts", bucket: int = 0,
              bucket_bounds=None, params=None, shape=None, device: str = "h100") -> TableRow:
    params = params if params is not None else moe_params(bucket)
    return TableRow(
        problem=problem, regime=regime, op=op, bucket=bucket, bucket_bounds=bucket_bounds,
        regime_index={"light": 0, "heavy": 1}.get(regime, 2), op_index=0,
        config=f"cfg{bucket}", params=params, shape=shape or {"M": 64, "N": 1408, "K": 2048}, device=device,
        source="modeled", triton_version="3.4.0", kernel_source_hash=None, problem_hash="cd" * 32,
        study_name=f"tuner:{problem}:{regime}", trial_number=3, seeds=2, horizon_s=20.0, goodput_rps=5.0,
        goodput_ci_rps=0.5, baseline_config="cfg0", baseline_goodput_rps=4.0, delta_ci_rps=0.25,
        one_config_goodput_rps=3.0, oracle_goodput_rps=None, regime_rate_rps=5.0, **schema_3_fields(),
        created_at=datetime(2026, 2, 3, 4, 5, 6, tzinfo=timezone.utc),
    )


def moe_rows(edges, regime: str = "heavy", op: str = "experts", n: int = 1408, **changes) -> list[TableRow]:
    """One fused_moe row per M bucket ``(edges[i-1], edges[i]]``, each its own config."""
    return [table_row(regime=regime, op=op, bucket=i, bucket_bounds={"M": [None if i == 0 else edges[i - 1], high]},
                      shape={"M": high, "N": n, "K": 2048}, **changes)
            for i, high in enumerate(edges)]


def bucket_of(m: int, edges) -> int:
    for i, edge in enumerate(edges):
        if m <= edge:
            return i
    return len(edges) - 1


def vllm_moe_lookup(folder: Path, file_name: str, m: int) -> dict:
    """vLLM's lookup, re-implemented from vllm/model_executor/layers/fused_moe/fused_moe.py
    (vllm-project/vllm): ``get_moe_configs`` opens ``os.path.join(VLLM_TUNED_CONFIG_FOLDER,
    get_config_file_name(E, N, dtype, block_shape))``, drops a ``triton_version`` key and
    makes every key an int; ``try_get_optimal_moe_config`` serves the entry whose key is
    nearest M (``min`` over the keys of ``abs(key - M)``)."""
    tuned = json.loads((folder / file_name).read_text())
    tuned.pop("triton_version", None)
    configs = {int(key): value for key, value in tuned.items()}
    return configs[min(configs.keys(), key=lambda key: abs(key - m))]


MOE = {"experts": {"experts": 64, "top_k": 6, "dtype": "bf16"}}


@pytest.mark.parametrize("edges", [
    POWERS_OF_TWO,
    [16, 64, 8192],                            # an uneven explicit list
    [3, 5, 1000, 1001, 1002, 4096],            # too uneven for one key per bucket: two keys each
    [256],                                     # one bucket
])
def test_vllm_serves_each_buckets_config_for_every_m(tmp_path, edges):
    rows = moe_rows(edges) + moe_rows(edges, regime="light")
    files, notes = export_vllm(rows, tmp_path / "out", MOE)
    name = "E=64,N=1408,device_name=NVIDIA_H100_80GB_HBM3.json"
    assert sorted(f.relative_to(tmp_path / "out").as_posix() for f in files) == [
        f"moe_heavy/{name}", f"moe_light/{name}"]
    for regime in ("heavy", "light"):
        folder = tmp_path / "out" / f"moe_{regime}"
        assert all(key.isdigit() for key in json.loads((folder / name).read_text()))  # vLLM does int(key)
        expected = [vllm_config(r)[0] for r in rows if r.regime == regime]
        wrong = [m for m in range(1, edges[-1] + 1)
                 if vllm_moe_lookup(folder, name, m) != expected[bucket_of(m, edges)]]
        assert not wrong, f"{regime}: M {wrong[:5]}… get another bucket's config"
        assert vllm_moe_lookup(folder, name, 10 * edges[-1]) == expected[-1]  # above the last edge: the last
        note = next(n for n in notes if n.startswith(f"{regime}: vLLM fused_moe configs in {folder}/"))
        assert f"VLLM_TUNED_CONFIG_FOLDER={folder} and restart" in note and name in note
    assert not any("no vLLM" in n for n in notes)  # the six parameters, spelled as vLLM spells them


@pytest.mark.parametrize("experts, n, device, dtype, block_shape, expected", [
    (8, 14336, "h100", "bf16", None, "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"),
    (8, 3584, "a100", "fp16", None, "E=8,N=3584,device_name=NVIDIA_A100-SXM4-80GB.json"),
    (256, 256, "h200", "fp8", [128, 128],
     "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"),
    (128, 768, "h100", "fp8_w8a8", None, "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8.json"),
    (16, 1024, "a100", "int8_w8a16", None, "E=16,N=1024,device_name=NVIDIA_A100-SXM4-80GB,dtype=int8_w8a16.json"),
    (64, 512, "h100", "fp32", [0, 0], "E=64,N=512,device_name=NVIDIA_H100_80GB_HBM3,dtype=float32.json"),
])
def test_the_file_is_named_as_vllms_get_config_file_name_names_it(tmp_path, experts, n, device, dtype, block_shape,
                                                                    expected):
    """``get_config_file_name``: ``E={E},N={N},device_name={name}``, ``,dtype=`` only for
    the strings ``_get_config_dtype_str`` returns (quantised schemes, float32; none for
    bf16/fp16), ``,block_shape=[n,k]`` only when both are non-zero."""
    options = {"experts": experts, "dtype": dtype, **({"block_shape": block_shape} if block_shape else {})}
    files, _ = export_vllm_moe(moe_rows([16, 128], n=n, device=device), tmp_path, {"experts": options})
    assert [f.name for f in files] == [expected]
    assert files[0].parent == tmp_path / "moe_heavy"


def test_the_file_name_helper_matches_vllms_bundled_configs():
    # names of files vLLM ships in vllm/model_executor/layers/fused_moe/configs/
    assert vllm_moe_file_name(8, 14336, "NVIDIA_A100-SXM4-80GB") == "E=8,N=14336,device_name=NVIDIA_A100-SXM4-80GB.json"
    assert (vllm_moe_file_name(128, 192, "NVIDIA_H100_80GB_HBM3", "fp8", (128, 128))
            == "E=128,N=192,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json")


def test_other_operators_keep_todays_files(tmp_path):
    plain = table_row(op="qkv", params={"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
                                        "num_warps": 4, "num_stages": 3}, shape={"M": 2048, "N": 6144, "K": 4096})
    with_moe, moe_notes = export_vllm([plain, *moe_rows([8, 64])], tmp_path / "a", MOE)
    alone, notes = export_vllm([plain], tmp_path / "b")
    assert [f.name for f in alone] == ["moe_heavy_qkv.json"] and with_moe[0].name == "moe_heavy_qkv.json"
    assert with_moe[0].read_text() == alone[0].read_text()
    assert notes == [] and len(moe_notes) == 1
    # without the fused_moe options an operator is exported like any other
    files, _ = export_vllm(moe_rows([8, 64]), tmp_path / "c")
    assert [f.name for f in files] == ["moe_heavy_experts.json"]


@pytest.mark.parametrize("moe, rows, message", [
    ({"experts": {"top_k": 2, "dtype": "bf16"}}, moe_rows([16, 64]), "heavy/experts: fused_moe option 'experts' (E)"),
    ({"experts": {"experts": 0}}, moe_rows([16, 64]), "'experts' (E) must be a positive integer"),
    ({"experts": {"experts": 8, "dtype": "int2"}}, moe_rows([16, 64]), "heavy/experts: fused_moe option 'dtype'"),
    (MOE, [table_row(shape={"M": 16, "K": 2048})], "heavy/experts: shape key 'N'"),
    (MOE, moe_rows([16, 64], device="generic"), "device 'generic' has no vLLM device name"),
    (MOE, [table_row(bucket_bounds={"M": [None, 8], "L": [None, 4]})], "keyed by M (tokens) alone"),
])
def test_bad_input_is_one_line_naming_the_key_and_writes_nothing(tmp_path, moe, rows, message):
    with pytest.raises(StorageError) as raised:
        export_vllm([table_row(op="qkv"), *rows], tmp_path / "out", moe)
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_two_operators_on_one_file_with_different_configs_are_refused(tmp_path):
    rows = moe_rows([16, 64], op="experts") + moe_rows([16, 64], op="experts2")
    rows[-1] = table_row(op="experts2", bucket=1, bucket_bounds={"M": [16, 64]}, params=moe_params(7),
                         shape={"M": 64, "N": 1408, "K": 2048})
    moe = {"experts": {"experts": 64}, "experts2": {"experts": 64}}
    with pytest.raises(StorageError, match="experts and experts2 both map to vLLM's E=64,N=1408"):
        export_vllm(rows, tmp_path / "out", moe)


# --- the command -----------------------------------------------------------------------------

PROBLEM = """
name: moe
device: {{name: h100}}
service:
  batching: continuous
  max_batch: 4
  max_tokens: 64
  router: {{experts: 8, top_k: 2}}
  memory: {{budget: 10 GiB, fixed: 1 GiB, per_request: MiB * (prompt + output)}}
  operators:
    - {{name: experts, family: moe, shape: {{M: tokens, N: 1408, K: 2048}}}}
  slo: {{ttft: 1 s, tpot: 1 s}}
families:
  moe:
    kernel: fused_moe
    options: {options}
regimes:
  heavy:
    arrivals: {{process: poisson, rate: 5}}
    sizes: {{prompt: {{dist: fixed, value: 8}}, output: {{dist: fixed, value: 4}}}}
    horizon: 5 s
"""


def stored(tmp_path: Path, rows: list[TableRow]) -> str:
    url = f"sqlite:///{tmp_path / 'moe.db'}"
    with Store(url, create=True) as store:
        store.replace_regime("moe", "heavy", rows)
    return url


def test_the_command_writes_the_regime_folder_and_says_how_to_use_it(tmp_path):
    edges = [16, 64, 256]
    url = stored(tmp_path, moe_rows(edges, n=1408))
    problem = tmp_path / "moe.yaml"
    problem.write_text(PROBLEM.format(options="{experts: 8, top_k: 2}"))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["table", "export", "--format", "vllm", str(out), "--storage", url,
                                       "--problem-file", str(problem)])
    assert result.exit_code == 0, result.output
    name = "E=8,N=1408,device_name=NVIDIA_H100_80GB_HBM3.json"  # dtype bf16, the family's default: no dtype=
    assert [p.relative_to(out).as_posix() for p in out.rglob("*.json")] == [f"moe_heavy/{name}"]
    assert f"VLLM_TUNED_CONFIG_FOLDER={out / 'moe_heavy'}" in result.stdout
    assert "1 files written" in result.stdout
    expected = [moe_params(i) for i in range(len(edges))]
    assert all(vllm_moe_lookup(out / "moe_heavy", name, m) == expected[bucket_of(m, edges)] for m in range(1, 300))


def test_the_command_without_the_problem_file_says_so(tmp_path):
    url = stored(tmp_path, moe_rows([16, 64]))
    result = CliRunner().invoke(main, ["table", "export", "--format", "vllm", str(tmp_path / "out"), "--storage", url])
    assert result.exit_code == 0, result.output
    assert "no problem file for moe" in result.stdout
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["moe_heavy_experts.json"]


def test_the_command_with_another_problems_file_is_one_line(tmp_path):
    url = stored(tmp_path, moe_rows([16, 64]))
    problem = tmp_path / "other.yaml"
    problem.write_text(PROBLEM.format(options="{experts: 8, top_k: 2}").replace("name: moe\n", "name: other\n", 1))
    result = CliRunner().invoke(main, ["table", "export", "--format", "vllm", str(tmp_path / "out"), "--storage", url,
                                       "--problem-file", str(problem)])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
    assert "is problem 'other', not 'moe'" in result.stderr and "Traceback" not in result.output


def test_a_file_that_cannot_be_written_leaves_every_folder_as_it_was(tmp_path):
    """The second fuzz round: an export that could not write one file left the regime
    folders half old, half new, and its error named a temporary file. Two regimes, the
    second's target made a directory (it cannot be replaced by a file): nothing changes,
    the error names that target, and no staging folder is left behind."""
    options = {"experts": {"experts": 64}}
    rows = moe_rows([16, 128], regime="light") + moe_rows([16, 128], regime="heavy")
    files, _ = export_vllm_moe(rows, tmp_path, options)
    assert len(files) == 2
    before = {p: p.read_text() for p in files}
    blocked = files[1]
    blocked.unlink()
    blocked.mkdir()  # a directory where the heavy regime's file goes
    changed = moe_rows([16, 128], regime="light", params=moe_params(7)) + moe_rows([16, 128], regime="heavy")
    with pytest.raises(StorageError) as info:
        export_vllm_moe(changed, tmp_path, options)
    assert str(blocked) in str(info.value) and ".tmp" not in str(info.value) and "nothing was written" in str(info.value)
    assert files[0].read_text() == before[files[0]] and blocked.is_dir()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tuner-export-")]
