"""Turn ``--assign OP=CONFIG`` strings into an assignment of configs to operators.

``CONFIG`` is either a name the problem file gives a config (``stage=fast``) or its
parameters (``qkv=tile=128x128,split_k=1``); a subset of the parameters is enough when
exactly one config matches it (``qkv=split_k=4``). Operators not mentioned keep their
family's default (the first config listed).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import AssignmentError
from .model import Config, Family, Problem


def resolve_assignment(problem: Problem, specs: Iterable[str] = ()) -> dict[str, Config]:
    """The default assignment with the given ``OP=CONFIG`` overrides applied.

    Raises:
        AssignmentError: a malformed spec, an unknown operator, an operator given twice,
            or a config that is not in the family (or parameters that match none or
            several); the message names the problem file and the ``--assign`` value.
    """
    assignment = problem.default_assignment()
    given: set[str] = set()
    for spec in specs:
        where = f"{problem.path}: --assign {spec}"
        op, sep, choice = (part.strip() for part in spec.partition("="))
        if not sep or not op or not choice:
            raise AssignmentError(f"{where}: expected OP=CONFIG, e.g. {_example(problem)}")
        if op not in assignment:
            raise AssignmentError(f"{where}: unknown operator {op!r} (operators: {', '.join(assignment)})")
        if op in given:
            raise AssignmentError(f"{where}: operator {op!r} is assigned twice")
        given.add(op)
        family = problem.family_of(op)
        if "=" in choice:
            assignment[op] = _by_params(family, choice, where)
        else:
            config = family.find(name=choice)
            if config is None:
                raise AssignmentError(
                    f"{where}: family {family.name!r} has no config {choice!r} (configs: {_names(family.configs)})"
                )
            assignment[op] = config
    return assignment


def _by_params(family: Family, choice: str, where: str) -> Config:
    params: dict[str, str] = {}
    for pair in choice.split(","):
        key, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not key:
            raise AssignmentError(f"{where}: expected PARAM=VALUE pairs separated by ',' but got {pair!r}")
        if key not in dict(family.space):
            raise AssignmentError(
                f"{where}: family {family.name!r} has no parameter {key!r} "
                f"(parameters: {', '.join(dict(family.space))})"
            )
        params[key] = value
    matches = [c for c in family.configs if all(_matches(c.param_dict[k], v) for k, v in params.items())]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise AssignmentError(
            f"{where}: no config of family {family.name!r} has these parameters (configs: {_names(family.configs)})"
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


def _names(configs: Iterable[Config]) -> str:
    return ", ".join(c.name for c in configs)


def _example(problem: Problem) -> str:
    op = problem.service.operators[0]
    return f"{op.name}={problem.families[op.family].default.name}"
