"""Every benchmark figure in README.md, benchmarks/README.md and docs/*.md, regenerated
from the recorded results in ``benchmarks/results/*.json``.

Why: figures pasted by hand drift from what was measured (a tune time quoted as "about
2 minutes" after 151–164 s runs, a simulator rate from another machine, an import time
from before a fix). Here every figure is a marker around text this script writes:

* a block — a line ``<!-- figures:NAME -->``, the generated lines, a line
  ``<!-- /figures -->`` — for tables and program output; NAME is a key of ``BLOCKS``;
* an inline figure — ``<!--fig SPEC-->text<!--/fig-->`` — for numbers in prose. SPEC is
  ``RESULT/PATH|FORMAT``: RESULT names ``benchmarks/results/RESULT.json``; PATH walks its
  ``report`` (or, starting with ``recorded``, the envelope's metadata) by keys, list
  indices, or ``key=value&...`` to pick the list element whose fields match; FORMAT is a
  ``format()`` spec, a name in ``FORMATS``, or ``rangeSPEC`` (a list's least and
  greatest value, each in SPEC: ``range.0f`` gives ``9–12``). ``=NAME|FORMAT`` takes a value ``DERIVED``
  computes from several results instead.

No line may begin with an inline figure: a line starting ``<!--`` starts a CommonMark
HTML block, which ends the paragraph above it and shows the line as raw HTML (the
paragraph renders in fragments, a list item loses the spaces around the figure). The
writer moves the previous line's last word down to such a line (:func:`unbroken`) and
``--check`` reports any it finds.

``IMAGES`` are whole files (the README's load curves, SVG) written the same way from a
record.

``python benchmarks/figures.py`` rewrites the files; ``--check`` only compares and exits
1 listing every figure that differs, and every benchmark-looking number left outside
markers that ``STRAYS`` recognises (``tests/test_benchmarks.py`` runs the same check).
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for path in (str(HERE), str(ROOT)):  # the benchmark modules import `recorded` and `tuner`
    if path not in sys.path:
        sys.path.insert(0, path)

from recorded import load  # noqa: E402

DOCS = (ROOT / "README.md", HERE / "README.md", *sorted((ROOT / "docs").glob("*.md")))
BLOCK = re.compile(r"^<!-- figures:(?P<name>[\w.-]+) -->\n(?P<body>.*?)^<!-- /figures -->$", re.S | re.M)
#: An inline figure's text holds no markup, backtick or line break, so a marker quoted in
#: a code span (as benchmarks/README.md does) is not taken for one.
INLINE = re.compile(r"<!--fig (?P<spec>[^>\n]+?)-->(?P<body>[^<`\n]*)<!--/fig-->")


@cache
def result(name: str) -> dict[str, Any]:
    """The envelope of ``benchmarks/results/<name>.json``, read once per run."""
    return load(name)


def report(name: str) -> Any:
    """What the benchmark itself reported in that record."""
    return result(name)["report"]


def bench(module: str):
    """A benchmark module, for its renderer (the table its own run prints)."""
    return importlib.import_module(module)


def measured(name: str) -> dict[str, Any]:
    """A record measured on a machine this one is not (``benchmarks/data/<name>.json``)."""
    return json.loads((HERE / "data" / f"{name}.json").read_text())


def fenced(text: str) -> str:
    return f"```text\n{text}\n```"


def lookup(spec_path: str) -> Any:
    """The value at ``RESULT/PATH`` (see the module docstring)."""
    name, *steps = spec_path.split("/")
    value: Any = result(name)
    if not steps or steps[0] != "recorded":
        value = value["report"]
    for step in steps:
        if isinstance(value, list) and "=" in step:
            wanted = dict(part.split("=", 1) for part in step.split("&"))
            value = next(item for item in value if all(str(item.get(k)) == v for k, v in wanted.items()))
        elif isinstance(value, list):
            value = value[int(step)]
        else:
            value = value[step]
    return value


def _tests(value: dict[str, int]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in value.items())


#: Named formats for inline figures (anything else is a ``format()`` spec).
FORMATS: dict[str, Callable[[Any], str]] = {
    "k": lambda v: f"{v / 1000:.0f}k",
    "date": lambda v: str(v)[:10],
    "met": lambda v: "met" if v else "**missed**",
    "tests": _tests,
    "us": lambda v: f"{v * 1e6:.1f} µs",
    "us2": lambda v: f"{v * 1e6:.2f} µs",
    "gbs": lambda v: f"{v / 1e9:.1f} GB/s",
}


def _runtime_ns(name: str) -> float:
    return lookup(f"bench_runtime/lookup_ns/{name}")


def _passed(*measures: str) -> bool:
    """Whether bench_runtime's record says these targets were met (by name prefix)."""
    targets = lookup("bench_runtime/targets")
    return all(next(t["pass"] for t in targets if t["measure"].startswith(m)) for m in measures)


