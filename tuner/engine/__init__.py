"""A serving engine as it really runs, step by step: vLLM's V1 scheduler (token budget,
chunked prefill, KV cache in blocks with prefix caching and preemption, CUDA-graph
padding), a step's cost on a GPU from the model's shapes, and replays of measured runs.

The service simulator (:mod:`tuner.sim`) prices kernels on a shared GPU model and searches their
configs; this package answers the question before that one: does the model of the engine
reproduce what a real deployment measured? ``tuner check-run`` replays a measured run
through it and prints predicted against measured latencies.
"""

from __future__ import annotations

from ..sim import native  # noqa: F401  first: it decides which build of the compiled scheduler loads
from .model_config import ModelShape, read_model_config
from .scheduler import EngineArgs, Scheduler, ScheduledStep
from .step_cost import StepCost, StepCoefficients
from .replay import Replay, replay

__all__ = ["EngineArgs", "ModelShape", "Replay", "ScheduledStep", "Scheduler", "StepCoefficients", "StepCost",
           "read_model_config", "replay"]
