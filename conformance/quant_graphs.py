"""Integer graphs for level L4-quant: corner tables of ``quant.Requantize``,
corner cases of int8 ``MatMulInteger``, integer MLP chains, and a float MLP run
through :func:`polyhal.passes.quantize`.

Every builder returns ``(graph, inputs)``: the data ``x`` is the graph's one input,
weights and requantization parameters are constants (as the quantization pass
emits them). Tables are fixed values; the other builders draw from the ``rng``
they are given.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polyhal import ops
from polyhal.ir import GraphBuilder, TensorType, f32
from polyhal.ir.graph import Graph
from polyhal.ops.requantize import multiplier_and_shift, requantize
from polyhal.passes import quantize

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
Built = tuple[Graph, list[np.ndarray]]


def _i32(values: object) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).astype(np.int32)


def _table(name: str, x: np.ndarray, nodes: list[dict[str, object]]) -> Built:
    """One Requantize node per entry of ``nodes`` (its parameters and attributes), all
    reading ``x``; one output each."""
    g = GraphBuilder(f"requantize_{name}")
    xs = g.input("x", TensorType.of(x))
    outputs = []
    for index, spec in enumerate(nodes):
        params = [_i32(spec[k]) for k in ("multiplier", "shift", "bias") if k in spec]
        attrs = {k: spec[k] for k in ("zero_point", "rounding", "relu") if k in spec}
        outputs.append(requantize(xs, *params, name=f"r{index}", **attrs))  # type: ignore[arg-type]
    g.output(*outputs, names=[f"y{i}" for i in range(len(outputs))])
    return g.build(), [x]


# --------------------------------------------------------------------------- Requantize


def ties(rounding: str) -> Built:
    """Exact ties ``(2k + 1) 2^(shift-1) / 2^shift`` for k = -4..3 (both signs, odd and
    even floors), each next to its neighbours +-1, with and without a bias."""
    shift = np.array([1, 2, 3, 8, 16, 24])
    multiplier = np.array([1, 1, 3, 1, 5, 1])
    bias = np.array([0, 2, 0, -256, 0, 2**23])
    odd = (2 * np.arange(-4, 4) + 1)[:, None]
    tie = odd * 2 ** (shift - 1) - bias
    x = np.concatenate([tie, tie + 1, tie - 1])
    return _table("ties", _i32(x), [{"multiplier": multiplier, "shift": shift, "bias": bias,
                                     "rounding": rounding}])


def shift_extremes(rounding: str) -> Built:
    """Shifts 0 and 63 (and 62) with the largest multipliers and x, bias at int32's
    extremes: products up to 2^63 - 2^32."""
    columns = [(1, 0, 0), (INT32_MAX, 0, 0), (INT32_MAX, 63, INT32_MIN), (2**30, 63, INT32_MAX),
               (1, 63, 0), (INT32_MAX, 62, INT32_MAX), (INT32_MAX, 63, INT32_MAX)]
    multiplier, shift, bias = (np.array(c) for c in zip(*columns, strict=True))
    x = np.array([INT32_MIN, INT32_MAX, 0, 1, -1, 2**30, -(2**30), 127, -128, 128])
    return _table("shift", _i32(np.repeat(x[:, None], len(columns), axis=1)),
                  [{"multiplier": multiplier, "shift": shift, "bias": bias,
                    "rounding": rounding}])


def multiplier_extremes(rounding: str) -> Built:
    """Multipliers 0, 1, 2^30 and 2^31 - 1 at shifts 0, 30, 31 and 32 over x from
    -2^31 to 2^31 - 1."""
    columns = [(0, 0), (0, 31), (1, 0), (2**30, 30), (2**30, 31), (INT32_MAX, 31),
               (INT32_MAX, 32), (INT32_MAX, 0)]
    multiplier, shift = (np.array(c) for c in zip(*columns, strict=True))
    x = np.array([INT32_MIN, -(2**24) - 1, -255, -1, 0, 1, 255, 2**24 + 1, INT32_MAX])
    return _table("multiplier", _i32(np.repeat(x[:, None], len(columns), axis=1)),
                  [{"multiplier": multiplier, "shift": shift, "rounding": rounding},
                   {"multiplier": multiplier, "shift": shift, "rounding": rounding,
                    "zero_point": -3}])


def saturation(rounding: str) -> Built:
    """Scale 1 (2^30 / 2^30) around both ends of int8, with zero points 0, 5 and -5:
    results just inside, on and beyond -128 and 127."""
    x = _i32(np.concatenate([np.arange(-140, -115), np.arange(115, 140), [-(2**31), 2**31 - 1]]))
    return _table("saturation", x, [{"multiplier": 2**30, "shift": 30, "zero_point": zp,
                                     "rounding": rounding} for zp in (0, 5, -5)])


def relu_zero_point(rounding: str) -> Built:
    """relu=1 with zero points -128, -20, 0, 17 and 127: the floor is the zero point,
    halves on both sides of it."""
    x = _i32(np.arange(-300, 301, 7))
    return _table("relu", x, [{"multiplier": 2**30, "shift": 31, "bias": 3, "zero_point": zp,
                               "relu": 1, "rounding": rounding}
                              for zp in (-128, -20, 0, 17, 127)])


def int32_extremes(rounding: str) -> Built:
    """x and bias at int32's extremes under the quantization pass's multipliers
    ([2^30, 2^31)) and shifts 31 to 63: s = x + bias spans [-2^32, 2^32 - 2]."""
    x = np.array([INT32_MIN, INT32_MIN + 1, -(2**30), -1, 0, 1, 2**30, INT32_MAX - 1,
                  INT32_MAX])
    shift = np.array([31, 32, 33, 40, 56, 62, 63])
    multiplier = np.array([2**30, INT32_MAX, 1518500250, 2**30 + 1, INT32_MAX, INT32_MAX,
                           INT32_MAX])
    nodes: list[dict[str, object]] = [
        {"multiplier": multiplier, "shift": shift, "bias": b, "rounding": rounding}
        for b in (INT32_MIN, INT32_MIN + 1, -1, 0, INT32_MAX)]
    nodes.append({"multiplier": multiplier, "shift": shift, "bias": INT32_MAX,
                  "rounding": rounding, "relu": 1, "zero_point": -7})
    return _table("int32", _i32(np.repeat(x[:, None], shift.size, axis=1)), nodes)


REQUANTIZE_TABLES: dict[str, Callable[[str], Built]] = {
    "ties": ties, "shift-extremes": shift_extremes, "multiplier-extremes": multiplier_extremes,
    "saturation": saturation, "relu-zero_point": relu_zero_point,
    "int32-extremes": int32_extremes,
}
"""Table name -> builder of the table's graph for a rounding."""