def _fleet_wall(backend: str) -> float:
    walls = {m["workers"]: m["wall_s"] for m in lookup("bench_fleet/measurements") if m["backend"] == backend}
    return walls[1] / walls[2]


def _sim2real_worst(part: str, metric: str = "e2e_ms") -> float:
    """The largest absolute error (%) of a stage's mean ``metric`` over bench_sim2real's runs."""
    return max(abs(stage["error_pct"][metric]["mean"]) for entry in lookup(f"bench_sim2real/{part}")
               for stage in entry["stages"])


#: Figures computed from several recorded values.
DERIVED: dict[str, Callable[[], Any]] = {
    "sim2real_calibration_e2e_worst": lambda: _sim2real_worst("calibration"),
    "sim2real_loro_e2e_worst": lambda: _sim2real_worst("leave_one_run_out"),
    "sim2real_kv_block_errors": lambda: [entry["error_pct"] for entry in lookup("bench_sim2real/kv_blocks")],
    "sim2real_engine_same_workload_errors": lambda: [
        100.0 * (stage["engine_model"]["e2e_p50_ms"] / stage["measured"]["e2e_p50_ms"] - 1.0)
        for entry in lookup("bench_sim2real/service_simulator") for stage in entry["stages"]],
    "sim2real_service_e2e_p50_errors": lambda: [
        100.0 * (stage["predicted"]["e2e_p50_ms"] / stage["measured"]["e2e_p50_ms"] - 1.0)
        for entry in lookup("bench_sim2real/service_simulator") for stage in entry["stages"]
        if not stage["predicted"]["overloaded"]],
    "sim2real_service_e2e_p90_errors": lambda: [
        100.0 * (stage["predicted"]["e2e_p90_ms"] / stage["measured"]["e2e_p90_ms"] - 1.0)
        for entry in lookup("bench_sim2real/service_simulator") for stage in entry["stages"]],
    "sim2real_service_loro_e2e_p50_errors": lambda: [
        100.0 * (stage["predicted"]["e2e_p50_ms"] / stage["measured"]["e2e_p50_ms"] - 1.0)
        for entry in lookup("bench_sim2real/kernel_factors/leave_one_run_out")
        for stage in entry["service_simulator"]["stages"]],
    "sim2real_kernel_step_errors": lambda: [row["error_pct"] for row in lookup("bench_sim2real/kernel_factors/steps")],
    "sim2real_kernel_step_errors_before": lambda: [
        row["error_pct"] for row in lookup("bench_sim2real/kernel_factors/steps_a100_cublas")],
    "sim2real_kernel_dense_loro_errors": lambda: [
        row["error_pct"] for entry in lookup("bench_sim2real/kernel_factors/leave_one_run_out")
        if "mixtral" not in entry["run"] for row in entry["steps"]],
    "sim2real_kernel_mixtral_loro_errors": lambda: [
        row["error_pct"] for entry in lookup("bench_sim2real/kernel_factors/leave_one_run_out")
        if "mixtral" in entry["run"] for row in entry["steps"]],
    "sim2real_experts_errors": lambda: [row["error_pct"] for row in lookup("bench_sim2real/kernel_factors/experts")],
    "runtime_bucketed_vs_call": lambda: (_runtime_ns("config(op, {M: m}), 14 buckets")
                                         / _runtime_ns("dict behind a call")),
    "runtime_two_dimensional_vs_call": lambda: (_runtime_ns("config(op, {B: b, L: l}), 8 x 10 buckets")
                                                / _runtime_ns("dict behind a call")),
    "runtime_bucketed_vs_dict": lambda: _runtime_ns("config(op, {M: m}), 14 buckets") / _runtime_ns("plain dict"),
    "runtime_one_bucket_vs_dict": lambda: _runtime_ns("config(op), 1 bucket") / _runtime_ns("plain dict"),
    "runtime_call_vs_dict": lambda: _runtime_ns("dict behind a call") / _runtime_ns("plain dict"),
    "runtime_lookup_met": lambda: _passed("Dispatcher.config(op), one bucket",
                                          "Dispatcher.config(op, {'M': m}), 14 buckets",
                                          "Dispatcher.config(op, {'B': b, 'L': l})", "config(op, {'N', 'K'})",
                                          "config(op, {'B': b})"),
    "runtime_ratio_met": lambda: _passed(*(f"{short} / dict behind a call" for short in
                                           ("one bucket", "14 buckets", "8 x 10 buckets", "M missing", "L missing"))),
    "runtime_load_met": lambda: _passed("load_table, 10,000 rows, SQLite"),
    "runtime_json_load_met": lambda: _passed("load_table, 10,000 rows, JSON"),
    "runtime_import_met": lambda: _passed("import tuner.runtime, fresh interpreter"),
    "tune_met": lambda: lookup("bench_tune/wall_s") < lookup("bench_tune/target_s"),
    "tune_studies": lambda: len(lookup("bench_tune/studies")),
    "policy_seed_gain": lambda: (lookup("bench_policy/workloads/problem=seed_example/table")
                                 / lookup("bench_policy/workloads/problem=seed_example/per_bucket_isolated_fastest")),
    "llm_decode_capacity_ratios": lambda: [r["capacity_ratio"] for r in lookup("headline/rows")
                                           if r["problem"] == "llm_decode"],
    # capacity ratios of the rows whose paired interval spans zero (not significant)
    "insignificant_capacity_ratios": lambda: [
        r["capacity_ratio"] for r in lookup("headline/rows")
        if r["capacity_ratio"] is not None and abs(r["capacity_delta_rps"]) <= r["capacity_delta_ci_rps"]],
    "guard_kept": lambda: sum(bool(r.get("guard")) for r in lookup("headline/rows")),
    "headline_regimes": lambda: len(lookup("headline/rows")),
    "horizon_llm_goodput_vs_baseline": lambda: [
        h["goodput"]["tuned_over_per_bucket_isolated_fastest"] for h in lookup("bench_horizon_llm_decode_heavy/horizons")],
    "horizon_llm_seconds": lambda: sum(h["seconds"] for h in lookup("bench_horizon_llm_decode_heavy/horizons")),
    "sharing_streaming_errors": lambda: [lookup("bench_sharing/fit_error"),
                                         lookup("bench_sharing/holdout_error_by_kind/bw_vs_sms")],
    "fleet_before_trials": lambda: [m["before_trials_s"] for m in lookup("bench_fleet/measurements")],
    "fleet_after_trials": lambda: [m["after_trials_s"] for m in lookup("bench_fleet/measurements")],
    "fleet_sqlite_wall_ratio": lambda: _fleet_wall("sqlite"),
    "fleet_postgresql_wall_ratio": lambda: _fleet_wall("postgresql"),
}


