"""Shape buckets: which config of an operator a launch uses, as ``triton.autotune(key=…)`` does.

A real autotuner keys configs on shape: ``triton.autotune`` benchmarks every distinct
value of its key arguments, vLLM's tables are keyed by M and looked up by the nearest M,
TensorRT-LLM rounds the token count up to a power of two. tuner chooses one config per
(operator, bucket), where an operator's buckets split the range of its *key dimensions*
(shape dimensions such as ``M``) at ascending upper edges: with edges ``16, 64`` a value
``v`` falls in bucket 0 when ``v <= 16``, bucket 1 when ``16 < v <= 64``, and the last
bucket also takes every value above the last edge (a launch is never without a config).
With several key dimensions the buckets are their product, first dimension slowest.

A bucket is judged at its *representative shape*: its key dimensions at the bucket's
upper edge (rounded up, as TensorRT-LLM rounds tokens up to the bucket), clipped to the
range the service can reach, the other dimensions at the largest batch. That is where
the per-bucket isolated-fastest baseline times configs and where the workspace a config
needs in that bucket is largest.

With several key dimensions the range is not a box: decode attention's 256 sequences
and 8192 tokens of context each are reachable, but not together when the memory budget
holds 65,536 tokens of KV cache. A bucketing may therefore carry the key values of the
batches the service can run (``points``, from :func:`tuner.problem.probe.reachable_points`):
the reachable region is what they dominate (fewer sequences or a shorter context fit
where more do). A bucket that region does not meet is unreachable, and a bucket whose
upper corner lies outside it is judged at its largest point inside instead.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from ..store.row import bucket_label, number


@dataclass(frozen=True)
class Bucket:
    """One cell of an operator's key: per key dimension the interval ``(low, high]``.

    ``low`` is -inf for the first interval of a dimension; ``high`` of the last one is
    the last edge (larger values are served by it too). ``index`` is its position in
    :attr:`Bucketing.buckets`.
    """

    index: int
    bounds: tuple[tuple[str, float, float], ...]

    @property
    def label(self) -> str:
        """Short and typeable (no ``=`` or ``,`` in it): ``M..16``, ``M17..64``, ``M2``, ``B..1/L17..32``."""
        return bucket_label(self.as_dict())

    def as_dict(self) -> dict[str, list[float | None]]:
        """``{dim: [low, high]}`` with an open low end as None (JSON has no infinity)."""
        return {dim: [None if math.isinf(low) else number(low), number(high)] for dim, low, high in self.bounds}


@dataclass(frozen=True)
class Bucketing:
    """An operator's key dimensions and the upper edges of its buckets along each.

    Attributes:
        key: shape dimensions the config depends on (empty: one bucket for every shape).
        edges: per key dimension, strictly ascending upper edges.
        reach: per key dimension, the (lowest, highest) value the service can produce
            (where representative shapes are clipped).
        points: key values of batches the service can run, jointly (see the module's
            docstring); empty: every combination of values inside ``reach``.
    """

    key: tuple[str, ...] = ()
    edges: tuple[tuple[float, ...], ...] = ()
    reach: tuple[tuple[float, float], ...] = ()
    points: tuple[tuple[float, ...], ...] = ()

    @cached_property
    def buckets(self) -> tuple[Bucket, ...]:
        """Every bucket, first key dimension slowest; the lowest bucket of each dimension is open below."""
        intervals = []
        for dim, edges in zip(self.key, self.edges):
            lows = (-math.inf, *edges[:-1])
            intervals.append([(dim, low, high) for low, high in zip(lows, edges)])
        return tuple(Bucket(i, tuple(cell)) for i, cell in enumerate(itertools.product(*intervals)))

    @cached_property
    def size(self) -> int:
        return math.prod(len(edges) for edges in self.edges)

    def index(self, values: Mapping[str, float]) -> int:
        """The bucket of a shape (values above the last edge fall in the last bucket)."""
        flat = 0
        for dim, edges in zip(self.key, self.edges):
            flat = flat * len(edges) + min(bisect.bisect_left(edges, values[dim]), len(edges) - 1)
        return flat

    def representative(self, bucket: Bucket) -> dict[str, float]:
        """Key values of the bucket's representative shape: upper edges, clipped to the
        reach; where the service cannot run that corner, the largest (by the product of
        its key values) of its batches that falls in the bucket."""
        out = {}
        for (dim, _, high), (lowest, highest) in zip(bucket.bounds, self.reach):
            out[dim] = min(max(high, lowest), highest)
        if self.points and not self._dominated(tuple(out.values())):
            highs = [high for _, _, high in bucket.bounds]
            inside = [tuple(map(min, p, highs)) for p in self.points if self._holds(bucket, p)]
            if inside:
                return dict(zip(self.key, max(inside, key=lambda p: (math.prod(p), p))))
        return out

    def lowest(self, bucket: Bucket) -> dict[str, float]:
        """Key values of the smallest shape the bucket holds (integer dimensions), clipped."""
        out = {}
        for (dim, low, high), (lowest, highest) in zip(bucket.bounds, self.reach):
            start = lowest if math.isinf(low) else math.floor(low) + 1
            out[dim] = min(max(start, lowest), highest, high)
        return out

    def reachable(self, bucket: Bucket) -> bool:
        """Whether any shape the service can produce falls in the bucket."""
        for (dim, low, high), (lowest, highest) in zip(bucket.bounds, self.reach):
            last = high == self._last_edge(dim)
            if highest <= low or (lowest > high and not last):
                return False
        return not self.points or self._dominated(tuple(self.lowest(bucket).values()))

    def _dominated(self, values: tuple[float, ...]) -> bool:
        """Whether a batch the service can run is at least ``values`` in every key dimension."""
        return any(all(p >= v for p, v in zip(point, values)) for point in self.points)

    def _holds(self, bucket: Bucket, point: tuple[float, ...]) -> bool:
        """Whether ``point`` falls in ``bucket`` (the last interval takes what lies above it)."""
        return all(low < v and (v <= high or high == self._last_edge(dim))
                   for (dim, low, high), v in zip(bucket.bounds, point))

    def _last_edge(self, dim: str) -> float:
        return self.edges[self.key.index(dim)][-1]


def power_of_two_edges(lowest: float, highest: float) -> tuple[float, ...]:
    """Upper edges 1, 2, 4, … covering ``[lowest, highest]`` (TensorRT-LLM's token buckets):
    the first edge is the power of two at or above ``lowest`` (at least 1), the last the
    one at or above ``highest``. A constant dimension gets one bucket."""
    if highest <= lowest:
        return (float(2 ** max(0, math.ceil(math.log2(max(highest, 1.0))))),)
    first = max(0, math.ceil(math.log2(max(lowest, 1.0))))
    last = max(first, math.ceil(math.log2(max(highest, 1.0))))
    return tuple(float(2 ** k) for k in range(first, last + 1))

