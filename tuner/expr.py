"""Arithmetic expressions in problem files: shapes, latencies, workspace, request state.

Shapes and costs depend on the batch (``M: tokens``, ``latency: "2*ms + 3e-6*tokens"``).
Expressions are parsed once with :mod:`ast`, checked against a whitelist of node types,
functions and variable names (so a typo in a name fails when the file is loaded, not in
the middle of a simulation), then compiled to a code object that is cheap to evaluate.
Unit names (``GiB``, ``ms`` …) are constants in every expression.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import CodeType

from .units import BYTE_UNITS, TIME_UNITS, is_quantity, parse_bytes, parse_seconds

FUNCTIONS: dict[str, object] = {
    "min": min, "max": max, "abs": abs,
    "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "sqrt": math.sqrt,
    "cdiv": lambda a, b: -(-a // b),
}
UNIT_CONSTANTS: dict[str, float] = {**BYTE_UNITS, **TIME_UNITS}
_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd,
)
_GLOBALS = {"__builtins__": {}, **FUNCTIONS, **UNIT_CONSTANTS}


@dataclass(frozen=True)
class Expr:
    """A validated arithmetic expression over named variables.

    Attributes:
        source: the text as written (or the number).
        names: the free variables it reads (constants and units excluded).
    """

    source: str
    names: frozenset[str]
    _code: CodeType = field(repr=False, compare=False)
    _constant: float | None = field(repr=False, compare=False, default=None)

    @property
    def is_constant(self) -> bool:
        return self._constant is not None

    def evaluate(self, variables: Mapping[str, float]) -> float:
        """Value for the given variables (which must include :attr:`names`)."""
        if self._constant is not None:
            return self._constant
        return float(eval(self._code, _GLOBALS, variables))  # noqa: S307 - whitelisted AST

    def evaluate_array(self, variables: Mapping[str, object]) -> object:
        """Vectorised value over numpy arrays (elementwise functions only)."""
        if self._constant is not None:
            return self._constant
        return eval(self._code, _GLOBALS, variables)  # noqa: S307 - whitelisted AST


def compile_expr(
    value: object,
    allowed: frozenset[str] | set[str],
    constants: Mapping[str, float] | None = None,
    unit: str | None = None,
) -> Expr:
    """Parse ``value`` (number, ``'4 GiB'`` literal or expression) into an :class:`Expr`.

    Args:
        value: what the problem file holds.
        allowed: variable names the expression may read.
        constants: named constants of the problem, folded in at compile time.
        unit: ``'bytes'`` or ``'seconds'`` to accept a ``NUMBER UNIT`` literal.

    Raises:
        ValueError: a syntax error, a forbidden construct or an unknown name; the message
            quotes the expression and lists the names it may use.
    """
    constants = dict(constants or {})
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number or an expression but got {value!r}")
    if isinstance(value, (int, float)):
        return _constant_expr(str(value), float(value))
    text = value.strip()
    if unit == "bytes" and is_quantity(text, BYTE_UNITS):
        return _constant_expr(text, parse_bytes(text))
    if unit == "seconds" and is_quantity(text, TIME_UNITS):
        return _constant_expr(text, parse_seconds(text))
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot parse expression {text!r}: {exc.msg}") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ValueError(f"expression {text!r} uses {type(node).__name__}, which is not allowed")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
                raise ValueError(
                    f"expression {text!r} calls something other than {', '.join(FUNCTIONS)}"
                )
        elif isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            names.add(node.id)
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ValueError(f"expression {text!r} holds a non-numeric constant {node.value!r}")
    unknown = sorted(names - set(allowed) - set(constants) - set(UNIT_CONSTANTS))
    if unknown:
        choices = ", ".join(sorted(set(allowed) | set(constants))) or "none"
        raise ValueError(
            f"expression {text!r} names unknown variable {unknown[0]!r} (known: {choices})"
        )
    tree = _fold_constants(tree, constants)
    free = frozenset(names & set(allowed) - set(constants))
    code = compile(tree, "<expr>", "eval")
    if not free:
        return _constant_expr(text, float(eval(code, _GLOBALS, {})))  # noqa: S307
    return Expr(text, free, code)


def _constant_expr(text: str, number: float) -> Expr:
    return Expr(text, frozenset(), compile(repr(number), "<expr>", "eval"), number)


def _fold_constants(tree: ast.Expression, constants: Mapping[str, float]) -> ast.Expression:
    class Fold(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in constants:
                return ast.copy_location(ast.Constant(float(constants[node.id])), node)
            return node

    return ast.fix_missing_locations(Fold().visit(tree))
