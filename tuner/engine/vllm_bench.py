"""A ``vllm bench serve --save-result [--save-detailed]`` result file as a measured run.

Why: users measure with vLLM's own benchmark, not in ``measured-run/1``. Its JSON holds the
offered rate and burstiness, each request's prompt and output length (``input_lens``,
``output_lens``, saved with ``--save-detailed``) and the summary figures (``mean_``,
``median_``, ``pNN_`` of ``ttft``, ``tpot`` and, when asked for with
``--percentile-metrics``, ``e2el``), but neither the deployment nor the arrival times. The
deployment comes from ``tuner check-run``'s options (the model's config and the engine
arguments, KV blocks computed as vLLM computes them unless given); the arrivals are a draw
of the process the benchmark sends (gamma gaps with shape ``burstiness``, Poisson at 1;
seed 0), not its own draw. A run with ``max_concurrency`` set is closed-loop and refused:
the replay sends requests at their arrival times.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RunError, shortened
from .init_problem import Deployment
from .measured_run import MAX_TOKENS, METRICS, MeasuredRun, Stage
from .model_config import read_json_object
from .replay import TraceRequest

#: vLLM's name of each metric (``mean_<name>_ms``) -> ours.
NAMES = {"e2el": "e2e_ms", "ttft": "ttft_ms", "tpot": "tpot_ms"}


def is_vllm_bench(data: Any) -> bool:
    return isinstance(data, dict) and "request_rate" in data and ("mean_ttft_ms" in data or "input_lens" in data)


def _figures(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    figures = {}
    for name, metric in NAMES.items():
        def number(key: str) -> float:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        figures[metric] = {"mean": number(f"mean_{name}_ms"), "p50": number(f"median_{name}_ms"),
                           "p90": number(f"p90_{name}_ms"), "p99": number(f"p99_{name}_ms")}
    return figures


def read_vllm_bench(path: str | Path, deployment: Deployment, seed: int = 0) -> MeasuredRun:
    """The run of a ``vllm bench serve`` result file on ``deployment``."""
    path = Path(path)
    where = shortened(path)
    data = read_json_object(path)
    if not is_vllm_bench(data):
        raise RunError(f"{where}: not a vllm bench serve result (no 'request_rate')")
    if data.get("max_concurrency") not in (None, 0):
        raise RunError(f"{where}: key 'max_concurrency': {data['max_concurrency']} makes a closed-loop run; "
                       "check-run replays open arrivals")
    rate = data["request_rate"]
    if isinstance(rate, str) or not isinstance(rate, (int, float)) or not (rate > 0 and math.isfinite(rate)):
        raise RunError(f"{where}: key 'request_rate': a finite positive rate is needed to replay arrivals, "
                       f"got {rate!r}")
    burstiness = data.get("burstiness", 1.0)
    if isinstance(burstiness, bool) or not isinstance(burstiness, (int, float)) or not (
            burstiness > 0 and math.isfinite(burstiness)):
        raise RunError(f"{where}: key 'burstiness': must be positive, got {burstiness!r}")
    inputs, outputs = data.get("input_lens"), data.get("output_lens")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        raise RunError(f"{where}: keys 'input_lens' and 'output_lens' are needed, of equal length "
                       "(save the result with --save-detailed)")
    if any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_TOKENS for v in (*inputs, *outputs)):
        raise RunError(f"{where}: key 'input_lens'/'output_lens': token counts must be integers between 0 and "
                       f"{MAX_TOKENS:,}")
    # vLLM writes output length 0 for a failed request and leaves it out of its figures
    served = [(p, o) for p, o in zip(inputs, outputs) if o > 0 and p > 0]
    if not served:
        raise RunError(f"{where}: every request failed (output_lens all 0); nothing to replay")
    gaps = np.random.default_rng(seed).gamma(burstiness, 1.0 / (rate * burstiness), len(served))
    arrivals = np.concatenate([[0.0], np.cumsum(gaps)[:-1]])
    engine = deployment.engine_args
    requests = tuple(TraceRequest(float(a), p, o, tuple((-3, i, j) for j in range(engine.keyed_blocks(p, o))))
                     for i, (a, (p, o)) in enumerate(zip(arrivals, served)))
    model = deployment.model
    if isinstance(data.get("model_id"), str):
        model = replace(model, name=data["model_id"])
    return MeasuredRun(name=path.stem, path=path, model=model, gpu=deployment.device.name.upper(),
                       tp=deployment.tp, engine=engine, requests=requests, stage_of=(0,) * len(requests),
                       stages=(Stage(0, float(rate), _figures(data)),))


__all__ = ["METRICS", "is_vllm_bench", "read_vllm_bench"]
