"""Reading NIR graphs (files or ``nir.NIRGraph`` objects) as polyhal graphs of snn ops.

NIR states the dynamics of each neuron but not how to step them in time, so
``dt``, the integration ``method`` and the ``reset`` rule are arguments of
:func:`load_nir`, written onto every node. Each NIR node becomes the snn op of
the same semantics (:data:`~polyhal.interop.nir.primitives.OPS`), its
parameters graph constants named ``<node>.<field>``; a top-level ``Input``
becomes a graph input ``[time, batch, *shape]``, a top-level ``Output`` a
graph output of its name. Edges into one node sum (``core.Add``).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nir
import numpy as np

from polyhal.errors import PolyhalError, SerializationError, UnsupportedError, VerificationError
from polyhal.files import display
from polyhal.interop.nir.reader import read_nir_file
from polyhal.interop.nir.structure import flatten, topological_order
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph
from polyhal.ir.limits import Limits, current_limits, use_limits
from polyhal.ir.types import TensorType
from polyhal.ops import snn

Source = str | os.PathLike[str] | nir.NIRGraph


def load_nir(source: Source, *, dt: float, method: str = "euler", reset: str = "v_reset",
             dtype: DType | str = DType.FLOAT64, limits: Limits | None = None) -> Graph:
    """Read a NIR graph (a ``.nir`` file or a ``nir.NIRGraph``) as a verified polyhal graph.

    ``dt`` is the time step in seconds, ``method`` ``'euler'`` or ``'exact'``,
    ``reset`` ``'v_reset'`` (NIR's rule) or ``'subtract'``; ``dtype`` (float64
    or float32) types the inputs and parameters. Nothing in the file is
    executed; its tensors are checked against ``limits`` (default: the limits
    in force) before they are read. Graph inputs and outputs follow the order of
    the NIR nodes (HDF5 files keep them sorted by name).

    >>> import nir, numpy as np
    >>> from polyhal.reference import run
    >>> lif = nir.LIF(tau=np.ones(2), r=np.ones(2), v_leak=np.zeros(2),
    ...               v_threshold=np.full(2, 0.6))
    >>> graph = load_nir(nir.NIRGraph.from_list(lif), dt=0.5)
    >>> run(graph, np.ones((4, 1, 2)))["output"][:, 0, 0]
    array([0., 1., 0., 1.])

    Errors, each naming the file and the node or field:
    :class:`SerializationError` for a file that is not a readable NIR graph,
    :class:`UnsupportedError` for primitives polyhal lacks and for recurrent
    graphs, :class:`VerificationError` for shapes or parameters that do not fit
    and for algebraic loops, :class:`LimitExceededError` for a file over
    ``limits``.
    """
    limits = limits or current_limits()
    settings = _settings(dt, method, reset, dtype)
    if not isinstance(source, nir.NIRGraph | str | os.PathLike):
        raise SerializationError(f"load_nir: expected a path or a nir.NIRGraph, got "
                                 f"{type(source).__name__}")
    label = "<nir graph>" if isinstance(source, nir.NIRGraph) else display(source)
    with use_limits(limits):
        try:
            if isinstance(source, nir.NIRGraph):
                graph, name = source, "nir_graph"
            else:
                graph, name = read_nir_file(source, limits), Path(source).stem or "nir_graph"
            return _Importer(graph, name, **settings).run()
        except PolyhalError as exc:
            raise type(exc)(f"{label}: {exc}") from None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError,
                AssertionError) as exc:
            raise SerializationError(f"{label}: cannot import the NIR graph "
                                     f"({type(exc).__name__}: {exc})") from exc


def _settings(dt: Any, method: Any, reset: Any, dtype: Any) -> dict[str, Any]:
    if isinstance(dt, bool) or not isinstance(dt, int | float) or not math.isfinite(dt) \
            or dt <= 0:
        raise VerificationError(f"load_nir: dt={dt!r} must be a finite time step in seconds "
                                "> 0 (NIR files carry no dt)")
    if method not in snn.METHODS:
        raise VerificationError(f"load_nir: method={method!r} must be one of "
                                f"{', '.join(snn.METHODS)}")
    if reset not in snn.RESETS:
        raise VerificationError(f"load_nir: reset={reset!r} must be one of "
                                f"{', '.join(snn.RESETS)}")
    try:
        dtype = DType(dtype)
    except ValueError:
        raise UnsupportedError(f"load_nir: unknown dtype {dtype!r}") from None
    if dtype not in snn.FLOATS:
        raise UnsupportedError(f"load_nir: dtype {dtype.value} is not one of the snn ops' "
                               f"types ({', '.join(sorted(d.value for d in snn.FLOATS))})")
    return {"dt": float(dt), "method": method, "reset": reset, "dtype": dtype}


def as_array(value: Any, where: str) -> np.ndarray:
    """A NIR field as a numpy array of numbers (torch tensors included, when torch is loaded)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if value is None:
        raise VerificationError(f"{where} is missing")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{where} is not an array of numbers ({exc})") from None
    if array.dtype.kind not in "biuf":
        raise SerializationError(f"{where} must hold numbers, got {array.dtype} values")
    return array


