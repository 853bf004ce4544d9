"""Output that fits a terminal: ``tuner tune``'s config table wraps its runs of buckets
(one per line, those that differ from THE baseline marked) to the terminal's width, and
``tuner validate`` wraps its bucket list (80 labels for llm_decode's decode attention).

Why: the table printed every run of an operator side by side (about 200 columns, the
width assumed for any output that is not a terminal) and validate printed 80 labels on
one line; a terminal folding such lines scrambles a table's columns.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from rich.console import Console

from tuner.cli import main
from tuner.problem import load_problem
from tuner.problem.assignment import Assignment, runs, spans
from tuner.search.summary import config_cell, config_table


@pytest.fixture(scope="module")
def llm_decode():
    return load_problem("llm_decode")


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_validate_wraps_every_line_to_the_terminal_and_keeps_every_label(llm_decode, columns: int) -> None:
    result = CliRunner().invoke(main, ["validate"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # a word longer than the terminal (the problem file's path, in a deep checkout) is never
    # split, so it stands alone on its line; every other line fits
    assert all(len(line) <= columns or len(line.split()) == 1 for line in lines), max(lines, key=len)
    attention = llm_decode.operator("decode_attn").bucketing
    assert attention.size == 80  # the list the issue saw on one line
    start = next(i for i, line in enumerate(lines) if line.startswith("  decode_attn: key B, L, 80 buckets:"))
    wrapped = [start] + [i for i in range(start + 1, len(lines)) if lines[i].startswith("      ")
                         and all(lines[j].startswith("      ") for j in range(start + 1, i + 1))]
    listed = " ".join(lines[i] for i in wrapped).split("buckets:", 1)[1].split()
    assert listed == [b.label for b in attention.buckets]


def test_spans_split_where_the_baseline_changes(llm_decode) -> None:
    configs = llm_decode.families[llm_decode.operator("qkv").family].configs
    base = Assignment.default(llm_decode).configs("qkv")[0]  # one config in all 14 buckets
    tuned = (base,) * 4 + (configs[1],) * 3 + (base,) * 7
    assert runs(llm_decode, "qkv", tuned) == [f"M..8:{base.name}", f"M9..64:{configs[1].name}",
                                              f"M65..8192:{base.name}"]
    # the same config on both sides of a change of baseline: two spans
    other = (configs[1],) * 7 + (base,) * 7
    assert [(label, c.name, b.name, n) for label, c, b, n in spans(llm_decode, "qkv", (configs[1],) * 14, other)] == [
        ("M..64", configs[1].name, configs[1].name, 7), ("M65..8192", configs[1].name, base.name, 7)]


def outcome(regime: str, tuned: Assignment, baseline: Assignment) -> SimpleNamespace:
    """What :func:`config_table` reads of a :class:`tuner.search.RegimeOutcome`."""
    return SimpleNamespace(regime=regime, tuned=SimpleNamespace(assignment=tuned),
                           baseline=SimpleNamespace(assignment=baseline))


def test_a_cell_names_the_changed_parameters_per_run_and_counts_the_rest(llm_decode) -> None:
    configs = llm_decode.families[llm_decode.operator("qkv").family].configs
    base = Assignment.default(llm_decode).configs("qkv")
    split = dict(configs[1].params)["SPLIT_K"]
    tuned = (configs[1],) * 2 + base[2:]
    assert config_cell(llm_decode, "qkv", tuned, base) == f"M..2: SPLIT_K 1→{split}\n12 other buckets: = baseline"
    assert config_cell(llm_decode, "qkv", base, base) == "= baseline"
    stage = load_problem("seed_example").families["stage"].configs
    lean, fast = (next(c for c in stage if c.name == n) for n in ("lean", "fast"))
    assert config_cell(load_problem("seed_example"), "stage", (lean,), (fast,)) == "variant fast→lean"


@pytest.mark.parametrize("width", [80, 100])
def test_the_tune_config_table_fits_the_terminal_without_folding(llm_decode, width: int) -> None:
    default = Assignment.default(llm_decode)
    changes = {}
    for op in ("qkv", "o_proj", "down"):
        configs = llm_decode.families[llm_decode.operator(op).family].configs
        changes.update({(op, b): configs[1 + b % 3] for b in range(0, 14, 2)})  # many short runs
    tuned = default.replace(changes)
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(config_table(llm_decode, [outcome(r, tuned, default) for r in ("light", "heavy")]))
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= width
    cells = "\n".join(config_cell(llm_decode, op, tuned.configs(op), default.configs(op)) for op in ("qkv", "down"))
    for line in cells.splitlines():
        assert line in text, line  # whole: neither cut nor folded
    assert "= baseline: the per-bucket isolated-fastest config" in " ".join(text.split())


def test_tune_prints_a_table_no_wider_than_the_terminal(tmp_path) -> None:
    """The whole command, end to end, on the seed example (seconds): the table within
    $COLUMNS, the prose lines whole (output into a pipe: grep finds them)."""
    result = CliRunner().invoke(main, ["tune", "seed_example", "--horizon", "5", "--seeds", "2", "--storage",
                                       f"sqlite:///{tmp_path / 'r.db'}", "-q"], env={"COLUMNS": "70"})
    assert result.exit_code == 0, (result.output, result.exception)
    lines = result.stdout.splitlines()
    table = lines[:next(i for i, line in enumerate(lines) if line.startswith("goodput and capacity"))]
    assert table and max(map(len, table)) <= 70, table
    assert any("variant fast→lean" in line for line in table)
    assert any(len(line) > 70 and "why:" in line for line in lines)  # prose: whole lines into a pipe
