"""Writing polyhal graphs of snn ops as NIR graphs.

Each snn node becomes the NIR primitive of the same semantics, its constant
inputs the primitive's fields (per-neuron parameters broadcast to the neuron
shape, as NIR wants); graph inputs and outputs ``[time, batch, *F]`` become
``Input``/``Output`` nodes of shape ``F``; a ``core.Add`` of two values
becomes two edges into the consumer (NIR sums them) and a ``core.Identity``
an edge. NIR carries no ``dt``, integration method or reset rule, so every
node must agree on them, and whoever reads the file passes the same ones to
:func:`~polyhal.interop.nir.load_nir`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping
from typing import Any

import nir
import numpy as np

from polyhal.errors import SerializationError, UnsupportedError
from polyhal.files import display, write_atomically
from polyhal.ir import dims as D
from polyhal.ir.graph import Graph, Node
from polyhal.ir.types import TensorType
from polyhal.ops.registry import get_op

_PASSING = {"Add", "Identity"}
"""Core ops NIR expresses by its edges."""


def to_nir(graph: Graph) -> nir.NIRGraph:
    """``graph`` as a ``nir.NIRGraph``; an :class:`UnsupportedError` naming every node NIR
    cannot express.

    >>> import numpy as np
    >>> from polyhal.ir import GraphBuilder, TensorType, DType
    >>> from polyhal.ops import snn
    >>> g = GraphBuilder("scale")
    >>> x = g.input("x", TensorType(DType.FLOAT64, ("time", "batch", 2)))
    >>> g.output(snn.scale(x, g.constant(np.array([1.0, 2.0])), name="s"), name="y")
    >>> sorted(to_nir(g.build()).nodes)
    ['s', 'x', 'y']
    """
    return _Exporter(graph).run()


def save_nir(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write ``graph`` (snn ops, their constants, graph inputs and outputs) as a NIR file.

    The file is replaced whole or not at all (:func:`polyhal.files.write_atomically`):
    a failed write leaves a previous file at ``path`` as it was, and a symbolic link
    there is replaced, not written through.

    >>> save_nir(graph, "model.nir")                     # doctest: +SKIP
    >>> same = load_nir("model.nir", dt=1e-3)            # doctest: +SKIP
    """
    model = to_nir(graph)
    # h5py reads back what it writes, which write_atomically's write-only stream does
    # not allow: the file is made in memory, then written whole.
    buffer = io.BytesIO()
    try:
        # h5py compresses no scalar dataset: a node over single neurons (features ())
        # has 0-d parameters, and such a file is written uncompressed.
        nir.write(buffer, model, compression=None if _has_scalar(model.to_dict()) else "gzip")
        write_atomically(path, buffer.getvalue())
    except (OSError, ValueError, TypeError) as exc:
        raise SerializationError(f"{display(path)}: cannot write the NIR file ({exc})") from None


def _has_scalar(tree: Mapping[str, Any]) -> bool:
    """True when a NIR model's dict holds a 0-d array anywhere."""
    return any(_has_scalar(v) if isinstance(v, Mapping) else
               isinstance(v, np.ndarray) and v.ndim == 0 for v in tree.values())


def _features(t: TensorType, where: str) -> tuple[int, ...]:
    if t.rank < 2 or not all(D.is_static(d) for d in t.shape[2:]):
        raise UnsupportedError(f"{where} is {t}; NIR needs [time, batch, *F] with static F")
    return tuple(int(d) for d in t.shape[2:])


def _safe(name: str) -> str:
    """A name HDF5 can hold as one group name."""
    name = name.replace("/", "_")
    return "_" if name in ("", ".", "..") else name


