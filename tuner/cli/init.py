"""``tuner init``: a problem file written from a model's ``config.json``."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .group import fail, main, one_line_errors


def _rates(ctx: click.Context, param: click.Parameter, value: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected request rates separated by commas, got {value!r}") from None
    return rates


@main.command("init")
@click.option("--model", "model_config", required=True, type=click.Path(dir_okay=False),
              help="The model's Hugging Face config.json (Llama-like dense or Mixtral-like MoE).")
@click.option("--gpu", type=click.Choice(["h100", "h200", "a100"]), default="h100", show_default=True)
@click.option("--tp", type=click.IntRange(1, 64), default=1, show_default=True, help="Tensor-parallel ranks.")
@click.option("--engine", type=click.Choice(["vllm"]), default="vllm", show_default=True)
@click.option("--max-num-seqs", type=click.IntRange(1, 65536), default=None,
              help="vLLM's max_num_seqs [default: vLLM's for the GPU]")
@click.option("--max-num-batched-tokens", type=click.IntRange(1, 1 << 20), default=None,
              help="vLLM's max_num_batched_tokens [default: vLLM's for the GPU]")
@click.option("--block-size", type=click.IntRange(1, 1024), default=16, show_default=True)
@click.option("--gpu-memory-utilization", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.9,
              show_default=True)
@click.option("--max-model-len", type=click.IntRange(16, 1 << 22), default=8192, show_default=True)
@click.option("--dtype", type=click.Choice(["float16", "bfloat16", "fp8"]), default=None,
              help="Weights and KV cache dtype [default: the config's torch_dtype]")
@click.option("--rate", "rates", default="1,4", callback=_rates, show_default=True,
              help="One regime per request rate (req/s), replaying the trace at that rate.")
@click.option("--trace", type=click.Path(dir_okay=False, exists=True), default=None,
              help="A CSV trace of prompt and output lengths [default: the bundled Azure conversation trace]")
@click.option("--prompt-column", default="ContextTokens", show_default=True)
@click.option("--output-column", default="GeneratedTokens", show_default=True)
@click.option("--name", default=None, help="The problem's name [default: from --out, else 'deployment']")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write here instead of stdout.")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@one_line_errors
def init(model_config: str, gpu: str, tp: int, engine: str, max_num_seqs: int | None,
         max_num_batched_tokens: int | None, block_size: int, gpu_memory_utilization: float, max_model_len: int,
         dtype: str | None, rates: tuple[float, ...], trace: str | None, prompt_column: str, output_column: str,
         name: str | None, out: str | None, force: bool) -> None:
    """Write a problem file for MODEL served by vLLM V1 on --tp GPUs.

    Every operator of a layer with its tensor-parallel shard (QKV, O, gate/up and down, or
    an MoE layer's router and experts), its all-reduces, decode and prefill attention, the
    KV bytes per token, the weights and the memory budget come from the config; the
    engine's limits from vLLM's defaults; each number carries a comment naming its source.
    Edit it, then `tuner validate` and `tuner tune` it.
    """
    from ..engine.init_problem import BUNDLED_TRACE, Deployment, problem_text
    from ..engine.model_config import read_model_config
    from ..profile.devices import PRESETS

    model = read_model_config(model_config, dtype)
    stem = Path(out).stem if out else "deployment"
    try:
        deployment = Deployment(
            model=model, device=PRESETS[gpu], tp=tp, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens, block_size=block_size,
            gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, rates=rates,
            trace=Path(trace).resolve() if trace else BUNDLED_TRACE, prompt_column=prompt_column,
            output_column=output_column, name=name or stem)
    except ValueError as exc:
        fail(str(exc))
    text = problem_text(deployment)
    if out is None:
        click.echo(text, nl=False)
        return
    target = Path(out)
    if target.exists() and not force:
        fail(f"{out}: exists; pass --force to replace it")
    if target.exists() and not target.is_file():
        fail(f"{out}: not a regular file")
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, target)
    click.echo(f"wrote {out}: {model.name}, {model.parameters / 1e9:.2f} B parameters on {tp} x {gpu.upper()}; "
               f"next: tuner validate {out}", err=True)