# --------------------------------------------------------------------------- MatMulInteger


def _matmul(name: str, a: np.ndarray, b: np.ndarray) -> Built:
    g = GraphBuilder(f"matmul_integer_{name}")
    x = g.input("x", TensorType.of(a))
    g.output(ops.matmul_integer(x, g.constant(b, name="w")), name="y")
    return g.build(), [a]


def _full(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


DEEPEST = 2**17 - 1
"""The largest K whose all -128 x -128 sum, K 2^14, stays within int32."""


def _constant(value: int, shape: tuple[int, int]) -> np.ndarray:
    return np.full(shape, value, np.int8)


def matmul_cases(rng: np.random.Generator) -> dict[str, Built]:
    """Every MatMulInteger corner case, by name (shape ``M x K x N``)."""
    extremes = np.array([-128, 127], np.int8)
    return {
        "extremes-128": _matmul("extremes_128", _constant(-128, (2, DEEPEST)),
                                _constant(-128, (DEEPEST, 3))),
        "wrap-128": _matmul("wrap_128", _constant(-128, (2, DEEPEST + 9)),
                            _constant(-128, (DEEPEST + 9, 3))),
        "extremes-mixed": _matmul("extremes_mixed", rng.choice(extremes, (5, 4096)),
                                  rng.choice(extremes, (4096, 6))),
        "empty-k": _matmul("empty_k", _full(rng, (3, 0)), _full(rng, (0, 4))),
        "empty-m": _matmul("empty_m", _full(rng, (0, 5)), _full(rng, (5, 4))),
        "empty-n": _matmul("empty_n", _full(rng, (3, 5)), _full(rng, (5, 0))),
        **{f"size-{m}x{k}x{n}": _matmul(f"size_{m}x{k}x{n}", _full(rng, (m, k)),
                                        _full(rng, (k, n)))
           for m, k, n in ((1, 1, 1), (3, 5, 7), (17, 9, 33))},
    }


# --------------------------------------------------------------------------- chains


def _layer_params(rng: np.random.Generator, columns: int, per_channel: bool,
                  depth: int) -> list[np.ndarray]:
    """Multiplier, shift and bias of a layer of ``depth`` full-range int8 products: scales
    that bring typical accumulators (about 128^2 sqrt(depth) / 3) into int8."""
    typical = 128.0**2 * np.sqrt(depth) / 3
    scales = rng.uniform(20, 90, columns if per_channel else 1) / typical
    pairs = [multiplier_and_shift(float(s)) for s in scales]
    multiplier, shift = (_i32([p[i] for p in pairs]) for i in (0, 1))
    if not per_channel:
        multiplier, shift = multiplier.reshape(()), shift.reshape(())
    bias = _i32(rng.integers(-int(typical), int(typical) + 1, columns))
    return [multiplier, shift, bias]


def chain(rng: np.random.Generator, sizes: tuple[int, int, int, int], rounding: str,
          per_channel: tuple[bool, bool]) -> Built:
    """``x [M, K]`` -> MatMulInteger -> Requantize(bias, relu) -> MatMulInteger ->
    Requantize(bias) -> ``y [M, N]``: a two-layer int8 MLP of ``sizes`` (M, K, H, N)."""
    m, k, hidden, n = sizes
    g = GraphBuilder("int8_mlp2")
    x = g.input("x", TensorType.of(np.zeros((m, k), np.int8)))
    h = requantize(ops.matmul_integer(x, _full(rng, (k, hidden))),
                   *_layer_params(rng, hidden, per_channel[0], k), rounding=rounding,
                   relu=True)
    y = requantize(ops.matmul_integer(h, _full(rng, (hidden, n))),
                   *_layer_params(rng, n, per_channel[1], hidden), rounding=rounding)
    g.output(y, name="y")
    return g.build(), [_full(rng, (m, k))]


CHAINS: dict[str, Callable[[np.random.Generator], Built]] = {
    "mlp2": lambda rng: chain(rng, (6, 16, 12, 5), "half_up", (True, True)),
    "mlp2-half_even": lambda rng: chain(rng, (4, 24, 8, 3), "half_even", (False, True)),
    "mlp2-wide": lambda rng: chain(rng, (33, 64, 48, 10), "half_even", (True, False)),
}
"""Chain name -> builder; ``ci`` takes the first two."""


# --------------------------------------------------------------------------- the pass


def quantized_mlp(rng: np.random.Generator, per_channel: bool, rounding: str) -> Built:
    """A seeded float32 MLP 8-16-16-4 (ReLU) quantized by :func:`polyhal.passes.quantize`
    on 64 calibration rows, and 24 rows to run it on, some 1.5 times wider than the
    calibration data (so that the int8 input saturates)."""
    g = GraphBuilder("float_mlp")
    h = g.input("x", f32["batch", 8])
    for fan_in, fan_out in ((8, 16), (16, 16)):
        weight = rng.normal(0, 1 / np.sqrt(fan_in), (fan_in, fan_out)).astype(np.float32)
        h = ops.relu(h @ weight + rng.normal(0, 0.1, fan_out).astype(np.float32))
    g.output(h @ rng.normal(0, 0.25, (16, 4)).astype(np.float32), name="y")
    calibration = rng.normal(0, 1, (64, 8)).astype(np.float32)
    graph = quantize(g.build(), [{"x": calibration}], per_channel=per_channel,
                     rounding=rounding)
    data = rng.normal(0, 1, (24, 8)) * np.where(np.arange(24) % 4 == 0, 1.5, 1.0)[:, None]
    return graph, [data.astype(np.float32)]


PASS_GRAPHS: dict[str, Callable[[np.random.Generator], Built]] = {
    "mlp": lambda rng: quantized_mlp(rng, True, "half_up"),
    "mlp-per_tensor-half_even": lambda rng: quantized_mlp(rng, False, "half_even"),
}
"""Quantized-graph name -> builder; ``ci`` takes the first."""
