"""Symbolic dimensions.

A dimension is an ``int`` (static) or a ``str``: a symbol such as ``"batch"``
or a polynomial in symbols such as ``"batch*seq"`` or ``"2*n+1"``, kept in one
canonical text form so that equal dimensions compare equal as strings.

Symbols written by users start with a letter. Symbols that polyhal invents
for a dimension it cannot express (a data-dependent size, a strided window
over a symbolic length) start with an underscore; they are bound when the
tensor is first produced at run time.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache

from polyhal.errors import IRError

Dim = int | str
Poly = dict[tuple[str, ...], int]

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")
MAX_EXPR_LENGTH = 256


def is_symbol(dim: Dim) -> bool:
    """True when ``dim`` is a single symbol (not an expression, not an int)."""
    return isinstance(dim, str) and _SYMBOL.fullmatch(dim) is not None


def is_static(dim: Dim) -> bool:
    """True when ``dim`` is a known integer."""
    return isinstance(dim, int)


@lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[tuple[tuple[str, ...], int], ...]:
    if len(text) > MAX_EXPR_LENGTH:
        raise ValueError(f"longer than {MAX_EXPR_LENGTH} characters")
    tokens: list[str] = []
    for number, name, other in _TOKEN.findall(text):
        if other and not other.isspace() and other not in "+-*()":
            raise ValueError(f"unexpected character {other!r}")
        tokens.append(number or name or other)
    tokens = [t for t in tokens if t and not t.isspace()]
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("unexpected end")
        pos += 1
        return tokens[pos - 1]

    def factor(depth: int) -> Poly:
        if depth > 16:
            raise ValueError("nested too deeply")
        tok = take()
        if tok == "(":
            inner = expr(depth + 1)
            if take() != ")":
                raise ValueError("missing ')'")
            return inner
        if tok == "-":
            return _scale(factor(depth + 1), -1)
        if tok.isdigit():
            return {(): int(tok)}
        if _SYMBOL.fullmatch(tok):
            return {(tok,): 1}
        raise ValueError(f"unexpected {tok!r}")

    def term(depth: int) -> Poly:
        result = factor(depth)
        while peek() == "*":
            take()
            result = _poly_mul(result, factor(depth))
        return result

    def expr(depth: int) -> Poly:
        result = term(depth)
        while peek() in ("+", "-"):
            sign = 1 if take() == "+" else -1
            result = _poly_add(result, _scale(term(depth), sign))
        return result

    poly = expr(0)
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r}")
    return tuple(sorted(poly.items()))


def _scale(p: Poly, k: int) -> Poly:
    return {m: c * k for m, c in p.items() if c * k != 0}


def _poly_add(a: Poly, b: Poly) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + c
    return {m: c for m, c in out.items() if c != 0}


def _poly_mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
    return {m: c for m, c in out.items() if c != 0}


def to_poly(dim: Dim) -> Poly:
    """The polynomial of a dimension; ``ValueError`` if it does not parse."""
    if isinstance(dim, bool):
        raise ValueError("a bool is not a dimension")
    if isinstance(dim, int):
        return {(): dim} if dim else {}
    if not isinstance(dim, str):
        raise ValueError(f"{type(dim).__name__} is not a dimension")
    return dict(_parse(dim))


def from_poly(poly: Poly) -> Dim:
    """The canonical dimension of a polynomial: an ``int`` when constant."""
    poly = {m: c for m, c in poly.items() if c != 0}
    if not poly:
        return 0
    if set(poly) == {()}:
        return poly[()]
    ordered = sorted(poly.items(), key=lambda mc: (-len(mc[0]), mc[0]))
    parts: list[str] = []
    for monomial, coeff in ordered:
        body = "*".join(monomial)
        if not monomial:
            text = str(abs(coeff))
        elif abs(coeff) == 1:
            text = body
        else:
            text = f"{abs(coeff)}*{body}"
        sign = "-" if coeff < 0 else "+"
        parts.append(text if not parts and sign == "+" else (sign + text if parts else "-" + text))
    return "".join(parts)


def canonical(dim: Dim, where: str = "dimension") -> Dim:
    """``dim`` in canonical form; an :class:`IRError` naming ``where`` if invalid."""
    if isinstance(dim, bool) or not isinstance(dim, int | str):
        raise IRError(f"{where}: {dim!r} is not a dimension (an int or a symbol expression)")
    if isinstance(dim, int):
        if dim < 0:
            raise IRError(f"{where}: dimension {dim} is negative")
        return dim
    try:
        return from_poly(to_poly(dim))
    except ValueError as exc:
        raise IRError(f"{where}: cannot parse dimension {dim!r}: {exc}") from None


def dim_add(a: Dim, b: Dim) -> Dim:
    """``a + b``."""
    return from_poly(_poly_add(to_poly(a), to_poly(b)))


def dim_sub(a: Dim, b: Dim) -> Dim:
    """``a - b``."""
    return from_poly(_poly_add(to_poly(a), _scale(to_poly(b), -1)))


def dim_mul(a: Dim, b: Dim) -> Dim:
    """``a * b``."""
    return from_poly(_poly_mul(to_poly(a), to_poly(b)))


def dim_prod(dims: tuple[Dim, ...] | list[Dim]) -> Dim:
    """The product of ``dims`` (1 for none)."""
    result: Dim = 1
    for d in dims:
        result = dim_mul(result, d)
    return result


def dim_div_exact(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when it is a polynomial (exact division), else ``None``."""
    pa, pb = to_poly(a), to_poly(b)
    if len(pb) != 1:
        return None
    (mb, cb), = pb.items()
    out: Poly = {}
    for ma, ca in pa.items():
        rest = Counter(ma)
        rest.subtract(Counter(mb))
        if any(v < 0 for v in rest.values()) or ca % cb:
            return None
        out[tuple(sorted(rest.elements()))] = ca // cb
    return from_poly(out)


def dims_equal(a: Dim, b: Dim) -> bool:
    """True when ``a`` and ``b`` are the same dimension for every binding."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return to_poly(a) == to_poly(b)


def free_symbols(dim: Dim) -> set[str]:
    """The symbols ``dim`` mentions."""
    return {s for monomial in to_poly(dim) for s in monomial}


def bind_shape(expected: Sequence[Dim], sizes: Sequence[int], bindings: dict[str, int]
               ) -> int | None:
    """Match the concrete ``sizes`` to the dimensions ``expected`` (of equal length):
    each plain symbol not yet in ``bindings`` is bound to its size on first sight.
    Returns the first axis whose size differs from its dimension's value, or
    ``None`` when all match (a dimension with an unbound symbol matches any size).
    Runs on every call of a compiled graph: static and bound dimensions take the
    short paths."""
    for axis, (dim, size) in enumerate(zip(expected, sizes, strict=True)):
        if isinstance(dim, int):
            if dim != size:
                return axis
        elif dim in bindings:
            if bindings[dim] != size:
                return axis
        elif is_symbol(dim):
            bindings[dim] = int(size)
        else:
            value = evaluate(dim, bindings)
            if value is not None and value != size:
                return axis
    return None


def evaluate(dim: Dim, bindings: Mapping[str, int]) -> int | None:
    """The value of ``dim`` under ``bindings``; ``None`` if a symbol is unbound."""
    if isinstance(dim, int):
        return dim
    total = 0
    for monomial, coeff in to_poly(dim).items():
        value = coeff
        for symbol in monomial:
            if symbol not in bindings:
                return None
            value *= bindings[symbol]
        total += value
    return total