class _Exporter:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: dict[str, Any] = {}
        self.edges: list[tuple[str, str]] = []
        self.input_keys: dict[str, str] = {}  # graph input -> NIR key
        self.node_keys: dict[str, str] = {}  # snn node name -> NIR key
        self.settings: dict[str, dict[Any, str]] = {"dt": {}, "method": {}, "reset": {}}

    def key(self, stem: str) -> str:
        name, k = _safe(stem), 1
        base = name
        while name in self.nodes:
            k += 1
            name = f"{base}_{k}"
        self.nodes[name] = None  # reserved; filled in below
        return name

    def run(self) -> nir.NIRGraph:
        g = self.graph
        unsupported = [f"{n.name!r} ({n.qualified_op})" for n in g.nodes
                       if not (n.domain == "snn" or (n.domain == "core" and n.op in _PASSING))]
        if unsupported:
            raise UnsupportedError(f"graph {g.name!r}: NIR has no equivalent of node "
                                   f"{', '.join(unsupported[:10])}"
                                   + (f" and {len(unsupported) - 10} more" if
                                      len(unsupported) > 10 else ""))
        for value in g.inputs:
            self.input_keys[value.name] = self.key(value.name)
        outputs = [self.key(value.name) for value in g.outputs]
        snn_nodes = [n for n in g.nodes if n.domain == "snn"]
        for node in snn_nodes:
            self.node_keys[node.name] = self.key(node.name)
        for value in g.inputs:
            shape = np.array(_features(value.type, f"graph input {value.name!r}"), np.int64)
            self.nodes[self.input_keys[value.name]] = nir.Input(input_type=shape)
        for node in snn_nodes:
            self.nodes[self.node_keys[node.name]] = _CONVERTERS[node.op](self, node)
            self.connect(node.inputs[0], self.node_keys[node.name], f"node {node.name!r}")
            self.check_unused(node)
        for key, value in zip(outputs, g.outputs, strict=True):
            shape = _features(value.type, f"graph output {value.name!r}")
            self.nodes[key] = nir.Output(output_type=np.array(shape, np.int64))
            self.connect(value.name, key, f"graph output {value.name!r}")
        self.check_settings()
        return nir.NIRGraph(nodes=self.nodes, edges=self.edges, type_check=False)

    # ------------------------------------------------------------ edges

    def sources(self, value: str, where: str) -> list[str]:
        """The NIR keys whose outputs sum to ``value``."""
        if value in self.input_keys:
            return [self.input_keys[value]]
        node = self.graph.producers.get(value)
        if node is None:
            raise UnsupportedError(f"{where} reads constant {value!r}; NIR data flows from "
                                   "Input nodes only")
        if node.domain == "snn":
            if node.outputs[0].name != value:
                raise UnsupportedError(f"{where} reads {value!r}, output "
                                       f"{node.output_names.index(value)} of {node.name!r} "
                                       f"({node.qualified_op}); NIR nodes have one output")
            return [self.node_keys[node.name]]
        if node.op == "Add":
            a, b = (self.graph.value_type(name) for name in node.inputs)
            if a.shape != b.shape:
                raise UnsupportedError(f"node {node.name!r} (core.Add) broadcasts {a} and {b}; "
                                       "NIR sums edges of one shape only")
            return [s for name in node.inputs for s in self.sources(name, where)]
        return self.sources(node.inputs[0], where)

    def connect(self, value: str, key: str, where: str) -> None:
        for source in self.sources(value, where):
            if (source, key) in self.edges:
                raise UnsupportedError(f"{where} adds the output of {source!r} to itself; NIR "
                                       "cannot repeat an edge (scale it with a Scale node)")
            self.edges.append((source, key))

    def check_unused(self, node: Node) -> None:
        for value in node.outputs[1:]:
            if value.name in self.graph.consumers or any(
                    o.name == value.name for o in self.graph.outputs):
                raise UnsupportedError(f"node {node.name!r} ({node.qualified_op}): its output "
                                       f"{value.name!r} is used, but a NIR node has one output")

    # ------------------------------------------------------------ nodes

    def constant(self, node: Node, index: int) -> np.ndarray | None:
        """The constant at input ``index`` (None if omitted)."""
        name = node.inputs[index] if index < len(node.inputs) else ""
        if not name:
            return None
        if name not in self.graph.constants:
            spec = get_op(node.op, node.domain).input_spec(index).name
            raise UnsupportedError(f"node {node.name!r} ({node.qualified_op}): input {spec} "
                                   f"reads {name!r}, which is not a constant; NIR stores "
                                   "parameters in the node")
        return np.array(self.graph.constants[name])

    def neuron(self, node: Node, fields: tuple[str, ...], defaults: dict[str, float] | None = None
               ) -> dict[str, np.ndarray]:
        """Per-neuron constants broadcast to the neuron shape, by NIR field name."""
        features = _features(self.graph.value_type(node.inputs[0]), f"node {node.name!r} input")
        defaults = defaults or {}
        params = {}
        for index, field in enumerate(fields, start=1):
            value = self.constant(node, index)
            if value is None:
                value = np.full((), defaults[field], self.graph.value_type(node.inputs[0])
                                .dtype.numpy)
            params[field] = np.array(np.broadcast_to(value, features))
        return params

    def record(self, node: Node, *names: str) -> None:
        for name in names:
            self.settings[name].setdefault(node.attrs[name], node.name)

    def check_settings(self) -> None:
        for name, seen in self.settings.items():
            if len(seen) > 1:
                found = ", ".join(f"{v!r} (node {n!r})" for v, n in seen.items())
                raise UnsupportedError(f"graph {self.graph.name!r}: NIR has one {name} for "
                                       f"the whole graph, but the nodes use {found}")


