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
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

from polyhal.errors import IRError, LimitExceededError, shown

Dim = int | str
Poly = dict[tuple[str, ...], int]

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")
MAX_EXPR_LENGTH = 256
"""Characters in a dimension expression, as written and in canonical form."""
MAX_TERMS = MAX_EXPR_LENGTH // 2
"""Terms of a polynomial while an expression is expanded: no canonical form of more
fits in ``MAX_EXPR_LENGTH`` characters, and the bound keeps expansion fast."""
MAX_DEPTH = 16
"""Nesting of parentheses and unary minus in a dimension expression."""


def is_symbol(dim: Dim) -> bool:
    """True when ``dim`` is a single symbol (not an expression, not an int)."""
    return isinstance(dim, str) and _SYMBOL.fullmatch(dim) is not None


def is_static(dim: Dim) -> bool:
    """True when ``dim`` is a known integer."""
    return isinstance(dim, int)


@lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[tuple[tuple[str, ...], int], ...]:
    if len(text) > MAX_EXPR_LENGTH:
        raise LimitExceededError(f"dimension {shown(text)} is over the limit of "
                                 f"{MAX_EXPR_LENGTH} characters")
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
        if depth > MAX_DEPTH:
            raise LimitExceededError(f"dimension {shown(text)} nests deeper than {MAX_DEPTH} "
                                     "levels")
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

    try:
        poly = expr(0)
    except _TooManyTerms:
        raise LimitExceededError(f"dimension {shown(text)} expands to more than {MAX_TERMS} "
                                 "terms") from None
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r}")
    return tuple(sorted(poly.items()))


class _TooManyTerms(Exception):
    """A polynomial grew past ``MAX_TERMS`` (callers name the dimension)."""


def _bounded(poly: Poly) -> Poly:
    if len(poly) > MAX_TERMS:
        raise _TooManyTerms
    return poly


def _scale(p: Poly, k: int) -> Poly:
    return {m: c * k for m, c in p.items() if c * k != 0}


def _poly_add(a: Poly, b: Poly) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + c
    return _bounded({m: c for m, c in out.items() if c != 0})


def _poly_mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
        _bounded(out)  # stop early: the product of two big sums is bigger still
    return _bounded({m: c for m, c in out.items() if c != 0})


def to_poly(dim: Dim) -> Poly:
    """The polynomial of a dimension; ``ValueError`` if it does not parse,
    :class:`LimitExceededError` if it is too long or expands too far."""
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
    result = "".join(parts)
    if len(result) > MAX_EXPR_LENGTH:
        raise LimitExceededError(f"dimension {shown(result)} is longer than "
                                 f"{MAX_EXPR_LENGTH} characters in canonical form")
    return result


def canonical(dim: Dim, where: str = "dimension") -> Dim:
    """``dim`` in canonical form; an :class:`IRError` naming ``where`` if invalid
    (a :class:`LimitExceededError` if it is too long or expands too far)."""
    if isinstance(dim, bool) or not isinstance(dim, int | str):
        raise IRError(f"{where}: {shown(dim)} is not a dimension (an int or a symbol "
                      "expression)")
    try:
        result = dim if isinstance(dim, int) else from_poly(to_poly(dim))
    except ValueError as exc:
        raise IRError(f"{where}: cannot parse dimension {shown(dim)}: {exc}") from None
    except LimitExceededError as exc:
        raise LimitExceededError(f"{where}: {exc}") from None
    if isinstance(result, int) and result < 0:
        written = "" if result == dim else f" ({shown(str(dim))})"
        raise IRError(f"{where}: dimension {result}{written} is negative")
    return result


def _combined(a: Dim, op: str, b: Dim, poly: Callable[[], Poly]) -> Dim:
    """The canonical form of ``poly()``, which combines ``a`` and ``b`` by ``op``."""
    try:
        return from_poly(poly())
    except _TooManyTerms:
        raise LimitExceededError(f"dimension ({shown(str(a))}){op}({shown(str(b))}) expands "
                                 f"to more than {MAX_TERMS} terms") from None


def dim_add(a: Dim, b: Dim) -> Dim:
    """``a + b``."""
    return _combined(a, "+", b, lambda: _poly_add(to_poly(a), to_poly(b)))


def dim_sub(a: Dim, b: Dim) -> Dim:
    """``a - b``."""
    return _combined(a, "-", b, lambda: _poly_add(to_poly(a), _scale(to_poly(b), -1)))


def dim_mul(a: Dim, b: Dim) -> Dim:
    """``a * b``."""
    return _combined(a, "*", b, lambda: _poly_mul(to_poly(a), to_poly(b)))


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
