"""Symbolic dimensions: canonical forms, arithmetic, evaluation."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polyhal.errors import IRError
from polyhal.ir import dims as D


@pytest.mark.parametrize(("text", "canonical"), [
    ("batch", "batch"),
    ("3*batch", "3*batch"),
    ("batch*3", "3*batch"),
    ("seq*batch", "batch*seq"),
    ("batch + 1 - 1", "batch"),
    ("2*(n+1)", "2*n+2"),
    ("n-n", 0),
    ("4", 4),
    ("-n+5", "-n+5"),
])
def test_canonical_form(text, canonical):
    assert D.canonical(text) == canonical


@pytest.mark.parametrize("bad", ["", "n+", "2**n", "n/2", "(n", "n)", "x;y", "n" * 300, -1, 1.5,
                                 None, True])
def test_invalid_dims_are_ir_errors(bad):
    with pytest.raises(IRError, match="dimension"):
        D.canonical(bad)


def test_arithmetic():
    assert D.dim_mul("batch", 784) == "784*batch"
    assert D.dim_div_exact("784*batch", 28) == "28*batch"
    assert D.dim_div_exact("784*batch", "batch") == 784
    assert D.dim_div_exact("batch+1", 2) is None
    assert D.dim_div_exact("batch", "seq") is None
    assert D.dim_add("a", "b") == "a+b"
    assert D.dim_sub("a+3", 3) == "a"
    assert D.dim_prod(["a", 2, "b"]) == "2*a*b"
    assert D.dims_equal("a*b", "b*a")
    assert not D.dims_equal("a", "b")
    assert D.free_symbols("2*a*b+c") == {"a", "b", "c"}


def test_evaluate():
    assert D.evaluate("2*a*b+c-1", {"a": 2, "b": 3, "c": 4}) == 15
    assert D.evaluate("a+1", {}) is None
    assert D.evaluate(7, {}) == 7


@given(st.integers(0, 50), st.integers(0, 50), st.integers(1, 5), st.integers(-5, 5))
def test_polynomial_arithmetic_matches_integers(a, b, k, c):
    expr = D.dim_add(D.dim_mul(D.dim_add("a", c), k), D.dim_mul("a", "b"))
    assert D.evaluate(expr, {"a": a, "b": b}) == (a + c) * k + a * b
    assert D.canonical(str(expr)) == expr
