"""A measured serving run in the ``measured-run/1`` format: the deployment (model config,
GPU, tensor parallelism, engine arguments), the per-request trace (arrival, lengths,
prompt id, measured e2e and TTFT) and the load stages with their measured figures.

The format is the one of ``shared/data/serving_real`` (its README): paths inside a run
file are relative to it; a run without ``measured`` figures (a plan) still replays.
Everything read is checked; a bad field is one :class:`~tuner.errors.RunError` line
naming the file, the key and the reason.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import RunError, shortened
from .model_config import ModelShape, read_json_object, read_model_config
from .replay import TraceRequest
from .scheduler import EngineArgs

#: Engine arguments a run may record, with vLLM V1's defaults where it does not, and the
#: most the replay holds (beyond any served deployment: the arrays and pools they size are
#: allocated whole).
ENGINE_KEYS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size", "num_gpu_blocks")
ENGINE_LIMITS = {"max_num_seqs": 1 << 16, "max_num_batched_tokens": 1 << 20, "max_model_len": 1 << 24,
                 "block_size": 1 << 12, "num_gpu_blocks": 1 << 22}
#: The longest prompt or output a trace row may give (max_model_len's limit).
MAX_TOKENS = 1 << 24
METRICS = ("e2e_ms", "ttft_ms", "tpot_ms")
STATS = ("mean", "p50", "p90", "p99")


@dataclass(frozen=True)
class Stage:
    """One load stage: its index, offered rate and the measured figures (or None)."""

    index: int
    rate_qps: float | None
    measured: dict[str, dict[str, float]] | None


@dataclass(frozen=True)
class MeasuredRun:
    """What a run file and its trace say (see the module docstring)."""

    name: str
    path: Path
    model: ModelShape
    gpu: str
    tp: int
    engine: EngineArgs
    requests: tuple[TraceRequest, ...]
    stage_of: tuple[int, ...]          # each request's stage index
    stages: tuple[Stage, ...]
    measured_e2e_s: tuple[float, ...] | None = None
    measured_ttft_s: tuple[float, ...] | None = None

    def mean_lengths(self) -> tuple[int, int]:
        """The mean prompt and output tokens of its requests, rounded."""
        count = len(self.requests)
        return (round(sum(r.prompt for r in self.requests) / count), round(sum(r.output for r in self.requests) / count))

    def distinct_prompts(self) -> int:
        """How many distinct prompts the run sent: its trace's prompt ids (one id's prompt
        varies by a few tokens between requests, so its prefix keys would count it twice)."""
        ids = {request.prompt_id for request in self.requests}
        return len(ids) if None not in ids else len({request.prefix for request in self.requests})


def _load_json(path: Path) -> dict[str, Any]:
    data = read_json_object(path)
    if not isinstance(data, dict):
        raise RunError(f"{shortened(path)}: expected a JSON object")
    return data


def _get(data: dict[str, Any], where: str, dotted: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    value: Any = data
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            if default is not ...:
                return default
            raise RunError(f"{where}: key '{dotted}' is missing")
        value = value[part]
    if value is None and default is not ...:
        return default
    if isinstance(value, bool) or not isinstance(value, kind):
        raise RunError(f"{where}: key '{dotted}': expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    return value


def gpu_preset_name(gpu: str) -> str:
    """The device preset for a GPU's marketing name ("NVIDIA H100 80GB HBM3" -> h100)."""
    lowered = gpu.lower()
    for name in ("h200", "h100", "a100"):
        if name in lowered:
            return name
    raise RunError(f"GPU {gpu!r} has no preset (known: A100, H100, H200)")


def read_run(path: str | Path) -> MeasuredRun:
    """Read a ``measured-run/1`` file and its trace."""
    path = Path(path)
    data = _load_json(path)
    where = shortened(path)
    if data.get("format") != "measured-run/1":
        raise RunError(f"{where}: key 'format': expected 'measured-run/1', got {data.get('format')!r}")
    config = path.parent / _get(data, where, "model.config", str)
    model = read_model_config(config, data.get("model", {}).get("dtype"))
    if isinstance(data["model"].get("name"), str):
        model = replace(model, name=data["model"]["name"])
    tp = _get(data, where, "parallel.tensor", int, 1)
    if tp < 1 or model.heads % tp or model.intermediate % tp:
        raise RunError(f"{where}: key 'parallel.tensor': {tp} must be at least 1 and divide the model's heads "
                       f"({model.heads}) and MLP width ({model.intermediate})")
    engine = _engine_args(data, where)
    stages = tuple(_stage(s, f"{where}: stages[{i}]") for i, s in enumerate(_get(data, where, "stages", list)))
    trace = path.parent / _get(data, where, "workload.trace", str)
    prompts = _get(data, where, "workload.prompts", dict, {})
    for key in ("system_prompt_len", "prompts_per_group"):
        if key in prompts and (isinstance(prompts[key], bool) or not isinstance(prompts[key], int)
                               or prompts[key] < 0):
            raise RunError(f"{where}: key 'workload.prompts.{key}': expected a count, got {prompts[key]!r}")
    requests, stage_of, e2e, ttft = _read_trace(trace, engine, prompts)
    return MeasuredRun(name=str(data.get("name") or path.stem), path=path, model=model,
                       gpu=_get(data, where, "gpu.name", str), tp=tp, engine=engine, requests=requests,
                       stage_of=stage_of, stages=stages, measured_e2e_s=e2e, measured_ttft_s=ttft)


