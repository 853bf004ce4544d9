"""The engine knobs a table was tuned with, served and exported (issue 40): the rows'
``engine_args``, ``Dispatcher.engine_args()`` and ``tuner table export --format
vllm-args|sglang-args``. The expected command lines are written out by hand from each
engine's argument names (vLLM's ``EngineArgs`` and ``CompilationConfig``, SGLang's
``ServerArgs``)."""

from __future__ import annotations

import logging
import shlex

from click.testing import CliRunner

import tuner.runtime as rt
from tests.test_runtime import row, sqlite_table
from tuner.cli import main
from tuner.store.export import export_json

KNOBS = {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "cudagraph_capture_sizes": [1, 2, 4, 8]}


def knob_rows(knobs=KNOBS, heavy=None):
    return [row(regime, op, engine_args=(heavy if heavy is not None and regime == "heavy" else knobs))
            for regime in ("light", "heavy") for op in ("qkv", "o")]


def export(tmp_path, fmt, table_rows, *more):
    db = sqlite_table(tmp_path / "t.db", table_rows)
    return CliRunner().invoke(main, ["table", "export", "--format", fmt, "-", "--storage", f"sqlite:///{db}", *more])


def test_vllm_and_sglang_command_lines_spell_each_knob_as_the_engine_does(tmp_path):
    vllm = export(tmp_path, "vllm-args", knob_rows())
    assert vllm.exit_code == 0, vllm.output
    commands = [line for line in vllm.stdout.splitlines() if not line.startswith("#")]
    assert len(commands) == 2 and commands[0] == commands[1]  # start-up knobs: one setting for every regime
    assert shlex.split(commands[0]) == ["vllm", "serve", "$MODEL", "--max-num-seqs", "128",
                                        "--max-num-batched-tokens", "2048", "--compilation-config",
                                        '{"cudagraph_capture_sizes": [1, 2, 4, 8]}']
    assert "# regime light" in vllm.stdout and "# regime heavy" in vllm.stdout
    (tmp_path / "s").mkdir()
    sglang = export(tmp_path / "s", "sglang-args", knob_rows())
    assert sglang.exit_code == 0, sglang.output
    line = next(line for line in sglang.stdout.splitlines() if not line.startswith("#"))
    assert shlex.split(line) == ["python", "-m", "sglang.launch_server", "--model-path", "$MODEL",
                                 "--max-running-requests", "128", "--chunked-prefill-size", "2048",
                                 "--cuda-graph-bs", "1", "2", "4", "8"]


def test_the_engines_default_writes_no_argument(tmp_path):
    result = export(tmp_path, "vllm-args", knob_rows({"max_num_batched_tokens": 4096, "cudagraph_capture_sizes": None}))
    assert result.exit_code == 0, result.output
    assert 'vllm serve "$MODEL" --max-num-batched-tokens 4096\n' in result.stdout


def test_two_batch_overlap_is_sglangs_switch_and_refused_by_vllm_when_on(tmp_path):
    """SGLang: ``ServerArgs.enable_two_batch_overlap`` (a flag, off by default); vLLM's
    ``--enable-dbo`` needs data and expert parallelism, so its line refuses the knob on
    and writes nothing for it off."""
    on = {"max_num_seqs": 128, "two_batch_overlap": True}
    sglang = export(tmp_path, "sglang-args", knob_rows(on))
    assert sglang.exit_code == 0, sglang.output
    line = next(line for line in sglang.stdout.splitlines() if not line.startswith("#"))
    assert shlex.split(line)[-3:] == ["--max-running-requests", "128", "--enable-two-batch-overlap"]
    (tmp_path / "v").mkdir()
    vllm = export(tmp_path / "v", "vllm-args", knob_rows(on))
    assert vllm.exit_code == 2 and len(vllm.output.strip().splitlines()) == 1
    assert "knob two_batch_overlap=true has no vllm-args argument: vLLM's dual-batch overlap" in vllm.output
    (tmp_path / "o").mkdir()
    off = export(tmp_path / "o", "vllm-args", knob_rows({"max_num_seqs": 128, "two_batch_overlap": False}))
    assert off.exit_code == 0 and 'vllm serve "$MODEL" --max-num-seqs 128\n' in off.stdout


