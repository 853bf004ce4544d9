"""``tuner init``: a problem file written from a model's ``config.json``."""

from __future__ import annotations

from pathlib import Path

import click

from .deployment import deployment_from_options, deployment_options
from .group import fail, main, one_line_errors


def _rates(ctx: click.Context, param: click.Parameter, value: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected request rates separated by commas, got {value!r}") from None
    return rates


def _check_loads(text: str, directory: Path | None) -> None:
    """Load the file about to be written, so that what the options make of it (a trace
    without the named columns, a name the schema refuses) is one line now, not at the
    first ``tuner simulate``."""
    import tempfile

    from ..errors import ProblemError
    from ..problem.load import load_problem

    with tempfile.TemporaryDirectory(dir=directory if directory and directory.is_dir() else None) as folder:
        path = Path(folder) / "problem.yaml"
        path.write_text(text)
        try:
            load_problem(path)
        except ProblemError as exc:
            fail(f"the problem file these options make does not load: {str(exc).replace(str(path) + ': ', '')}")


@main.command("init")
@deployment_options(model_required=True)
@click.option("--rate", "rates", default="1,4", callback=_rates, show_default=True,
              help="One regime per request rate (req/s), replaying the trace at that rate.")
@click.option("--trace", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A CSV trace of prompt and output lengths [default: the bundled Azure conversation trace]")
@click.option("--time-column", default="TIMESTAMP", show_default=True,
              help="The trace's arrival times: datetimes or seconds.")
@click.option("--prompt-column", default="ContextTokens", show_default=True)
@click.option("--output-column", default="GeneratedTokens", show_default=True)
@click.option("--prompt-id-column", default=None,
              help="A column naming each request's prompt: requests with equal ids share it in the prefix cache "
                   "[default: none, every prompt distinct]")
@click.option("--name", default=None, help="The problem's name [default: from --out, else 'deployment']")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write here instead of stdout.")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@one_line_errors
def init(rates: tuple[float, ...], trace: str | None, time_column: str, prompt_column: str, output_column: str,
         prompt_id_column: str | None, name: str | None, out: str | None, force: bool, **options: object) -> None:
    """Write a problem file for MODEL served by vLLM V1 on --tp GPUs.

    Every operator of a layer with its tensor-parallel shard (QKV, O, gate/up and down, or
    an MoE layer's router and experts), its all-reduces, decode and prefill attention, the
    KV bytes per token, the weights and the memory budget come from the config; the
    engine's limits from vLLM's defaults; each number carries a comment naming its source.
    Edit it, then `tuner validate` and `tuner tune` it.
    """
    from ..engine.init_problem import BUNDLED_TRACE, problem_text
    from ..outputs import output_problem, output_target, write_atomically

    stem = Path(out).stem if out else "deployment"
    deployment = deployment_from_options(
        options, rates=rates, trace=Path(trace).resolve() if trace else BUNDLED_TRACE, time_column=time_column,
        prompt_column=prompt_column, output_column=output_column, prompt_id_column=prompt_id_column,
        name=name or stem)
    model, tp, gpu = deployment.model, deployment.tp, deployment.device.name
    text = problem_text(deployment)
    _check_loads(text, Path(out).parent if out else None)
    if out is None or str(out) == "-":  # standard output, as without --out
        click.echo(text, nl=False)
        return
    target = Path(out)
    problem = output_problem(target)
    if problem is not None:
        fail(f"{out}: {problem}")
    if target.exists() and not force:
        fail(f"{out}: exists; pass --force to replace it")
    write_atomically(output_target(target), text)
    click.echo(f"wrote {out}: {model.name}, {model.parameters / 1e9:.2f} B parameters on {tp} x {gpu.upper()}; "
               f"next: tuner validate {out}", err=True)