def _engine_args(data: dict[str, Any], where: str) -> EngineArgs:
    defaults = EngineArgs()
    _get(data, where, "engine", dict, {})
    values = {key: _get(data, where, f"engine.{key}", int, getattr(defaults, key)) for key in ENGINE_KEYS}
    for key, value in values.items():
        low = 2 if key == "num_gpu_blocks" else 1
        if not low <= value <= ENGINE_LIMITS[key]:
            raise RunError(f"{where}: key 'engine.{key}': must be between {low} and {ENGINE_LIMITS[key]:,}, "
                           f"got {value}")
    caching = _get(data, where, "engine.enable_prefix_caching", bool, True)
    return EngineArgs(**values, enable_prefix_caching=caching)


def _stage(stage: Any, where: str) -> Stage:
    if not isinstance(stage, dict):
        raise RunError(f"{where}: expected an object")
    measured = stage.get("measured")
    figures = None
    if measured is not None:
        figures = {}
        for metric in METRICS:
            block = measured.get(metric) if isinstance(measured, dict) else None
            if not isinstance(block, dict) or any(not isinstance(block.get(s), (int, float)) for s in STATS):
                raise RunError(f"{where}: key 'measured.{metric}': expected mean, p50, p90 and p99 numbers")
            figures[metric] = {s: float(block[s]) for s in STATS}
    rate = stage.get("rate_qps")
    index = stage.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int):
        raise RunError(f"{where}: key 'index': expected an integer, got {index!r}")
    return Stage(index=index, rate_qps=float(rate) if isinstance(rate, (int, float)) else None, measured=figures)


def prefix_keys(prompt_id: int | None, full: int, block_size: int, prompts: dict[str, Any],
                rid: int) -> tuple[tuple[Any, ...], ...]:
    """A key for each of a prompt's first ``full`` blocks: blocks wholly inside the
    group's shared system prompt are keyed by the group (``prompt_id //
    prompts_per_group``: the generator writes a group's prompts one after another), the
    others by the prompt id; a request without a prompt id shares nothing."""
    if prompt_id is None:
        return tuple((-2, rid, j) for j in range(full))
    system = int(prompts.get("system_prompt_len") or 0)
    per_group = int(prompts.get("prompts_per_group") or 0)
    group = prompt_id // per_group if per_group > 0 else None
    return tuple(("g", group, j) if group is not None and (j + 1) * block_size <= system else ("p", prompt_id, j)
                 for j in range(full))


def _read_trace(path: Path, engine: EngineArgs, prompts: dict[str, Any]):
    where = shortened(path)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        raise RunError(f"{where}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise RunError(f"{where}: not a CSV trace ({exc})") from None
    if not rows:
        raise RunError(f"{where}: the trace has no requests")
    missing = {"arrival_s", "input_tokens", "output_tokens"} - set(rows[0])
    if missing:
        raise RunError(f"{where}: column '{sorted(missing)[0]}' is missing")
    requests, stages, e2e, ttft = [], [], [], []
    measured = {"e2e_s", "ttft_s"} <= set(rows[0])
    for line, row in enumerate(rows, start=2):
        try:
            arrival = float(row["arrival_s"])
            prompt, output = int(row["input_tokens"]), int(row["output_tokens"])
            prompt_id = int(row["prompt_id"]) if row.get("prompt_id") not in (None, "") else None
            stage = int(row.get("stage") or 0)
            if measured:
                e2e.append(float(row["e2e_s"]) if row["e2e_s"] else math.nan)
                ttft.append(float(row["ttft_s"]) if row["ttft_s"] else math.nan)
        except (ValueError, TypeError) as exc:  # TypeError: a row with fewer fields than the header
            raise RunError(f"{where}: line {line}: {exc}") from None
        if not math.isfinite(arrival) or arrival < 0 or not 1 <= prompt <= MAX_TOKENS or not 1 <= output <= MAX_TOKENS:
            raise RunError(f"{where}: line {line}: arrival_s must be finite and >= 0, token counts between 1 and "
                           f"{MAX_TOKENS:,}")
        requests.append(TraceRequest(arrival, prompt, output, prefix_keys(
            prompt_id, engine.keyed_blocks(prompt, output), engine.block_size, prompts, line), prompt_id))
        stages.append(stage)
    order = sorted(range(len(requests)), key=lambda k: requests[k].arrival_s)
    pick = lambda values: tuple(values[k] for k in order)  # noqa: E731
    return pick(requests), pick(stages), pick(e2e) if measured else None, pick(ttft) if measured else None
