"""Lowering: an snn graph to populations of neurons and the synapse maps between them.

Pure numpy: nothing here imports brian2. Every value of the graph becomes a
:class:`Signal`, a linear function of one *root* (a graph input, a
population's spikes or a population's state variable) plus a constant bias.
Linear ops only transform signals, so a chain such as
``Flatten -> Linear -> Delay`` between two neuron layers is one
:class:`~polyhal.adapters.neuro.maps.SynapseMap`. Neuron ops become
:class:`Population` objects reading their input signal as a current; a graph
output that is not a root becomes a *probe* population that records it.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from polyhal.adapters.neuro import maps
from polyhal.adapters.neuro.maps import SynapseMap
from polyhal.adapters.neuro.models import DEFAULTS, MODELS, SPIKES, NeuronModel, probe
from polyhal.errors import UnsupportedError
from polyhal.ir import DType, Graph, Node
from polyhal.ir.verify import resolve_attrs
from polyhal.ops import get_op
from polyhal.ops.snn import delay_steps

LINEAR_OPS = frozenset({"Linear", "Affine", "Scale", "Conv1d", "Conv2d", "SumPool2d",
                        "Flatten", "Delay"})
SUPPORTED_OPS = frozenset(MODELS) | LINEAR_OPS
"""The snn ops the neuro adapter runs."""

MAX_EXPONENT = 700.0
"""Largest dt/tau whose exp(dt/tau) brian2's closed forms may compute (float64 ends near 709)."""

DEFAULT_DT = 1e-3
"""dt of a graph whose nodes state none (only linear maps): it changes no result."""


@dataclass(frozen=True)
class Root:
    """Where a signal comes from.

    ``kind`` is ``"input"`` (graph input ``name``), ``"spikes"`` (of population
    ``name``) or ``"state"`` (``variable`` of population ``name``, continuous).
    """

    kind: str
    name: str
    variable: str = ""


@dataclass(frozen=True, eq=False)
class Signal:
    """``value[t, b, post] = sum weight * root[t - lag, b, pre] + bias[post]`` (per batch item)."""

    root: Root
    shape: tuple[int, ...]
    synapses: SynapseMap
    bias: SynapseMap
    delayed_by: str = ""
    """The first Delay node that gave the signal a lag (for error messages)."""

    @property
    def is_root(self) -> bool:
        """True when the signal is its root, unchanged."""
        return self.synapses.is_identity and not len(self.bias)

    def then(self, step: SynapseMap, shape: tuple[int, ...], bias: SynapseMap | None = None,
             delay_node: str = "") -> Signal:
        """The signal after one more linear op (``bias``: the op's own bias)."""
        new_bias = self.bias.then(step)
        if bias is not None:
            new_bias = new_bias.plus(bias)
        return Signal(self.root, shape, self.synapses.then(step), new_bias,
                      self.delayed_by or (delay_node if step.lag.any() else ""))


@dataclass(eq=False)
class Population:
    """One neuron node (or output probe): brian2 groups, one per model part."""

    name: str
    """brian2-safe name stem."""
    node: str
    """The graph node it implements."""
    shape: tuple[int, ...]
    models: list[NeuronModel]
    input: Signal
    record: set[str] = field(default_factory=set)
    """Variables to monitor (:data:`~polyhal.adapters.neuro.models.SPIKES` for spikes)."""

    @property
    def size(self) -> int:
        """Neurons per batch item."""
        return math.prod(self.shape)

    @property
    def reads_input_directly(self) -> bool:
        """True when the input is a graph input unchanged: the group reads it itself."""
        return self.input.root.kind == "input" and self.input.is_root

    def parts(self) -> list[tuple[NeuronModel, np.ndarray]]:
        """Each model with the elements (of one batch item) it covers."""
        return [(m, np.arange(self.size) if m.elements is None else m.elements)
                for m in self.models]


