"""The README's first screen and the docs' figures, as a CommonMark renderer shows them
(markdown-it-py, which rich already installs; GitHub renders CommonMark plus tables).

Why rendered and not grepped: a line that begins with ``<!--`` starts an HTML block, so a
figure marker at the start of a line ended the paragraph above it and showed the rest of
the line as raw HTML ("met); compiled kernel…" alone, "and1.000×" in a list item); only
a renderer sees that. Also here: the short table's renderer (``benchmarks/headline.py``'s
``summary``), the writer that keeps markers off line starts (``benchmarks/figures.py``'s
``unbroken``) and the load-curve picture (``benchmarks/load_curves.py``'s ``svg``).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import their shared `recorded`

import figures  # noqa: E402
import headline  # noqa: E402
import load_curves  # noqa: E402

README = ROOT / "README.md"
MARKDOWN = MarkdownIt("commonmark").enable("table")
#: What figures.py counts as a set-up, tune or test time in the README's opening.
TIMING = next(s.pattern for s in figures.STRAYS if s.first_section_only and "set-up" in s.why)


def first_table(text: str) -> tuple[list[str], list[list[str]], int]:
    """The first table's header cells, body rows (cells' inline source) and first line."""
    tokens = MARKDOWN.parse(text)
    start = next(i for i, t in enumerate(tokens) if t.type == "table_open")
    end = next(i for i in range(start, len(tokens)) if tokens[i].type == "table_close")
    header: list[str] = []
    rows: list[list[str]] = []
    section = None
    for token in tokens[start:end]:
        if token.type in ("thead_open", "tbody_open"):
            section = token.type
        elif token.type == "tr_open" and section == "tbody_open":
            rows.append([])
        elif token.type == "inline":
            (header if section == "thead_open" else rows[-1]).append(token.content)
    return header, rows, tokens[start].map[0]


def test_the_first_table_is_short_and_comes_before_any_set_up_timing() -> None:
    text = README.read_text()
    header, rows, line = first_table(text)
    assert 3 <= len(header) <= 6, header
    assert header[-1] == "verdict" and "capacity" in " ".join(header) and rows
    before = "\n".join(text.splitlines()[:line])
    shown = re.sub(r"<!--.*?-->", "", before)  # what a reader sees: the figures without their markers
    assert not re.search(TIMING, shown), re.search(TIMING, shown)
    assert not re.search(r"<!--fig (setup_and_tests|bench_tune)/", before)


def test_the_first_tables_rows_go_from_gains_to_no_difference_and_none_is_a_loss() -> None:
    """Gains first, then no difference; a loss would sort last, and the guard (issue 38)
    promises there is none: a regime keeps the baseline's configs rather than lose."""
    _, rows, _ = first_table(README.read_text())
    rank = {"gain": 0, "no difference": 1, "loss": 2}
    verdicts = [next(r for k, r in rank.items() if row[-1].startswith(k)) for row in rows]
    assert verdicts == sorted(verdicts) and set(verdicts) == {0, 1}