def inline(spec: str) -> str:
    source, _, form = spec.partition("|")
    value = DERIVED[source[1:]]() if source.startswith("=") else lookup(source)
    if form.startswith("range"):  # rangeSPEC: the smallest and largest of a list, each in SPEC
        low, high = f"{min(value):{form[5:]}}", f"{max(value):{form[5:]}}"
        return low if low == high else f"{low}–{high}"
    return FORMATS[form](value) if form in FORMATS else format(value, form)


#: Block name -> what goes between its markers.
BLOCKS: dict[str, Callable[[], str]] = {
    "headline": lambda: bench("headline").render(report("headline")),
    "headline_seed_example": lambda: bench("headline").problem_table(report("headline"), "seed_example"),
    "bench_policy": lambda: bench("bench_policy").render(report("bench_policy")),
    "bench_replay": lambda: bench("bench_replay").render(report("bench_replay")),
    "bench_runtime": lambda: bench("bench_runtime").markdown(report("bench_runtime")),
    "bench_simulator": lambda: fenced(bench("bench_simulator").table(report("bench_simulator"))),
    "bench_sharing": lambda: fenced(bench("bench_sharing").render(report("bench_sharing"))),
    "bench_fleet": lambda: bench("bench_fleet").rows_table(report("bench_fleet")),
    "bench_tune": lambda: bench("bench_tune").markdown(report("bench_tune")),
    "bench_model": lambda: bench("bench_model").markdown(report("bench_model_no_fit")),
    "bench_horizon_llm_decode": lambda: bench("bench_horizon").render(
        report("bench_horizon_llm_decode_heavy")),
    "bench_horizon_seed_example": lambda: bench("bench_horizon").render(
        report("bench_horizon_seed_example_heavy")),
    "headline_summary": lambda: bench("headline").summary(report("headline")),
    "deployments": lambda: bench("bench_deployments").table(report("bench_deployments")),
    "sim2real": lambda: bench("bench_sim2real").render(report("bench_sim2real")),
    "sim2real_published": lambda: bench("bench_sim2real").render_published(report("bench_sim2real")),
    "sim2real_service_simulator": lambda: bench("bench_sim2real").render_service_simulator(report("bench_sim2real")),
    "sim2real_coefficients": lambda: bench("bench_sim2real").render_coefficients(report("bench_sim2real")),
    "sim2real_kernel_factors": lambda: bench("bench_sim2real").render_kernel_factors(report("bench_sim2real")),
    "gpu_checks": lambda: fenced(bench("gpu_check").render(bench("gpu_check").records())),
    "gpu_sharing_measured": lambda: fenced(bench("gpu_sharing").render(measured("gpu_sharing_measured"))),
}