def _lif(ex: _Exporter, node: Node) -> Any:
    ex.record(node, "dt", "method", "reset")
    return nir.LIF(**ex.neuron(node, ("tau", "r", "v_leak", "v_threshold", "v_reset"),
                               {"v_reset": 0.0}))


def _cuba_lif(ex: _Exporter, node: Node) -> Any:
    ex.record(node, "dt", "method", "reset")
    return nir.CubaLIF(**ex.neuron(node, ("tau_syn", "tau_mem", "r", "v_leak", "v_threshold",
                                          "v_reset", "w_in"), {"v_reset": 0.0, "w_in": 1.0}))


def _if(ex: _Exporter, node: Node) -> Any:
    ex.record(node, "dt", "method", "reset")
    return nir.IF(**ex.neuron(node, ("r", "v_threshold", "v_reset"), {"v_reset": 0.0}))


def _li(ex: _Exporter, node: Node) -> Any:
    ex.record(node, "dt", "method")
    return nir.LI(**ex.neuron(node, ("tau", "r", "v_leak")))


def _integrator(ex: _Exporter, node: Node) -> Any:
    ex.record(node, "dt", "method")
    return nir.I(**ex.neuron(node, ("r",)))


def _delay(ex: _Exporter, node: Node) -> Any:
    ex.record(node, "dt")
    return nir.Delay(**ex.neuron(node, ("delay",)))


def _linear(ex: _Exporter, node: Node) -> Any:
    weight = ex.constant(node, 1)
    if node.op == "Linear":
        return nir.Linear(weight=weight)
    return nir.Affine(weight=weight, bias=ex.constant(node, 2))


def _symmetric_pads(node: Node, pads: list[int], rank: int) -> list[int]:
    if pads[:rank] != pads[rank:]:
        raise UnsupportedError(f"node {node.name!r} ({node.qualified_op}): pads {pads} differ "
                               "at the two ends; NIR pads both ends alike")
    return pads[:rank]


def _conv(ex: _Exporter, node: Node) -> Any:
    rank = 1 if node.op == "Conv1d" else 2
    weight = ex.constant(node, 1)
    bias = ex.constant(node, 2)
    bias = np.zeros(weight.shape[:1], weight.dtype) if bias is None else bias
    strides = list(node.attrs.get("strides") or [1] * rank)
    dilations = list(node.attrs.get("dilations") or [1] * rank)
    pads = list(node.attrs.get("pads") or [0] * (2 * rank))
    totals = [d * (k - 1) for d, k in zip(dilations, weight.shape[2:], strict=True)]
    same = [t // 2 for t in totals] + [t - t // 2 for t in totals]
    if pads[:rank] != pads[rank:] and pads == same and all(s == 1 for s in strides):
        padding: Any = "same"
    else:
        padding = _symmetric_pads(node, pads, rank)
    spatial = _features(ex.graph.value_type(node.inputs[0]), f"node {node.name!r} input")[1:]
    group = int(node.attrs.get("group", 1))
    if rank == 1:
        padding = padding if padding == "same" else padding[0]
        return nir.Conv1d(input_shape=spatial[0], weight=weight, stride=strides[0],
                          padding=padding, dilation=dilations[0], groups=group, bias=bias)
    return nir.Conv2d(input_shape=tuple(spatial), weight=weight, stride=tuple(strides),
                      padding=padding if padding == "same" else tuple(padding),
                      dilation=tuple(dilations), groups=group, bias=bias)


def _sum_pool(ex: _Exporter, node: Node) -> Any:
    kernel = list(node.attrs["kernel_shape"])
    strides = list(node.attrs.get("strides") or kernel)
    pads = _symmetric_pads(node, list(node.attrs.get("pads") or [0, 0, 0, 0]), 2)
    return nir.SumPool2d(kernel_size=np.array(kernel), stride=np.array(strides),
                         padding=np.array(pads))


def _flatten(ex: _Exporter, node: Node) -> Any:
    features = _features(ex.graph.value_type(node.inputs[0]), f"node {node.name!r} input")
    return nir.Flatten(input_type=np.array(features, np.int64),
                       start_dim=int(node.attrs.get("start_dim", 0)),
                       end_dim=int(node.attrs.get("end_dim", -1)))


_CONVERTERS: dict[str, Callable[[_Exporter, Node], Any]] = {
    "LIF": _lif, "CubaLIF": _cuba_lif, "IF": _if, "LI": _li, "Integrator": _integrator,
    "Delay": _delay, "Linear": _linear, "Affine": _linear, "Conv1d": _conv, "Conv2d": _conv,
    "SumPool2d": _sum_pool, "Flatten": _flatten,
    "Threshold": lambda ex, node: nir.Threshold(**ex.neuron(node, ("threshold",))),
    "Scale": lambda ex, node: nir.Scale(**ex.neuron(node, ("scale",))),
}
