"""``tuner gate``: fail a candidate config assignment that loses goodput in some regime."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .group import main, one_line_errors
from .params import Number, OutputFile
from .attribute import ASSIGNMENT_HELP, common_options, load_inputs


@main.command(epilog=ASSIGNMENT_HELP + " Exit 0: not worse by more than the tolerance in any regime at the "
                                       "stated confidence; 1: worse somewhere; 2: bad input.")
@click.argument("base")
@click.argument("cand")
@common_options(min_seeds=2, why="a paired comparison needs two seeds")
@click.option("--tolerance", default=0.02, show_default=True, type=Number(),
              help="Largest accepted loss of the metric, as a fraction of the base's.")
@click.option("--confidence", default=0.95, show_default=True, type=Number(),
              help="Confidence of the one-sided bound on the paired difference.")
@click.option("--report", "report_path", type=OutputFile(), default=None,
              help="Write a Markdown report (a PR comment) to this file ('-': standard output, the verdicts then "
                   "on stderr).")
@click.option("--force", is_flag=True,
              help="Replace an existing file this command did not write (a file it wrote is replaced without it).")
@one_line_errors
def gate(base: str, cand: str, problem: Path | None, regimes: tuple[str, ...], seeds: int, horizon: float | None,
         metric: str, tolerance: float, confidence: float, report_path: Path | None, force: bool) -> None:
    """Paired non-inferiority test of CAND against BASE over seeds, per regime."""
    from ..attribution import gate as run_gate
    from ..attribution.render import markdown_report, verdict_line
    from ..outputs import GATE_REPORT_MARK, is_stdout, refuse_foreign, write_output

    if report_path is not None:
        refuse_foreign(report_path, GATE_REPORT_MARK, force)

    loaded, _, base_a, cand_a = load_inputs(problem, base, cand, regimes)
    result = run_gate(loaded, base_a, cand_a, range(seeds), horizon, tolerance, confidence,
                      attribute_all=report_path is not None, metric=metric)
    to_stdout = report_path is not None and is_stdout(report_path)  # the report is stdout: verdicts to stderr
    if report_path is not None:
        write_output(report_path, markdown_report(loaded, result, base, cand))
    for verdict in result.verdicts:
        click.echo(verdict_line(verdict), err=to_stdout)
    click.echo(f"gate: {'PASS' if result.passed else 'FAIL'}", err=to_stdout)
    if report_path is not None and not to_stdout:
        click.echo(f"report written to {report_path}")
    sys.exit(0 if result.passed else 1)
