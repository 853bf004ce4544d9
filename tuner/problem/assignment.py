"""The joint assignment: one config per (operator, shape bucket), and its two codecs.

Everything that carries a choice of configs — a trial, a baseline, a table row set, a
``--assign`` list, a gate's BASE and CAND — carries an :class:`Assignment`. Its codecs
are here and nowhere else: :meth:`Assignment.specs` / :func:`parse_specs` (the
``OP=CONFIG`` and ``OP@BUCKET=CONFIG`` text a user types and the CLI prints),
:meth:`Assignment.from_rows` / :meth:`Assignment.to_rows` (the config table's rows) and
:meth:`Assignment.names` / :meth:`Assignment.named` (plain values a worker process reads).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import AssignmentError, StorageError, TunerError, shown_value
from ..store.row import number, span_label
from .capabilities import FamilyProfile, LaunchResources, SourceHashed
from .model import Config, Problem

if TYPE_CHECKING:
    from ..store.row import TableRow

#: One cell of the assignment: (operator name, bucket index).
Cell = tuple[str, int]

#: An assignment as plain values (:meth:`Assignment.names`): per operator, its config
#: name in each bucket.
AssignmentNames = tuple[tuple[str, tuple[str, ...]], ...]


class RowLike(Protocol):
    """What :meth:`Assignment.from_rows` reads of a table row."""

    op: str
    bucket: int
    config: str


@dataclass(frozen=True)
class Assignment:
    """One config per bucket of every operator, in service order; hashable, comparable.

    Attributes:
        ops: per operator ``(name, configs)``, ``configs[b]`` serving bucket ``b``.
    """

    ops: tuple[tuple[str, tuple[Config, ...]], ...]

    def __hash__(self) -> int:
        """Hashed once: the search keys its maps on assignments of a hundred cells and more."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = self.__dict__["_hash"] = hash(self.ops)
        return found

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its caches: a hash is its process's own (strings hash by a seed)."""
        return {"ops": self.ops}

    @cached_property
    def in_cell_order(self) -> tuple[Config, ...]:
        """The configs, operators in service order and buckets in order (a joint space's
        cell order: index ``i`` is its cell ``i``)."""
        return tuple(config for _, configs in self.ops for config in configs)

    @classmethod
    def uniform(cls, problem: Problem, per_op: Mapping[str, Config]) -> Assignment:
        """Every bucket of each operator gets that operator's config (what one config per
        operator, as the table held before buckets, means)."""
        missing = [op.name for op in problem.service.operators if op.name not in per_op]
        if missing:
            raise AssignmentError(f"operator {shown_value(missing[0])} has no config in the assignment")
        return cls(tuple((op.name, (per_op[op.name],) * op.bucketing.size) for op in problem.service.operators))

    @classmethod
    def default(cls, problem: Problem) -> Assignment:
        """Each operator's family default (the first config listed), in every bucket."""
        return cls.uniform(problem, {op.name: problem.families[op.family].default for op in problem.service.operators})

    @property
    def operators(self) -> tuple[str, ...]:
        return tuple(op for op, _ in self.ops)

    def configs(self, op: str) -> tuple[Config, ...]:
        """The configs of ``op``, one per bucket (KeyError when the assignment has no such operator)."""
        for name, configs in self.ops:
            if name == op:
                return configs
        raise KeyError(op)

    def config(self, op: str, bucket: int = 0) -> Config:
        return self.configs(op)[bucket]

    def cells(self) -> Iterator[tuple[Cell, Config]]:
        for op, configs in self.ops:
            for bucket, config in enumerate(configs):
                yield (op, bucket), config

    def uniform_config(self, op: str) -> Config | None:
        """The operator's config when every bucket has the same one, else None."""
        configs = self.configs(op)
        return configs[0] if all(c == configs[0] for c in configs) else None

    def replace(self, changes: Mapping[Cell, Config]) -> Assignment:
        """A copy with some cells changed."""
        ops = []
        for op, configs in self.ops:
            ops.append((op, tuple(changes.get((op, b), c) for b, c in enumerate(configs))))
        return Assignment(tuple(ops))

    def replace_op(self, op: str, configs: tuple[Config, ...]) -> Assignment:
        """A copy with every bucket of ``op`` taken from ``configs``."""
        return Assignment(tuple((name, configs if name == op else current) for name, current in self.ops))

    def changed(self, other: Assignment) -> tuple[Cell, ...]:
        """Cells where ``other`` has another config, in service then bucket order."""
        return tuple(cell for (cell, mine), (_, theirs) in zip(self.cells(), other.cells()) if mine != theirs)

    def changed_ops(self, other: Assignment) -> tuple[str, ...]:
        return tuple(dict.fromkeys(op for op, _ in self.changed(other)))

    # --- the value codec (what a worker process receives) -----------------------------

    def names(self) -> AssignmentNames:
        """Every cell's config name, per operator: the assignment as plain values, which
        a process that loaded the same problem file reads back with :meth:`named`."""
        return tuple((op, tuple(config.name for config in configs)) for op, configs in self.ops)

    @classmethod
    def named(cls, problem: Problem, names: AssignmentNames) -> Assignment:
        """The assignment :meth:`names` wrote, on ``problem`` (another process's load of the
        same file, so every name is its family's: a name it lacks is a bug, not input).

        Raises:
            AssignmentError: an operator or config name ``problem`` does not have."""
        ops = []
        for op, configs in names:
            try:
                family = problem.family_of(op)
            except KeyError:
                raise AssignmentError(f"{problem.path}: no operator named {shown_value(op)}") from None
            found = []
            for name in configs:
                config = family.find(name)
                if config is None:
                    raise AssignmentError(f"{problem.path}: operator {shown_value(op)} has no config named "
                                          f"{shown_value(name)}")
                found.append(config)
            ops.append((op, tuple(found)))
        return cls(tuple(ops))

    # --- the text codec ------------------------------------------------------------

    def specs(self, problem: Problem) -> list[str]:
        """``OP=CONFIG`` for an operator with one config in every bucket, else one
        ``OP@BUCKET=CONFIG`` per bucket (the text ``--assign`` reads back)."""
        out = []
        for op, configs in self.ops:
            uniform = self.uniform_config(op)
            if uniform is not None:
                out.append(f"{op}={uniform.name}")
                continue
            buckets = problem.operator(op).bucketing.buckets
            out.extend(f"{op}@{bucket.label}={config.name}" for bucket, config in zip(buckets, configs))
        return out

    def as_dict(self, problem: Problem) -> dict[str, str | dict[str, str]]:
        """JSON-ready: ``{op: name}`` for an operator with one config, else
        ``{op: {bucket label: name}}`` (the same choices :meth:`specs` spells out)."""
        out: dict[str, str | dict[str, str]] = {}
        for op, configs in self.ops:
            uniform = self.uniform_config(op)
            buckets = problem.operator(op).bucketing.buckets
            out[op] = uniform.name if uniform is not None else {b.label: c.name for b, c in zip(buckets, configs)}
        return out

    def summary(self, problem: Problem) -> str:
        """One line: operators with one config as ``op=name``, the others as
        ``op=[label:name …]`` with runs of equal configs merged (``M..64:a M128..8192:b``)."""
        parts = []
        for op, configs in self.ops:
            uniform = self.uniform_config(op)
            if uniform is not None:
                parts.append(f"{op}={uniform.name}")
                continue
            parts.append(f"{op}=[{' '.join(runs(problem, op, configs))}]")
        return "; ".join(parts)

    # --- the table codec -------------------------------------------------------------

    @classmethod
    def from_rows(cls, problem: Problem, rows: Iterable[RowLike], where: str) -> Assignment:
        """The assignment one regime's rows hold.

        Raises:
            StorageError: a row names an unknown operator, bucket or config, or an
                operator's buckets are missing (the table was tuned with other buckets
                or another version of the problem: tune it again).
        """
        found: dict[Cell, str] = {}
        for row in rows:
            found[(row.op, int(row.bucket))] = row.config
        ops = []
        for op in problem.service.operators:
            family = problem.families[op.family]
            configs = []
            for bucket in range(op.bucketing.size):
                name = found.pop((op.name, bucket), None)
                config = None if name is None else family.find(name=name)
                if config is None:
                    what = "no row" if name is None else f"config {shown_value(name)}, which family {shown_value(family.name)} lacks"
                    raise StorageError(f"{where}: {op.name} bucket {bucket}: {what}; the table was tuned for "
                                       "other buckets or configs: run `tuner tune` again")
                configs.append(config)
            ops.append((op.name, tuple(configs)))
        if found:
            (op, bucket), _ = next(iter(found.items()))
            raise StorageError(f"{where}: a row for {op} bucket {bucket}, which {problem.path} does not have; "
                               "the table was tuned for another version of the problem: run `tuner tune` again")
        return cls(tuple(ops))

    @staticmethod
    def drift(problem: Problem, rows: Iterable[RowLike], where: str) -> str | None:
        """A warning when ``rows`` were tuned from another version of the problem file
        (their ``problem_hash`` is not the file's): their configs still load, but the
        file's device factors, shapes or spaces may have changed since, so the figures the
        tune stored do not describe what is simulated now. None when they match (or the
        rows do not say)."""
        tuned = {getattr(row, "problem_hash", None) for row in rows} - {None}
        if not tuned or problem.file_hash in tuned:
            return None
        return (f"{where}: the table was tuned from another version of {problem.path} (the file changed since: "
                "its factors, shapes or spaces may differ); run `tuner tune` again for figures of this one")

    def to_rows(self, problem: Problem, regime: str, provenance: Mapping[str, Any],
                baseline: Assignment) -> list[TableRow]:
        """One row per (operator, bucket), each with the regime's ``provenance`` fields
        (every :class:`~tuner.store.TableRow` field that is not about the cell) and the
        cell's config in ``baseline``."""
        from ..store.row import TableRow

        rows = []
        regime_index = list(problem.regimes).index(regime)
        for op_index, (op, configs) in enumerate(self.ops):
            operator = problem.operator(op)
            for bucket, config, base in zip(operator.bucketing.buckets, configs, baseline.configs(op)):
                rows.append(TableRow(
                    problem=problem.name, regime=regime, op=op, bucket=bucket.index,
                    bucket_bounds=bucket.as_dict() or None, regime_index=regime_index, op_index=op_index,
                    config=config.name, params={k: _jsonable(v) for k, v in config.params}, baseline_config=base.name,
                    shape=representative_shape(problem, op, bucket.index),
                    source=str(config.profile.source),
                    kernel_source_hash=config.profile.source_hash if isinstance(config.profile, SourceHashed) else None,
                    **provenance,
                    **cell_requirements(problem, op, bucket.index, config),
                ))
        return rows


