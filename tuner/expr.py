"""Arithmetic expressions in problem files: shapes, latencies, workspace, request state.

Shapes and costs depend on the batch (``M: tokens``, ``latency: "2*ms + 3e-6*tokens"``).
Expressions are parsed once with :mod:`ast`, checked against a whitelist of node types,
functions and variable names (so a typo in a name fails when the file is loaded, not in
the middle of a simulation), then compiled to a code object that is cheap to evaluate.

Unit names (``GiB``, ``ms`` …) are constants in every expression; a variable of the same
name (a shape dimension ``B``) hides the unit. ``min`` is both a function and a unit:
called, ``min(a, b)`` is the function; bare, ``5 * min`` is five minutes. Integer
literals become floats, so ``9 ** 9 ** 9`` overflows at once instead of computing a
huge integer.
"""

from __future__ import annotations

import ast
import functools
import keyword
import math
import re
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import CodeType

import numpy as np

from .errors import SHOWN_CHARS, shown_value
from .units import BYTE_UNITS, TIME_UNITS, is_quantity, parse_bytes, parse_seconds


def _cdiv(a: float, b: float) -> float:
    """Ceiling division, as grids are sized: ``cdiv(M, 128)`` CTAs cover M rows."""
    return -(-a // b)


FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min, "max": max, "abs": abs,
    "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "sqrt": math.sqrt,
    "cdiv": _cdiv,
}
#: Elementwise twins of :data:`FUNCTIONS`, for :meth:`Expr.evaluate_array`.
ARRAY_FUNCTIONS: dict[str, Callable[..., object]] = {
    "min": lambda *xs: functools.reduce(np.minimum, xs),
    "max": lambda *xs: functools.reduce(np.maximum, xs),
    "abs": np.abs, "ceil": np.ceil, "floor": np.floor, "log2": np.log2, "sqrt": np.sqrt,
    "cdiv": _cdiv,
}
#: How many arguments each function takes: (least, most); None means no upper bound.
_ARITY: dict[str, tuple[int, int | None]] = {
    "min": (2, None), "max": (2, None), "abs": (1, 1), "ceil": (1, 1), "floor": (1, 1),
    "log2": (1, 1), "sqrt": (1, 1), "cdiv": (2, 2),
}
UNIT_CONSTANTS: dict[str, float] = {**BYTE_UNITS, **TIME_UNITS}
_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd,
)
# Calls are renamed to these slots so a function and a unit may share a name (``min``).
_FN = "__fn_"
_GLOBALS = {"__builtins__": {}, **UNIT_CONSTANTS, **{_FN + k: f for k, f in FUNCTIONS.items()}}
_ARRAY_GLOBALS = {"__builtins__": {}, **UNIT_CONSTANTS, **{_FN + k: f for k, f in ARRAY_FUNCTIONS.items()}}
_NUMBER_UNIT = re.compile(r"\d\s*(?:%s)\b" % "|".join(sorted(UNIT_CONSTANTS, key=len, reverse=True)))
#: A number followed by a unit inside a formula; bare ``B`` is left out because shapes
#: often name a dimension B.
_QUANTITY_IN_EXPR = re.compile(
    r"(?<![\w.])((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(%s)\b"
    % "|".join(sorted((u for u in UNIT_CONSTANTS if u != "B"), key=len, reverse=True))
)
#: What evaluating a valid expression may still raise for unlucky values (1/0, sqrt(-1)).
EVALUATION_ERRORS = (ArithmeticError, ValueError, TypeError)


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
        """Value for the given variables (which must include :attr:`names`).

        Raises:
            ArithmeticError, ValueError, TypeError: the expression is undefined there
                (see :data:`EVALUATION_ERRORS`); the loader probes typical batches so a
                loaded problem does not meet these in a simulation.
        """
        if self._constant is not None:
            return self._constant
        return float(eval(self._code, _GLOBALS, variables))  # type: ignore[arg-type]  # noqa: S307 - whitelisted AST

    def evaluate_array(self, variables: Mapping[str, object]) -> object:
        """Elementwise value over numpy arrays (functions map to their numpy twins)."""
        if self._constant is not None:
            return self._constant
        return eval(self._code, _ARRAY_GLOBALS, variables)  # type: ignore[arg-type]  # noqa: S307 - whitelisted AST


