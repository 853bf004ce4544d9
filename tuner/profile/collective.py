"""The profile of a collective (``kernel: comm``): its time on the interconnect and what it
holds of the GPU meanwhile (``Profile`` of :mod:`tuner.problem.model`)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import KernelError
from ..families.comm.kernel import CommFamily
from ..phases import WHOLE_DEVICE, Partition, Phase
from .devices import DevicePreset
from .interconnect import HBM_PER_WIRE_BYTE, PRESETS, Interconnect, wire_factor


@dataclass(frozen=True)
class CollectiveProfile:
    """A collective's cost on the GPU it runs on (``Profile`` of tuner.problem.model):
    one phase of one wave holding ``CHANNELS`` SMs, drawing HBM for what it sends. NCCL
    allocates its buffers when the communicator is created, outside the engine's
    workspace, so it reserves none here."""

    family: CommFamily
    params: tuple[tuple[str, Any], ...]
    device: DevicePreset
    source: str = "modeled"
    config: dict[str, Any] = field(init=False, compare=False, repr=False)
    link: Interconnect = field(init=False, compare=False, repr=False)
    _pinned: dict[int, CollectiveProfile] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "config", dict(self.params))
        object.__setattr__(self, "_pinned", {})
        link = PRESETS.get(self.family.interconnect)
        if link is None:
            raise KernelError(f"interconnect {self.family.interconnect!r} is not a preset ({', '.join(PRESETS)})")
        object.__setattr__(self, "link", link)

    @property
    def variables_read(self) -> frozenset[str]:
        return frozenset(self.family.shape_keys)   # its launches depend on its shape alone

    @property
    def source_hash(self) -> str:
        """Hash of what prices it (the collective and the interconnect preset's constants),
        so a table row tells when the model changed (a Triton config hashes its sources)."""
        return hashlib.sha256(f"{self.family!r}{self.link!r}".encode()).hexdigest()[:16]

    def shape_of(self, variables: Mapping[str, float]) -> dict[str, int]:
        return {key: max(1, math.ceil(variables[key])) for key in self.family.shape_keys}

    def with_channels(self, channels: int) -> CollectiveProfile:
        """This collective as NCCL runs it when held to ``channels`` at start-up
        (``NCCL_MIN_NCHANNELS`` = ``NCCL_MAX_NCHANNELS``: the knob ``nccl_channels``),
        whatever its config's ``CHANNELS``; one object per count, so the simulator's
        launch memos, keyed by profile, are shared by every trial that pins it alike."""
        if int(self.config["CHANNELS"]) == channels:
            return self
        pinned = self._pinned.get(channels)
        if pinned is None:
            params = tuple((k, channels if k == "CHANNELS" else v) for k, v in self.params)
            pinned = self._pinned[channels] = CollectiveProfile(self.family, params, self.device, self.source)
        return pinned

    def seconds(self, shape: Mapping[str, int]) -> float:
        """Isolated time of one collective at ``shape``."""
        family = self.family
        return self.link.seconds(family.collective, family.nbytes(shape), family.ranks, int(self.config["CHANNELS"]))

    def phases(self, shape: Mapping[str, int]) -> tuple[Phase, ...]:
        """One wave: its channels' SMs (need = share: a channel is an SM's worth of copy
        and reduction), and the HBM its traffic draws."""
        family = self.family
        seconds = self.seconds(shape)
        held = min(1.0, int(self.config["CHANNELS"]) / self.device.sms)
        wire = family.nbytes(shape) * wire_factor(family.collective, family.ranks)
        dram = min(1.0, HBM_PER_WIRE_BYTE[family.collective] * wire / seconds / self.device.dram_bytes_per_s)
        return ((seconds, held, dram, held, 1.0),)

    def launches(self, variables: Mapping[str, float], device: Any, tag: str,
                 partition: Partition = WHOLE_DEVICE) -> tuple[tuple[str, tuple[Phase, ...]], ...]:
        """One launch (its shares are of the whole device; on a partition the GPU layer
        caps what it holds, and channels beyond its SMs wait a round)."""
        return ((f"{tag}:{self.family.collective}", self.phases(self.shape_of(variables))),)

    def workspace_bytes(self, variables: Mapping[str, float], partition: Partition = WHOLE_DEVICE) -> float:
        return 0.0


def priced_profile(family: object, params: Mapping[str, Any], device: DevicePreset) -> CollectiveProfile | None:
    """The profile of a family priced by a model instead of compiled (NCCL's collectives,
    which are not Triton kernels), or None for a Triton family: the one place that tells
    the two apart, for problem files and ``tuner profile --family`` alike."""
    if isinstance(family, CommFamily):
        return CollectiveProfile(family, tuple(params.items()), device)
    return None
