"""Time configs on this machine's CUDA GPU (``tuner profile PROBLEM --device cuda``).

Each legal config of each operator is run for real at the problem's probe shapes:
``triton.testing.do_bench`` gives the median time over CUDA-event-timed repetitions
after warm-up; the allocator's peak during one run, less the inputs and output, is the
workspace. Results go to ``tuner_measured`` (see :mod:`.measured`), labelled with the
GPU's name, the device preset it matches and the Triton version.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

from ..errors import IllegalConfigError, TunerError
from ..problem.model import Problem
from ..problem.probe import probe_points
from ..profile.measured import MeasuredStore, family_options
from ..profile.modeled import ModeledProfile


def require_cuda() -> Any:
    """torch, when a CUDA GPU is visible.

    Raises:
        TunerError: no GPU, so nothing can be measured.
    """
    import torch

    if not torch.cuda.is_available():
        raise TunerError("--device cuda: no CUDA GPU is visible (torch.cuda.is_available() is False); "
                         "profile with a preset instead: --device a100, h100 or h200")
    return torch


def measure_problem(problem: Problem, cache: Any,
                    progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Measure every legal (operator, config, probe shape) of the problem's built-in families.

    ``progress(done, total)`` is called before the first measurement and after each: a
    problem's configs take minutes to time.
    """
    torch = require_cuda()
    import triton.testing

    store = MeasuredStore(cache.url)
    gpu = torch.cuda.get_device_name()
    triton_version = importlib.metadata.version("triton")
    points = [variables for _, variables in probe_points(problem.service, problem.size_fields)]
    skipped = 0
    seen: set[tuple] = set()
    todo: list[tuple[ModeledProfile, dict[str, int]]] = []
    for op in problem.service.operators:
        for config in problem.families[op.family].configs:
            profile = config.profile
            if not isinstance(profile, ModeledProfile):
                continue
            for variables in points:
                shape = profile.shape_of(op.variables(variables))
                key = (profile.family.name, repr(profile.family), profile.params, tuple(shape.items()))
                if key in seen:
                    continue
                seen.add(key)
                try:
                    profile.at(shape)
                except IllegalConfigError:
                    skipped += 1
                    continue
                todo.append((profile, shape))
    for index, (profile, shape) in enumerate(todo):
        if progress is not None:
            progress(index, len(todo))
        inputs = profile.family.make_inputs(shape, seed=0, dtype=torch.bfloat16, device="cuda")
        run = lambda: profile.family.run(inputs, profile.config, shape)  # noqa: E731
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        output = run()
        torch.cuda.synchronize()
        written = output.numel() * output.element_size() if output is not None else 0  # a user kernel may name none
        workspace = max(torch.cuda.max_memory_allocated() - before - written, 0)
        latency_ms = triton.testing.do_bench(run)
        store.record(family=profile.family.name, options=family_options(profile.family), config=profile.config,
                     shape=shape, gpu=gpu, device_preset=profile.device.name, triton_version=triton_version,
                     source_hash="", latency_s=latency_ms * 1e-3, workspace_bytes=float(workspace))
    done = len(todo)
    if progress is not None:
        progress(done, done)
    return {"problem": problem.name, "gpu": gpu, "measured": done, "illegal_skipped": skipped,
            "summary": f"{problem.name}: measured {done} (config, shape) pairs on {gpu}; {skipped} illegal skipped"}
