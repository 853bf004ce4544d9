"""Fill the compile cache for a problem, and answer one profile query.

``tuner profile PROBLEM`` compiles every launch every config of the problem's built-in
families can make (at the shapes its operators take at the largest batch and at the
smallest, and at each shape bucket's representative and smallest shapes, where the
search times configs), once per architecture, so that tuning and simulating never wait on the
compiler; it then reports which configs are legal at those shapes and why the others
are not. ``tuner profile --family F --shape ...`` profiles one shape.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import IllegalConfigError, TunerError
from ..families import family_spec
from ..kernels.family import KernelFamily, KernelLaunch, all_configs
from ..problem.model import Problem
from ..problem.probe import probe_points
from ..profile.cache import CompileCache
from ..profile.devices import DevicePreset
from ..profile.modeled import LazyCompileCache, ModeledProfile

def _autotune_space(family: KernelFamily) -> Mapping[str, tuple[Any, ...]]:
    """The configs ``--best`` searches when no narrower space is given: the family spec's
    ``autotune_space`` (for ``matmul`` the tile sizes, warps, stages and splits a Triton
    autotune list typically holds), else the family's whole space."""
    try:
        spec = family_spec(family.name)
    except TunerError:  # a user's kernel (module:function) is not registered by name
        return family.space
    return spec.autotune_space if spec.autotune_space is not None else family.space


@dataclass
class FamilyReport:
    """Legality of one problem family's configs at the shapes its operators take."""

    family: str
    kernel: str
    configs: int
    legal: int
    illegal_reasons: Counter = field(default_factory=Counter)


@dataclass
class FillReport:
    """What ``tuner profile`` filled for a problem: launches resolved, kernels compiled, time taken, per family."""

    problem: str
    device: str
    launches: int
    compiled_keys: int
    seconds: float
    families: list[FamilyReport]

    def to_dict(self) -> dict[str, Any]:
        return {
            "problem": self.problem, "device": self.device, "launches": self.launches,
            "distinct_compiles": self.compiled_keys, "seconds": round(self.seconds, 3),
            "families": [
                {"family": f.family, "kernel": f.kernel, "configs": f.configs, "legal": f.legal,
                 "illegal": f.configs - f.legal, "illegal_reasons": dict(f.illegal_reasons.most_common())}
                for f in self.families
            ],
        }


@dataclass(frozen=True)
class ProblemLaunches:
    """Every launch a problem's built-in families make where the search times them, and
    each (family, config profile, shape) it was planned for (None: no built-in family)."""

    launches: list[KernelLaunch]
    jobs: list[tuple[str, ModeledProfile, dict[str, int]]]
    device: DevicePreset | None


def problem_launches(problem: Problem) -> ProblemLaunches:
    """The launches of every config of the problem's built-in families at the shapes its
    operators take at the largest batch and the smallest, and at each bucket's
    representative and smallest shapes."""
    points = [variables for _, variables in probe_points(problem.service, problem.size_fields)]
    largest = problem.service.largest_batch_variables(problem.size_fields)
    launches: list[KernelLaunch] = []
    jobs: list[tuple[str, ModeledProfile, dict[str, int]]] = []
    device: DevicePreset | None = None
    for op in problem.service.operators:
        family = problem.families[op.family]
        for config in family.configs:
            profile = config.profile
            if not isinstance(profile, ModeledProfile):
                continue
            device = profile.device
            shapes = [op.variables(variables) for variables in points]
            shapes += [op.bucket_variables(largest, bucket, at) for bucket in range(op.bucketing.size)
                       for at in ("representative", "lowest")]
            for values in shapes:
                shape = profile.shape_of(values)
                jobs.append((family.name, profile, shape))
                if profile.family.illegal(profile.config, shape) is None:
                    launches.extend(profile.family.plan(profile.config, shape, device.sms).launches)
    return ProblemLaunches(launches, jobs, device)


def fill_problem(problem: Problem, cache: CompileCache, workers: int = 1,
                 progress: Callable[[int, int], None] | None = None) -> FillReport:
    """Compile everything the problem's built-in families launch; report legality."""
    started = time.perf_counter()
    planned = problem_launches(problem)
    launches, jobs, device = planned.launches, planned.jobs, planned.device
    if device is None:
        raise TunerError(f"{problem.path}: no built-in kernel family to profile (families with 'kernel:')")
    cache.warm(launches, device, progress=progress, workers=workers)
    reports: dict[str, FamilyReport] = {}
    verdicts: dict[tuple[str, str], str | None] = {}
    for name, profile, shape in jobs:
        key = (name, str(profile.params))
        try:
            profile.at(shape)
        except IllegalConfigError as exc:
            verdicts.setdefault(key, str(exc).rsplit(": ", 1)[-1])
        else:
            verdicts.setdefault(key, None)
    for (name, _), reason in verdicts.items():
        kernel = problem.families[name].configs[0].profile.family.name
        report = reports.setdefault(name, FamilyReport(name, kernel, 0, 0))
        report.configs += 1
        if reason is None:
            report.legal += 1
        else:
            report.illegal_reasons[reason] += 1
    distinct = len({launch.compile_key() for launch in launches})
    return FillReport(problem.name, device.name, len(launches), distinct,
                      time.perf_counter() - started, list(reports.values()))


