"""The ``comm`` family's spec (its model: :mod:`tuner.families.comm.kernel`): one NCCL launch of
``CHANNELS`` CTAs, each holding an SM; no workspace. Priced by the collective model,
not the Triton one; never launched by tuner itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..formulas import PlannedLaunch, WorkBuffer
from ..spec import FamilySpec


def workspace(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int],
              num_sms: int) -> tuple[WorkBuffer, ...]:
    return ()


def launches(options: Mapping[str, Any], config: Mapping[str, Any], shape: Mapping[str, int], num_sms: int,
             ctas_per_sm: int | None, expert_counts: Sequence[int] | None) -> tuple[PlannedLaunch, ...]:
    return ((str(options.get("collective", "all_reduce")), int(config["CHANNELS"]), True),)


SPEC = FamilySpec(name="comm", kernel="tuner.families.comm.kernel:CommFamily", cost="collective",
                  workspace=workspace, launches=launches)