def is_identifier(name: str) -> bool:
    """True when ``name`` can be read by an expression: an identifier, no keyword, no ``_``."""
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")


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
        ValueError: a syntax error, a forbidden construct, an unknown name, or a constant
            expression that cannot be evaluated; the message quotes the expression and
            lists the names it may use.
    """
    constants = dict(constants or {})
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a number or an expression but got {reprlib.repr(value)}")
    if isinstance(value, (int, float)):
        try:
            return _constant_expr(str(value), float(value))
        except OverflowError:  # a YAML integer of 400 digits
            raise ValueError(f"number {reprlib.repr(value)} is beyond the largest float (about 1.8e308)") from None
    text = value.strip()
    if unit == "bytes" and is_quantity(text, BYTE_UNITS):
        return _constant_expr(text, parse_bytes(text))
    if unit == "seconds" and is_quantity(text, TIME_UNITS):
        return _constant_expr(text, parse_seconds(text))
    tree = _parse(text)
    names = _check(tree, text)
    unknown = sorted(names - set(allowed) - set(constants) - set(UNIT_CONSTANTS))
    if unknown:
        choices = ", ".join(sorted(set(allowed) | set(constants))) or "none"
        raise ValueError(
            f"expression {quote(text)} names unknown variable {shown_value(unknown[0])} (known: {choices})"
        )
    free = frozenset(names & set(allowed) - set(constants))
    code = compile(_Rewrite(constants).visit(tree), "<expr>", "eval")
    if free:
        return Expr(text, free, code)
    try:
        number = float(eval(code, _GLOBALS, {}))  # noqa: S307 - whitelisted AST
    except EVALUATION_ERRORS as exc:
        raise ValueError(f"expression {quote(text)} {evaluation_failure(exc)}") from None
    return _constant_expr(text, number)


def names_read(value: object) -> frozenset[str]:
    """The names an expression reads (units included); none for a number or for text
    that is no valid expression."""
    if not isinstance(value, str):
        return frozenset()
    try:
        return frozenset(_check(_parse(value.strip()), value))
    except ValueError:
        return frozenset()


def evaluation_failure(exc: BaseException) -> str:
    """What went wrong evaluating an expression, in words: Python's own text for an
    overflow is ``(34, 'Numerical result out of range')``, which names no cause."""
    if isinstance(exc, OverflowError):
        return "overflows: its value is beyond the largest float (about 1.8e308)"
    if isinstance(exc, ZeroDivisionError):
        return "divides by zero"
    return f"cannot be evaluated ({exc or type(exc).__name__})"


#: How much of an expression a message echoes (as much as any echoed value): a
#: 20,000-character one stays one line.
_SHOWN = SHOWN_CHARS


def quote(text: str, at: int | None = None) -> str:
    """``text`` as a message echoes it: whole up to 80 characters, else 80 of them
    (around the 0-based position ``at`` when given) and its length."""
    if len(text) <= _SHOWN:
        return repr(text)
    start = 0 if at is None else max(0, min(at - _SHOWN // 2, len(text) - _SHOWN))
    before = "..." if start else ""
    after = "..." if start + _SHOWN < len(text) else ""
    return f"{before}{text[start:start + _SHOWN]!r}{after} ({len(text)} characters)"


def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError as exc:
        # People write quantities inside formulas ("20 us + 1 us * T"): read them as factors.
        quantities = _QUANTITY_IN_EXPR.sub(r"(\1*\2)", text)
        if quantities != text:
            try:
                return ast.parse(quantities, mode="eval")
            except SyntaxError:
                pass
        hint = "; write a unit as a factor, e.g. '2 * GiB * batch'" if _NUMBER_UNIT.search(text) else ""
        at = _position(text, exc)
        where = "" if at is None else f" at character {at + 1}"
        raise ValueError(f"cannot parse expression {quote(text, at)}{where}: {exc.msg or 'invalid syntax'}{hint}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        reason = str(exc) or "too long or too deeply nested to parse"
        raise ValueError(f"cannot parse expression {quote(text)}: {reason}") from None


def _position(text: str, exc: SyntaxError) -> int | None:
    """The 0-based index in ``text`` where the parser gave up (it counts lines and columns from 1)."""
    if not exc.lineno or not exc.offset:
        return None
    lines = text.split("\n")
    return min(sum(len(line) + 1 for line in lines[:exc.lineno - 1]) + exc.offset - 1, len(text))


def _check(tree: ast.Expression, text: str) -> set[str]:
    """Refuse anything but arithmetic on numbers, names and whitelisted calls; return the names."""
    callees = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ValueError(f"expression {quote(text)} uses {type(node).__name__}, which is not allowed")
        if isinstance(node, ast.Call):
            fn = node.func.id if isinstance(node.func, ast.Name) else None
            if node.keywords:
                raise ValueError(
                    f"expression {quote(text)} passes a keyword argument; functions take positional arguments only"
                )
            if fn not in FUNCTIONS:
                raise ValueError(
                    f"expression {quote(text)} calls something other than {', '.join(FUNCTIONS)}"
                )
            least, most = _ARITY[fn]
            if len(node.args) < least or (most is not None and len(node.args) > most):
                wanted = f"{least}" if least == most else f"at least {least}"
                raise ValueError(
                    f"expression {quote(text)}: {fn}() takes {wanted} argument(s) but got {len(node.args)}"
                )
        elif isinstance(node, ast.Name) and id(node) not in callees:
            if node.id in FUNCTIONS and node.id not in UNIT_CONSTANTS:
                raise ValueError(f"expression {quote(text)} uses function {shown_value(node.id)} without calling it")
            if node.id.startswith("_"):
                raise ValueError(f"expression {quote(text)} names {shown_value(node.id)}; names may not start with '_'")
            names.add(node.id)
        elif isinstance(node, ast.Constant) and (
            isinstance(node.value, bool) or not isinstance(node.value, (int, float))
        ):
            raise ValueError(f"expression {quote(text)} holds a non-numeric constant {shown_value(node.value)}")
    return names


class _Rewrite(ast.NodeTransformer):
    """Fold named constants, make integer literals floats, route calls to function slots."""

    def __init__(self, constants: Mapping[str, float]) -> None:
        self.constants = constants

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node.args = [self.visit(arg) for arg in node.args]
        func = ast.copy_location(ast.Name(_FN + node.func.id, ast.Load()), node.func)  # type: ignore[attr-defined]
        return ast.copy_location(ast.Call(func, node.args, []), node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.constants:
            return ast.copy_location(ast.Constant(float(self.constants[node.id])), node)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.copy_location(ast.Constant(float(node.value)), node)

    def visit_Expression(self, node: ast.Expression) -> ast.AST:
        self.generic_visit(node)
        return ast.fix_missing_locations(node)


def _constant_expr(text: str, number: float) -> Expr:
    return Expr(text, frozenset(), compile(repr(number), "<expr>", "eval"), number)