@dataclass(eq=False)
class NetworkPlan:
    """Everything the network needs, in schedule order."""

    dt: float
    steps: int
    batch: int
    inputs: list[tuple[str, tuple[int, ...]]]
    """Graph inputs: name and per-item shape, in graph order."""
    populations: list[Population]
    """Neuron nodes in topological order, then the output probes."""
    outputs: list[tuple[str, Root]]
    """Graph outputs: value name and where it is read."""

    @property
    def neurons(self) -> int:
        """Neurons over the whole batch."""
        return self.batch * sum(p.size for p in self.populations)

    def input_lags(self, name: str) -> list[int]:
        """The lags at which populations read graph input ``name`` through synapses."""
        lags: set[int] = set()
        for pop in self.populations:
            if pop.input.root == Root("input", name) and not pop.reads_input_directly:
                lags.update(np.unique(pop.input.synapses.lag).tolist())
        return sorted(lags)

    @cached_property
    def relayed_inputs(self) -> list[str]:
        """Graph inputs that reach some population through synapses."""
        return [name for name, _ in self.inputs if self.input_lags(name)]

    def bias_lags(self) -> list[int]:
        """The lags (> 0) of delayed biases, each a relay neuron of its own."""
        lags: set[int] = set()
        for pop in self.populations:
            lags.update(int(x) for x in np.unique(pop.input.bias.lag) if x > 0)
        return sorted(lags)

    def fingerprint(self, *extra: str) -> str:
        """A hash of everything that shapes the network (and ``extra``)."""
        digest = hashlib.sha256()

        def feed(*items: Any) -> None:
            for item in items:
                if isinstance(item, np.ndarray):
                    digest.update(f"{item.dtype}{item.shape}".encode())
                    digest.update(np.ascontiguousarray(item).tobytes())
                else:
                    digest.update(repr(item).encode())

        feed(self.dt, self.steps, self.batch, self.inputs, self.outputs, *extra)
        for pop in self.populations:
            feed(pop.name, pop.shape, sorted(pop.record), pop.input.root, pop.input.shape)
            for signal_map in (pop.input.synapses, pop.input.bias):
                feed(signal_map.n_pre, signal_map.n_post, signal_map.pre, signal_map.post,
                     signal_map.weight, signal_map.lag)
            for model, elements in pop.parts():
                feed(model.equations, model.threshold, model.reset, model.method,
                     sorted(model.outputs.items()), elements)
                for key, (values, unit) in sorted(model.parameters.items()):
                    feed(key, unit, values)
        return digest.hexdigest()


def _unsupported(node: Node, message: str) -> UnsupportedError:
    return UnsupportedError(f"neuro: node {node.name!r} ({node.qualified_op}): {message}")


def check_supported(graph: Graph) -> None:
    """Raise :class:`UnsupportedError` for any node, dtype or parameter neuro cannot run.

    Shapes may still be symbolic: everything checked here holds for any binding.
    """
    problems = [f"{n.name} ({n.qualified_op})" for n in graph.nodes
                if n.domain != "snn" or n.op not in SUPPORTED_OPS]
    if problems:
        raise UnsupportedError(f"neuro runs snn ops only; it cannot run: {', '.join(problems)}")
    for name, t in graph.value_types.items():
        if t.dtype != DType.FLOAT64:
            raise UnsupportedError(f"neuro computes in float64 (as brian2 does); value {name!r} "
                                   f"is {t.dtype.value}")
    shared_dt(graph)
    for node in graph.nodes:
        parameters(graph, node)


def parameters(graph: Graph, node: Node) -> dict[str, np.ndarray | None]:
    """The node's parameter inputs by name, each required to be a graph constant."""
    opdef = get_op(node.op, "snn")
    params: dict[str, np.ndarray | None] = {spec.name: None for spec in opdef.inputs[1:]}
    for index, name in enumerate(node.inputs[1:], start=1):
        spec = opdef.input_spec(index).name
        if name and name not in graph.constants:
            raise _unsupported(node, f"input {spec} ({name!r}) must be a graph constant: the "
                                     "neuro adapter builds parameters into the network")
        if name:
            params[spec] = np.asarray(graph.constants[name], np.float64)
    return params


def shared_dt(graph: Graph) -> float:
    """The one dt every node that states one agrees on."""
    stated = {n.name: float(n.attrs["dt"]) for n in graph.nodes if "dt" in n.attrs}
    if len(set(stated.values())) > 1:
        listing = ", ".join(f"{k} dt={v}" for k, v in stated.items())
        raise UnsupportedError(f"neuro runs one clock per graph, but the nodes disagree on dt: "
                               f"{listing}")
    return next(iter(stated.values()), DEFAULT_DT)