def as_ints(value: Any, count: int, where: str) -> list[int]:
    """``count`` integers from an int or a sequence of ``count`` (or one) of them."""
    array = as_array(value, where).reshape(-1)
    if array.size == 1:
        array = np.repeat(array, count)
    if array.size != count or not _all_integers(array):
        raise VerificationError(f"{where} must be {count} integer(s), got "
                                f"{np.asarray(value).tolist()}")
    return [int(v) for v in array]


def _all_integers(array: np.ndarray) -> bool:
    """True when every element is a finite whole number (inf is not a size)."""
    return bool(np.all(np.isfinite(array)) and np.all(array == np.round(array)))


class _Importer:
    def __init__(self, graph: nir.NIRGraph, name: str, *, dt: float, method: str, reset: str,
                 dtype: DType) -> None:
        self.flat = flatten(graph)
        self.g = GraphBuilder(name)
        self.dt, self.method, self.reset, self.dtype = dt, method, reset, dtype
        self.taken = set(self.flat.nodes)
        self.values: dict[str, Var] = {}

    def fresh(self, stem: str) -> str:
        name, k = stem, 1
        while name in self.taken:
            k += 1
            name = f"{stem}_{k}"
        self.taken.add(name)
        return name

    def where(self, name: str) -> str:
        return f"NIR node {name!r} ({self.flat.kinds[name]})"

    def run(self) -> Graph:
        for name in topological_order(self.flat):
            node = self.flat.nodes[name]
            if name in self.flat.inputs:
                shape = self.shape(node.input_type.get("input"), f"{self.where(name)}: shape")
                self.values[name] = self.g.input(
                    name, TensorType(self.dtype, ("time", "batch", *shape)))
            else:
                self.values[name] = _MAPPERS[self.flat.kinds[name]](self, name, node,
                                                                    self.incoming(name))
        claimed = set(self.flat.inputs)
        for name in self.flat.outputs:
            value = self.values[name]
            if value.name in claimed:  # a graph input or another output: give it its own copy
                value = self.g.op("Identity", value, name=self.fresh(f"{name}.copy"))
            claimed.add(value.name)
            self.g.output(value, name=name)
        return self.g.build()

    def incoming(self, name: str) -> Var:
        """The node's input: its one source, or the sum of several."""
        preds = self.flat.preds[name]
        total = self.values[preds[0]]
        for pred in preds[1:]:
            value = self.values[pred]
            if value.shape[2:] != total.shape[2:]:
                raise VerificationError(
                    f"{self.where(name)} receives shape {list(total.shape[2:])} from "
                    f"{preds[0]!r} and {list(value.shape[2:])} from {pred!r}; NIR sums the "
                    "edges into a node, so their shapes must agree")
            total = self.g.op("Add", total, value, name=self.fresh(f"{name}.sum"))
        return total

    @staticmethod
    def shape(value: Any, where: str) -> tuple[int, ...]:
        array = as_array(value, where)
        if array.ndim != 1 or not _all_integers(array) or np.any(array < 0):
            raise VerificationError(f"{where} must be a list of sizes, got {array.tolist()}")
        return tuple(int(d) for d in array)

    def check_shape(self, x: Var, declared: Any, name: str, field: str) -> None:
        """A VerificationError unless ``x`` has the neuron shape a node declares (if any)."""
        if declared is None:
            return
        shape = self.shape(declared, f"{self.where(name)}: {field}")
        if tuple(x.shape[2:]) != shape:
            raise VerificationError(f"{self.where(name)} declares {field} {list(shape)} but "
                                    f"receives {list(x.shape[2:])}")

    def param(self, name: str, field: str, value: Any, shape: tuple[int, ...] | None = None
              ) -> Var:
        where = f"{self.where(name)}: field {field!r}"
        array = as_array(value, where)
        if shape is not None and array.shape != shape:
            try:
                array = np.broadcast_to(array, shape)
            except ValueError:
                raise VerificationError(f"{where} has shape {list(array.shape)}, expected "
                                        f"{list(shape)}") from None
        return self.g.constant(array.astype(self.dtype.numpy), name=self.fresh(f"{name}.{field}"))

    def params(self, name: str, node: nir.NIRNode, *fields: str) -> list[Var | None]:
        """Constants of the fields; an optional field left None stays an omitted input."""
        return [None if getattr(node, f) is None and f in ("v_reset", "w_in")
                else self.param(name, f, getattr(node, f)) for f in fields]

    def attrs(self, spiking: bool = False) -> dict[str, Any]:
        attrs: dict[str, Any] = {"dt": self.dt, "method": self.method}
        if spiking:
            attrs["reset"] = self.reset
        return attrs