#: Generated files (path under the repository) -> their whole text.
IMAGES: dict[str, Callable[[], str]] = {
    f"docs/images/load_{name}.svg": (lambda name=name: bench("load_curves").svg(report("load_curves"), name))
    for name in bench("load_curves").PROBLEMS
}


@dataclass(frozen=True)
class Stray:
    """A benchmark-looking number that must not appear outside markers."""

    pattern: re.Pattern[str]
    why: str
    first_section_only: bool = False  # only README.md's lines before its first heading


STRAYS = (
    Stray(re.compile(r"\d+(?:\.\d+)?k/s"), "simulator throughput (bench_simulator)"),
    Stray(re.compile(r"\d+(?:\.\d+)?× SimPy"), "simulator speed against SimPy (bench_simulator)"),
    Stray(re.compile(r"\d+(?:\.\d+)?\s?ns\b"), "a dispatcher lookup time (bench_runtime)"),
    Stray(re.compile(r"import tuner\.runtime[^\n]{0,60}?(?<![<≤] )\b\d+\s?ms"),
          "the runtime's import time (bench_runtime)"),
    Stray(re.compile(r"\d+(?:\.\d+)?\s?(?:s|seconds|minutes?)\b|\babout (?:a|one|two) minutes?\b"),
          "set-up, tune or test time (bench_tune, setup_and_tests)", first_section_only=True),
    Stray(re.compile(r"\b\d+ tests\b"), "the test count (setup_and_tests)", first_section_only=True),
)


@dataclass(frozen=True)
class Problem:
    """One figure that differs from the record, or one number left outside markers."""

    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.what}"


#: What a marker whose record or renderer is missing raises: it is left as it is, and
#: ``--check`` reports it.
MISSING = (KeyError, IndexError, StopIteration, FileNotFoundError, ValueError)


def regenerate(text: str) -> str:
    """``text`` with every marked figure that has a record rewritten from it."""
    def block(m: re.Match[str]) -> str:
        try:
            return f"<!-- figures:{m['name']} -->\n{BLOCKS[m['name']]()}\n<!-- /figures -->"
        except MISSING:
            return m.group(0)

    def figure(m: re.Match[str]) -> str:
        try:
            return f"<!--fig {m['spec']}-->{inline(m['spec'])}<!--/fig-->"
        except MISSING:
            return m.group(0)

    return unbroken(INLINE.sub(figure, BLOCK.sub(block, text)))


#: What a paragraph's line starts with when it is not a paragraph's continuation.
_NOT_PROSE = ("#", "|", "```", "<!--", ">")


def _leading_figures(lines: list[str]) -> list[int]:
    """Indices of the lines (outside code fences) that begin, after their indentation,
    with a well-formed inline figure and continue a paragraph: the lines the writer can
    mend. (A figure opening a paragraph or a list item cannot be mended by moving words;
    tests/test_readme.py renders the docs and finds those.)"""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        previous = lines[i - 1].lstrip() if i else ""
        prose = previous and (not previous.startswith(_NOT_PROSE) or INLINE.match(previous))
        if not fenced and prose and INLINE.match(line.lstrip()):
            found.append(i)
    return found


#: A line beginning so may start another block (a list item, a quote, a heading, a code
#: fence, HTML, a table): a word moved down must not begin so.
_BLOCK_START = re.compile(r"[-+*>#|=<`~]|\d{1,9}[.)](\s|$)")


def _split_point(line: str) -> int | None:
    """Where to cut ``line`` so that its tail can move down: the last space outside a
    figure and a code span whose tail begins with neither a figure nor what starts a
    block, and before which more than a list marker remains; None when there is none."""
    inside = {i for m in INLINE.finditer(line) for i in range(m.start(), m.end())}
    for i in range(len(line.rstrip()) - 1, 0, -1):
        if line[i] != " " or i in inside or line.count("`", 0, i) % 2:
            continue
        head, tail = line[:i].strip(), line[i + 1:]
        if head and not re.fullmatch(r"[-*+]|\d+[.)]", head) and not _BLOCK_START.match(tail) \
                and not tail.startswith("<!--fig "):
            return i
    return None


