"""Each operator's shape buckets: from the problem file's ``buckets``, or by default.

Default (``buckets`` not given): the key is the family's ``bucket_key`` (built-in
families: ``M`` for GEMMs and norms, the batch ``B`` and context ``L`` for decode
attention) or, for a declared family, the operator's first shape dimension that varies
with the batch; a family with one config gets one bucket; edges are powers of two over the range the service reaches
(:func:`~tuner.problem.buckets.power_of_two_edges`). A key dimension the service never
varies is dropped. ``buckets: {}`` asks for one bucket (one config for every shape).

Explicit (``buckets: {M: [16, 64, 8192]}``): each key must be a shape dimension of the
operator and its edges strictly ascending numbers; a bucket no reachable shape falls in
is a warning (it keeps the family's default config, never launched nor reserved for),
not an error.
"""

from __future__ import annotations

import dataclasses

import math
from collections.abc import Mapping, Sequence

from . import schema as s
from .buckets import Bucketing, power_of_two_edges
from .explain import Invalid
from .model import Family, Operator
from .probe import ProbePoint



def bucketed(spec: s.ProblemSpec, operators: Sequence[Operator], families: Mapping[str, Family],
             points: Sequence[ProbePoint], batch_vars: frozenset[str]) -> tuple[tuple[Operator, ...], tuple[str, ...]]:
    """Operators with their bucketing over the batches the service can run (``points``:
    :func:`~tuner.problem.probe.reachable_points`), and one-line warnings (``KEY: reason``)."""
    out, warnings = [], []
    for i, (op, written) in enumerate(zip(operators, spec.service.operators)):
        key = f"service.operators[{i}].buckets"
        reach = {dim: _reach(op, dim, points) for dim, _ in op.shape}
        if written.buckets is None:
            bucketing = _default(op, families[op.family], reach, batch_vars)
        else:
            bucketing = _explicit(op, written.buckets, reach, key)
            for bucket in bucketing.buckets:
                if not bucketing.reachable(bucket):
                    warnings.append(f"{key}: bucket {bucket.label} of operator {s.show(op.name)} holds no shape the "
                                    f"service reaches ({_describe_reach(bucketing)}); it keeps the family's default config")
        if len(bucketing.key) > 1:  # joint reach: which combinations the service can run
            joint = {tuple(op.variables(variables)[dim] for dim in bucketing.key) for _, variables in points}
            bucketing = dataclasses.replace(bucketing, points=tuple(sorted(joint)))
        out.append(dataclasses.replace(op, bucketing=bucketing))
    return tuple(out), tuple(warnings)


def _reach(op: Operator, dim: str, points: Sequence[ProbePoint]) -> tuple[float, float]:
    values = [op.variables(variables)[dim] for _, variables in points]
    return (min(values), max(values))


def _default(op: Operator, family: Family, reach: Mapping[str, tuple[float, float]],
             batch_vars: frozenset[str]) -> Bucketing:
    if len(family.configs) <= 1:
        return Bucketing()  # nothing to choose
    if family.bucket_key is not None:
        key = [dim for dim in family.bucket_key if dim in reach]
    else:
        key = [next((dim for dim, expr in op.shape if expr.names & batch_vars), None)]
    key = [dim for dim in key if dim is not None and reach[dim][0] < reach[dim][1]]
    if not key:
        return Bucketing()
    return Bucketing(tuple(key), tuple(power_of_two_edges(*reach[dim]) for dim in key),
                     tuple(reach[dim] for dim in key))


def _explicit(op: Operator, written: Mapping[str, list[float]], reach: Mapping[str, tuple[float, float]],
              key: str) -> Bucketing:
    dims = []
    for dim, edges in written.items():
        where = f"{key}.{dim}"
        if dim not in reach:
            known = ", ".join(reach) or "none"
            raise Invalid(where, f"{s.show(dim)} is not a shape dimension of operator {s.show(op.name)} (dimensions: {known})")
        if not edges:
            raise Invalid(where, "lists no edge; give ascending upper edges, e.g. [16, 64, 256]")
        for edge in edges:
            if not math.isfinite(edge):
                raise Invalid(where, f"edge {edge} is not a finite number")
        for low, high in zip(edges, edges[1:]):
            if high <= low:
                raise Invalid(where, f"edges must be strictly ascending but {high:g} follows {low:g}")
        dims.append(dim)
    if not dims:
        return Bucketing()
    return Bucketing(tuple(dims), tuple(tuple(float(e) for e in written[d]) for d in dims),
                     tuple(reach[d] for d in dims))


def _describe_reach(bucketing: Bucketing) -> str:
    return ", ".join(f"{dim} from {low:g} to {high:g}" for dim, (low, high) in zip(bucketing.key, bucketing.reach))
