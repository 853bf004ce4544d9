"""Turn ``--assign OP=CONFIG`` strings into an assignment of configs to operators.

``CONFIG`` is either a name the problem file gives a config (``stage=fast``) or its
parameters (``qkv=BLOCK_M=64,BLOCK_N=128``); operators not mentioned keep their
family's default (the first config listed).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import AssignmentError
from .model import Config, Problem


def _parse_value(text: str) -> object:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def resolve_assignment(problem: Problem, specs: Iterable[str] = ()) -> dict[str, Config]:
    """The default assignment with the given ``OP=CONFIG`` overrides applied.

    Raises:
        AssignmentError: an unknown operator, or a config that is not in the family.
    """
    assignment = problem.default_assignment()
    for spec in specs:
        op, sep, choice = spec.partition("=")
        if not sep or not choice:
            raise AssignmentError(f"--assign {spec!r}: expected OP=CONFIG, e.g. stage=fast")
        if op not in assignment:
            raise AssignmentError(
                f"--assign {spec!r}: unknown operator {op!r} (operators: {', '.join(assignment)})"
            )
        family = problem.family_of(op)
        if "=" in choice:
            params = {}
            for pair in choice.split(","):
                key, _, value = pair.partition("=")
                params[key.strip()] = _parse_value(value.strip())
            config = family.find(params=params) or _partial_match(family.configs, params)
        else:
            config = family.find(name=choice)
        if config is None:
            names = ", ".join(c.name for c in family.configs)
            raise AssignmentError(
                f"--assign {spec!r}: family {family.name!r} has no such config (configs: {names})"
            )
        assignment[op] = config
    return assignment


def _partial_match(configs: tuple[Config, ...], params: dict[str, object]) -> Config | None:
    """The single config whose parameters include ``params``; None when 0 or several match."""
    matches = [c for c in configs if all(c.param_dict.get(k) == v for k, v in params.items())]
    return matches[0] if len(matches) == 1 else None