def spans(problem: Problem, op: str, configs: tuple[Config, ...],
          baseline: tuple[Config, ...] | None = None) -> list[tuple[str, Config, Config, int]]:
    """``(label, config, baseline config, buckets)`` per run of consecutive buckets with one
    config and, given ``baseline`` (the operator's configs in another assignment), one
    baseline config; the label is "" for an operator's only bucket."""
    buckets = problem.operator(op).bucketing.buckets
    base = baseline or configs
    out: list[tuple[str, Config, Config, int]] = []
    start = 0
    for i in range(1, len(configs) + 1):
        if i == len(configs) or (configs[i], base[i]) != (configs[start], base[start]):
            label = "" if len(configs) == 1 else span_label([bucket.as_dict() for bucket in buckets[start:i]])
            out.append((label, configs[start], base[start], i - start))
            start = i
    return out


def runs(problem: Problem, op: str, configs: tuple[Config, ...]) -> list[str]:
    """``label:name`` per run of consecutive buckets with the same config."""
    return [f"{label}:{config.name}" if label else config.name
            for label, config, _, _ in spans(problem, op, configs)]


def representative_shape(problem: Problem, op: str, bucket: int) -> dict[str, float | int]:
    """The operator's shape dimensions at a bucket's representative shape (see
    :mod:`tuner.problem.buckets`)."""
    operator = problem.operator(op)
    values = operator.bucket_variables(problem.service.largest_batch_variables(problem.size_fields), bucket)
    return {dim: number(values[dim]) for dim, _ in operator.shape}


