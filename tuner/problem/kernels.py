"""Built-in Triton kernel families in problem files (``kernel: matmul``).

Their configs are the product of the narrowed ``space`` (parameters not narrowed keep
the family's default), and each config's profile is modeled: the family's launch plan,
compiled resources for the device's architecture, and the analytic model. Importing
the kernels pulls in Triton, so this module does so only when a file asks for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import TunerError
from . import schema as s
from .explain import Invalid
from .model import Config, Family, Operator, same_value
from .user_kernels import user_family


def device_preset(name: str) -> Any:
    """The device preset a built-in family is profiled on."""
    from ..profile.devices import PRESETS

    preset = PRESETS.get(name.lower())
    if preset is None:
        raise Invalid("device.name", f"built-in kernel families need a device preset, one of {', '.join(PRESETS)}; "
                                     f"got {s.show(name)}")
    return preset


def factor_set(name: str) -> Any:
    """The efficiency factors a problem's ``device.factors`` names."""
    from ..profile.factor_sets import FACTOR_SETS

    found = FACTOR_SETS.get(name)
    if found is None:
        raise Invalid("device.factors", f"unknown factor set {s.show(name)} (known: {', '.join(FACTOR_SETS)})")
    return found.factors


def config_name(params: Mapping[str, Any]) -> str:
    """A short, stable name: ``BLOCK_M=64, num_warps=4, PERSISTENT=False`` → ``bm64_nw4_p0``.

    Parameters whose initials collide (``NUM_SPLITS``, ``num_stages``) keep their full
    lower-case names, so a name never reads two ways.
    """
    initials = {key: "".join(word[0] for word in key.lower().split("_") if word) for key in params}
    taken = [abbreviation for abbreviation in initials.values()]
    parts = []
    for key, value in params.items():
        short = initials[key] if taken.count(initials[key]) == 1 else key.lower().replace("_", "")
        shown = int(value) if isinstance(value, bool) else value
        parts.append(f"{short}{shown}")
    return "_".join(parts)


def kernel_families(
    spec: s.ProblemSpec, operators: tuple[Operator, ...], preset: Any, factors: Any, resources: object | None,
    base: Path, constants: Mapping[str, float],
) -> dict[str, Family]:
    """Families declared as ``kernel: NAME`` (built in) or ``kernel: module:function`` (a
    user's, resolved from ``base`` first) with modeled profiles for their configs: a
    model's price where the family is not a Triton kernel (``priced_profile``: the `comm`
    family's collectives), else a Triton :class:`ModeledProfile`. A built-in family's
    configs are its narrowed space's product; a user kernel's are its own list (those
    inside ``space`` when the file narrows it). ``factors``: the efficiency factors the
    Triton profiles price with (:func:`factor_set`)."""
    from ..families import broken_entry_points, family_names, family_spec, get_family
    from ..kernels.family import all_configs
    from ..profile.collective import priced_profile
    from ..profile.measured import MeasuredStore, MeasuredStores
    from ..profile.modeled import LazyCompileCache, ModeledProfile
    from ..profile.user_cache import existing_cache_url

    source = resources if resources is not None else LazyCompileCache.from_environment()
    url = getattr(source, "url", None)
    urls = list(dict.fromkeys(u for u in (url, existing_cache_url()) if u))
    measured = MeasuredStores([MeasuredStore(u) for u in urls]) if urls else None
    families: dict[str, Family] = {}
    for fname, fam in spec.families.items():
        if fam.kernel is None:
            continue
        key = f"families.{fname}"
        if fam.user is not None:
            family: Any = user_family(fam, key, base, constants)
            _narrowed(family.space, fam.space, f"{key}.space")  # its names and values are the kernel's
            space = {name: tuple(fam.space.get(name, values)) for name, values in family.space.items()}
            points = [params for params in family.configs
                      if all(any(same_value(params.get(name), v) for v in space[name]) for name in fam.space)]
            if not points:
                raise Invalid(f"{key}.space", "no config of the kernel's list is inside this space")
        else:
            try:
                family_spec(fam.kernel)  # plugins' entry points are read only for a name not registered
            except TunerError:
                raise Invalid(f"{key}.kernel", broken_entry_points().get(fam.kernel) or (
                    f"unknown kernel family {s.show(fam.kernel)} "
                    f"(registered: {', '.join(family_names())}; a kernel of yours: module:function)")) from None
            try:
                family = get_family(fam.kernel, **fam.options)
            except TunerError as exc:
                raise Invalid(f"{key}.options", str(exc)) from None
            space = _narrowed(family.space, fam.space, f"{key}.space")
            points = list(all_configs(space))
        for i, op in enumerate(operators):
            if op.family == fname:
                missing = [k for k in family.shape_keys if k not in dict(op.shape)]
                if missing:
                    raise Invalid(f"service.operators[{i}].shape",
                                  f"family {s.show(fam.kernel)} needs shape dimensions {', '.join(family.shape_keys)}; "
                                  f"{s.show(missing[0])} is missing")
        if "expert_counts" in getattr(family, "batch_variables", ()):
            _check_routed(spec, fname, family, operators)
        try:
            configs = tuple(
                Config(fname, config_name(params), tuple(params.items()),
                       priced_profile(family, params, preset)
                       or ModeledProfile(family, tuple(params.items()), preset, source, factors, measured=measured))
                for params in points
            )
        except TunerError as exc:
            raise Invalid(f"{key}.options", str(exc)) from None
        families[fname] = Family(fname, tuple(space.items()), configs, bucket_key=tuple(family.bucket_key))
    return families