def unbroken(text: str) -> str:
    """``text`` with no paragraph line beginning with an inline figure: the line above
    gives it its last word (or, where no word can move, the two lines are joined)."""
    lines = text.split("\n")
    for i in reversed(_leading_figures(lines)):
        above, line = lines[i - 1].rstrip(), lines[i]
        indent = line[:len(line) - len(line.lstrip())]
        cut = _split_point(above)
        if cut is None:
            lines[i - 1:i + 1] = [f"{above} {line.lstrip()}"]
        else:
            lines[i - 1:i + 1] = [above[:cut], f"{indent}{above[cut + 1:]} {line.lstrip()}"]
    return "\n".join(lines)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def differences(path: Path, text: str) -> list[Problem]:
    """Every marked figure of ``text`` that the records do not give, and every marker
    naming a block or a result that does not exist."""
    found = []
    for opening, pattern in (("<!--fig ", INLINE), ("<!-- figures:", BLOCK)):
        matched = {m.start() for m in pattern.finditer(text)}
        found += [Problem(path, _line(text, m.start()), f"malformed marker (no closing marker, or markup inside): "
                                                         f"{text[m.start():m.start() + 60]!r}")
                  for m in re.finditer(re.escape(opening), text)
                  if m.start() not in matched and text[m.start() - 1:m.start()] != "`"]  # `quoted` in a code span
    found += [Problem(path, i + 1, "a line begins with a figure: CommonMark starts an HTML block there and "
                                   "breaks the paragraph (run benchmarks/figures.py)")
              for i in _leading_figures(text.split("\n"))]
    for m in BLOCK.finditer(text):
        try:
            expected = BLOCKS[m["name"]]() + "\n"
        except MISSING as exc:
            found.append(Problem(path, _line(text, m.start()), f"block {m['name']}: no record or renderer ({exc!r})"))
            continue
        if m["body"] != expected:
            found.append(Problem(path, _line(text, m.start()), f"block {m['name']} differs from its record"))
    for m in INLINE.finditer(text):
        try:
            expected = inline(m["spec"])
        except MISSING as exc:
            found.append(Problem(path, _line(text, m.start()), f"figure {m['spec']}: not in the record ({exc!r})"))
            continue
        if m["body"] != expected:
            found.append(Problem(path, _line(text, m.start()),
                                 f"figure {m['spec']} says {m['body']!r}, the record {expected!r}"))
    return found


def strays(path: Path, text: str) -> list[Problem]:
    """Benchmark-looking numbers outside markers (marked text blanked, lines kept)."""
    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    bare = INLINE.sub(blank, BLOCK.sub(blank, text))
    heading = re.search(r"^## ", bare, re.M)
    found = []
    for stray in STRAYS:
        if stray.first_section_only and path != ROOT / "README.md":
            continue
        scope = bare[:heading.start()] if stray.first_section_only and heading else bare
        found += [Problem(path, _line(bare, m.start()), f"{m.group(0)!r} outside markers: {stray.why}")
                  for m in stray.pattern.finditer(scope)]
    return found


def rendered_images() -> dict[str, str | Exception]:
    """Each file of ``IMAGES``: the text its record gives, or why there is none."""
    out: dict[str, str | Exception] = {}
    for name, render in IMAGES.items():
        try:
            out[name] = render()
        except MISSING as exc:
            out[name] = exc
    return out


def image_differences(root: Path = ROOT) -> list[Problem]:
    """Every generated file of ``IMAGES`` (under ``root``) that is missing or differs
    from its record."""
    found = []
    for name, expected in rendered_images().items():
        path = root / name
        if isinstance(expected, Exception):
            found.append(Problem(path, 1, f"image: no record or renderer ({expected!r})"))
        elif not path.is_file() or path.read_text() != expected:
            found.append(Problem(path, 1, "image differs from its record (run benchmarks/figures.py)"))
    return found


def write_images() -> None:
    """Write each file of ``IMAGES`` whose record gives another text."""
    for name, text in rendered_images().items():
        path = ROOT / name
        if isinstance(text, str) and (not path.is_file() or path.read_text() != text):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {name}")


def check(paths: tuple[Path, ...] = DOCS) -> list[Problem]:
    problems = []
    for path in paths:
        text = path.read_text()
        problems += differences(path, text) + strays(path, text)
    return problems + (image_differences() if paths == DOCS else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 listing what differs")
    args = parser.parse_args(argv)
    if not args.check:
        for path in DOCS:
            text = path.read_text()
            new = regenerate(text)
            if new != text:
                path.write_text(new)
                print(f"rewrote {path.relative_to(ROOT)}")
        write_images()
    problems = check()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
