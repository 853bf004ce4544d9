"""Profiles of built-in kernel families: plan → compiled resources → analytic model.

A :class:`ModeledProfile` is what a config of a built-in family (``kernel: matmul`` in a
problem file) hands the simulator. For each batch it turns the operator's shape into the
family's launch plan, looks up each launch's compiled resources (compiled once per
architecture and cached) and times each launch with the analytic model. Results are
memoised per shape, because batches repeat shapes.

A family may read batch variables besides its shape: those it names in
``batch_variables`` (``fused_moe``: ``expert_counts``, the (token, expert) pairs each
expert got, a tuple of ints). They go to its ``plan`` as keyword arguments when the
batch has them, are part of the memo keys, and are listed in ``variables_read``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import IllegalConfigError
from ..kernels.family import KernelFamily, KernelLaunch, LaunchPlan, margin_problem, sized_sms
from ..phases import WHOLE_DEVICE, Partition, Phase
from .devices import DevicePreset
from .model import DEFAULT, Efficiency, LaunchTiming, launch_time
from .resources import CompiledResources

_MEMO_LIMIT = 65536


class ResourceSource(Protocol):
    """Where compiled resources come from (a compile cache, or a stand-in in tests)."""

    def get_or_compile(self, launch: KernelLaunch, device: DevicePreset) -> CompiledResources: ...




class LazyCompileCache:
    """A compile cache opened on first use, so loading a problem touches no database.

    Misses fall back on the compile cache committed in ``results.db.example`` (read
    only) before compiling, and what is found there is copied into ``url``. Without a
    ``url`` (no writable cache directory) compiles are kept in memory for the run.
    """

    def __init__(self, url: str | None, unwritable: str | None = None) -> None:
        self.url = url
        self.unwritable = unwritable
        self._cache: ResourceSource | None = None

    @classmethod
    def from_environment(cls) -> LazyCompileCache:
        """The cache of a command that names no database: ``$TUNER_STORAGE``, else the
        user's cache directory (:mod:`tuner.profile.user_cache`), never ``./results.db``."""
        from .user_cache import compile_cache_url

        return cls(*compile_cache_url())

    def opened(self) -> ResourceSource:
        if self._cache is None:
            from .cache import CompileCache, example_fallback

            if self.url is None:
                _say_once(f"tuner: warning: no compile cache ({self.unwritable}): kernels compiled in this run are "
                          "kept in memory only; set TUNER_CACHE_DIR to a writable directory")
                self._cache = example_fallback()
            else:
                self._cache = CompileCache(self.url, fallback=_user_cache_fallback(self.url))
        return self._cache

    def get_or_compile(self, launch: KernelLaunch, device: DevicePreset) -> CompiledResources:
        return self.opened().get_or_compile(launch, device)


_SAID: set[str] = set()


def _user_cache_fallback(url: str) -> Any:
    """What a compile cache at ``url`` falls back on: the user's cache directory (what
    ``tuner simulate`` and ``tuner profile`` compiled there, read only), then the committed
    ``results.db.example``; the example alone when ``url`` is the user's cache."""
    from .cache import CompileCache, example_fallback
    from .user_cache import existing_cache_file

    cached = existing_cache_file()
    if cached is None or url == f"sqlite:///{cached}":
        return example_fallback()
    return CompileCache.read_only(cached, fallback=example_fallback())


def _say_once(message: str) -> None:
    """A warning on stderr, once per process (the cache is opened deep inside a load)."""
    if message not in _SAID:
        _SAID.add(message)
        print(message, file=sys.stderr)


@dataclass(frozen=True)
class ShapeTiming:
    """One config at one shape: its plan and each launch's timing (modeled, or steered by
    measurements — ``modeled_latency_s`` keeps the model's own total)."""

    plan: LaunchPlan
    timings: tuple[LaunchTiming, ...]
    modeled_latency_s: float = 0.0

    @property
    def latency_s(self) -> float:
        return sum(t.latency_s for t in self.timings)


