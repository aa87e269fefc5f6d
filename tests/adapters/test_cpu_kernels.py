"""The cpu adapter's fast kernels against the reference kernels (the specification).

Every fast kernel runs on every conformance recipe sample of its op (every dtype
the op admits, every shape class, seeds 0..2), called the way the executor calls
it (16-bit floats computed in float32, results rounded back), and must match the
reference's outputs within the conformance tolerances. Targeted tests then walk
the attribute combinations the recipes sample only once: Conv groups, dilations,
strides, every auto_pad, asymmetric pads and 1-D/2-D/3-D; pools with ceil_mode,
count_include_pad, dilations and both Indices orders; LayerNormalization axes;
every Gemm transpose, alpha, beta and C broadcast; MatMul batching.
"""

from __future__ import annotations

import itertools
import math
import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import polyhal.ops.normalization  # noqa: F401  (registers the normalization ops)
from polyhal.adapters.cpu.kernels import FAST_KERNELS, FIRST_OUTPUT_KERNELS, conv, norm, pool
from polyhal.conformance.cases import op_case
from polyhal.conformance.recipes import SHAPE_CLASSES, OpSample, dtypes_for, recipe_for
from polyhal.conformance.tolerances import compare, tolerance_for
from polyhal.errors import LimitExceededError
from polyhal.ir import Limits, use_limits
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import freeze_attr
from polyhal.ir.verify import resolve_attrs
from polyhal.ops import get_op
from polyhal.ops.registry import OpDef

SEEDS = (0, 1, 2)


def _op(name: str) -> OpDef:
    domain, _, op = name.rpartition(".")
    return get_op(op, domain)


def _low(dtype: np.dtype) -> bool:
    return dtype == np.float16 or dtype.name == "bfloat16"


def _attrs(op: OpDef, attrs: dict[str, Any]) -> dict[str, Any]:
    frozen = {k: freeze_attr(v, k) for k, v in attrs.items()}
    return resolve_attrs(op, frozen, f"test {op.qualified_name}")


def _call(kernel: Any, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any],
          out_dtypes: Sequence[np.dtype]) -> list[np.ndarray]:
    """``kernel`` called as the executor calls it, its first ``len(out_dtypes)`` results."""
    args = [a.astype(np.float32) if a is not None and _low(a.dtype) else a for a in inputs]
    with np.errstate(all="ignore"):
        result = kernel(*args, **attrs)
    results = list(result) if isinstance(result, tuple | list) else [result]
    outputs = []
    for array, dtype in zip(results, out_dtypes, strict=False):
        array = np.asarray(array)
        if _low(np.dtype(dtype)) and array.dtype == np.float32:
            with np.errstate(over="ignore"):
                array = array.astype(dtype)
        outputs.append(array)
    assert len(outputs) == len(out_dtypes), f"kernel returned {len(results)} outputs"
    return outputs


def _assert_close(name: str, actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                  what: str) -> None:
    tol = tolerance_for(name, [DType.from_numpy(e.dtype) for e in expected])
    for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
        result = compare(a, e, tol)
        assert result.ok, f"{what}: output {index}: {result.message or ''} " \
                          f"(max abs err {result.max_abs_err:g}; {a.dtype}{list(a.shape)} " \
                          f"vs {e.dtype}{list(e.shape)})"