def compile_ahead(problem: Problem, announce: Callable[[int, float | None], None],
                  progress: Callable[[int, int], None], workers: int = 1) -> int:
    """Compile, before the first trial, every launch the search will time that no compile
    cache holds: a first use of a space (a user's own kernels) compiled for minutes,
    silently, inside the trials. ``announce(missing, seconds_each)`` is told once, before
    the first compile, how many there are and what one took on average in the cache
    (None: nothing to go by); ``progress(done, total)`` then counts them.

    Returns:
        How many launches were compiled (0: everything was cached, or no built-in family).
    """
    planned = problem_launches(problem)
    cache = _compile_cache(planned)
    if cache is None or planned.device is None:
        return 0
    missing = 0

    def counted(done: int, total: int) -> None:
        nonlocal missing
        if not missing and done < total:
            missing = total - done
            announce(missing, cache.typical_compile_seconds())
        if missing:
            progress(done - (total - missing), missing)

    distinct = {launch.compile_key(): launch for launch in planned.launches}  # shapes share binaries
    cache.warm(distinct.values(), planned.device, progress=counted, workers=workers)
    return missing


def _compile_cache(planned: ProblemLaunches) -> CompileCache | None:
    """The compile cache the problem's profiles read (opened now), if it is one."""
    if not planned.jobs:
        return None
    resources = planned.jobs[0][1].resources
    if isinstance(resources, LazyCompileCache):
        resources = resources.opened()
    return resources if isinstance(resources, CompileCache) else None


def profile_one(family: KernelFamily, shape: Mapping[str, int], device: DevicePreset, cache: CompileCache,
                config: Mapping[str, Any] | None = None, best: bool = False,
                space: Mapping[str, tuple[Any, ...]] | None = None) -> dict[str, Any]:
    """One profile query: a given config (defaults filled in), or the isolated-fastest.

    Raises:
        IllegalConfigError: the given config cannot run the shape, or none can (``best``).
    """
    defaults = {name: values[0] for name, values in family.space.items()}
    if best:
        candidates = [c for c in all_configs({**{k: (v,) for k, v in defaults.items()},
                                              **(space or _autotune_space(family))})
                      if family.illegal(c, shape) is None]
        if not candidates:
            raise IllegalConfigError(f"no config of {family.name} can run {dict(shape)}")
        launches = [l for c in candidates for l in family.plan(c, shape, device.sms).launches]
        cache.warm(launches, device)
        timed = []
        for candidate in candidates:
            try:
                timed.append((_profile(family, candidate, shape, device, cache), candidate))
            except IllegalConfigError:
                continue
        if not timed:
            raise IllegalConfigError(f"no config of {family.name} compiles for {dict(shape)} on {device.name}")
        answer = min(timed, key=lambda pair: pair[0]["latency_s"])[0]
        answer["candidates"] = len(candidates)
        return answer
    return _profile(family, {**defaults, **(config or {})}, shape, device, cache)


def _profile(family: KernelFamily, config: Mapping[str, Any], shape: Mapping[str, int],
             device: DevicePreset, cache: CompileCache) -> dict[str, Any]:
    profile = ModeledProfile(family, tuple(config.items()), device, cache)
    timing = profile.at(shape)
    resources = [cache.get_or_compile(launch, device) for launch in timing.plan.launches]
    main = max(range(len(timing.timings)), key=lambda i: timing.timings[i].latency_s)
    return {
        "family": family.name, "shape": dict(shape), "device": device.name, "config": dict(config),
        "latency_s": timing.latency_s, "workspace_bytes": timing.plan.workspace_bytes,
        "smem_bytes": resources[main].smem_bytes, "regs_per_thread": resources[main].regs_per_thread,
        "ctas": timing.plan.launches[main].grid, "ctas_per_sm": resources[main].ctas_per_sm,
        "persistent": timing.plan.launches[main].persistent, "source": profile.source,
        "launches": [
            {"name": launch.name, "latency_s": t.latency_s, "ctas": launch.grid, "smem_bytes": r.smem_bytes,
             "regs_per_thread": r.regs_per_thread, "ctas_per_sm": r.ctas_per_sm, "limiter": r.limiter,
             "waves": t.waves}
            for launch, t, r in zip(timing.plan.launches, timing.timings, resources)
        ],
    }