def test_nccls_channels_are_its_environment_before_either_engines_command(tmp_path):
    """NCCL reads NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS from the environment (both
    the count: every collective held to it); no engine argument sets them. The engine's
    default (null) writes neither."""
    for fmt, command in (("vllm-args", ["vllm", "serve"]), ("sglang-args", ["python", "-m", "sglang.launch_server"])):
        (tmp_path / fmt).mkdir()
        result = export(tmp_path / fmt, fmt, knob_rows({"max_num_seqs": 128, "nccl_channels": 8}))
        assert result.exit_code == 0, result.output
        line = next(line for line in result.stdout.splitlines() if not line.startswith("#"))
        assert shlex.split(line)[:2 + len(command)] == ["NCCL_MIN_NCHANNELS=8", "NCCL_MAX_NCHANNELS=8", *command]
        assert "--disable-custom-all-reduce hands it to NCCL" in result.stdout
    (tmp_path / "d").mkdir()
    default = export(tmp_path / "d", "vllm-args", knob_rows({"max_num_seqs": 128, "nccl_channels": None}))
    assert default.exit_code == 0 and "NCCL" not in default.stdout


def test_a_table_without_knobs_or_with_regimes_that_disagree_is_one_line(tmp_path):
    plain = export(tmp_path, "vllm-args", knob_rows(None))
    assert plain.exit_code == 2 and "its rows carry no engine arguments" in plain.output
    (tmp_path / "d").mkdir()
    split = export(tmp_path / "d", "sglang-args", knob_rows(heavy={**KNOBS, "max_num_seqs": 256}))
    assert split.exit_code == 2 and "the regimes' engine arguments differ" in split.output
    assert len(split.output.strip().splitlines()) == 1


def test_a_file_the_export_did_not_write_is_kept_without_force(tmp_path):
    notes = tmp_path / "serve.sh"
    notes.write_text("my own notes\n")
    db = sqlite_table(tmp_path / "t.db", knob_rows())
    command = ["table", "export", "--format", "vllm-args", str(notes), "--storage", f"sqlite:///{db}"]
    refused = CliRunner().invoke(main, command)
    assert refused.exit_code == 2 and notes.read_text() == "my own notes\n"
    assert CliRunner().invoke(main, [*command, "--force"]).exit_code == 0
    assert CliRunner().invoke(main, command).exit_code == 0  # its own earlier file is replaced
    assert "--max-num-seqs 128" in notes.read_text()


def test_the_dispatcher_answers_the_served_regimes_knobs(tmp_path, caplog):
    table = export_json("toy", knob_rows(), tmp_path / "t.json")
    d = rt.load_table(table, initial_regime="heavy")
    args = d.engine_args()
    assert args == KNOBS
    args["max_num_seqs"] = 1  # a copy: the served table is not changed through it
    assert d.engine_args() == KNOBS
    plain = rt.load_table(export_json("toy", knob_rows(None), tmp_path / "p.json"), initial_regime="light")
    assert plain.engine_args() is None
    with caplog.at_level(logging.WARNING, "tuner.runtime"):
        broken = rt.load_table(tmp_path / "missing.json", fallback={"BLOCK_M": 64})
        assert broken.engine_args() is None and broken.engine_args() is None
        odd = rt.load_table(export_json("toy", knob_rows([1, 2]), tmp_path / "o.json"), initial_regime="light")
        assert odd.engine_args() is None
    messages = [r.getMessage() for r in caplog.records if "engine_args()" in r.getMessage()]
    assert len(messages) == 2 and "has no table" in messages[0] and "expected an object" in messages[1]


def test_table_show_names_the_engine_arguments_once_per_problem(tmp_path):
    db = sqlite_table(tmp_path / "t.db", knob_rows())
    shown = CliRunner().invoke(main, ["table", "show", "--storage", f"sqlite:///{db}"])
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if "engine arguments" in line]
    assert lines == ["toy: engine arguments (every regime; start-up): max_num_seqs=128, max_num_batched_tokens=2048, "
                     "cudagraph_capture_sizes=1,2,4,8; `tuner table export --format vllm-args -` writes the "
                     "command line"]  # as a command line writes them (tuner simulate --knob NAME=VALUE)
