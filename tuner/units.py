"""Quantities with units, as people write them in problem files.

Problem files are read by people who think in ``GiB`` and ``ms``; the simulator works in
bytes and seconds. These helpers convert once, at the boundary, and quote the bad value
(capped by :func:`~tuner.errors.shown_value`, so a 20,000-character value stays one line).
"""

from __future__ import annotations

import math
import re
import reprlib

from .errors import shown_value

BYTE_UNITS: dict[str, float] = {
    "B": 1.0,
    "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
    "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40,
}
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)\s*$")


def _got(value: object) -> str:
    """The bad value as a message echoes it: typed text capped by ``shown_value``, any
    other value (``None``, a 400-digit integer, a list) by the standard bounded repr."""
    return shown_value(value) if isinstance(value, str) else reprlib.repr(value)


def _parse(value: object, units: dict[str, float], default_unit: str, kind: str, example: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind} such as {example!r} but got {_got(value)}")
    if isinstance(value, (int, float)):
        try:
            result = float(value) * units[default_unit]
        except OverflowError:  # an int beyond the largest float: refused as not finite below
            result = math.inf
    elif isinstance(value, str) and (match := _QUANTITY.match(value)):
        number, unit = match.groups()
        unit = unit or default_unit
        if unit not in units:
            raise ValueError(
                f"unknown {kind} unit {shown_value(unit)} in {_got(value)} (use one of {', '.join(units)})"
            )
        result = float(number) * units[unit]
    else:
        raise ValueError(f"expected a {kind} such as {example!r} but got {_got(value)}")
    if not math.isfinite(result):
        raise ValueError(f"expected a finite {kind} but got {_got(value)}")
    return result


def parse_bytes(value: object) -> float:
    """``'4 GiB'`` → 4294967296.0; a bare number is bytes.

    Raises:
        ValueError: not a number with a byte unit, an unknown unit, or not finite.
    """
    return _parse(value, BYTE_UNITS, "B", "size in bytes", "4 GiB")


def gib_text(nbytes: float) -> str:
    """``4294967296`` → ``'4.00 GiB'``: a size as a message or a generated file states it."""
    return f"{nbytes / BYTE_UNITS['GiB']:.2f} GiB"


def duration_text(seconds: float) -> str:
    """``0.1`` → ``'100 ms'``: the largest unit that keeps the number at least 1."""
    for unit in ("h", "min", "s", "ms", "us", "ns"):
        if seconds >= TIME_UNITS[unit] or unit == "ns":
            return f"{seconds / TIME_UNITS[unit]:.4g} {unit}"
    raise AssertionError("unreachable")


def size_text(nbytes: float) -> str:
    """``4294967296`` → ``'4 GiB'``: binary units, the largest that keeps the number at least 1."""
    for unit in ("TiB", "GiB", "MiB", "KiB", "B"):
        if nbytes >= BYTE_UNITS[unit] or unit == "B":
            return f"{nbytes / BYTE_UNITS[unit]:.4g} {unit}"
    raise AssertionError("unreachable")


def parse_seconds(value: object) -> float:
    """``'10 ms'`` → 0.01; a bare number is seconds.

    Raises:
        ValueError: not a number with a time unit, an unknown unit, or not finite.
    """
    return _parse(value, TIME_UNITS, "s", "duration", "10 ms")


def is_bare_number(value: object) -> bool:
    """A number without a unit: ``60``, ``2.5`` or ``"60"``."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    return bool(match) and not match.group(2)


def is_quantity(value: str, units: dict[str, float]) -> bool:
    """True when ``value`` is a plain ``NUMBER UNIT`` literal in ``units``."""
    match = _QUANTITY.match(value)
    return bool(match) and (match.group(2) or "") in units | {"": 1.0}
