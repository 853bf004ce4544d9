"""Expressions and units: what problem files may compute, and what they may not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.expr import EVALUATION_ERRORS, compile_expr, is_identifier
from tuner.units import is_quantity, parse_bytes, parse_seconds, BYTE_UNITS, TIME_UNITS

VARS = frozenset({"batch", "tokens", "M", "N", "K", "B"})


def value(text: object, constants: dict[str, float] | None = None, unit: str | None = None, **variables: float) -> float:
    return compile_expr(text, VARS, constants, unit).evaluate(variables)


# -- units ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("4 GiB", 4 * 2**30), ("4GiB", 4 * 2**30), ("1.5 KB", 1500.0), ("2 MiB", 2 * 2**20),
    ("1 TB", 1e12), ("512", 512.0), (512, 512.0), (2.5, 2.5), ("1e3 B", 1000.0), (" 3 B ", 3.0),
    ("-1 GiB", -(2**30)),
])
def test_parse_bytes(text: object, expected: float) -> None:
    assert parse_bytes(text) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("10 ms", 0.01), ("10ms", 0.01), ("2.5e-3 s", 2.5e-3), ("4 us", 4e-6), ("7 ns", 7e-9),
    ("2 min", 120.0), ("1 h", 3600.0), ("60", 60.0), (60, 60.0), (0.5, 0.5), (".5 s", 0.5),
])
def test_parse_seconds(text: object, expected: float) -> None:
    assert parse_seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize(("parse", "bad", "reason"), [
    (parse_bytes, "4 parsecs", "unknown size in bytes unit 'parsecs'"),
    (parse_bytes, "lots", "expected a size in bytes such as '4 GiB'"),
    (parse_bytes, True, "expected a size in bytes"),
    (parse_bytes, [4], "expected a size in bytes"),
    (parse_bytes, float("inf"), "finite"),
    (parse_seconds, "10 GiB", "unknown duration unit 'GiB'"),
    (parse_seconds, "1e400 s", "finite"),
    (parse_seconds, None, "expected a duration such as '10 ms' but got None"),
])
def test_parse_refuses(parse, bad: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("(", r"\(")):
        parse(bad)


def test_is_quantity() -> None:
    assert is_quantity("4 GiB", BYTE_UNITS) and is_quantity("4", BYTE_UNITS)
    assert not is_quantity("4 ms", BYTE_UNITS) and is_quantity("4 ms", TIME_UNITS)
    assert not is_quantity("4 * GiB", BYTE_UNITS)


# -- evaluation -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "variables", "expected"), [
    ("2 * batch + 1", {"batch": 3}, 7.0),
    ("batch / 2", {"batch": 3}, 1.5),
    ("batch // 2", {"batch": 3}, 1.0),
    ("batch % 2", {"batch": 3}, 1.0),
    ("-batch ** 2", {"batch": 3}, -9.0),
    ("cdiv(M, 128) * cdiv(N, 128)", {"M": 129, "N": 128}, 2.0),
    ("ceil(tokens / 64) + floor(2.7)", {"tokens": 65}, 4.0),
    ("max(1, batch, 2) - min(batch, 4, 9)", {"batch": 7}, 3.0),
    ("abs(1 - batch) + sqrt(16) + log2(8)", {"batch": 3}, 9.0),
    ("3 * us + 2 * ms", {}, 2.003e-3),
    ("2 * GiB * batch", {"batch": 2}, 4 * 2**30),
    ("5 * min", {}, 300.0),        # bare min is the unit
    ("min(batch, 5)", {"batch": 9}, 5.0),  # called min is the function
    ("B * 2", {"B": 8}, 16.0),     # a variable named like a unit hides the unit
    ("2 ** 10", {}, 1024.0),
])
def test_evaluate(text: str, variables: dict[str, float], expected: float) -> None:
    assert value(text, **variables) == pytest.approx(expected)


def test_numbers_and_quantities_by_unit() -> None:
    assert value(7) == 7.0 and value(2.5) == 2.5
    assert value("10 ms", unit="seconds") == pytest.approx(0.01)
    assert value("4 GiB", unit="bytes") == 4 * 2**30
    # Inside formulas a quantity reads as a factor: "2 GiB * batch" is "2 * GiB * batch".
    assert value("2 GiB * batch", unit="bytes", batch=3) == 6 * 2**30
    assert value("20 us + 1 us * batch", batch=10) == pytest.approx(30e-6)
    with pytest.raises(ValueError, match="write a unit as a factor"):
        value("4 B")  # bare B is left alone: shapes often name a dimension B


def test_constants_are_folded_and_names_reported() -> None:
    expr = compile_expr("d * batch + d", VARS, {"d": 4096.0})
    assert expr.names == frozenset({"batch"})
    assert expr.evaluate({"batch": 2}) == 3 * 4096
    constant = compile_expr("d * 2 * KiB", VARS, {"d": 3.0})
    assert constant.is_constant and constant.names == frozenset()
    assert constant.evaluate({}) == 6 * 1024


def test_evaluate_array_is_elementwise() -> None:
    expr = compile_expr("max(prompt, 100) * 2 + min(output, 5) + ceil(prompt / 3) + cdiv(output, 2)",
                        {"prompt", "output"})
    got = expr.evaluate_array({"prompt": np.array([1.0, 300.0]), "output": np.array([10.0, 1.0])})
    assert np.allclose(got, [200 + 5 + 1 + 5, 600 + 1 + 100 + 1])


def test_integer_literals_are_floats_so_powers_overflow_fast() -> None:
    with pytest.raises(ValueError, match="overflows"):
        compile_expr("9 ** 9 ** 9", VARS)
    expr = compile_expr("batch ** 9 ** 9", VARS)
    with pytest.raises(EVALUATION_ERRORS):
        expr.evaluate({"batch": 10})


@pytest.mark.parametrize(("text", "reason"), [
    ("batch.real", "uses Attribute"),
    ("tokens[0]", "uses Subscript"),
    ("(lambda: 1)()", "calls something other than"),
    ("__import__('os')", "calls something other than"),
    ("open('x')", "calls something other than"),
    ("'text'", "non-numeric constant"),
    ("True + 1", "non-numeric constant"),
    ("1j", "non-numeric constant"),
    ("batch if batch else 1", "uses IfExp"),
    ("batch < 2", "uses Compare"),
    ("batch and 1", "uses BoolOp"),
    ("[batch]", "uses List"),
    ("max(a=1, b=2)", "keyword argument"),
    ("max(1, *tokens)", "uses Starred"),
    ("ceil", "without calling it"),
    ("max(batch)", r"max\(\) takes at least 2"),
    ("sqrt(1, 2)", r"sqrt\(\) takes 1"),
    ("foo * 2", "unknown variable 'foo' \\(known: B, K, M, N, batch, tokens\\)"),
    ("_hidden", "may not start with '_'"),
    ("batch +", "cannot parse expression"),
    ("1 / 0", "divides by zero"),
    ("sqrt(-1)", "cannot be evaluated"),
])
def test_refuses(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        compile_expr(text, VARS)


def test_an_overflow_says_so_in_words() -> None:
    with pytest.raises(ValueError) as info:
        compile_expr("10**10**10", VARS)
    message = str(info.value)
    assert message == "expression '10**10**10' overflows: its value is beyond the largest float (about 1.8e308)"


@pytest.mark.parametrize(("text", "where", "reason"), [
    ("(" * 20000, "at character 201", "too many nested parentheses"),   # the parser stops at depth 200
    ("a b" + " c" * 10000, "", "too long or too deeply nested to parse"),  # a MemoryError with no text
    ("1 + " * 5000 + "$", "at character 20001", "invalid syntax"),
])
def test_a_long_expression_is_echoed_in_80_characters_with_the_position(text: str, where: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        compile_expr(text, VARS)
    message = str(info.value)
    assert len(message) < 80 + 120, message
    assert f"({len(text)} characters)" in message
    assert where in message and message.endswith(f": {reason}"), message


def test_a_short_expression_is_echoed_whole_with_the_position() -> None:
    with pytest.raises(ValueError, match=r"^cannot parse expression '1 \+ \(2 \* 3' at character 5: '\(' was never closed$"):
        compile_expr("1 + (2 * 3", VARS)


@pytest.mark.parametrize("bad", [True, None, [1], {"a": 1}])
def test_refuses_non_expressions(bad: object) -> None:
    with pytest.raises(ValueError, match="expected a number or an expression"):
        compile_expr(bad, VARS)


def test_runtime_errors_are_the_documented_ones() -> None:
    expr = compile_expr("1 / (batch - 1) + sqrt(tokens)", VARS)
    for variables in ({"batch": 1, "tokens": 1}, {"batch": 2, "tokens": -1}):
        with pytest.raises(EVALUATION_ERRORS):
            expr.evaluate(variables)
    assert math.isclose(expr.evaluate({"batch": 2, "tokens": 4}), 3.0)


def test_is_identifier() -> None:
    assert is_identifier("kv_dim") and is_identifier("M")
    assert not any(is_identifier(n) for n in ("_x", "1a", "for", "a-b", ""))