@dataclass(frozen=True, eq=False)
class ModeledProfile:
    """A built-in family's config, profiled by the analytic model on a device preset."""

    family: KernelFamily
    params: tuple[tuple[str, Any], ...]
    device: DevicePreset
    resources: ResourceSource
    factors: Efficiency = DEFAULT
    measured: Any = None  # a MeasuredStore (or anything with .latencies(...)), read on first use
    _timings: dict = field(default_factory=dict, repr=False)   # shape key -> ShapeTiming
    _launches: dict = field(default_factory=dict, repr=False)  # (shape key, partition, tag) -> launches
    _resources: dict = field(default_factory=dict, repr=False)  # launch.compile_key() -> resources
    _measured: dict = field(default_factory=dict, repr=False)  # "latencies" -> the store's answer, read once
    _extra: tuple[str, ...] = field(init=False, repr=False, default=())  # the family's batch_variables

    def __post_init__(self) -> None:
        object.__setattr__(self, "_extra", tuple(getattr(self.family, "batch_variables", ())))

    @property
    def measurements(self) -> Mapping[tuple[tuple[str, int], ...], float]:
        """Measured latency by shape for this config on this kind of GPU (may be empty)."""
        found = self._measured.get("latencies")
        if found is None:
            found = {}
            if self.measured is not None:
                import importlib.metadata

                from .measured import family_options

                found = self.measured.latencies(self.family.name, family_options(self.family), self.config,
                                                self.device.name, importlib.metadata.version("triton"))
            self._measured["latencies"] = found
        return found

    @property
    def variables_read(self) -> frozenset[str]:
        """Its launches depend on the family's shape dimensions and the batch variables
        the family names (``batch_variables``: ``expert_counts`` for ``fused_moe``)."""
        return frozenset(self.family.shape_keys) | frozenset(self._extra)

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def source_hash(self) -> str | None:
        """Hash of the Triton sources this config launches (None before any shape is timed),
        so a table row can tell whether the kernels changed since it was tuned."""
        timings = list(self._timings.values())
        if not timings:
            return None
        from .cache import kernel_source_hash

        hashes = sorted({kernel_source_hash(launch.fn) for launch in timings[0].plan.launches})
        return hashlib.sha256("".join(hashes).encode()).hexdigest()[:16]

    @property
    def source(self) -> str:
        """``measured`` when real GPU timings of this config steer it, else ``modeled``."""
        return "measured" if self.measurements else "modeled"

    def shape_of(self, variables: Mapping[str, float]) -> dict[str, int]:
        """The family's shape from an operator's variables (sizes rounded up to integers)."""
        return dict(zip(self.family.shape_keys, self._dims(variables)))

    def _dims(self, variables: Mapping[str, float]) -> tuple[int, ...]:
        """The shape's sizes in the family's key order, each rounded up to at least 1."""
        return tuple([max(1, math.ceil(variables[key])) for key in self.family.shape_keys])

    def extras_of(self, variables: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        """The batch variables beyond the shape that the family reads and the batch has,
        as ``(name, value)`` pairs (sequences become tuples of ints, hashable for the memo
        keys); empty for a family that reads none."""
        if not self._extra:
            return ()
        found = []
        for name in self._extra:
            value = variables.get(name)
            if value is not None:
                found.append((name, tuple(int(v) for v in value) if not isinstance(value, (int, float)) else value))
        return tuple(found)

    def at(self, shape: Mapping[str, int], sms: int | None = None, sizing_sms: int | None = None,
           extras: tuple[tuple[str, Any], ...] = ()) -> ShapeTiming:
        """Plan and timings at ``shape``, on ``sms`` of the device's SMs (default: all), the
        plan sized to ``sizing_sms`` (the ``num_sms`` its persistent grid and split counts
        are told; default: the device's), with the batch variables ``extras`` (see
        :meth:`extras_of`) passed to the family's ``plan``.

        Raises:
            IllegalConfigError: the config cannot run this shape on this device.
        """
        key: tuple = tuple(shape[k] for k in self.family.shape_keys)
        device = self.device
        sizing = device.sms if sizing_sms is None else sizing_sms
        if sms is not None and sms != device.sms or sizing != device.sms:
            key += (sms, sizing)
            device = dataclasses.replace(device, sms=device.sms if sms is None else sms)
        if extras:
            key += (extras,)
        cached = self._timings.get(key)
        if cached is not None:
            return cached
        config = self.config
        reason = self.family.illegal(config, shape) or margin_problem(config, sizing)
        if reason is not None:
            raise IllegalConfigError(f"{self.family.name} {_describe(config)} at {dict(shape)}: {reason}")
        sizing = sized_sms(config, sizing)
        kwargs = dict(extras)
        plan = self.family.plan(config, shape, sizing, **kwargs)
        compiled = [self._compiled(launch) for launch in plan.launches]
        if any(launch.persistent for launch in plan.launches):
            # A persistent grid is SMs × occupancy, and occupancy needs the compiled kernel.
            occupancy = min(r.ctas_per_sm for r, l in zip(compiled, plan.launches) if l.persistent)
            plan = self.family.plan(config, shape, sizing * occupancy, **kwargs)
        timings = tuple(launch_time(l, r, device, self.factors, shape=shape)
                        for l, r in zip(plan.launches, compiled))
        modeled = sum(t.latency_s for t in timings)
        if self.measurements:
            timings = self._steered(shape, timings)
        result = ShapeTiming(plan, timings, modeled)
        if len(self._timings) >= _MEMO_LIMIT:
            self._timings.clear()
        self._timings[key] = result
        return result

    def _steered(self, shape: Mapping[str, int], timings: tuple[LaunchTiming, ...]) -> tuple[LaunchTiming, ...]:
        """Scale the model so it agrees with the measurement at the nearest measured shape
        (exactly, at a measured shape): measured beats modeled."""
        here = tuple(sorted(shape.items()))
        nearest = min(self.measurements, key=lambda key: _distance(key, here))
        if nearest == here:
            modeled_there = sum(t.latency_s for t in timings)
        else:
            modeled_there = self.at(dict(nearest)).modeled_latency_s
        ratio = self.measurements[nearest] / modeled_there if modeled_there > 0 else 1.0
        return tuple(t.scaled(ratio) for t in timings)

    def _compiled(self, launch: KernelLaunch) -> CompiledResources:
        key = launch.compile_key()  # many shapes share a binary: skip the cache's key hashing
        resources = self._resources.get(key)
        if resources is None:
            resources = self._resources[key] = self.resources.get_or_compile(launch, self.device)
        if not resources.legal:
            raise IllegalConfigError(
                f"{self.family.name} {_describe(self.config)}: launch {launch.name!r} on "
                f"{self.device.name}: {resources.reason}"
            )
        return resources

    def launches(self, variables: Mapping[str, float], device: object, tag: str,
                 partition: Partition = WHOLE_DEVICE) -> tuple[tuple[str, tuple[Phase, ...]], ...]:
        """Its launches for a batch, timed on ``partition``'s SMs and sized to them or to
        the whole device as the partition says (shares in the phases are of the device)."""
        dims = self._dims(variables)
        extras = self.extras_of(variables) if self._extra else ()
        key = (dims, partition, tag, extras) if extras else (dims, partition, tag)
        found = self._launches.get(key)
        if found is None:  # a config seen in an earlier trial's assignment: no model, no phases again
            timing, share = self._on(dict(zip(self.family.shape_keys, dims)), partition, extras)
            found = tuple((f"{tag}:{launch.name}", t.phases(self.device.saturating_share, share))
                          for launch, t in zip(timing.plan.launches, timing.timings))
            if len(self._launches) >= _MEMO_LIMIT:
                self._launches.clear()
            self._launches[key] = found
        return found

    def workspace_bytes(self, variables: Mapping[str, float], partition: Partition = WHOLE_DEVICE) -> float:
        """The workspace of its plan on ``partition`` (split counts sized as it is told)."""
        return self._on(self.shape_of(variables), partition, self.extras_of(variables))[0].plan.workspace_bytes

    def launch_resources(self, variables: Mapping[str, float], partition: Partition = WHOLE_DEVICE
                         ) -> dict[str, dict[str, int]]:
        """Per launch of its plan for a batch on ``partition``: shared memory and registers
        per CTA and CTAs per SM, from the compiled kernels (what a table row carries for
        ``tuner.requirements``: a persistent grid's size needs the occupancy).

        Raises:
            IllegalConfigError: the config cannot run this shape, or a launch does not compile.
        """
        timing, _ = self._on(self.shape_of(variables), partition, self.extras_of(variables))
        out = {}
        for launch in timing.plan.launches:
            compiled = self._compiled(launch)
            out[launch.name] = {"shared_bytes": int(compiled.smem_bytes),
                                "registers": int(compiled.regs_per_thread) * 32 * int(compiled.num_warps),
                                "ctas_per_sm": int(compiled.ctas_per_sm)}
        return out

    def _on(self, shape: Mapping[str, int], partition: Partition,
            extras: tuple[tuple[str, Any], ...] = ()) -> tuple[ShapeTiming, float]:
        """Its plan and timings on ``partition``, and the device's share that partition is."""
        if partition.share >= 1.0:
            return self.at(shape, extras=extras), 1.0
        preset = self.device
        sms = partition.sms(preset)
        sizing = sms if partition.sized_to_partition else preset.sms
        return self.at(shape, sms, sizing, extras), partition.exact_share(preset)


def _distance(a: tuple[tuple[str, int], ...], b: tuple[tuple[str, int], ...]) -> float:
    """How far apart two shapes are: the sum of |log ratio| over their dimensions."""
    return sum(abs(math.log(x / y)) for (_, x), (_, y) in zip(a, b))


def _describe(config: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())
