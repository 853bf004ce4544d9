"""The options that describe a deployment (``tuner init``, ``tuner check-run``): the model's
config, the GPU, tensor parallelism and vLLM's engine arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .group import fail


def deployment_options(model_required: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--model --gpu --tp --engine --max-num-seqs --max-num-batched-tokens --block-size
    --gpu-memory-utilization --max-model-len --num-gpu-blocks --dtype``."""
    options = [
        click.option("--model", "model_config", required=model_required, default=None,
                     type=click.Path(dir_okay=False),
                     help="The model's Hugging Face config.json (Llama-like dense or Mixtral-like MoE)."),
        click.option("--gpu", type=click.Choice(["h100", "h200", "a100"]), default="h100", show_default=True),
        click.option("--tp", type=click.IntRange(1, 64), default=1, show_default=True, help="Tensor-parallel ranks."),
        click.option("--engine", type=click.Choice(["vllm"]), default="vllm", show_default=True),
        click.option("--max-num-seqs", type=click.IntRange(1, 65536), default=None,
                     help="vLLM's max_num_seqs [default: vLLM's for the GPU]"),
        click.option("--max-num-batched-tokens", type=click.IntRange(1, 1 << 20), default=None,
                     help="vLLM's max_num_batched_tokens [default: vLLM's for the GPU]"),
        click.option("--block-size", type=click.IntRange(1, 1024), default=16, show_default=True),
        click.option("--gpu-memory-utilization", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.9,
                     show_default=True),
        click.option("--max-model-len", type=click.IntRange(16, 1 << 22), default=8192, show_default=True),
        click.option("--num-gpu-blocks", type=click.IntRange(2, 1 << 26), default=None,
                     help="KV cache blocks [default: what the memory leaves, as vLLM computes it]"),
        click.option("--dtype", type=click.Choice(["float16", "bfloat16", "fp8"]), default=None,
                     help="Weights and KV cache dtype [default: the config's torch_dtype]"),
    ]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def deployment_from_options(options: dict[str, Any], **extra: Any):
    """A :class:`tuner.engine.init_problem.Deployment` from the options above (and
    ``extra`` fields); a bad combination is one line and exit code 2."""
    from ..engine.init_problem import Deployment
    from ..engine.model_config import read_model_config
    from ..profile.devices import PRESETS

    model = read_model_config(options["model_config"], options["dtype"])
    try:
        return Deployment(
            model=model, device=PRESETS[options["gpu"]], tp=options["tp"], max_num_seqs=options["max_num_seqs"],
            max_num_batched_tokens=options["max_num_batched_tokens"], block_size=options["block_size"],
            gpu_memory_utilization=options["gpu_memory_utilization"], max_model_len=options["max_model_len"],
            num_gpu_blocks=options["num_gpu_blocks"], **extra)
    except ValueError as exc:
        fail(str(exc))
