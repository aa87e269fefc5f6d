"""Window geometry shared by Conv, ConvTranspose and the pools (ONNX semantics).

Every windowed op shares one geometry: the input is ``[N, C, D1, ..., Dn]``
and each spatial axis has a kernel size, stride, dilation and begin/end pads
(explicit, or derived from ``auto_pad``). This module checks those attributes
(:func:`check_window`, also ConvTranspose's) and computes, per spatial axis
of Conv and the pools, the pads and the output size (:func:`axis_geometry`,
:func:`out_dim`). The ops (:mod:`polyhal.ops.nn`,
:mod:`polyhal.ops.transposed_conv`), the fast CPU kernels and the gradient
rules all use it, so they accept and reject the same nodes.

Choices where ONNX is silent or inconsistent:

* ``pads`` together with an ``auto_pad`` other than NOTSET is an error (the
  ONNX doc forbids it; runtimes disagree on which one wins).
* ``VALID`` means explicit zero pads, so ``ceil_mode`` applies to it as to
  NOTSET (as ONNX shape inference and onnxruntime do).
* SAME_UPPER/SAME_LOWER: output ``ceil(D / stride)``, total pad
  ``max(0, (out - 1) * stride + (k - 1) * dilation + 1 - D)``, the odd pixel
  at the end (UPPER) or the beginning (LOWER).
* With ``ceil_mode`` a window that would start inside the end padding is
  dropped. Pools reject explicit pads >= the kernel size (as onnxruntime).
* An explicitly padded input smaller than the dilated kernel is an error.

(No op is named Window, so ``polyhal.ops.window`` is this module and not an
op's builder.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polyhal.ir import dims as D
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext

__all__ = ["AUTO_PADS", "BadWindow", "Window", "axis_geometry", "check_window", "check_x",
           "out_dim", "window_attrs", "window_ints"]

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
"""The values of the ``auto_pad`` attribute."""


class BadWindow(ValueError):
    """An invalid window attribute; inference reports it as a VerificationError."""


@dataclass(frozen=True)
class Window:
    """The validated window attributes of one node (``kernel`` may be symbolic)."""

    kernel: tuple[D.Dim, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # [x1_begin, ..., xn_begin, x1_end, ..., xn_end]
    auto_pad: str
    ceil_mode: bool


def window_ints(attrs: Mapping[str, Any], name: str, count: int, default: int,
                minimum: int) -> tuple[int, ...]:
    """The ints attribute ``name``: ``count`` values, each ``>= minimum``.

    An absent (``None``) attribute gives ``count`` times ``default``; a wrong
    length or a value below ``minimum`` raises :class:`BadWindow`.
    """
    value = attrs.get(name)
    if value is None:
        return (default,) * count
    if len(value) != count:
        raise BadWindow(f"attribute {name}={list(value)} has {len(value)} values, "
                        f"expected {count}")
    if any(v < minimum for v in value):
        raise BadWindow(f"attribute {name}={list(value)}: every value must be >= {minimum}")
    return tuple(int(v) for v in value)


def check_window(kernel: Sequence[D.Dim], attrs: Mapping[str, Any], pool: bool) -> Window:
    """Check the window attributes of a node with spatial kernel ``kernel``.

    ``attrs`` holds ``auto_pad`` and optionally ``pads``, ``strides``,
    ``dilations`` and ``ceil_mode``; ``pool`` adds the pools' rule that every
    pad is smaller than its kernel size. Raises :class:`BadWindow`.
    """
    n = len(kernel)
    auto_pad = attrs["auto_pad"]
    if auto_pad not in AUTO_PADS:
        raise BadWindow(f"attribute auto_pad={auto_pad!r} must be one of {', '.join(AUTO_PADS)}")
    if attrs.get("pads") is not None and auto_pad != "NOTSET":
        raise BadWindow(f"attributes pads and auto_pad={auto_pad} cannot be used together")
    ceil_mode = attrs.get("ceil_mode", 0)
    if ceil_mode not in (0, 1):
        raise BadWindow(f"attribute ceil_mode={ceil_mode} must be 0 or 1")
    pads = window_ints(attrs, "pads", 2 * n, 0, 0)
    if pool:
        for i, k in enumerate(kernel):
            if isinstance(k, int) and max(pads[i], pads[n + i]) >= k:
                raise BadWindow(f"attribute pads={list(pads)}: pads of spatial axis {i} must "
                                f"be smaller than its kernel size {k}")
    return Window(tuple(kernel), window_ints(attrs, "strides", n, 1, 1),
                  window_ints(attrs, "dilations", n, 1, 1), pads, auto_pad, bool(ceil_mode))


def window_attrs(kernel: Sequence[int], attrs: Mapping[str, Any], pool: bool) -> Window:
    """:func:`check_window` for kernels: an invalid attribute raises a plain
    ``ValueError``."""
    try:
        return check_window(kernel, attrs, pool)
    except BadWindow as exc:
        raise ValueError(str(exc)) from None


def axis_geometry(size: int, axis: int, win: Window) -> tuple[int, int, int]:
    """``(pad_begin, pad_end, output_size)`` of spatial axis ``axis`` of static size.

    Needs a static kernel size on that axis; raises :class:`BadWindow` when an
    explicitly padded input is smaller than the dilated kernel.
    """
    n = len(win.kernel)
    k, s, d = int(win.kernel[axis]), win.strides[axis], win.dilations[axis]
    effective = (k - 1) * d + 1
    if win.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = -(-size // s)
        total = max(0, (out - 1) * s + effective - size)
        begin = total // 2 if win.auto_pad == "SAME_UPPER" else total - total // 2
        return begin, total - begin, out
    begin, end = (0, 0) if win.auto_pad == "VALID" else (win.pads[axis], win.pads[n + axis])
    span = size + begin + end - effective
    if span < 0:
        raise BadWindow(f"spatial axis {axis}: padded size {size + begin + end} is smaller "
                        f"than the dilated kernel size {effective}")
    out = (-(-span // s) if win.ceil_mode else span // s) + 1
    if win.ceil_mode and (out - 1) * s >= size + begin:
        out -= 1  # the last window would start in the end padding
    return begin, end, out


def out_dim(ctx: InferContext, size: D.Dim, axis: int, win: Window) -> D.Dim:
    """Output size of one spatial axis, symbolic where expressible.

    A static size and kernel give :func:`axis_geometry`'s (its error reported
    through ``ctx``); otherwise the exact quotient when the stride divides
    it, else a fresh symbol.
    """
    k = win.kernel[axis]
    if isinstance(size, int) and isinstance(k, int):
        try:
            return axis_geometry(size, axis, win)[2]
        except BadWindow as exc:
            raise ctx.error(str(exc)) from None
    if not isinstance(k, int):
        return ctx.fresh(f"out{axis}")
    s = win.strides[axis]
    if win.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        numerator: D.Dim = size  # ceil(size / s)
        plus = 0
    else:
        n = len(win.kernel)
        pads = 0 if win.auto_pad == "VALID" else win.pads[axis] + win.pads[n + axis]
        numerator = D.dim_sub(D.dim_add(size, pads), (k - 1) * win.dilations[axis] + 1)
        plus = 1
    # When s divides the numerator exactly, floor and ceil agree; ceil_mode's
    # start-in-padding rule cannot fire since pool pads are below the kernel size.
    quotient = D.dim_div_exact(numerator, s)
    return D.dim_add(quotient, plus) if quotient is not None else ctx.fresh(f"out{axis}")


def check_x(ctx: InferContext) -> TensorType:
    """Input 0 (X) of a windowed node, checked to have rank >= 3 ([N, C, D1, ...])."""
    x = ctx.input(0)
    if x.rank < 3:
        raise ctx.error(f"input X must have rank >= 3 ([N, C, D1, ...]), got {x}")
    return x
