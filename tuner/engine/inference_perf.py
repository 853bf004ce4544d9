"""An inference-perf report folder as a measured run.

inference-perf (kubernetes-sigs/inference-perf) writes, per run, a folder with
``config.yaml`` (the whole config: ``load.stages``), ``stage_<N>_lifecycle_metrics.json``
per load stage (``load_summary``: ``count``, ``requested_rate``; latencies in seconds) and,
when ``report.request_lifecycle.per_request`` is on, ``per_request_lifecycle_metrics.json``:
one entry per request with ``start_time``/``end_time`` (``time.perf_counter()`` seconds:
only differences mean anything), the HTTP ``request`` payload as a string, and ``info``
whose layout changed across versions (v0.4: ``info.input_tokens``, ``info.output_tokens``,
``info.output_token_times``; v0.5: the output side under ``info.response_info``; v0.6:
``info.request_metrics.text.input_tokens`` and ``info.response_metrics``). Read from
reportgen/base.py and apis/ of that repository (v0.4.0-v0.6.1).

The replay needs each request's arrival and lengths, so the per-request file is required.
Everything measured is computed from it as ``check-run`` defines it (TTFT = first token
time - start; TPOT = (e2e - TTFT) / (output tokens - 1)), so every version reads alike;
requests are split into stages in start order by each stage file's ``count``. Requests
whose payload holds the same prompt text share prefix-cache blocks; nothing else is known
of their tokens. The deployment comes from ``check-run``'s options.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RunError, shortened
from .init_problem import Deployment
from .measured_run import MAX_TOKENS, MeasuredRun, Stage
from .model_config import read_json_object
from .replay import TraceRequest, percentiles

PER_REQUEST = "per_request_lifecycle_metrics.json"
STAGE_FILE = re.compile(r"(?:.*_)?stage_(\d+)_lifecycle_metrics\.json$")


def is_inference_perf(path: Path) -> bool:
    return path.is_dir() and any(STAGE_FILE.match(p.name) or p.name.endswith(PER_REQUEST) for p in path.iterdir())


def _dig(data: Any, *paths: tuple[str, ...]) -> Any:
    """The first of ``paths`` present in ``data`` (the layouts of several versions)."""
    for path in paths:
        value = data
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            return value
    return None


def _request(entry: Any, where: str) -> tuple[float, float, int, int, float | None, str] | None:
    """(start, end, prompt tokens, output tokens, first token time, prompt text) of one
    entry; None for a failed request."""
    if not isinstance(entry, dict):
        raise RunError(f"{where}: expected an object")
    if entry.get("error"):
        return None
    info = entry.get("info") or {}
    prompt = _dig(info, ("request_metrics", "text", "input_tokens"), ("input_tokens",))
    output = _dig(info, ("response_metrics", "output_tokens"), ("response_info", "output_tokens"), ("output_tokens",))
    times = _dig(info, ("response_metrics", "output_token_times"), ("response_info", "output_token_times"),
                 ("output_token_times",))
    start, end = entry.get("start_time"), entry.get("end_time")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in (start, end, prompt, output)):
        raise RunError(f"{where}: start_time, end_time and the token counts in 'info' must be finite numbers")
    if not 0 <= prompt <= MAX_TOKENS or not 0 <= output <= MAX_TOKENS:
        raise RunError(f"{where}: token counts must be between 0 and {MAX_TOKENS:,}")
    text = entry.get("request") if isinstance(entry.get("request"), str) else ""
    try:
        payload = json.loads(text) if text else {}
    except json.JSONDecodeError:
        payload = {}
    asked = payload.get("prompt", payload.get("messages")) if isinstance(payload, dict) else None
    prompt_text = json.dumps(asked, sort_keys=True) if asked else ""  # "": nothing known, nothing shared
    first = float(times[0]) if isinstance(times, list) and times and isinstance(times[0], (int, float)) else None
    return float(start), float(end), int(prompt), int(output), first, prompt_text


def _stage_counts(folder: Path) -> list[tuple[int, float | None, int]]:
    """(stage index, requested rate, request count) of each stage file, in index order."""
    stages = []
    for path in sorted(folder.iterdir()):
        match = STAGE_FILE.match(path.name)
        if match is None:
            continue
        data = read_json_object(path)
        summary = data.get("load_summary") if isinstance(data, dict) else None
        count = summary.get("count") if isinstance(summary, dict) else None
        if not isinstance(count, int) or count < 0:
            raise RunError(f"{shortened(path)}: key 'load_summary.count' must be a count, got {count!r}")
        rate = summary.get("requested_rate")
        stages.append((int(match.group(1)), float(rate) if isinstance(rate, (int, float)) else None, count))
    return sorted(stages)


def read_inference_perf(folder: str | Path, deployment: Deployment) -> MeasuredRun:
    """The run of an inference-perf report folder on ``deployment``."""
    folder = Path(folder)
    files = sorted(folder.glob(f"*{PER_REQUEST}"))
    if not files:
        raise RunError(f"{shortened(folder)}: no {PER_REQUEST}: inference-perf writes it only with "
                       "report.request_lifecycle.per_request: true")
    entries = read_json_object(files[0])
    if not isinstance(entries, list) or not entries:
        raise RunError(f"{shortened(files[0])}: expected a list of requests")
    parsed = [(_start(e), _request(e, f"{shortened(files[0])}: [{i}]")) for i, e in enumerate(entries)]
    order = sorted(range(len(parsed)), key=lambda i: (parsed[i][0] if parsed[i][0] is not None else -math.inf, i))
    # stages count every request, failed ones too: split in start order, then drop failures
    every_stage = _stage_of(folder, len(parsed))
    kept = [(parsed[i][1], every_stage[n]) for n, i in enumerate(order) if parsed[i][1] is not None]
    if not kept:
        raise RunError(f"{shortened(files[0])}: every request failed; nothing to replay")
    rows = [row for row, _ in kept]
    origin = rows[0][0]
    engine = deployment.engine_args
    requests = tuple(TraceRequest(start - origin, max(prompt, 1), max(output, 1), tuple(
        (hashlib.sha1(text.encode()).hexdigest() if text else f"request {n}", j)
        for j in range(engine.keyed_blocks(prompt, output))))
        for n, (start, _, prompt, output, _, text) in enumerate(rows))
    stage_of, stages = _stages(folder, rows, tuple(stage for _, stage in kept))
    return MeasuredRun(name=folder.name, path=folder, model=deployment.model, gpu=deployment.device.name.upper(),
                       tp=deployment.tp, engine=engine, requests=requests, stage_of=stage_of, stages=stages)


def _start(entry: Any) -> float | None:
    value = entry.get("start_time") if isinstance(entry, dict) else None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _stage_of(folder: Path, total: int) -> list[int]:
    """The stage of each of ``total`` requests in start order, by the stage files' counts
    (failures included, as inference-perf counts them); one stage without them."""
    counts = _stage_counts(folder) or [(0, None, total)]
    stage_of: list[int] = []
    for index, _, count in counts:
        stage_of += [index] * count
    return (stage_of + [counts[-1][0]] * total)[:total]


def _stages(folder: Path, rows: list, stage_of: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[Stage, ...]]:
    """Each stage's figures, computed from its requests."""
    counts = _stage_counts(folder) or [(0, None, len(rows))]
    start = np.array([r[0] for r in rows])
    e2e = np.array([r[1] for r in rows]) - start
    ttft = np.array([math.nan if r[4] is None else r[4] for r in rows]) - start
    output = np.array([r[3] for r in rows], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (e2e - ttft) / np.maximum(output - 1, 1), 0.0)
    which = np.array(stage_of)
    stages = tuple(Stage(index, rate, {name: percentiles(values[which == index] * 1e3)
                                       for name, values in (("e2e_ms", e2e), ("ttft_ms", ttft), ("tpot_ms", tpot))})
                   for index, rate, _ in counts)
    return stage_of, stages
