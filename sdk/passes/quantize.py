"""Post-training quantization: a float32 graph to one that computes in int8.

``quantize(graph, calibration)`` returns a graph with the same interface (input
and output names and float32 types) whose linear layers run on integers:

- **Layers.** Each ``MatMul(x, W)``, optionally followed by ``Add`` of a bias
  and then by ``Relu``, and each ``Gemm(x, W[, C])`` (``transA=0``; ``alpha``,
  ``beta`` and ``transB`` are folded into the constants), optionally followed by
  ``Relu``, whose weight is a constant float32 matrix and whose bias is a
  constant per-column vector, becomes ``MatMulInteger`` (int8 x int8 -> int32,
  zero points 0) followed by ``quant.Requantize`` (bias, rescale, relu) back to
  int8. Intermediate values of the layer may have no other user.
- **Weights** are symmetric int8, ``W_q = round(W / s_w)`` in [-127, 127], with
  ``s_w = max|W| / 127`` per output column (``per_channel=True``, the default)
  or for the whole matrix; an all-zero column takes ``s_w = 1``.
- **Activations** are symmetric int8 per tensor: their scales ``s = max|v| /
  127`` come from running the float graph on the reference executor over the
  ``calibration`` feeds (the largest magnitude seen; a value that is always 0
  takes ``s = 1``), rounded to float32 as the graph stores them.
- **Requantize** gets ``bias_q = round(b / (s_in s_w))`` (int32, saturated) and
  the effective scale ``s_in s_w / s_out`` as ``multiplier / 2^shift`` with
  ``multiplier`` in [2^30, 2^31) and ``shift`` in [0, 63]
  (:func:`~polyhal.ops.requantize.multiplier_and_shift`); a following ``Relu``
  becomes ``relu=1``. ``rounding`` is ``"half_up"`` by default, the op's own
  default and the cheapest in hardware (one add before the shift); a tie
  needs ``p`` to be an exact odd multiple of ``2^(shift-1)``, so it is rare and
  its bias negligible. ``"half_even"`` is the other choice.
- **Edges.** ``QuantizeLinear`` (scale ``s``, zero point int8 0) where a float
  value enters a layer, ``DequantizeLinear`` where a layer's int8 result meets
  a float op or a graph output; consecutive layers pass int8 straight on. Every
  other op stays float, with DequantizeLinear before it and QuantizeLinear
  after it where layers surround it.

A layer whose depth ``K`` could overflow the int32 accumulator (``K * 128 *
127 >= 2^31``) stays float. A graph with no layer to quantize, an empty
calibration and a feed that does not match the graph's inputs are errors
(:class:`~polyhal.errors.IRError`, :class:`~polyhal.errors.InputBindingError`).

>>> import numpy as np
>>> from polyhal import ops
>>> from polyhal.ir import GraphBuilder, f32
>>> g = GraphBuilder("layer")
>>> x = g.input("x", f32["batch", 3])
>>> w = np.array([[0.5, -1.0], [0.25, 0.0], [1.0, 2.0]], np.float32)
>>> g.output(ops.relu(x @ w + np.float32(0.1)), name="y")
>>> feeds = [{"x": np.random.default_rng(0).uniform(-1, 1, (16, 3)).astype(np.float32)}]
>>> [n.qualified_op for n in quantize(g.build(), feeds).nodes]  # doctest: +NORMALIZE_WHITESPACE
['core.QuantizeLinear', 'core.MatMulInteger', 'quant.Requantize',
 'core.DequantizeLinear']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from polyhal.errors import InputBindingError, IRError
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph, Node, Value
from polyhal.ops import snake_name
from polyhal.ops.requantize import ROUNDINGS, multiplier_and_shift
from polyhal.passes.cleanup import eliminate_dead_code
from polyhal.passes.rebuild import replay
from polyhal.passes.rewrite import Match, P, Rule, V, find_match

INT8_MAX = 127
MAX_DEPTH = (2**31 - 1) // (128 * INT8_MAX)
"""The largest K whose int8 x int8 dot products cannot overflow int32."""

_MATMUL = P("MatMul", V("x"), V("w", const=True), name="linear")
_GEMMS = (P("Gemm", V("x"), V("w", const=True), V("b", const=True), name="linear"),
          P("Gemm", V("x"), V("w", const=True), name="linear"))
_BIASED = (P("Add", _MATMUL, V("b", const=True)), P("Add", V("b", const=True), _MATMUL))
LAYER_PATTERNS = (*(P("Relu", p, name="relu") for p in (*_BIASED, *_GEMMS, _MATMUL)),
                  *_BIASED, *_GEMMS, _MATMUL)
"""The layers the pass quantizes, most specific first."""


@dataclass(frozen=True)
class Layer:
    """One matched layer: ``out = relu?(x @ weight + bias)`` in float64 constants."""

    root: Node
    x: str
    weight_name: str
    weight: np.ndarray
    """[K, N], alpha and transB folded in."""
    bias: np.ndarray | None
    """[N], beta folded in."""
    relu: bool
    covered: tuple[str, ...]

    @property
    def out(self) -> str:
        """The value the layer computes."""
        return self.root.outputs[0].name


def quantize(graph: Graph, calibration: Iterable[Mapping[str, np.ndarray]], *,
             per_channel: bool = True, rounding: str = "half_up") -> Graph:
    """``graph`` with its linear layers in int8, calibrated on ``calibration`` (a
    sequence of feeds, each a mapping from every input name to an array); see
    :mod:`polyhal.passes.quantize`."""
    where = f"quantize of graph {graph.name!r}"
    if rounding not in ROUNDINGS:
        raise IRError(f"{where}: rounding={rounding!r} must be one of "
                      f"{', '.join(map(repr, ROUNDINGS))}")
    layers = find_layers(graph)
    if not layers:
        raise IRError(f"{where}: nothing to quantize; the pass quantizes MatMul (+ Add) "
                      "(+ Relu) and Gemm (+ Relu) with a constant 2-D float32 weight, a "
                      "constant per-column bias and a float32 input")
    names = {name for layer in layers.values() for name in (layer.x, layer.out)}
    scales = calibrate(graph, calibration, [n for n in graph.value_types if n in names], where)
    return _Quantizer(graph, layers, scales, per_channel, rounding).run()


# --------------------------------------------------------------------------- matching


def _bias_vector(bias: np.ndarray, rank: int, columns: int) -> np.ndarray | None:
    """A constant added to a ``[..., N]`` result as an ``[N]`` vector, or ``None`` when it
    varies along another axis (or would broadcast the result to a larger shape)."""
    if bias.ndim > rank or any(d != 1 for d in bias.shape[:-1]):
        return None
    if bias.ndim and bias.shape[-1] not in (1, columns):
        return None
    return np.broadcast_to(bias.astype(np.float64).reshape(-1), (columns,)).copy()


def _layer(match: Match) -> Layer | None:
    """The layer a match stands for, or ``None`` when it cannot be quantized."""
    x, w = match.type("x"), match.const("w")
    linear = match.nodes["linear"]
    if x.dtype is not DType.FLOAT32 or w is None or w.dtype != np.float32 or w.ndim != 2:
        return None
    weight = w.astype(np.float64)
    bias = match.const("b") if "b" in match.values else None
    if linear.op == "Gemm":
        attrs = match.attrs("linear")
        if attrs["transA"] or x.rank != 2:
            return None
        weight = attrs["alpha"] * (weight.T if attrs["transB"] else weight)
        bias = None if bias is None else attrs["beta"] * bias.astype(np.float64)
    elif x.rank < 1:
        return None
    if weight.shape[0] > MAX_DEPTH or (bias is not None and bias.dtype.kind != "f"):
        return None
    vector = None
    if bias is not None:
        vector = _bias_vector(np.asarray(bias), x.rank, weight.shape[1])
        if vector is None:
            return None
    if not (np.isfinite(weight).all() and (vector is None or np.isfinite(vector).all())):
        return None
    return Layer(match.root, match.values["x"], match.values["w"], weight, vector,
                 "relu" in match.nodes,
                 tuple(n.name for n in match.covered))


def find_layers(graph: Graph) -> dict[str, Layer]:
    """The layers :func:`quantize` would quantize, by the name of their last node."""
    rules = [Rule(f"layer-{i}", pattern, "x") for i, pattern in enumerate(LAYER_PATTERNS)]
    layers: dict[str, Layer] = {}
    claimed: set[str] = set()
    for node in reversed(graph.nodes):
        if node.name in claimed:
            continue
        for rule in rules:
            match = find_match(rule, graph, node)
            layer = None if match is None else _layer(match)
            if layer is not None and not claimed & set(layer.covered):
                layers[node.name] = layer
                claimed.update(layer.covered)
                break
    return layers


# --------------------------------------------------------------------------- calibration


def _scale(magnitude: float) -> float:
    """The symmetric int8 scale of values up to ``magnitude``, as float32 stores it."""
    return float(np.float32(magnitude / INT8_MAX)) if magnitude > 0 else 1.0


def calibrate(graph: Graph, calibration: Iterable[Mapping[str, np.ndarray]],
              names: list[str], where: str = "calibration") -> dict[str, float]:
    """The symmetric int8 scale of each value in ``names``: its largest magnitude over the
    float graph run on every feed of ``calibration``, over 127."""
    from polyhal.reference import ReferenceExecutor

    if isinstance(calibration, Mapping):
        raise InputBindingError(f"{where}: calibration must be a sequence of feeds (mappings "
                                "from input name to array), got one mapping; wrap it in a list")
    feeds = list(calibration)
    if not feeds:
        raise InputBindingError(f"{where}: calibration is empty; give at least one feed of "
                                f"the inputs {', '.join(v.name for v in graph.inputs)}")
    listed = {v.name for v in graph.outputs}
    extra = tuple(Value(n, graph.value_type(n)) for n in names if n not in listed)
    observed = ReferenceExecutor(Graph(graph.name, graph.inputs, graph.outputs + extra,
                                       graph.nodes, graph.constants))
    largest = dict.fromkeys(names, 0.0)
    inputs = [v.name for v in graph.inputs]
    for index, feed in enumerate(feeds):
        if not isinstance(feed, Mapping):
            raise InputBindingError(f"{where}: calibration feed {index} is a "
                                    f"{type(feed).__name__}, not a mapping of input names "
                                    "to arrays")
        missing = [n for n in inputs if n not in feed]
        if missing:
            raise InputBindingError(f"{where}: calibration feed {index} lacks input(s) "
                                    f"{', '.join(missing)} (the graph's inputs: "
                                    f"{', '.join(inputs)})")
        try:
            values = observed(**feed)
        except InputBindingError as exc:
            raise InputBindingError(f"{where}: calibration feed {index}: {exc}") from None
        for name in names:
            array = values[name]
            if array.size:
                magnitude = float(np.max(np.abs(array.astype(np.float64))))
                if not np.isfinite(magnitude):
                    raise InputBindingError(f"{where}: calibration feed {index} gives "
                                            f"non-finite values of {name!r}")
                largest[name] = max(largest[name], magnitude)
    return {name: _scale(magnitude) for name, magnitude in largest.items()}


# --------------------------------------------------------------------------- rewriting


def quantize_weight(weight: np.ndarray, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 ``weight`` ``[K, N]`` and its scales (``[N]``, or one, as ``[1]``)."""
    magnitude = np.abs(weight).max(axis=0) if per_channel else np.abs(weight).max().reshape(1)
    scale = np.where(magnitude > 0, magnitude / INT8_MAX, 1.0)
    codes = np.clip(np.rint(weight / scale), -INT8_MAX, INT8_MAX).astype(np.int8)
    return codes, scale