def _copies(inputs: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
    return [None if a is None else a.copy() for a in inputs]


def _assert_unchanged(before: Sequence[np.ndarray | None],
                      after: Sequence[np.ndarray | None]) -> None:
    for old, new in zip(before, after, strict=True):
        if old is not None:
            assert new is not None
            # Bitwise: NaN payloads count, and bfloat16 NaN compares unequal in older numpy.
            assert old.tobytes() == new.tobytes(), "a fast kernel wrote its input"


# --------------------------------------------------------------------------- recipes

def _samples(op: OpDef, dtype: DType, shape_class: str) -> list[tuple[int, OpSample]]:
    found = []
    for seed in SEEDS:
        sample = recipe_for(op)(op, dtype, shape_class, np.random.default_rng(seed))
        if sample is not None:
            found.append((seed, sample))
    return found


RECIPE_CASES = [(name, dtype, shape_class) for name in sorted(FAST_KERNELS)
                for dtype in dtypes_for(_op(name)) for shape_class in SHAPE_CLASSES
                if _samples(_op(name), dtype, shape_class)]
"""Every (op, dtype, shape class) some seed has a recipe sample for."""


@pytest.mark.parametrize(("name", "dtype", "shape_class"), RECIPE_CASES,
                         ids=[f"{n}-{d.value}-{c}" for n, d, c in RECIPE_CASES])
def test_fast_kernel_matches_reference_on_recipes(name: str, dtype: DType, shape_class: str):
    op = _op(name)
    for seed, sample in _samples(op, dtype, shape_class):
        case = op_case(op, dtype, shape_class, seed, sample)
        out_dtypes = [e.dtype for e in case.expected]
        attrs = _attrs(op, sample.attrs)
        inputs = list(sample.inputs)
        before = _copies(inputs)
        actual = _call(FAST_KERNELS[name], inputs, attrs, out_dtypes)
        _assert_unchanged(before, inputs)
        _assert_close(name, actual, case.expected, f"{case.id} (seed {seed})")
        if name in FIRST_OUTPUT_KERNELS:
            first = _call(FIRST_OUTPUT_KERNELS[name], inputs, attrs, out_dtypes[:1])
            _assert_close(name, first, case.expected[:1], f"{case.id} first output")


def test_every_fast_kernel_is_for_a_known_op_and_runs_on_some_recipe():
    for name in FAST_KERNELS:
        op = _op(name)
        assert any(_samples(op, d, c) for d in dtypes_for(op) for c in SHAPE_CLASSES), name
    assert set(FIRST_OUTPUT_KERNELS) <= set(FAST_KERNELS)


# --------------------------------------------------------------------------- targeted

RNG = np.random.default_rng(1234)


def _data(shape: Sequence[int], dtype: Any = np.float32, low: float = -3.0,
          high: float = 3.0) -> np.ndarray:
    return RNG.uniform(low, high, size=tuple(shape)).astype(dtype)


def check(name: str, inputs: Sequence[np.ndarray | None], num_outputs: int | None = None,
          **attrs: Any) -> list[np.ndarray]:
    """The fast kernel of ``name`` against its reference kernel on ``inputs``."""
    op = _op(name)
    resolved = _attrs(op, attrs)
    inputs = list(inputs)
    with np.errstate(all="ignore"):
        expected = op.kernel(*inputs, **resolved)
    expected = list(expected) if isinstance(expected, tuple | list) else [expected]
    expected = [np.asarray(e) for e in expected[:num_outputs or len(expected)]]
    before = _copies(inputs)
    actual = _call(FAST_KERNELS[name], inputs, resolved, [e.dtype for e in expected])
    _assert_unchanged(before, inputs)
    _assert_close(name, actual, expected, f"{name} {attrs}")
    return actual


def _with_specials(x: np.ndarray, count: int = 4) -> np.ndarray:
    x = x.copy()
    flat = x.reshape(-1)
    picks = RNG.choice(flat.size, size=min(count, flat.size), replace=False)
    flat[picks] = np.resize(np.array([np.nan, np.inf, -np.inf, -0.0], dtype=x.dtype), len(picks))
    return x


# Conv ------------------------------------------------------------------------

CONV_2D = [
    ({"pads": [1, 1, 1, 1]}, 1, 4, 6),
    ({"strides": [2, 3], "pads": [0, 2, 1, 0]}, 1, 3, 5),
    ({"dilations": [2, 3], "pads": [2, 1, 0, 3]}, 1, 4, 4),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 1, 3, 4),
    ({"auto_pad": "SAME_LOWER", "strides": [3, 1], "dilations": [1, 2]}, 1, 3, 4),
    ({"auto_pad": "VALID", "strides": [1, 2]}, 1, 2, 2),
    ({"pads": [1, 1, 1, 1]}, 2, 4, 6),                      # grouped
    ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, 3, 6, 6),  # grouped, strided
    ({"pads": [1, 1, 1, 1]}, 4, 4, 4),                      # depthwise
    ({"pads": [0, 1, 2, 0], "dilations": [2, 1]}, 4, 4, 8),  # depthwise, multiplier 2
    ({"auto_pad": "SAME_LOWER", "strides": [2, 1]}, 5, 5, 10),
    ({}, 1, 6, 5),                                          # valid 3x3 without pads
]


