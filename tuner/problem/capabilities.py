"""What a config's profile may offer beyond what the simulator asks of every profile.

Every profile gives its launches and workspace (:class:`tuner.problem.model.Profile`).
Some say more, and the code that uses more asks for it by name, as a capability, never
by probing attribute names:

* :class:`FamilyProfile` — the profile of a built-in kernel family (a Triton kernel
  modeled or measured, or NCCL's collective): its family, its device and the shape a
  batch runs it at. A table row's ``family``, ``sms`` and requirements come from it; a
  declared profile (numbers typed into the problem file) has none of this.
* :class:`SourceHashed` — a profile that can say what prices it (its kernels' sources):
  a table row's ``kernel_source_hash``.
* :class:`LaunchResources` — a profile whose kernels tuner compiles: per launch, the
  shared memory, registers and occupancy at a shape.
* :class:`ChannelBound` — a collective that NCCL can hold to a number of channels at
  start-up (the knob ``nccl_channels``).

They are ``runtime_checkable`` protocols, so a user's own profile class gains a
capability by having its members, with nothing to inherit or register. Standard library
only: the problem model, its knobs and the compiled simulator all import it. Python 3.11's
``isinstance`` against a protocol reads each member (about 5-10 µs, and a property is
evaluated), so no check here belongs on a per-launch path: each is asked once per bind
or per table row, and ``source_hash``, a property that hashes sources, has a protocol of
its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class FamilyProfile(Protocol):
    """A built-in family's profile: what the table and the runtime's requirements read."""

    family: Any
    device: Any

    def shape_of(self, variables: Mapping[str, float]) -> dict[str, int]:
        """The family's shape for a batch's variables."""
        ...


@runtime_checkable
class SourceHashed(Protocol):
    """A profile that can say what prices it, so that a table row tells when it changed."""

    @property
    def source_hash(self) -> str | None:
        """Hash of what prices it (its kernels' sources), None while unknown."""
        ...


@runtime_checkable
class LaunchResources(Protocol):
    """A profile whose kernels are compiled here, which can say what each launch holds."""

    def launch_resources(self, variables: Mapping[str, float], partition: Any = ...) -> dict[str, Any] | None:
        """Per launch name, ``shared_bytes``, ``registers`` and ``ctas_per_sm`` at the batch's shape."""
        ...


@runtime_checkable
class ChannelBound(Protocol):
    """A collective that NCCL holds to a number of channels (``nccl_channels``)."""

    def with_channels(self, channels: int) -> Any:
        """The collective as NCCL runs it when held to ``channels``."""
        ...