@pytest.mark.parametrize("path", figures.DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_paragraph_is_split_by_a_figure_marker(path: Path) -> None:
    """Every inline figure renders inside its paragraph (an HTML block holding one is a
    paragraph or list item broken in two); block markers are HTML blocks on purpose."""
    broken = [t.map[0] + 1 for t in MARKDOWN.parse(path.read_text())
              if t.type == "html_block" and "<!--fig " in t.content]
    assert not broken, f"{path.name}: lines {broken} begin an HTML block with a figure (run benchmarks/figures.py)"


# -- figures.py keeps markers off line starts ---------------------------------------------

FIG = "<!--fig bench_tune/wall_s|.0f-->{}<!--/fig-->".format(figures.inline("bench_tune/wall_s|.0f"))


@pytest.mark.parametrize(("text", "mended"), [
    (f"the tuning took\n{FIG} s on two cores\n", f"the tuning\ntook {FIG} s on two cores\n"),
    (f"- a list item whose tune took\n  {FIG} s\n", f"- a list item whose tune\n  took {FIG} s\n"),
    (f"- took\n  {FIG} s\n", f"- took {FIG} s\n"),  # no word can move: the lines are joined
    (f"both took {FIG} and\n{FIG} s\n", f"both took {FIG}\nand {FIG} s\n"),
    (f"took {FIG}\n{FIG} s\n", f"took {FIG} {FIG} s\n"),  # the tail would begin with a figure
])
def test_a_figure_at_a_line_start_is_reported_and_mended(text: str, mended: str) -> None:
    problems = figures.differences(figures.DOCS[0], text)
    assert [p.what.startswith("a line begins with a figure") for p in problems] == [True]
    assert figures.regenerate(text) == mended
    assert not figures.differences(figures.DOCS[0], mended)
    assert not [t for t in MARKDOWN.parse(mended) if t.type == "html_block"]


@pytest.mark.parametrize("text", [
    f"{FIG} s opens a paragraph: no line above to take a word from\n",
    f"## A heading\n{FIG} s\n",
    f"```text\nquoted\n{FIG} s\n```\n",
])
def test_lines_the_writer_cannot_mend_are_left_alone(text: str) -> None:
    assert figures.regenerate(text) == text


# -- the short table ------------------------------------------------------------------------

def row(problem: str, regime: str, capacity: float, base: float, ci: float, mechanism: str = "shape: x") -> dict:
    return {"problem": problem, "regime": regime, "capacity_rps": capacity, "baseline_capacity_rps": base,
            "capacity_delta_rps": capacity - base, "capacity_delta_ci_rps": ci, "capacity_ratio": capacity / base,
            "goodput_rps": 10.0, "baseline_goodput_rps": 10.0, "goodput_delta_rps": 0.0, "delta_ci_rps": 0.0,
            "mechanism": mechanism, "seeds": 3}


def test_the_summary_orders_rows_by_effect_and_merges_regimes_without_one() -> None:
    report = {"rows": [
        row("a", "light", 100, 100, 0),
        row("a", "heavy", 103, 100, 5),  # not significant: one line with light
        row("b", "heavy", 90, 100, 2, "3 of 9 cells differ (x, y); SM sharing: changed shares; waves: x[1] "
                                      "beside 3 SMs runs its CTAs in rounds: baseline 2, tuned 1 (alone: 1, 1); "
                                      "x[2] beside 3 SMs runs its CTAs in rounds: baseline 2, tuned 1 (alone: 1, 1); "
                                      "and 4 more cells"),
        # a loss, last
        row("c", "light", 130, 100, 3, "memory: reserved workspace 2.000 → 0.000 GiB"),
        row("c", "heavy", 150, 100, 3),  # the larger gain, first
    ]}
    lines = headline.summary(report).splitlines()
    assert lines[0].count("|") - 1 == 5
    body = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert [(r[0], r[1], r[-1]) for r in body] == [
        ("c", "heavy", "gain: +50% capacity over 3 seeds"), ("c", "light", "gain: +30% capacity over 3 seeds"),
        ("a", "light, heavy", "no difference"), ("b", "heavy", "loss: -10% capacity over 3 seeds")]
    assert body[1][2] == "memory (workspace 2 → 0 GiB)"
    assert body[2][3] == "largest difference, heavy: 103 vs 100 (+3.0 ± 5.0)"
    assert body[3][2] == "SM sharing, waves"  # the kinds, not the cells a note names


# -- the load-curve picture -----------------------------------------------------------------

def sweep_report() -> dict:
    return {"problems": [{
        "problem": "p", "arrivals_of": "heavy", "seeds": 3, "sources": ["declared"], "rates": [10.0, 20.0, 30.0],
        "rate_buckets": [{"regime": "light", "low": 10.0, "high": 10.0},
                         {"regime": "bursty", "low": 11.0, "high": 11.0},
                         {"regime": "heavy", "low": 25.0, "high": 28.0}],
        "curves": [{"label": "tuned for heavy", "is_baseline": False, "means": [10.0, 20.0, 29.0],
                    "half_widths": [0.1, 0.2, 1.0]},
                   {"label": "per-bucket isolated-fastest", "is_baseline": True, "means": [10.0, 19.0, 5.0],
                    "half_widths": [None, None, None]}],
        "capacities": [{"label": "tuned for heavy", "rate": 29.0, "is_baseline": False, "what": "capacity"},
                       {"label": "per-bucket isolated-fastest", "rate": 21.0, "is_baseline": True, "what": "capacity"}],
    }]}


def test_the_load_curve_svg_draws_every_curve_from_the_record() -> None:
    svg = load_curves.svg(sweep_report(), "p")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == 2
    assert [line.get("stroke-dasharray") for line in lines] == [None, "6 4"]  # THE baseline dashed, on top
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "tuned capacity 29" in texts and "baseline capacity 21" in texts
    assert any("simulated" in (t or "") for t in texts)
    labels = {t.text: (float(t.get("x")), float(t.get("y"))) for t in root.iter(f"{ns}text") if t.get("x")}
    (x1, y1), (x2, y2) = labels["light"], labels["bursty"]
    assert y1 != y2, "regime labels 1 req/s apart share a row and overlap"


def test_nice_ticks_cover_the_data_in_round_steps() -> None:
    assert load_curves.nice_ticks(900) == [0, 200, 400, 600, 800, 1000]
    assert load_curves.nice_ticks(22.5) == [0, 5, 10, 15, 20, 25]


def test_a_picture_that_differs_from_its_record_is_reported(tmp_path: Path) -> None:
    assert not figures.image_differences()
    (name, text), *_ = ((n, t) for n, t in figures.rendered_images().items() if isinstance(t, str))
    (tmp_path / name).parent.mkdir(parents=True)
    (tmp_path / name).write_text(text.replace("goodput vs offered load", "a pasted title"))
    reported = figures.image_differences(tmp_path)
    assert [str(p.path) for p in reported if "differs" in p.what][:1] == [str(tmp_path / name)]
    assert len(reported) == len(figures.IMAGES)  # the others: missing under tmp_path


def test_the_readme_shows_the_committed_pictures() -> None:
    text = README.read_text()
    for name in figures.IMAGES:
        assert f"]({name})" in text and (ROOT / name).is_file(), name
