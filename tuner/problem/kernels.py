"""Built-in Triton kernel families in problem files (``kernel: matmul``).

Their configs are the product of the narrowed ``space`` (parameters not narrowed keep
the family's default), and each config's profile is modeled: the family's launch plan,
compiled resources for the device's architecture, and the analytic model. Importing
the kernels pulls in Triton, so this module does so only when a file asks for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import TunerError
from . import schema as s
from .explain import Invalid
from .model import Config, Family, Operator, same_value


def device_preset(name: str) -> Any:
    """The device preset a built-in family is profiled on."""
    from ..profile.devices import PRESETS

    preset = PRESETS.get(name.lower())
    if preset is None:
        raise Invalid("device.name", f"built-in kernel families need a device preset, one of {', '.join(PRESETS)}; "
                                     f"got {name!r}")
    return preset


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
    spec: s.ProblemSpec, operators: tuple[Operator, ...], preset: Any, resources: object | None
) -> dict[str, Family]:
    """Families declared as ``kernel: NAME`` with modeled profiles for their configs."""
    from ..kernels import FAMILIES, get_family
    from ..kernels.family import all_configs
    from ..profile.measured import MeasuredStore
    from ..profile.modeled import LazyCompileCache, ModeledProfile

    source = resources if resources is not None else LazyCompileCache.from_environment()
    url = getattr(source, "url", None)
    measured = MeasuredStore(url) if url else None
    families: dict[str, Family] = {}
    for fname, fam in spec.families.items():
        if fam.kernel is None:
            continue
        key = f"families.{fname}"
        if fam.kernel not in FAMILIES:
            raise Invalid(f"{key}.kernel", f"unknown kernel family {fam.kernel!r} (built-in: {', '.join(sorted(FAMILIES))})")
        try:
            family = get_family(fam.kernel, **fam.options)
        except TunerError as exc:
            raise Invalid(f"{key}.options", str(exc)) from None
        space = _narrowed(family.space, fam.space, f"{key}.space")
        for i, op in enumerate(operators):
            if op.family == fname:
                missing = [k for k in family.shape_keys if k not in dict(op.shape)]
                if missing:
                    raise Invalid(f"service.operators[{i}].shape",
                                  f"family {fam.kernel!r} needs shape dimensions {', '.join(family.shape_keys)}; "
                                  f"{missing[0]!r} is missing")
        configs = tuple(
            Config(fname, config_name(params), tuple(params.items()),
                   ModeledProfile(family, tuple(params.items()), preset, source, measured=measured))
            for params in all_configs(space)
        )
        families[fname] = Family(fname, tuple(space.items()), configs, bucket_key=tuple(family.bucket_key))
    return families


def _narrowed(full: Mapping[str, tuple[Any, ...]], narrowed: Mapping[str, list[Any]], key: str) -> dict[str, tuple[Any, ...]]:
    """The family's space with the file's choices; unnamed parameters keep their default."""
    for name, values in narrowed.items():
        if name not in full:
            raise Invalid(f"{key}.{name}", f"not a parameter of this family ({', '.join(full)})")
        for value in values:
            if not any(same_value(value, allowed) for allowed in full[name]):
                raise Invalid(f"{key}.{name}", f"value {value!r} is outside the family's space {list(full[name])}")
    return {name: tuple(narrowed.get(name, full[name][:1])) for name in full}
