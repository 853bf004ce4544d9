"""Old public names kept working for one more release, with a ``DeprecationWarning``
naming where each went (the convention of NumPy, httpx and vLLM: a renamed API warns
before it breaks). A package lists its moved names and installs the module
``__getattr__`` this builds; nothing is imported until an old name is asked for, so the
packages' import cost is unchanged.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping

#: The release that drops the names listed here.
REMOVED_IN = "0.3"


def moved_names(package: str, moved: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package`` for its ``moved`` names, each mapped to
    its new home as ``"module:attribute"``: the new object, with a warning that names it."""

    def __getattr__(name: str) -> object:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = target.partition(":")
        warnings.warn(f"{package}.{name} is deprecated and goes in tuner {REMOVED_IN}: use {module}.{attribute}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), attribute)

    return __getattr__