@pytest.mark.parametrize(("attrs", "group", "c", "m"), CONV_2D,
                         ids=[f"{i}" for i in range(len(CONV_2D))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_2d(attrs, group, c, m, dtype, bias):
    x = _data((2, c, 9, 8), dtype)
    w = _data((m, c // group, 3, 2), dtype)
    b = _data((m,), dtype) if bias else None
    check("core.Conv", [x, w, b], group=group, **attrs)


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("group", [1, 2, 4])
def test_conv_every_rank_auto_pad_and_group(auto_pad, rank, group):
    spatial = (7, 6, 5)[:rank]
    kernel = (3, 2, 3)[:rank]
    x = _data((2, 4, *spatial))
    w = _data((8, 4 // group, *kernel))
    attrs: dict[str, Any] = {"auto_pad": auto_pad, "strides": [2, 1, 2][:rank],
                             "dilations": [1, 2, 1][:rank]}
    if auto_pad == "NOTSET":
        attrs["pads"] = [1, 0, 2][:rank] + [0, 2, 1][:rank]
    check("core.Conv", [x, w, _data((8,))], group=group, **attrs)


@pytest.mark.parametrize("shape", [(3, 8, 5, 5), (2, 6, 4, 3, 5), (2, 6, 7)])
@pytest.mark.parametrize("group", [1, 2])
def test_conv_pointwise(shape, group):
    rank = len(shape) - 2
    x = _data(shape)
    w = _data((4, shape[1] // group, *[1] * rank))
    check("core.Conv", [x, w, None], group=group)
    check("core.Conv", [x, w, None], group=group, strides=[2] * rank)
    check("core.Conv", [x, w, None], group=group, pads=[1] * (2 * rank))
    check("core.Conv", [np.swapaxes(x, 0, 1).copy().swapaxes(0, 1), w, None], group=group)


@pytest.mark.parametrize("tile", [64, 700, 5000])
def test_conv_in_small_tiles(monkeypatch, tile):
    """Tiles of a few batch items, a few output rows, or a single row."""
    monkeypatch.setattr(conv, "TILE_BYTES", tile)
    monkeypatch.setattr(conv, "DEPTHWISE_BYTES", tile)
    for group, c in ((1, 3), (2, 4), (4, 4)):
        x = _data((3, c, 7, 6))
        w = _data((4, c // group, 3, 3))
        check("core.Conv", [x, w, _data((4,))], group=group, pads=[1, 2, 0, 1], strides=[1, 2])
        x3 = _data((2, c, 4, 5, 3))
        check("core.Conv", [x3, _data((4, c // group, 2, 3, 2)), None], group=group,
              pads=[1, 0, 1, 0, 1, 1])


def test_conv_non_contiguous_inputs():
    x = np.asfortranarray(_data((2, 4, 6, 7)))
    w = _data((4, 2, 3, 3, 5))[..., 1]  # a strided view
    check("core.Conv", [x, w, None], group=2, pads=[1, 1, 1, 1])
    check("core.Conv", [x[:, :, ::-1], _data((3, 4, 1, 1)), None])  # negative strides
    check("core.Conv", [x[:, :, :, 1:], _data((4, 1, 2, 2)), None], group=4)
    check("core.Conv", [x[:, :, ::-1, ::2], _data((5, 4, 3, 2)), None])  # im2col, no pads
    check("core.Conv", [x[::-1], _data((4, 2, 2, 3)), _data((4,))], group=2, strides=[2, 1])


def test_conv_special_values_and_empty():
    x = _with_specials(_data((2, 3, 6, 6)), 8)
    check("core.Conv", [x, _data((4, 3, 3, 3)), _data((4,))], pads=[1, 1, 1, 1])
    check("core.Conv", [x, _data((6, 1, 3, 3)), None], group=3, strides=[2, 2])
    check("core.Conv", [_data((0, 3, 5, 5)), _data((4, 3, 3, 3)), _data((4,))])
    check("core.Conv", [_data((2, 0, 5, 5)), _data((4, 0, 3, 3)), _data((4,))])
    check("core.Conv", [_data((2, 3, 5, 5)), _data((0, 3, 3, 3)), None])
    check("core.Conv", [_data((2, 3, 0, 5)), _data((4, 3, 1, 2)), _data((4,))],
          auto_pad="SAME_UPPER")


def test_conv_scratch_is_bounded_by_tiles_not_by_the_window_count():
    """The reference gathers all windows (51 * 50 elements here) and so fails under a
    1000-element limit; the fast kernel's scratch is tile-sized, only its output counts."""
    x, w = _data((1, 1, 100)), _data((1, 1, 50))
    op = _op("core.Conv")
    attrs = _attrs(op, {})
    expected = op.kernel(x, w, **attrs)
    with use_limits(Limits(max_elements=1000)):
        np.testing.assert_allclose(FAST_KERNELS["core.Conv"](x, w, **attrs), expected,
                                   rtol=1e-5, atol=1e-4)
        with pytest.raises(LimitExceededError, match="output"):
            FAST_KERNELS["core.Conv"](_data((1, 1, 2000)), w, **attrs)


def test_conv_rejects_what_the_reference_rejects():
    x, w = _data((1, 2, 3, 3)), _data((2, 2, 5, 5))
    op = _op("core.Conv")
    attrs = _attrs(op, {})
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        op.kernel(x, w, **attrs)
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        FAST_KERNELS["core.Conv"](x, w, **attrs)



def lowered_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, relu: bool = False,
                 **attrs: Any) -> np.ndarray | None:
    """Conv through :class:`conv.Conv2dLowering` (``None`` when it declines), its output
    a channels-last buffer and its scratch as the plan allocates them."""
    resolved = _attrs(_op("core.Conv"), attrs)
    lowering = conv.Conv2dLowering.build(x.shape, w.shape, resolved, x.dtype)
    if lowering is None:
        return None
    n, m, *spatial = lowering.out_shape
    out = np.moveaxis(np.full((n, *spatial, m), np.nan, x.dtype), -1, 1)
    scratch = {name: (np.zeros if zeroed else np.empty)(shape, x.dtype)
               for name, (shape, zeroed) in lowering.scratch.items()}
    for _ in range(2):  # a second run on the same scratch: the padded border stays zero
        with np.errstate(all="ignore"):
            lowering(x, lowering.filters(w, b), out, scratch, relu=relu)
    assert out.transpose(0, 2, 3, 1).flags.c_contiguous
    return out


STRATEGIES = {"im2col": 0, "direct": math.inf}
"""``conv.DIRECT_MAX_DEPTH`` that forces each strategy."""


@pytest.mark.parametrize(("attrs", "group", "c", "m"), [e for e in CONV_2D if e[1] == 1],
                         ids=[f"{i}" for i, e in enumerate(CONV_2D) if e[1] == 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["nchw", "channels-last"])
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_lowered_conv_matches_the_reference(monkeypatch, attrs, group, c, m, dtype, layout,
                                            strategy):
    monkeypatch.setattr(conv, "DIRECT_MAX_DEPTH", STRATEGIES[strategy])
    x = _with_specials(_data((3, c, 9, 8), dtype), 2) if c > 3 else _data((3, c, 9, 8), dtype)
    if layout == "channels-last":
        x = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)
    w, b = _data((m, c, 3, 2), dtype), _data((m,), dtype)
    op = _op("core.Conv")
    for bias, relu in ((None, False), (b, False), (b, True)):
        expected = op.kernel(x, w, bias, **_attrs(op, {"group": 1, **attrs}))
        if relu:
            expected = _op("core.Relu").kernel(expected)
        actual = lowered_conv(x, w, bias, relu, group=1, **attrs)
        assert actual is not None
        _assert_close("core.Conv", [actual], [expected],
                      f"lowered Conv {attrs} {layout} {strategy} relu={relu}")


DIRECT_SHAPES = [
    # (N, C, H, W), M, kernel, attrs: whole tiles and leftover pixels, channel counts
    # under, at and over a block (16 float32 / 8 float64) and partial last blocks,
    # windows wholly in the padding, strides, dilations.
    ((2, 3, 11, 13), 16, (3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 16, 8, 9), 40, (3, 3), {"pads": [1, 2, 2, 1], "strides": [2, 1]}),
    ((2, 5, 6, 7), 8, (2, 3), {"pads": [4, 3, 4, 5]}),
    ((1, 4, 12, 15), 33, (3, 3), {"dilations": [2, 3], "pads": [2, 3, 1, 0]}),
    ((3, 7, 9, 10), 9, (1, 1), {"strides": [2, 3]}),
    ((1, 2, 5, 4), 1, (5, 4), {}),
    ((2, 8, 7, 20), 24, (3, 5), {"auto_pad": "SAME_LOWER", "strides": [1, 2]}),
]


LAYOUTS = {
    "nchw": lambda x: x,
    "channels-last": lambda x: np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1),
    "strided view": lambda x: np.repeat(x, 2, axis=3)[..., ::2],
    "reversed view": lambda x: np.ascontiguousarray(x[:, :, ::-1])[:, :, ::-1],
}
"""Memory layouts of the same logical input."""


@pytest.mark.parametrize(("x_shape", "m", "kernel", "attrs"), DIRECT_SHAPES,
                         ids=[str(i) for i in range(len(DIRECT_SHAPES))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_direct_conv_matches_the_reference_across_tiles_and_blocks(monkeypatch, x_shape, m,
                                                                   kernel, attrs, dtype,
                                                                   layout):
    monkeypatch.setattr(conv, "DIRECT_MAX_DEPTH", math.inf)
    x = LAYOUTS[layout](_with_specials(_data(x_shape, dtype), 2))  # NaN and inf in places
    w, b = _data((m, x_shape[1], *kernel), dtype), _data((m,), dtype)
    op = _op("core.Conv")
    expected = op.kernel(x, w, b, **_attrs(op, attrs))
    for relu in (False, True):
        want = _op("core.Relu").kernel(expected) if relu else expected
        actual = lowered_conv(x, w, b, relu, **attrs)
        assert actual is not None
        _assert_close("core.Conv", [actual], [want], f"direct {x_shape} {m} {attrs} {relu}")


def test_shallow_windows_run_direct_and_deep_ones_on_blas():
    def lowering(channels: int, kernel: int = 3, dtype: Any = np.float32
                 ) -> conv.Conv2dLowering:
        resolved = _attrs(_op("core.Conv"), {"pads": [1, 1, 1, 1]})
        built = conv.Conv2dLowering.build((2, channels, 8, 8), (16, channels, kernel, kernel),
                                          resolved, np.dtype(dtype))
        assert built is not None
        return built

    assert lowering(64).direct  # 576 values, 64 channels of 3x3
    assert lowering(3).direct and lowering(3, dtype=np.float64).direct
    assert not lowering(65).direct  # a GEMM this deep is wide enough for BLAS
    resolved = _attrs(_op("core.Conv"), {})
    pointwise = conv.Conv2dLowering.build((2, 16, 8, 8), (16, 16, 1, 1), resolved,
                                          np.dtype(np.float32))
    assert pointwise is not None and not pointwise.direct  # BLAS reads the input in place
    assert lowering(64).scratch == {}  # padding is handled row by row, nothing is copied
    assert "conv-columns" in lowering(128).scratch


@pytest.mark.parametrize("layout", ["nchw", "channels-last"])
def test_lowered_conv_pointwise_strided_and_in_tiles(monkeypatch, layout):
    monkeypatch.setattr(conv, "DIRECT_MAX_DEPTH", 0)  # im2col
    op = _op("core.Conv")
    x = _data((5, 6, 7, 4))
    if layout == "channels-last":
        x = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)
    cases = [((3, 6, 1, 1), {}), ((3, 6, 1, 1), {"strides": [2, 2]}),
             ((4, 6, 3, 3), {"pads": [1, 1, 1, 1]})]
    for tile in (conv.TILE_BYTES, 7 * 4 * 60 * 4):  # all images in one tile; one per tile
        monkeypatch.setattr(conv, "TILE_BYTES", tile)
        for w_shape, attrs in cases:
            w, b = _data(w_shape), _data((w_shape[0],))
            expected = op.kernel(x, w, b, **_attrs(op, attrs))
            actual = lowered_conv(x, w, b, **attrs)
            assert actual is not None
            _assert_close("core.Conv", [actual], [expected], f"{w_shape} {attrs} tile {tile}")


def test_lowering_declines_what_the_generic_kernel_handles(monkeypatch):
    assert lowered_conv(_data((2, 4, 6)), _data((3, 4, 3)), None) is None  # 1-D
    assert lowered_conv(_data((2, 4, 5, 5)), _data((4, 2, 3, 3)), None, group=2) is None
    assert lowered_conv(_data((0, 4, 5, 5)), _data((3, 4, 3, 3)), None) is None  # empty
    monkeypatch.setattr(conv, "TILE_BYTES", 100)  # one image's columns exceed a tile
    monkeypatch.setattr(conv, "DIRECT_MAX_DEPTH", 0)
    assert lowered_conv(_data((2, 4, 5, 5)), _data((3, 4, 3, 3)), None) is None
    monkeypatch.setattr(conv, "DIRECT_MAX_DEPTH", math.inf)  # writes no columns at all
    assert lowered_conv(_data((2, 4, 5, 5)), _data((3, 4, 3, 3)), None) is not None


# Pools -----------------------------------------------------------------------

POOLS = [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 2, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "dilations": [2, 2]},
    {"kernel_shape": [2, 3], "dilations": [3, 2], "pads": [1, 2, 1, 2], "ceil_mode": 1,
     "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [3, 2]},
    {"kernel_shape": [3, 2], "auto_pad": "VALID", "strides": [2, 1], "ceil_mode": 1},
    {"kernel_shape": [1, 1], "strides": [2, 2]},
]


@pytest.mark.parametrize("attrs", POOLS, ids=[str(i) for i in range(len(POOLS))])
@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint8])
def test_max_pool_2d(attrs, storage_order, dtype):
    if np.dtype(dtype).kind == "f":
        x = _with_specials(_data((2, 3, 9, 8), dtype))
    else:  # small integers: many ties, Indices must name the first
        x = RNG.integers(0, 4, size=(2, 3, 9, 8)).astype(dtype)
    check("core.MaxPool", [x], storage_order=storage_order, **attrs)
    y = FIRST_OUTPUT_KERNELS["core.MaxPool"](x, **_attrs(_op("core.MaxPool"), {
        "storage_order": storage_order, **attrs}))
    np.testing.assert_array_equal(y, check("core.MaxPool", [x], **attrs)[0])


@pytest.mark.parametrize("attrs", POOLS, ids=[str(i) for i in range(len(POOLS))])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_average_pool_2d(attrs, count_include_pad, dtype):
    x = _data((2, 3, 9, 8), dtype)
    check("core.AveragePool", [x], count_include_pad=count_include_pad, **attrs)
    check("core.AveragePool", [_with_specials(x)], count_include_pad=count_include_pad,
          **attrs)


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_pools_every_rank(rank, ceil_mode):
    x = _data((2, 2, *(7, 6, 5)[:rank]))
    attrs = {"kernel_shape": [3, 2, 2][:rank], "strides": [2, 2, 3][:rank],
             "pads": [1, 0, 1][:rank] + [0, 1, 1][:rank], "dilations": [1, 2, 1][:rank],
             "ceil_mode": ceil_mode}
    for storage_order in (0, 1):
        check("core.MaxPool", [x], storage_order=storage_order, **attrs)
    for count_include_pad in (0, 1):
        check("core.AveragePool", [x], count_include_pad=count_include_pad, **attrs)
    for auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        same = {k: v for k, v in attrs.items() if k != "pads"}
        check("core.MaxPool", [x], storage_order=1, auto_pad=auto_pad, **same)
        check("core.AveragePool", [x], count_include_pad=1, auto_pad=auto_pad, **same)


def test_pool_windows_that_cover_only_padding():
    """Dilation lets a window miss the input: -inf and Indices -1, and 0 / 0 = NaN."""
    x = _data((1, 2, 1, 1))
    attrs = {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "dilations": [2, 2]}
    y, indices = check("core.MaxPool", [x], **attrs)
    assert indices.shape == y.shape
    check("core.MaxPool", [RNG.integers(-5, 5, size=(1, 2, 1, 3)).astype(np.int8)],
          kernel_shape=[2, 2], pads=[1, 1, 1, 1], dilations=[2, 2])
    check("core.AveragePool", [x], **attrs)
    check("core.AveragePool", [x], count_include_pad=1, **attrs)


WIDE_POOLS = [  # kernels wider than the 5 x 4 input (pools read only what reaches it)
    {"kernel_shape": [9, 11], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [12, 7], "auto_pad": "SAME_LOWER", "strides": [2, 3]},
    {"kernel_shape": [8, 6], "pads": [7, 5, 6, 2], "strides": [3, 2], "ceil_mode": 1},
    {"kernel_shape": [7, 5], "pads": [6, 4, 6, 4], "dilations": [2, 2]},
]


@pytest.mark.parametrize("attrs", WIDE_POOLS, ids=[str(i) for i in range(len(WIDE_POOLS))])
def test_pools_with_kernels_wider_than_the_input(attrs):
    x = _with_specials(_data((2, 3, 5, 4)))
    for storage_order in (0, 1):
        check("core.MaxPool", [x], storage_order=storage_order, **attrs)
    check("core.MaxPool", [RNG.integers(0, 3, size=(2, 3, 5, 4)).astype(np.int8)], **attrs)
    for count_include_pad in (0, 1):
        check("core.AveragePool", [x], count_include_pad=count_include_pad, **attrs)


def test_a_pool_kernel_of_2_to_the_62_rows_costs_no_more_than_one_as_wide_as_the_input():
    """SAME padding lets a model ask for any kernel: one of 2**62 rows must neither loop
    nor allocate per row. Every window then covers all 5 rows, as a kernel of 11 does."""
    x = _with_specials(_data((2, 3, 5, 4)))
    kernels = {"max": FAST_KERNELS["core.MaxPool"], "mean": FAST_KERNELS["core.AveragePool"]}

    def pools(rows):
        attrs = {"kernel_shape": [rows, 3], "auto_pad": "SAME_UPPER"}
        return (*kernels["max"](x, **_attrs(_op("core.MaxPool"), attrs)),
                kernels["mean"](x, **_attrs(_op("core.AveragePool"), attrs)))

    tracemalloc.start()
    try:
        huge = pools(2**62)  # beyond int64 as a count of kernel positions
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    for got, want in zip(huge, pools(11), strict=True):
        np.testing.assert_array_equal(got, want)


def test_pools_on_empty_and_all_minus_inf():
    check("core.MaxPool", [_data((0, 2, 4, 4))], kernel_shape=[2, 2])
    check("core.MaxPool", [_data((2, 0, 4, 4))], kernel_shape=[2, 2], storage_order=1)
    check("core.AveragePool", [_data((0, 2, 4, 4))], kernel_shape=[2, 2])
    for name in ("core.MaxPool", "core.AveragePool"):  # zero-size spatial axes
        check(name, [_data((1, 2, 0, 4))], kernel_shape=[2, 2], auto_pad="SAME_UPPER")
        check(name, [_data((1, 2, 0, 4))], kernel_shape=[2, 2], pads=[1, 1, 1, 1])
        check(name, [_data((2, 3, 0, 0))], kernel_shape=[1, 1], auto_pad="SAME_LOWER")
    x = np.full((1, 1, 3, 3), -np.inf, np.float32)
    check("core.MaxPool", [x], kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    x = np.full((1, 1, 3, 3), np.iinfo(np.int8).min, np.int8)
    check("core.MaxPool", [x], kernel_shape=[2, 2], pads=[1, 1, 0, 0])


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 2, 4),
                                   (0, 3, 4, 4), (2, 3, 0, 4)])
@pytest.mark.parametrize("name", ["core.GlobalAveragePool", "core.GlobalMaxPool"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_global_pools(shape, name, dtype):
    x = _data(shape, dtype)
    check(name, [x])
    if x.size:
        check(name, [_with_specials(x)])
    check(name, [np.asfortranarray(x)])


# Normalization ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["core.Softmax", "core.LogSoftmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_every_axis(name, dtype):
    x = _data((2, 3, 4, 5), dtype, -20, 20)
    for axis in range(-4, 4):
        check(name, [x], axis=axis)
        check(name, [x.transpose(2, 0, 3, 1)], axis=axis)
    rows = np.array([[0.0, 1.0, 2.0], [-np.inf] * 3, [np.inf, 1.0, 2.0], [np.nan, 1.0, 0.0],
                     [np.inf, -np.inf, 0.0], [1e30, -1e30, 0.0]], dtype=dtype)
    check(name, [rows], axis=-1)
    check(name, [rows], axis=0)
    check(name, [np.zeros((3, 0), dtype)], axis=1)
    check(name, [np.zeros((0, 3), dtype)], axis=0)
    check(name, [_data((7,), dtype)], axis=0)


LAYER_NORM_SHAPES = [((6,), 0, (6,)), ((3, 4), 1, (4,)), ((2, 3, 4), 1, (3, 4)),
                     ((2, 3, 4), 2, (1,)), ((2, 3, 4), 0, (2, 3, 4)), ((2, 1, 3, 2), -2, (1, 2)),
                     ((2, 3, 4, 5), -1, (3, 1, 5)), ((2, 3, 4, 5), 1, (4, 1)),
                     ((2, 3, 4), -3, ()), ((2, 0, 4), -1, (4,)), ((0, 3), 1, (3,)),
                     ((2, 3, 0), 1, (3, 0))]


@pytest.mark.parametrize(("shape", "axis", "scale_shape"), LAYER_NORM_SHAPES,
                         ids=[f"{s}-{a}" for s, a, _ in LAYER_NORM_SHAPES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [False, True])
def test_layer_norm_axes(shape, axis, scale_shape, dtype, bias):
    x = _data(shape, dtype)
    scale = _data(scale_shape, dtype, -1.5, 1.5)
    b = _data(scale_shape[1:] if scale_shape else (), dtype) if bias else None
    check("core.LayerNormalization", [x, scale, b], axis=axis)
    check("core.LayerNormalization", [x, scale, b], axis=axis, epsilon=0.5)
    if x.size:
        check("core.LayerNormalization", [_with_specials(x, 2), scale, b], axis=axis)
    if x.ndim > 1:
        check("core.LayerNormalization", [np.asfortranarray(x), scale, b], axis=axis)


@pytest.mark.parametrize("nbytes", [64, 1 << 20])
def test_layer_norm_is_bitwise_the_reference(monkeypatch, nbytes):
    """Its float32 stage rounds exactly like the reference's: a float64 graph carries that
    stage's float32 rounding, which float64 tolerances would not forgive."""
    monkeypatch.setattr(norm, "BLOCK_BYTES", nbytes)
    op = _op("core.LayerNormalization")
    for shape, axis in (((2, 6, 16), -1), ((4, 3, 5, 7), 1), ((3, 130), -1), ((2, 3, 300), -2)):
        for dtype in (np.float32, np.float64):
            x = _data(shape, dtype)
            params = [_data(shape[axis:], dtype), _data(shape[axis:], dtype)]
            attrs = _attrs(op, {"axis": axis})
            expected = op.kernel(x, *params, **attrs)
            actual = FAST_KERNELS["core.LayerNormalization"](x, *params, **attrs)
            for a, e in zip(actual, expected, strict=True):
                np.testing.assert_array_equal(a, e)


@pytest.mark.filterwarnings("ignore:Mean of empty slice")  # the reference's, empty batches
@pytest.mark.parametrize("shape", [(5,), (4, 3), (2, 3, 4), (2, 3, 2, 2), (1, 2, 2, 3, 2),
                                   (0, 3, 2), (2, 3, 0), (2, 3, 8, 9), (1, 2, 5, 4, 4)])
@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (np.float64, np.float64),
                                    (np.float32, np.float64), (np.float64, np.float32)])
def test_batch_norm(shape, dtypes):
    x_dtype, p_dtype = dtypes
    channels = shape[1] if len(shape) > 1 else 1
    x = _data(shape, x_dtype)
    params = [_data((channels,), p_dtype, -1.5, 1.5), _data((channels,), p_dtype),
              _data((channels,), p_dtype, -1, 1), _data((channels,), p_dtype, 0.5, 2)]
    check("core.BatchNormalization", [x, *params])
    check("core.BatchNormalization", [x, *params], epsilon=0.25)
    check("core.BatchNormalization", [x, *params], training_mode=1)
    check("core.BatchNormalization", [x, *params], training_mode=1, momentum=0.25,
          epsilon=0.5)
    if x.size:
        huge = _with_specials(x)
        huge.reshape(-1)[-1] = np.finfo(x_dtype).max
        check("core.BatchNormalization", [huge, *params])
        zero_scale = [np.zeros_like(params[0]), *params[1:]]
        check("core.BatchNormalization", [huge, *zero_scale])
        check("core.BatchNormalization", [huge, *params], training_mode=1)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8, 11, 2**40])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lrn(size, dtype):  # windows wider than the 5 channels cost no more than 9
    x = _data((2, 5, 3, 2), dtype)
    check("core.LRN", [x], size=size)
    check("core.LRN", [x], size=size, alpha=0.5, beta=0.5, bias=2.0)
    check("core.LRN", [x[:, :, 0]], size=size, alpha=0.01, beta=2.0, bias=1.0)
    check("core.LRN", [_with_specials(x)], size=size)
    check("core.LRN", [np.zeros((0, 5, 2), dtype)], size=size)


# Linear algebra --------------------------------------------------------------

GEMM_C_SHAPES = [None, (), (1,), "n", (1, 1), "m1", "1n", "mn"]


def _c_shape(spec: Any, m: int, n: int) -> tuple[int, ...] | None:
    return {"n": (n,), "m1": (m, 1), "1n": (1, n), "mn": (m, n)}.get(spec, spec)


@pytest.mark.parametrize(("trans_a", "trans_b"), list(itertools.product((0, 1), repeat=2)))
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (0.5, 2.0), (-1.5, 0.0), (2.0, -1.0)])
@pytest.mark.parametrize("c_spec", GEMM_C_SHAPES, ids=[str(c) for c in GEMM_C_SHAPES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_gemm(trans_a, trans_b, alpha, beta, c_spec, dtype):
    m, k, n = 4, 5, 3
    if np.dtype(dtype).kind == "i":
        alpha, beta = float(round(alpha * 2)), float(round(beta * 2))

        def make(shape):
            return RNG.integers(-50, 50, size=shape).astype(dtype)
    else:
        def make(shape):
            return _data(shape, dtype)
    a = make((k, m) if trans_a else (m, k))
    b = make((n, k) if trans_b else (k, n))
    shape = _c_shape(c_spec, m, n)
    c = None if shape is None else make(shape)
    check("core.Gemm", [a, b, c], alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)


def test_gemm_edge_cases():
    a, b = _data((3, 4)), _data((4, 2))
    c = np.array([[np.inf, np.nan]], np.float32)
    check("core.Gemm", [a, b, c], beta=0.0)  # 0 * inf = NaN, literally
    check("core.Gemm", [_with_specials(a), b, _data((2,))], alpha=0.5, beta=0.5)
    check("core.Gemm", [_data((0, 4)), b, _data((1, 2))])
    check("core.Gemm", [_data((3, 0)), _data((0, 2)), _data((3, 1))], alpha=2.0)
    check("core.Gemm", [np.asfortranarray(a), b[::-1], None], transA=0)
    big = np.full((2, 2), np.iinfo(np.int32).max, np.int32)
    check("core.Gemm", [big, big, big], alpha=3.0, beta=-2.0)  # wraps
    with pytest.raises(ValueError):
        FAST_KERNELS["core.Gemm"](a, b, _data((3, 2, 1)).reshape(3, 2)[:, :1].repeat(3, 1),
                                  **_attrs(_op("core.Gemm"), {}))


MATMUL_SHAPES = [((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((3, 4), (4, 5)),
                 ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                 ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((3, 4), (2, 4, 5)),
                 ((2, 2, 1, 4), (4, 3)), ((0, 3, 4), (4, 2)), ((2, 3, 0), (0, 5)),
                 ((2, 0, 4), (4, 3))]


@pytest.mark.parametrize(("a_shape", "b_shape"), MATMUL_SHAPES,
                         ids=[f"{a}@{b}" for a, b in MATMUL_SHAPES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_matmul(a_shape, b_shape, dtype):
    if np.dtype(dtype).kind == "i":
        a = RNG.integers(-9, 9, size=a_shape).astype(dtype)
        b = RNG.integers(-9, 9, size=b_shape).astype(dtype)
    else:
        a, b = _data(a_shape, dtype), _data(b_shape, dtype)
    check("core.MatMul", [a, b])
    if a.ndim >= 2:
        check("core.MatMul", [np.asfortranarray(a), b])
        check("core.MatMul", [np.swapaxes(np.swapaxes(a, -1, -2).copy(), -1, -2), b])


def test_matmul_special_values():
    a = _with_specials(_data((2, 3, 4)))
    check("core.MatMul", [a, _data((4, 5))])
    check("core.MatMul", [a, _with_specials(_data((4, 5)))])


# Blocked paths ---------------------------------------------------------------

@pytest.mark.parametrize("nbytes", [1, 300, 5000])
def test_kernels_in_small_blocks(monkeypatch, nbytes):
    """Blocks of one slice, of a few slices, and slabs split along their inner axis."""
    monkeypatch.setattr(norm, "BLOCK_BYTES", nbytes)
    monkeypatch.setattr(pool, "BLOCK_BYTES", nbytes)
    x = _with_specials(_data((3, 4, 9, 10)), 6)
    for axis in range(-4, 4):
        check("core.Softmax", [x], axis=axis)
        check("core.LogSoftmax", [x], axis=axis)
    for axis in (1, 2, 3):
        scale = _data(x.shape[axis:])
        check("core.LayerNormalization", [x, scale, _data(x.shape[-1:])], axis=axis)
        check("core.LayerNormalization", [x.astype(np.float64), scale.astype(np.float64)],
              axis=axis)
    params = [_data((4,)), _data((4,)), _data((4,)), _data((4,), low=0.5, high=2.0)]
    check("core.BatchNormalization", [x, *params])
    check("core.BatchNormalization", [x, *params], training_mode=1)
    check("core.BatchNormalization", [x[:, :, :1, :1], *params])
    for attrs in POOLS:
        check("core.MaxPool", [x], storage_order=1, **attrs)
        check("core.AveragePool", [x], count_include_pad=1, **attrs)
        check("core.AveragePool", [x], **attrs)


@pytest.mark.parametrize("rounding", ["half_up", "half_even"])
def test_requantize_in_int64_is_the_reference_bit_for_bit(rounding):
    from polyhal.adapters.cpu.kernels.quant import requantize

    reference = get_op("Requantize", "quant").kernel
    rng = np.random.default_rng(11)
    for trial in range(120):
        per_channel = trial % 2 == 0
        size = 7 if per_channel else ()
        x = rng.integers(-2**31, 2**31, (5, 7), dtype=np.int64).astype(np.int32)
        if trial % 3 == 0:
            x = rng.integers(-40, 40, (5, 7)).astype(np.int32)  # ties and small values
        multiplier = rng.integers(0, 2**31, size).astype(np.int32)
        if trial % 5 == 0:
            multiplier = np.full(size, 2**31 - 1, np.int32)
        shift = rng.integers(0, 64, size).astype(np.int32)
        if trial % 7 == 0:
            shift = np.full(size, 63 if trial % 2 else 1, np.int32)
        bias = (rng.integers(-2**31, 2**31, size, dtype=np.int64).astype(np.int32)
                if trial % 4 else None)
        for relu, zero_point in ((0, 0), (1, -7), (0, 100), (1, 127)):
            kwargs = {"zero_point": zero_point, "rounding": rounding, "relu": relu}
            np.testing.assert_array_equal(requantize(x, multiplier, shift, bias, **kwargs),
                                          reference(x, multiplier, shift, bias, **kwargs))
    with pytest.raises(ValueError, match="multiplier holds -1 at \\[2\\]"):
        requantize(x, np.array([1, 1, -1, 1, 1, 1, 1], np.int32), np.int32(3), None,
                   zero_point=0, rounding=rounding, relu=0)
    with pytest.raises(ValueError, match="shift holds 64"):
        requantize(x, np.int32(1), np.int32(64), None, zero_point=0, rounding=rounding, relu=0)