Mapper = Callable[[_Importer, str, Any, Var], Var]


def _pass_through(im: _Importer, name: str, node: Any, x: Var) -> Var:
    """An inner Input or a graph Output: its value, checked against its declared shape."""
    if isinstance(node, nir.Input):
        im.check_shape(x, node.input_type.get("input"), name, "shape")
    else:
        im.check_shape(x, node.output_type.get("output"), name, "shape")
    return x


def _lif(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.lif(x, *im.params(name, node, "tau", "r", "v_leak", "v_threshold", "v_reset"),
                   name=name, **im.attrs(spiking=True))


def _cuba_lif(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.cuba_lif(x, *im.params(name, node, "tau_syn", "tau_mem", "r", "v_leak",
                                      "v_threshold", "v_reset", "w_in"),
                        name=name, **im.attrs(spiking=True))


def _if(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.if_(x, *im.params(name, node, "r", "v_threshold", "v_reset"), name=name,
                   **im.attrs(spiking=True))


def _li(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.li(x, *im.params(name, node, "tau", "r", "v_leak"), name=name, **im.attrs())


def _integrator(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.integrator(x, *im.params(name, node, "r"), name=name, **im.attrs())


def _threshold(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.threshold(x, *im.params(name, node, "threshold"), name=name)


def _delay(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.delay(x, *im.params(name, node, "delay"), name=name, dt=im.dt)


def _scale(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.scale(x, *im.params(name, node, "scale"), name=name)


def _weight(im: _Importer, name: str, node: Any) -> Var:
    weight = as_array(node.weight, f"{im.where(name)}: field 'weight'")
    if weight.ndim != 2:
        raise UnsupportedError(f"{im.where(name)}: weight of shape {list(weight.shape)}; polyhal "
                               "reads [out, in] weights only")
    return im.param(name, "weight", weight)


def _linear(im: _Importer, name: str, node: Any, x: Var) -> Var:
    return snn.linear(x, _weight(im, name, node), name=name)


def _affine(im: _Importer, name: str, node: Any, x: Var) -> Var:
    weight = _weight(im, name, node)
    return snn.affine(x, weight, im.param(name, "bias", node.bias, weight.shape[:1]), name=name)


def _conv_pads(im: _Importer, name: str, padding: Any, kernel: tuple[int, ...],
               strides: list[int], dilations: list[int]) -> list[int]:
    rank = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * (2 * rank)
        if padding != "same":
            raise VerificationError(f"{im.where(name)}: padding {padding!r} must be 'same', "
                                    "'valid' or sizes")
        if any(s != 1 for s in strides):
            raise UnsupportedError(f"{im.where(name)}: padding 'same' with strides {strides} "
                                   "(as in PyTorch, 'same' needs stride 1)")
        totals = [d * (k - 1) for d, k in zip(dilations, kernel, strict=True)]
        return [t // 2 for t in totals] + [t - t // 2 for t in totals]  # PyTorch: extra at end
    return as_ints(padding, rank, f"{im.where(name)}: field 'padding'") * 2


def _conv(rank: int) -> Mapper:
    def convert(im: _Importer, name: str, node: Any, x: Var) -> Var:
        where = im.where(name)
        weight = as_array(node.weight, f"{where}: field 'weight'")
        if weight.ndim != rank + 2:
            raise VerificationError(f"{where}: weight must be [C_out, C_in/groups, {rank} "
                                    f"kernel sizes], got shape {list(weight.shape)}")
        strides = as_ints(node.stride, rank, f"{where}: field 'stride'")
        dilations = as_ints(node.dilation, rank, f"{where}: field 'dilation'")
        groups = as_ints(node.groups, 1, f"{where}: field 'groups'")[0]
        if node.input_shape is not None and len(x.shape) == rank + 3:
            declared = as_ints(node.input_shape, rank, f"{where}: field 'input_shape'")
            if list(x.shape[3:]) != declared:
                raise VerificationError(f"{where} declares input_shape {declared} but receives "
                                        f"spatial shape {list(x.shape[3:])}")
        pads = _conv_pads(im, name, node.padding, weight.shape[2:], strides, dilations)
        bias = None if node.bias is None else im.param(name, "bias", node.bias, weight.shape[:1])
        conv = snn.conv1d if rank == 1 else snn.conv2d
        return conv(x, im.param(name, "weight", weight), bias, strides=strides, pads=pads,
                    dilations=dilations, group=groups, name=name)

    return convert


def _sum_pool(im: _Importer, name: str, node: Any, x: Var) -> Var:
    where = im.where(name)
    pads = as_ints(node.padding, 2, f"{where}: field 'padding'")
    return snn.sum_pool2d(x, kernel_shape=as_ints(node.kernel_size, 2, f"{where}: field "
                                                                    "'kernel_size'"),
                          strides=as_ints(node.stride, 2, f"{where}: field 'stride'"),
                          pads=pads * 2, name=name)


def _flatten(im: _Importer, name: str, node: Any, x: Var) -> Var:
    im.check_shape(x, (node.input_type or {}).get("input"), name, "input_type")
    where = im.where(name)
    return snn.flatten(x, start_dim=as_ints(node.start_dim, 1, f"{where}: field 'start_dim'")[0],
                       end_dim=as_ints(node.end_dim, 1, f"{where}: field 'end_dim'")[0],
                       name=name)


_MAPPERS: dict[str, Mapper] = {
    "Input": _pass_through, "Output": _pass_through, "LIF": _lif, "CubaLIF": _cuba_lif,
    "IF": _if, "LI": _li, "I": _integrator, "Threshold": _threshold, "Delay": _delay,
    "Linear": _linear, "Affine": _affine, "Scale": _scale, "Conv1d": _conv(1),
    "Conv2d": _conv(2), "SumPool2d": _sum_pool, "Flatten": _flatten}
