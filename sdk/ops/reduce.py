"""Reductions (ONNX semantics): ReduceSum, ReduceMean, ReduceMax, ReduceMin and
ReduceProd over an optional ``axes`` input, and ArgMax/ArgMin along one axis.

The Reduce ops take ``axes`` as an optional int64 input (newest opsets). When
it is omitted or empty they reduce over every axis, or with
``noop_with_empty_axes=1`` return the data unchanged. Shape inference keeps
the non-reduced dims, symbolic or not; when ``axes`` is not a known constant
the rank is still known (with ``keepdims=1``, or from the static length of
``axes``) and each dim becomes a fresh symbol.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polyhal.ir import dims as D
from polyhal.ir.dtypes import FLOAT_TYPES, NUMERIC_TYPES, DType
from polyhal.ir.types import TensorType
from polyhal.ops.infer import InferContext
from polyhal.ops.registry import Attr, AttrKind, Input, OpDef, Output, register

# ONNX type constraints intersected with the polyhal dtypes.
_SUM_TYPES = FLOAT_TYPES | {DType.INT32, DType.INT64}
_MINMAX_TYPES = _SUM_TYPES | {DType.INT8, DType.UINT8, DType.BOOL}
_ARG_TYPES = NUMERIC_TYPES
_INT64 = frozenset({DType.INT64})


# ---------------------------------------------------------------- inference


def _const_axes(ctx: InferContext, rank: int) -> list[int] | None:
    """The normalized ``axes`` input: ``[]`` when omitted, ``None`` when not constant."""
    if not ctx.has_input(1):
        return []
    axes_type = ctx.input(1)
    if axes_type.rank != 1:
        raise ctx.error(f"input axes must be a 1-D tensor, got {axes_type}")
    value = ctx.const(1)
    if value is None:
        return None
    listed = [int(a) for a in np.asarray(value).reshape(-1)]
    result = []
    for axis in listed:
        if not -rank <= axis < rank:
            raise ctx.error(f"input axes={listed}: axis {axis} is out of range for data of "
                            f"rank {rank}")
        result.append(axis % rank)
    if len(set(result)) != len(result):
        raise ctx.error(f"input axes={listed} repeats an axis")
    return result


def _infer_unknown_axes(ctx: InferContext, data: TensorType, keepdims: bool) -> TensorType:
    """Output type when ``axes`` is an input whose value is unknown before run time."""
    count = ctx.input(1).shape[0]
    if count == 0:  # statically empty: the same as an omitted axes input
        return _reduced_type(ctx, data, [], keepdims)
    if keepdims:
        # Each dim is either kept or becomes 1; a dim already 1 stays 1 either way.
        return data.with_shape(tuple(1 if d == 1 else ctx.fresh(f"d{i}")
                                     for i, d in enumerate(data.shape)))
    if not isinstance(count, int):
        raise ctx.error(f"keepdims=0 with an axes input of symbolic length {count}: the "
                        "output rank cannot be inferred (make axes a constant)")
    if count > data.rank:
        raise ctx.error(f"input axes has {count} entries but data has rank {data.rank}")
    return data.with_shape(tuple(ctx.fresh(f"d{i}") for i in range(data.rank - count)))


def _reduced_type(ctx: InferContext, data: TensorType, axes: list[int],
                  keepdims: bool) -> TensorType:
    if not axes:
        if ctx.flag("noop_with_empty_axes"):
            return data
        axes = list(range(data.rank))
    if keepdims:
        return data.with_shape(tuple(1 if i in axes else d for i, d in enumerate(data.shape)))
    return data.with_shape(tuple(d for i, d in enumerate(data.shape) if i not in axes))


def _infer_reduce(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    keepdims = ctx.flag("keepdims")
    ctx.flag("noop_with_empty_axes")
    axes = _const_axes(ctx, data.rank)
    if axes is None:
        return _infer_unknown_axes(ctx, data, keepdims)
    return _reduced_type(ctx, data, axes, keepdims)


def _infer_arg(ctx: InferContext) -> TensorType:
    data = ctx.input(0)
    keepdims = ctx.flag("keepdims")
    ctx.flag("select_last_index")
    if data.rank == 0:
        raise ctx.error("attribute axis cannot index data of rank 0 (ArgMax/ArgMin need "
                        "rank >= 1)")
    axis = ctx.axis(ctx.attrs["axis"], data.rank)
    if D.dims_equal(data.shape[axis], 0):
        raise ctx.error(f"attribute axis={ctx.attrs['axis']} selects an empty dimension of "
                        f"{data}: there is no index to return")
    if keepdims:
        shape = tuple(1 if i == axis else d for i, d in enumerate(data.shape))
    else:
        shape = tuple(d for i, d in enumerate(data.shape) if i != axis)
    return TensorType(DType.INT64, shape)


# ------------------------------------------------------------------ kernels


def _axes_to_reduce(data: np.ndarray, axes: np.ndarray | None,
                    noop: int) -> tuple[int, ...] | None:
    """Normalized axes to reduce; ``None`` means return the data unchanged."""
    listed = [] if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    if not listed:
        return None if noop else tuple(range(data.ndim))
    rank = data.ndim
    result = []
    for axis in listed:
        if not -rank <= axis < rank:
            raise ValueError(f"axes={listed}: axis {axis} is out of range for rank {rank}")
        result.append(axis % rank)
    if len(set(result)) != len(result):
        raise ValueError(f"axes={listed} repeats an axis")
    return tuple(result)


Reducer = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


def _reduce_kernel(reducer: Reducer) -> Callable[..., np.ndarray]:
    """A Reduce* kernel from ``reducer(data, axes, keepdims)``."""

    def kernel(data: np.ndarray, axes: np.ndarray | None = None, *, keepdims: int,
               noop_with_empty_axes: int) -> np.ndarray:
        picked = _axes_to_reduce(data, axes, noop_with_empty_axes)
        if picked is None:
            return data.copy()
        return np.asarray(reducer(data, picked, bool(keepdims)), dtype=data.dtype)

    return kernel


def _lowest(dtype: np.dtype) -> object:
    """The identity of max: -inf, the integer minimum, or False."""
    if dtype.kind == "b":
        return False
    if dtype.kind == "f":
        return -np.inf
    return np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> object:
    """The identity of min: +inf, the integer maximum, or True."""
    if dtype.kind == "b":
        return True
    if dtype.kind == "f":
        return np.inf
    return np.iinfo(dtype).max


def _sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # dtype=x.dtype: integers accumulate (and wrap) in their own type.
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _prod(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _max(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.max(x, axis=axes, keepdims=keepdims, initial=_lowest(x.dtype))


def _min(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.min(x, axis=axes, keepdims=keepdims, initial=_highest(x.dtype))


def _mean(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if x.dtype.kind == "f":
        total = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
        with np.errstate(invalid="ignore", divide="ignore"):  # empty: 0/0 = NaN, on purpose
            return total / x.dtype.type(count)
    # Integers: the exact sum (int64 holds any int32 sum; Python ints for int64),
    # divided by the count and truncated toward zero.
    exact = np.int64 if x.dtype.itemsize < 8 else object
    total = np.sum(x.astype(exact), axis=axes, keepdims=keepdims)
    total = np.asarray(total, dtype=exact)
    if count == 0:
        return np.zeros(total.shape, x.dtype)
    return np.where(total < 0, -((-total) // count), total // count).astype(x.dtype)


def _arg_kernel(pick: Callable[..., np.ndarray], what: str) -> Callable[..., np.ndarray]:
    """An ArgMax/ArgMin kernel from ``np.argmax``/``np.argmin``."""

    def kernel(data: np.ndarray, *, axis: int, keepdims: int,
               select_last_index: int) -> np.ndarray:
        rank = data.ndim
        if not -rank <= axis < rank:
            raise ValueError(f"axis={axis} is out of range for rank {rank}")
        axis %= rank
        length = data.shape[axis]
        if length == 0:
            raise ValueError(f"{what} over axis {axis} of length 0: there is no index "
                             "to return")
        if select_last_index:
            # The first hit in the reversed axis is the last hit in the original.
            flipped = pick(np.flip(data, axis), axis=axis, keepdims=bool(keepdims))
            return np.asarray(length - 1 - flipped, dtype=np.int64)
        return np.asarray(pick(data, axis=axis, keepdims=bool(keepdims)), dtype=np.int64)

    return kernel


# -------------------------------------------------------------- registration

_REDUCE_ATTRS = (
    Attr("keepdims", AttrKind.INT, 1, doc="1 keeps each reduced axis as a dim of size 1."),
    Attr("noop_with_empty_axes", AttrKind.INT, 0,
         doc="With omitted or empty axes: 0 reduces every axis, 1 returns the data as is."),
)

_REDUCE_DOC = (" along the axes given by the optional int64 input ``axes`` (negative "
               "axes count from the back); omitted or empty axes reduce every axis, or with "
               "noop_with_empty_axes=1 return the data unchanged. float16/bfloat16 "
               "accumulate in float32.")


def _register_reduce(name: str, reducer: Reducer, dtypes: frozenset[DType], since: int,
                     doc: str) -> None:
    register(OpDef(
        name=name,
        inputs=(Input("data", "T"), Input("axes", "Tind", optional=True)),
        outputs=(Output("reduced", "T"),),
        type_vars={"T": dtypes, "Tind": _INT64},
        attrs=_REDUCE_ATTRS,
        infer=_infer_reduce,
        kernel=_reduce_kernel(reducer),
        onnx_since=since,
        differentiable=True,
        doc=doc + _REDUCE_DOC,
    ))


_register_reduce("ReduceSum", _sum, _SUM_TYPES, 13,
                 "Sum; over an empty set it is 0. Integer sums wrap in two's complement.")
_register_reduce("ReduceMean", _mean, _SUM_TYPES, 18,
                 "Arithmetic mean. Choices where ONNX is silent: float means are the float "
                 "sum divided by the count (NaN over an empty set); integer means are the "
                 "exact sum divided by the count, truncated toward zero (0 over an empty "
                 "set).")
_register_reduce("ReduceMax", _max, _MINMAX_TYPES, 20,
                 "Maximum (False < True for bool); over an empty set it is -inf for floats "
                 "and the dtype minimum otherwise. NaN propagates.")
_register_reduce("ReduceMin", _min, _MINMAX_TYPES, 20,
                 "Minimum (False < True for bool); over an empty set it is +inf for floats "
                 "and the dtype maximum otherwise. NaN propagates.")
_register_reduce("ReduceProd", _prod, _SUM_TYPES, 18,
                 "Product; over an empty set it is 1. Integer products wrap in two's "
                 "complement.")

_ARG_ATTRS = (
    Attr("axis", AttrKind.INT, 0, doc="The axis to search; negative counts from the back."),
    Attr("keepdims", AttrKind.INT, 1, doc="1 keeps the searched axis as a dim of size 1."),
    Attr("select_last_index", AttrKind.INT, 0,
         doc="1 returns the last index of a repeated extreme value, 0 the first."),
)


def _register_arg(name: str, pick: Callable[..., np.ndarray], extreme: str) -> None:
    register(OpDef(
        name=name,
        inputs=(Input("data", "T"),),
        outputs=(Output("reduced", "I"),),
        type_vars={"T": _ARG_TYPES, "I": _INT64},
        attrs=_ARG_ATTRS,
        infer=_infer_arg,
        kernel=_arg_kernel(pick, name),
        onnx_since=13,
        doc=(f"int64 index of the {extreme} along ``axis`` (first occurrence, or the last "
             "with select_last_index=1). NaN counts as the extreme value, as in numpy. An "
             "axis of length 0 is a verification error when static and an ExecutionError "
             "at run time."),
    ))


_register_arg("ArgMax", np.argmax, "maximum")
_register_arg("ArgMin", np.argmin, "minimum")