def cell_requirements(problem: Problem, op: str, bucket: int, config: Config) -> dict[str, Any]:
    """The row fields of schema version 4 for one cell: the family and options
    ``tuner.requirements`` needs, the SMs the config is told, the workspace the simulator
    reserves for the cell (``tuner.sim.program.BoundOperator.reserved_workspace``: the
    config's at the bucket's representative shape at the largest batch, when the service
    reaches the bucket; else 0), and the compiled resources of its launches there."""
    operator = problem.operator(op)
    service = problem.service
    partition = operator.partition or service.partition
    chosen = operator.bucketing.buckets[bucket]
    largest = service.largest_batch_variables(problem.size_fields)
    values = operator.bucket_variables(largest, bucket)
    profile = config.profile
    try:
        workspace = float(profile.workspace_bytes(values, partition)) if operator.bucketing.reachable(chosen) else 0.0
    except TunerError:  # a config illegal where the service never launches it
        workspace = 0.0
    if not isinstance(profile, FamilyProfile) or profile.family is None:  # declared: only its workspace is known
        return {"workspace_bytes": workspace}
    family = profile.family
    device = profile.device or service.device
    sms = partition.sms(device) if partition.share < 1.0 and partition.sized_to_partition else device.sms
    resources: dict[str, Any] | None = None
    if isinstance(profile, LaunchResources):  # not a collective: NCCL's, not compiled here
        try:
            resources = profile.launch_resources(values, partition)
        except TunerError:  # illegal or uncompilable at this shape: resources unknown
            resources = None
    from ..profile.measured import family_options

    return {"family": family.name, "family_options": {k: _jsonable(v) for k, v in family_options(family).items()},
            "sms": int(sms), "workspace_bytes": workspace, "resources": resources}


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