class _Quantizer:
    """One run of the pass: the builder, and each value in float and in int8."""

    def __init__(self, graph: Graph, layers: dict[str, Layer], scales: dict[str, float],
                 per_channel: bool, rounding: str) -> None:
        self.graph, self.layers, self.scales = graph, layers, scales
        self.per_channel, self.rounding = per_channel, rounding
        self.covered = {name for layer in layers.values() for name in layer.covered}
        self.outputs = {v.name for v in graph.outputs}
        self.taken = {n.name for n in graph.nodes} | set(graph.value_types)
        self.builder = GraphBuilder(graph.name, reserved=sorted(self.taken))
        self.floats: dict[str, Var] = {}
        self.ints: dict[str, tuple[Var, float]] = {}

    def run(self) -> Graph:
        g = self.builder
        for value in self.graph.inputs:
            self.floats[value.name] = g.input(value.name, value.type)
        for name, array in self.graph.constants.items():
            self.floats[name] = g.constant(array, name=name)
        for node in self.graph.nodes:
            if node.name in self.layers:
                self._layer(self.layers[node.name])
            elif node.name not in self.covered:
                outs = replay(g, node, [self.float_of(i) if i else None for i in node.inputs])
                self.floats.update(zip(node.output_names, outs, strict=True))
        for value in self.graph.outputs:
            g.output(self.float_of(value.name), name=value.name)
        built = eliminate_dead_code(g.build())
        return Graph(built.name, built.inputs, built.outputs, built.nodes, built.constants,
                     self.graph.doc)

    def _fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def _constant(self, array: np.ndarray, base: str) -> Var:
        return self.builder.constant(array, name=self._fresh(base))

    def _op(self, op: str, *inputs: Var | None, base: str, output: str | None = None,
            **attrs: object) -> Var:
        """``op`` in a node named ``<base>_<op in snake case>`` whose output is ``output``
        (default: the node's name)."""
        node = self._fresh(f"{base}_{snake_name(op)}")
        return self.builder.op(op, *inputs, domain="quant" if op == "Requantize" else "core",
                               name=node, output_names=[output or node], **attrs)

    def float_of(self, name: str) -> Var:
        """The float value ``name``: as built, or dequantized (under its own name) from
        the int8 a layer made."""
        if name not in self.floats:
            codes, scale = self.ints[name]
            self.floats[name] = self._op("DequantizeLinear", codes,
                                         self._constant(np.float32(scale), f"{name}_scale"),
                                         base=name, output=name)
        return self.floats[name]

    def int_of(self, name: str) -> tuple[Var, float]:
        """The int8 value ``name`` and its scale: as a layer made it, or quantized."""
        if name not in self.ints:
            scale = self.scales[name]
            codes = self._op("QuantizeLinear", self.float_of(name),
                             self._constant(np.float32(scale), f"{name}_scale"),
                             self._constant(np.int8(0), f"{name}_zero_point"), base=name,
                             output=self._fresh(f"{name}_int8"))
            self.ints[name] = (codes, scale)
        return self.ints[name]

    def _layer(self, layer: Layer) -> None:
        codes, in_scale = self.int_of(layer.x)
        weight, weight_scale = quantize_weight(layer.weight, self.per_channel)
        base = layer.root.name
        accumulated = self._op("MatMulInteger", codes,
                               self._constant(weight, f"{layer.weight_name}_int8"), base=base)
        out_scale = self.scales[layer.out]
        pairs = [multiplier_and_shift(s) for s in in_scale * weight_scale / out_scale]
        multiplier, shift = (np.array(column, np.int32) for column in zip(*pairs, strict=True))
        if not self.per_channel:
            multiplier, shift = multiplier.reshape(()), shift.reshape(())
        params = [self._constant(multiplier, f"{base}_multiplier"),
                  self._constant(shift, f"{base}_shift")]
        if layer.bias is not None:
            info = np.iinfo(np.int32)
            bias = np.clip(np.rint(layer.bias / (in_scale * weight_scale)), info.min, info.max)
            params.append(self._constant(bias.astype(np.int32), f"{base}_bias"))
        result = self._op("Requantize", accumulated, *params, base=base,
                          output=self._fresh(f"{layer.out}_int8"), zero_point=0,
                          rounding=self.rounding, relu=int(layer.relu))
        self.ints[layer.out] = (result, out_scale)
