"""What a config needs to run at a shape: workspace, launches, grids, SMs, the one rule.

An engine serving a tuned table must know more than a config's parameters: how much
global workspace it needs at its largest shapes (reserved before the KV cache is sized),
how many kernels it launches, whether its grid is persistent and to how many SMs it is
sized. The kernel families' ``plan`` (which the profiler and the simulator use), the
runtime's :meth:`tuner.runtime.Dispatcher.requirements` and the exports all take these
figures from this module, so they cannot disagree.

This module imports only the standard library (no torch, Triton, NumPy or Optuna): a
serving process imports it through :mod:`tuner.runtime`. It sits outside
:mod:`tuner.kernels`, whose package import loads Triton.

The formulas are each family's own, in its spec (:mod:`tuner.families`: the bundled
families' module docstrings write them out); this module asks the registry for the spec
by the family's name, so a family registered by a user is judged like a bundled one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import KernelError
from .families import family_spec
from .families.formulas import (
    ELEMENT_BYTES,
    EW_BLOCK,
    MAX_AUTO_SPLITS,
    WorkBuffer,
    decode_splits,
    flash_splits,
    margin_problem,
    matmul_items,
    sized_sms,
    uniform_counts,
)

__all__ = [
    "ELEMENT_BYTES", "EW_BLOCK", "MAX_AUTO_SPLITS", "LaunchNeeds", "Requirements", "RequirementsError",
    "WorkBuffer", "decode_splits", "flash_splits", "margin_problem", "matmul_items", "requirements", "sized_sms",
    "uniform_counts", "workspace_buffers",
]


class RequirementsError(ValueError):
    """A family, config or shape the requirements cannot be computed for (one line)."""


def _judged(family: str) -> Any:
    """The spec of ``family`` when it has requirement rules.

    Raises:
        RequirementsError: an unknown family, or one whose spec has no rules.
    """
    try:
        spec = family_spec(family)
    except KernelError as exc:
        raise RequirementsError(f"no requirements are known for kernel family {family!r}: {exc}") from None
    if not spec.judges_requirements:
        raise RequirementsError(f"no requirements are known for kernel family {family!r}: its spec gives no rules")
    return spec


def workspace_buffers(family: str, options: Mapping[str, Any], config: Mapping[str, Any],
                      shape: Mapping[str, int], num_sms: int) -> tuple[WorkBuffer, ...]:
    """The global workspace buffers of a config at a shape, by the family's spec: the
    families' ``plan`` sums them and their ``run`` allocates them, so what is reserved is
    what runs. ``num_sms``: the sized SMs (margin taken off).

    Raises:
        RequirementsError: an unknown family, or one whose spec has no workspace rule.
        KeyError: a shape dimension or parameter the family needs is missing.
    """
    return _judged(family).workspace(options, config, shape, num_sms)


# --- the value -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchNeeds:
    """One launch of a config at a shape.

    Attributes:
        name: what it does (``matmul_partial``, ``splitk_reduce``, …), as in the family's plan.
        grid: CTAs launched; None for a persistent grid whose occupancy is unknown.
        persistent: the grid is sized to the SMs and loops over work items.
        shared_bytes, registers: shared memory and registers per CTA from the compiled
            kernel (None when not known: not compiled, or a declared profile).
        ctas_per_sm: the occupancy the device allows it (None when not known).
    """

    name: str
    grid: int | None
    persistent: bool
    shared_bytes: int | None = None
    registers: int | None = None
    ctas_per_sm: int | None = None


@dataclass(frozen=True)
class Requirements:
    """What one config needs at one shape (see the module docstring for the formulas).

    Attributes:
        family: the kernel family.
        shape: the shape it was computed at, ``(dim, value)`` pairs.
        workspace: global workspace by buffer, ``(name, bytes)`` pairs.
        launches: each launch, in order.
        device_sms: the SMs it is told (the device's, or its partition's when sized to it).
        margin: the SMs it leaves to other streams (``SM_MARGIN``).
        sized_sms: what its persistent grid and split counts are sized to (told − margin).
        shape_range: the range of the bucket the config was tuned for, ``(dim, low, high)``
            with ``low`` exclusive (None: open) and ``high`` inclusive (None: the last
            bucket, which also serves larger shapes); empty when not from a table.
    """

    family: str
    shape: tuple[tuple[str, int], ...]
    workspace: tuple[tuple[str, int], ...]
    launches: tuple[LaunchNeeds, ...]
    device_sms: int
    margin: int
    sized_sms: int
    shape_range: tuple[tuple[str, float | None, float | None], ...] = ()

    @property
    def workspace_bytes(self) -> int:
        """Total workspace, every buffer live together."""
        return sum(b for _, b in self.workspace)

    @property
    def launch_count(self) -> int:
        return len(self.launches)

    @property
    def persistent(self) -> bool:
        return any(launch.persistent for launch in self.launches)

    @property
    def ctas(self) -> int | None:
        """CTAs over every launch (None when a persistent grid's occupancy is unknown)."""
        grids = [launch.grid for launch in self.launches]
        return None if None in grids else sum(grids)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as the exports and ``tuner table show --json`` write it."""
        return {
            "family": self.family, "shape": dict(self.shape), "workspace_bytes": self.workspace_bytes,
            "workspace": dict(self.workspace), "launches": [launch.__dict__.copy() for launch in self.launches],
            "persistent": self.persistent, "device_sms": self.device_sms, "margin": self.margin,
            "sized_sms": self.sized_sms, "shape_range": {d: [lo, hi] for d, lo, hi in self.shape_range},
        }


def requirements(family: str, config: Mapping[str, Any], shape: Mapping[str, Any], *, sms: int,
                 options: Mapping[str, Any] | None = None, ctas_per_sm: int | None = None,
                 resources: Mapping[str, Mapping[str, Any]] | None = None,
                 shape_range: Mapping[str, Sequence[Any]] | None = None,
                 expert_counts: Sequence[int] | None = None) -> Requirements:
    """What ``config`` of ``family`` (built with ``options``) needs at ``shape``.

    Args:
        sms: the SMs the config is told (the device's, or its partition's when kernels
            are sized to the partition); its ``SM_MARGIN`` is taken off here.
        ctas_per_sm: the compiled occupancy of a persistent launch (None: taken from
            ``resources`` when they have it, else the persistent grid is None).
        resources: per launch name, ``shared_bytes``, ``registers`` (per CTA) and
            ``ctas_per_sm`` from the compiled kernel, as a table row carries them.
        shape_range: the bucket's bounds ``{dim: [low, high]}``.
        expert_counts: ``fused_moe``'s pairs per expert (None: spread evenly).

    Raises:
        RequirementsError: an unknown family, a shape lacking a dimension the family
            needs, a config lacking a parameter, or a value of the wrong kind (one line).
    """
    options = options or {}
    resources = resources or {}
    try:
        unbounded = [k for k, v in shape.items() if isinstance(v, float) and not math.isfinite(v)]
        if unbounded:
            raise RequirementsError(f"shape {unbounded[0]}={shape[unbounded[0]]!r} is not a finite number")
        dims = {k: int(math.ceil(v)) for k, v in shape.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        sized = sized_sms(config, int(sms))
        buffers = workspace_buffers(family, options, config, dims, sized)
        if ctas_per_sm is None:
            found = [r.get("ctas_per_sm") for r in resources.values() if isinstance(r, Mapping)]
            ctas_per_sm = min((c for c in found if isinstance(c, int) and c > 0), default=None)
        planned = _judged(family).launches(options, config, dims, sized, ctas_per_sm, expert_counts)
    except RequirementsError:
        raise
    except KeyError as exc:
        raise RequirementsError(f"{family}: the shape or config lacks {exc.args[0]!r}") from None
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
        raise RequirementsError(f"{family}: cannot compute requirements at {dict(shape)!r}: {exc}") from None
    launches = []
    for name, grid, persistent in planned:
        r = resources.get(name)
        r = r if isinstance(r, Mapping) else {}
        launches.append(LaunchNeeds(name, grid, persistent, r.get("shared_bytes"), r.get("registers"),
                                    r.get("ctas_per_sm")))
    bounds = tuple((d, pair[0], pair[1]) for d, pair in (shape_range or {}).items())
    return Requirements(
        family=family, shape=tuple(dims.items()),
        workspace=tuple((name, count * ELEMENT_BYTES[dtype]) for name, count, dtype in buffers),
        launches=tuple(launches), device_sms=int(sms), margin=int(config.get("SM_MARGIN", 0)), sized_sms=sized,
        shape_range=bounds,
    )