def _check_routed(spec: s.ProblemSpec, fname: str, family: Any, operators: Sequence[Operator]) -> None:
    """A family priced on each iteration's expert counts (``fused_moe``) must route over
    the service's router, and its operators' ``M`` must be the iteration's ``tokens``,
    whose counts the simulator draws (a count vector sums to M · top_k)."""
    router = spec.service.router
    if router is None:
        return
    for name, mine, theirs in (("experts", family.experts, router.experts), ("top_k", family.top_k, router.top_k)):
        if mine != theirs:
            raise Invalid(f"families.{fname}.options.{name}", f"{mine}, but service.router has {name} {theirs}")
    for i, op in enumerate(operators):
        if op.family == fname and dict(op.shape)["M"].source.replace(" ", "") != "tokens":
            raise Invalid(f"service.operators[{i}].shape.M",
                          f"a routed MoE operator's M must be tokens (each iteration's routed tokens), "
                          f"not {s.show(dict(op.shape)['M'].source)}")


def check_shapes(spec: s.ProblemSpec, operators: Sequence[Operator], families: Mapping[str, Family],
                 points: Sequence[tuple[str, Mapping[str, float]]]) -> None:
    """Some config of each built-in family must run its operators' shapes at every batch
    the service can run (``points``: the largest batch, tokens and context the memory
    budget admits, :func:`~tuner.problem.probe.reachable_points`), or the file would
    validate and every simulation of it fail at its first large batch. A shape only a
    batch beyond the budget would make (256 sequences of 8,192 tokens each) is not
    asked for. The test is the family's own rule (``illegal``: its int32 indexing limit,
    its split and head constraints), asked of each config in turn until one can run the
    shape.

    Raises:
        Invalid: keyed by the operator's shape, with the default config's reason.
    """
    for i, op in enumerate(operators):
        if spec.families[op.family].kernel is None:
            continue
        profiles = [config.profile for config in families[op.family].configs]
        seen = set()
        for where, variables in points:
            shape = profiles[0].shape_of(op.variables(variables))
            if tuple(shape.items()) in seen:
                continue
            seen.add(tuple(shape.items()))
            if spec.families[op.family].user is not None:
                _check_user_launches(profiles, shape, f"families.{op.family}.user", op.name)
            reasons = (profile.family.illegal(profile.config, shape) for profile in profiles)
            first = next(reasons)
            if first is not None and all(reason is not None for reason in reasons):
                dims = ", ".join(f"{dim}={size if size < 10**15 else format(size, '.3g')}" for dim, size in shape.items())
                raise Invalid(f"service.operators[{i}].shape", f"operator {s.show(op.name)} {where} ({dims}): {first}")


def _check_user_launches(profiles: Sequence[Any], shape: Mapping[str, int], key: str, op: str) -> None:
    """Each config of a user kernel plans at ``shape``: its argument builder runs, every
    argument types and every constexpr has a value. User code fails here, at load, in
    one line — not in the middle of a tuning run."""
    from ..kernels import KernelError

    for profile in profiles:
        try:
            profile.family.plan(profile.config, shape, profile.device.sms)
        except KernelError as exc:
            raise Invalid(key, f"operator {s.show(op)}: {exc}") from None


def _narrowed(full: Mapping[str, tuple[Any, ...]], narrowed: Mapping[str, list[Any]], key: str) -> dict[str, tuple[Any, ...]]:
    """The family's space with the file's choices; unnamed parameters keep their default,
    and optional ones (``kernels.family.OPTIONAL_PARAMS``) stay out of the configs."""
    from ..kernels.family import OPTIONAL_PARAMS

    for name, values in narrowed.items():
        if name not in full:
            raise Invalid(f"{key}.{name}", f"not a parameter of this family ({', '.join(full)})")
        for value in values:
            if not any(same_value(value, allowed) for allowed in full[name]):
                raise Invalid(f"{key}.{name}", f"value {s.show(value)} is outside the family's space {list(full[name])}")
    return {name: tuple(narrowed.get(name, full[name][:1])) for name in full
            if name in narrowed or name not in OPTIONAL_PARAMS}