def _brian_name(index: int, node: str) -> str:
    stem = re.sub(r"\W", "_", node)[:40]
    return f"n{index}_{stem}"


class Lowering:
    """Builds the :class:`NetworkPlan` of one graph (see :func:`lower`)."""

    def __init__(self, graph: Graph) -> None:
        check_supported(graph)
        for name, t in graph.value_types.items():
            if not t.is_static:
                raise UnsupportedError(f"neuro: lowering needs concrete shapes; value {name!r} "
                                       f"is {t}")
        self.graph = graph
        self.dt = shared_dt(graph)
        if not graph.inputs and not graph.nodes:
            raise UnsupportedError("neuro: the graph has no nodes to run")
        first = graph.inputs[0].type.shape if graph.inputs else graph.value_type(
            graph.nodes[0].inputs[0]).shape
        self.steps, self.batch = int(first[0]), int(first[1])
        self.signals: dict[str, Signal] = {}
        self.populations: list[Population] = []
        self.by_name: dict[str, Population] = {}

    def run(self) -> NetworkPlan:
        for value in self.graph.inputs:
            self._check_time_and_batch(value.name, value.type.shape)
            shape = tuple(int(d) for d in value.type.shape[2:])
            n = math.prod(shape)
            self.signals[value.name] = Signal(Root("input", value.name), shape,
                                              SynapseMap.identity(n), SynapseMap.empty(1, n))
        for node in self.graph.nodes:
            self._lower(node)
        outputs = [(v.name, self._output_root(v.name)) for v in self.graph.outputs]
        inputs = [(v.name, tuple(int(d) for d in v.type.shape[2:])) for v in self.graph.inputs]
        return NetworkPlan(self.dt, self.steps, self.batch, inputs, self.populations, outputs)

    def _check_time_and_batch(self, name: str, shape: Iterable[Any]) -> None:
        shape = tuple(shape)
        if len(shape) < 2 or (int(shape[0]), int(shape[1])) != (self.steps, self.batch):
            raise UnsupportedError(f"neuro: value {name!r} has shape {list(shape)}, but every "
                                   f"value must share time and batch [{self.steps}, "
                                   f"{self.batch}, ...]")

    def _source(self, node: Node) -> Signal:
        name = node.inputs[0]
        if name not in self.signals:
            what = "a graph constant" if name in self.graph.constants else "not an snn value"
            raise _unsupported(node, f"input X ({name!r}) is {what}; neuro takes X from a graph "
                                     "input or an snn node")
        return self.signals[name]

    def _lower(self, node: Node) -> None:
        for value in node.outputs:
            self._check_time_and_batch(value.name, value.type.shape)
        attrs = resolve_attrs(get_op(node.op, "snn"), node.attrs, f"node {node.name!r}")
        params = parameters(self.graph, node)
        source = self._source(node)
        if node.op in LINEAR_OPS:
            out_shape = tuple(int(d) for d in node.outputs[0].type.shape[2:])
            self.signals[node.outputs[0].name] = self._linear(node, source, params, attrs,
                                                              out_shape)
            return
        shape = source.shape
        n = math.prod(shape)
        broadcast = {k: np.broadcast_to(DEFAULTS[k] if v is None else v, shape).reshape(n).copy()
                     for k, v in params.items()}
        models = MODELS[node.op](broadcast, attrs)
        self._check_closed_form(node, models)
        pop = Population(_brian_name(len(self.populations), node.name), node.name, shape, models,
                         self._consumed(node, source))
        self.populations.append(pop)
        self.by_name[pop.name] = pop
        for index, value in enumerate(node.outputs):
            variable = models[0].outputs[index]
            root = Root("spikes", pop.name) if variable == SPIKES else Root("state", pop.name,
                                                                             variable)
            self.signals[value.name] = Signal(root, shape, SynapseMap.identity(n),
                                              SynapseMap.empty(1, n))

    def _check_closed_form(self, node: Node, models: list[NeuronModel]) -> None:
        # brian2's CubaLIF closed form multiplies exp(dt/tau) by exp(-dt/tau): past
        # exp's float64 range that is inf * 0, where the reference stays finite.
        for model in models:
            if node.op == "CubaLIF" and model.method == "exact" and "tau_syn" in model.parameters:
                ratio = self.dt / min(float(model.parameters[k][0].min())
                                      for k in ("tau_syn", "tau_mem"))
                if ratio > MAX_EXPONENT:
                    raise _unsupported(node, f"dt/tau = {ratio:.4g} overflows brian2's exact "
                                             f"CubaLIF solution (limit {MAX_EXPONENT}); use "
                                             "method='euler' or longer time constants")

    def _consumed(self, node: Node, signal: Signal) -> Signal:
        """``signal`` as population ``node`` reads it: late and needless entries dropped."""
        keep = signal.synapses.lag < self.steps
        if signal.root.kind == "spikes":
            keep &= signal.synapses.weight != 0  # a spike times 0 adds nothing, exactly
        if signal.root.kind == "state" and signal.synapses.lag[keep].any():
            raise UnsupportedError(
                f"neuro: node {signal.delayed_by!r} (snn.Delay) delays a continuous value (a "
                f"state of node {self.by_name[signal.root.name].node!r}) feeding node "
                f"{node.name!r}; the neuro adapter delays spikes and graph inputs only")
        synapses = signal.synapses if keep.all() else signal.synapses.select(keep)
        bias = signal.bias.select(signal.bias.lag < self.steps)
        return replace(signal, synapses=synapses, bias=bias)

    def _linear(self, node: Node, source: Signal, params: Mapping[str, np.ndarray | None],
                attrs: Mapping[str, Any], out_shape: tuple[int, ...]) -> Signal:
        n_in, n_out = math.prod(source.shape), math.prod(out_shape)
        op = node.op
        if op == "Flatten":
            return replace(source, shape=out_shape)
        if op in ("Linear", "Affine"):
            bias = None
            if params.get("bias") is not None:
                bias = SynapseMap.of(1, n_out, np.zeros(n_out), np.arange(n_out), params["bias"])
            return source.then(SynapseMap.dense(params["weight"]), out_shape, bias)
        if op == "Scale":
            scale = np.broadcast_to(params["scale"], source.shape).reshape(n_in)
            return source.then(SynapseMap.diagonal(scale), out_shape)
        if op == "Delay":
            steps = delay_steps(params["delay"], self.dt, f"node {node.name!r} (snn.Delay)")
            lag = np.broadcast_to(steps, source.shape).reshape(n_in)
            return source.then(SynapseMap.diagonal(np.ones(n_in), lag), out_shape,
                               delay_node=node.name)
        rank = len(source.shape) - 1
        if op == "SumPool2d":
            kernel = [int(k) for k in attrs["kernel_shape"]]
            channels = source.shape[0]
            weight = np.ones((channels, 1, *kernel))
            step = maps.conv_map(weight, source.shape, out_shape,
                                 list(attrs.get("strides") or kernel),
                                 list(attrs.get("pads") or [0] * 4), [1, 1], channels)
            return source.then(step, out_shape)
        weight = params["weight"]
        step = maps.conv_map(weight, source.shape, out_shape,
                             list(attrs.get("strides") or [1] * rank),
                             list(attrs.get("pads") or [0] * (2 * rank)),
                             list(attrs.get("dilations") or [1] * rank), int(attrs["group"]))
        bias = None if params.get("bias") is None else maps.channel_bias(params["bias"],
                                                                         out_shape)
        return source.then(step, out_shape, bias)

    def _output_root(self, name: str) -> Root:
        signal = self.signals.get(name)
        if signal is None:
            raise UnsupportedError(f"neuro: graph output {name!r} is a constant; it has no "
                                   "network to run")
        if not signal.is_root:
            producer = self.graph.producers[name]
            stem = _brian_name(len(self.populations), f"{producer.name}_out")
            pop = Population(stem, producer.name, signal.shape, [probe()],
                             self._consumed(producer, signal), {"y"})
            self.populations.append(pop)
            self.by_name[pop.name] = pop
            signal = Signal(Root("state", pop.name, "y"), signal.shape,
                            SynapseMap.identity(pop.size), SynapseMap.empty(1, pop.size))
            self.signals[name] = signal
        root = signal.root
        if root.kind != "input":
            self.by_name[root.name].record.add(SPIKES if root.kind == "spikes" else root.variable)
        return root


def lower(graph: Graph) -> NetworkPlan:
    """The network plan of ``graph``; :class:`UnsupportedError` for what neuro cannot run."""
    return Lowering(graph).run()
