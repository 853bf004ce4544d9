"""Evaluate every expression of a problem at a few probe batches when the file is loaded.

An expression can be valid and still wrong: ``10*ms - batch*1e-3`` is negative for large
batches, ``1/prefill_tokens`` divides by zero on a decode-only iteration, ``sqrt(M - 64)``
is undefined for small ``M``. The simulator trusts the model it is given, so these are
found here, at the largest batch the engine runs (where the workspace is reserved) and
at the smallest iterations the batching policy makes, and reported with the key to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..expr import EVALUATION_ERRORS, Expr
from . import schema as s
from .explain import Invalid
from .model import Family, KernelProfile, Neighbor, Operator, PiecewiseLinear, Quantity, Service

#: A probe: an operator's name and the batch variables of one shape it meets.
ProbePoint = tuple[str, dict[str, float]]


def probe_points(service: Service, size_fields: frozenset[str]) -> list[ProbePoint]:
    """Named batch-variable assignments that every expression must survive."""
    largest = ("at the largest batch", service.largest_batch_variables(size_fields))
    if service.kind.token_level:
        one = {"batch": 1, "tokens": 1, "context": 1, "max_context": 1}
        return [
            largest,
            ("in a one-sequence decode step", {**one, "prefill_tokens": 0, "decode_seqs": 1}),
            ("in a one-token prefill step", {**one, "prefill_tokens": 1, "decode_seqs": 0}),
        ]
    smallest: dict[str, float] = {"batch": 1}
    for name in size_fields:
        smallest[name] = smallest[f"{name}_total"] = 1
    return [largest, ("for a batch of one", smallest)]


def reachable_points(service: Service, size_fields: frozenset[str], budget: float) -> list[ProbePoint]:
    """Batches a continuous-batching service can run within ``budget`` bytes (the largest
    of the service's and its regimes'): for each batch size ``b`` the decode step of ``b``
    sequences at the longest mean context the budget admits (the memory frontier: every
    smaller batch or context fits too, so the frontier bounds the region), the
    one-sequence one-token step, and prefill chunks of up to ``max_tokens``. Dynamic
    batching keeps :func:`probe_points`.

    A sequence of ``l`` tokens is taken to hold the least state ``per_request`` gives with
    all ``l`` tokens in one size field (an engine's: its KV blocks), and no workspace is counted: the region is the
    largest the budget could allow, so no shape the service can meet is left out.
    """
    if not service.kind.token_level:
        return probe_points(service, size_fields)
    free = budget - service.memory.fixed
    per_request = service.memory.per_request
    fields = sorted(size_fields) or ["prompt"]

    def state(tokens: int) -> float:
        if service.engine is not None:  # an engine's KV cache: its bytes per token, in whole blocks
            size = service.engine.block_size
            return service.engine.kv_bytes_per_token * size * -(-tokens // size)
        return min(per_request.evaluate({**{f: 0.0 for f in fields}, f: float(tokens)}) for f in fields)

    sizes = range(1, service.max_batch + 1) if service.max_batch <= 4096 else _ladder(service.max_batch)
    frontier = [(b, l) for b in sizes if (l := _largest(lambda t, b=b: b * state(t) <= free, service.max_context))]
    if not frontier:
        return probe_points(service, size_fields)  # not one token fits: the simulation says so
    points: list[ProbePoint] = [
        (f"in a decode step of {b} sequences at {l} tokens of context",
         {"batch": b, "tokens": b, "prefill_tokens": 0, "decode_seqs": b, "context": b * l, "max_context": l})
        for b, l in [(1, 1), *frontier]
    ]
    for t in _ladder(service.max_tokens):
        if state(t) <= free:
            points.append((f"in a prefill chunk of {t} tokens",
                           {"batch": 1, "tokens": t, "prefill_tokens": t, "decode_seqs": 0, "context": t, "max_context": t}))
    return points


def _ladder(largest: int) -> list[int]:
    """1, 2, 4, … below ``largest``, and ``largest``."""
    steps = [2**k for k in range(max(0, int(largest).bit_length())) if 2**k < largest]
    return steps + [int(largest)]


def _largest(fits: Callable[[int], bool], highest: int) -> int:
    """The largest n in 1..``highest`` with ``fits(n)`` (monotone: true up to some n), 0 if none."""
    if not fits(1):
        return 0
    low, high = 1, int(highest)
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


def check_operators(
    operators: Sequence[Operator], families: Mapping[str, Family], points: list[ProbePoint],
) -> None:
    """Every shape and every config profile of each operator is finite and >= 0 at every point.

    Raises:
        Invalid: keyed by the shape dimension or the profile field that fails.
    """
    for i, op in enumerate(operators):
        family = families[op.family]
        for where, variables in points:
            values = dict(variables)
            for dim, expr in op.shape:
                values[dim] = _value(expr, values, f"service.operators[{i}].shape.{dim}", "a shape dimension",
                                     _where(f"for operator {s.show(op.name)} {where}", expr, values))
            for j, config in enumerate(family.configs):
                if isinstance(config.profile, KernelProfile):  # modeled profiles are checked by their model
                    key = f"families.{op.family}.configs[{j}].profile"
                    _check_profile(config.profile, values, key, f"for operator {s.show(op.name)} {where}")


#: The shortest a neighbour's launch cycle (its kernel's latency plus its gap) may be: a
#: GPU runs at most about a million back-to-back launches a second (even a CUDA graph's
#: nodes are ~1 µs apart), and every launch is simulated events: a 1 ns kernel with no gap
#: made a one-second simulation run without end.
MIN_NEIGHBOR_CYCLE_S = 1e-6


def check_neighbors(neighbors: Sequence[Neighbor]) -> None:
    """A neighbour's kernel must take time, or its closed loop would never let time pass,
    and a launch cycle of at least :data:`MIN_NEIGHBOR_CYCLE_S`."""
    for i, neighbor in enumerate(neighbors):
        key = f"service.neighbors[{i}].profile"
        _check_profile(neighbor.profile, {}, key, f"for neighbour {s.show(neighbor.name)}")
        latency = neighbor.profile.latency.evaluate({})
        if latency <= 0:
            raise Invalid(f"{key}.latency", "a neighbour's kernel needs a latency greater than 0")
        if latency + neighbor.gap_s < MIN_NEIGHBOR_CYCLE_S:
            raise Invalid(f"{key}.latency", f"a kernel every {latency + neighbor.gap_s:.3g} s (latency + gap): a GPU "
                          "launches at most one a microsecond back to back; make the latency or the gap longer")


def check_per_request(per_request: Expr, size_fields: frozenset[str], largest: float) -> None:
    """Request state must be finite and >= 0 for sizes from 1 to ``largest`` (vectorised,
    as the simulator evaluates it over a whole workload)."""
    sizes = {name: np.array([1.0, float(largest)]) for name in size_fields}
    key = "service.memory.per_request"
    try:
        with np.errstate(all="ignore"):
            state = np.asarray(per_request.evaluate_array(sizes), dtype=np.float64)
    except EVALUATION_ERRORS as exc:
        raise Invalid(key, f"cannot be evaluated for sizes 1 and {largest} ({exc})") from None
    if not (np.all(np.isfinite(state)) and np.all(state >= 0)):
        raise Invalid(key, f"evaluates to {np.ravel(state).tolist()} for sizes 1 and {largest}; "
                           "request state must be a finite number of bytes >= 0")


def _check_profile(profile: KernelProfile, values: Mapping[str, float], key: str, where: str) -> None:
    for name, what, quantity in (
        ("latency", "a latency", profile.latency),
        ("workspace", "a workspace size", profile.workspace),
        ("ctas", "a CTA count", profile.ctas),
    ):
        if quantity is not None:
            _value(quantity, values, f"{key}.{name}", what, _where(where, quantity, values))


def _value(quantity: Quantity, values: Mapping[str, float], key: str, what: str, where: str) -> float:
    try:
        value = quantity.evaluate(values)
    except EVALUATION_ERRORS as exc:
        raise Invalid(key, f"cannot be evaluated {where}: {exc}") from None
    if not (math.isfinite(value) and value >= 0):
        raise Invalid(key, f"evaluates to {value:g} {where}; {what} must be a finite number >= 0")
    return value


def _where(where: str, quantity: Quantity, values: Mapping[str, float]) -> str:
    """``where`` plus the values of the variables the quantity reads, e.g. ``(M=2048, N=4096)``."""
    if isinstance(quantity, PiecewiseLinear):
        names = [quantity.variable]
    elif isinstance(quantity, Expr):
        names = sorted(quantity.names)
    else:
        names = []
    shown = ", ".join(f"{n}={values[n]:g}" for n in names if n in values)
    return f"{where} ({shown})" if shown else where
