"""Turn ``--assign`` strings into an :class:`~tuner.problem.assignment.Assignment`.

``OP=CONFIG`` sets every bucket of the operator; ``OP@BUCKET=CONFIG`` one bucket, named
by its label (``qkv@M17..32``, as ``tuner validate`` lists them) or its index
(``qkv@3``); a bucket spec after an operator-wide one overrides it there. ``CONFIG`` is
either a name the problem file gives a config (``stage=fast``) or its parameters
(``qkv=tile=128x128,split_k=1``); a subset of the parameters is enough when exactly one
config matches it (``qkv=split_k=4``). Operators not mentioned keep ``base`` (by
default each family's default, the first config listed).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import SHOWN_CHARS, AssignmentError, shortened, shown_value
from .assignment import Assignment
from .model import Config, Family, Problem


def resolve_assignment(problem: Problem, specs: Iterable[str] = (), base: Assignment | None = None) -> Assignment:
    """``base`` (default: every family's default) with the given overrides applied.

    Raises:
        AssignmentError: a malformed spec, an unknown operator or bucket, a cell given
            twice, or a config that is not in the family (or parameters that match none
            or several); the message names the problem file and the ``--assign`` value.
    """
    assignment = base or Assignment.default(problem)
    operators = assignment.operators
    given: set[tuple[str, int | None]] = set()
    for spec in specs:
        where = f"{problem.path}: --assign {shortened(spec, SHOWN_CHARS)}"
        target, sep, choice = (part.strip() for part in spec.partition("="))
        op, at, bucket_name = (part.strip() for part in target.partition("@"))
        if not sep or not op or not choice or (at and not bucket_name):
            raise AssignmentError(f"{where}: expected OP=CONFIG or OP@BUCKET=CONFIG, e.g. {_example(problem)}")
        if op not in operators:
            raise AssignmentError(f"{where}: unknown operator {shown_value(op)} (operators: {', '.join(operators)})")
        bucket = _bucket(problem, op, bucket_name, where) if at else None
        if (op, bucket) in given:
            raise AssignmentError(f"{where}: operator {shown_value(op)}{'' if bucket is None else f' bucket {bucket_name}'} "
                                  "is assigned twice")
        given.add((op, bucket))
        family = problem.family_of(op)
        if "=" in choice:
            config = _by_params(family, choice, where)
        else:
            found = family.find(name=choice)
            if found is None:
                raise AssignmentError(
                    f"{where}: family {shown_value(family.name)} has no config {shown_value(choice)} (configs: {_names(family.configs)})"
                )
            config = found
        if bucket is None:
            assignment = assignment.replace_op(op, (config,) * len(assignment.configs(op)))
        else:
            assignment = assignment.replace({(op, bucket): config})
    return assignment


def _bucket(problem: Problem, op: str, name: str, where: str) -> int:
    buckets = problem.operator(op).bucketing.buckets
    for bucket in buckets:
        if name in (bucket.label, str(bucket.index)):
            return bucket.index
    labels = ", ".join(b.label for b in buckets) if buckets[0].bounds else "none: it has one bucket"
    raise AssignmentError(f"{where}: operator {shown_value(op)} has no bucket {shown_value(name)} (buckets: {labels})")


def _by_params(family: Family, choice: str, where: str) -> Config:
    params: dict[str, str] = {}
    for pair in choice.split(","):
        key, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not key:
            raise AssignmentError(f"{where}: expected PARAM=VALUE pairs separated by ',' but got {shown_value(pair)}")
        if key not in dict(family.space):
            raise AssignmentError(
                f"{where}: family {shown_value(family.name)} has no parameter {shown_value(key)} "
                f"(parameters: {', '.join(dict(family.space))})"
            )
        params[key] = value
    matches = [c for c in family.configs if all(_matches(c.param_dict[k], v) for k, v in params.items())]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise AssignmentError(
            f"{where}: no config of family {shown_value(family.name)} has these parameters (configs: {_names(family.configs)})"
        )
    raise AssignmentError(f"{where}: {len(matches)} configs match ({_names(matches)}); give more parameters")


def _matches(declared: object, text: str) -> bool:
    """Whether the typed text names the declared value: ``true`` a boolean, ``4`` or
    ``4.0`` the number 4, anything else a string equal to it."""
    if isinstance(declared, bool):
        return text.lower() == str(declared).lower()
    if isinstance(declared, (int, float)):
        try:
            return float(text) == declared
        except ValueError:
            return False
    return declared == text


#: How many config names an error lists before saying how many more there are.
LISTED_NAMES = 8


def _names(configs: Iterable[Config]) -> str:
    """The configs' names for an error line, capped: a kernel family has dozens."""
    names = [c.name for c in configs]
    if len(names) <= LISTED_NAMES:
        return ", ".join(names)
    return (", ".join(names[:LISTED_NAMES]) + f", … and {len(names) - LISTED_NAMES} more; "
            "`tuner profile PROBLEM` lists them")


def _example(problem: Problem) -> str:
    op = problem.service.operators[0]
    return f"{op.name}={problem.families[op.family].default.name}"
