"""L3: gradients. The vjp graphs of the L1 op cases and of the L2 models, and
training steps, run on the device and compared with the reference.

* **Op gradients.** For an L1 case whose graph has floating-point inputs and
  outputs, :func:`polyhal.autodiff.vjp` gives a graph with one more input
  ``cotangent_<y>`` per float output and one more output ``grad_<x>`` per float
  input; the cotangents are seeded random values. The ``ci`` profile takes a
  representative subset (one dtype, two shape classes per op), ``full`` every
  L1 case.
* **Model gradients.** The L2 models, their float weights fed as inputs, so that
  the gradient reaches every weight as well as the batch.
* **Training.** Steps of SGD with momentum on a small MLP
  (:mod:`polyhal.conformance.training`), each step one graph, each step's
  state fed to the next on the device; the losses and the final state must
  match the same steps on the reference.
* **Hybrid gradients.** For each hybrid L2 case (a device that claims
  ``quantum.Expectation``), the vjp graph of the model
  (``L3/<model>/<dtype>/batch-N``) and the gradient of its mean softmax
  cross-entropy with respect to the batch and every weight, classical and
  quantum (``L3/<model>/<dtype>/loss-N``): the quantum nodes
  (``quantum.Expectation`` and the ``quantum.ExpectationVJP`` autodiff emits)
  run on the device, the classical nodes it does not cover on the reference
  fallback, as in L2. Without a claim of ``quantum.ExpectationVJP`` they are
  not applicable.

A case whose op has no gradient (not differentiable, no float input or output,
a rule that cannot apply to its shapes) and a gradient graph with ops the
device does not claim are graded ``not_applicable``, with the reason, rather
than left out: the report shows what the device's gradients do not cover.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from functools import partial

import numpy as np

from polyhal import autodiff, ops
from polyhal.conformance.cases import Case, reference_outputs
from polyhal.conformance.levels.l1 import op_cases, primary_dtypes
from polyhal.conformance.levels.l2 import QUANTUM_OPS, hybrid_case, quantum_dtypes
from polyhal.conformance.models import HYBRID_MODELS, MODELS
from polyhal.conformance.profiles import Profile
from polyhal.conformance.snn_networks import NETWORKS
from polyhal.conformance.tolerances import Comparison, Tolerance, compare, gradient_tolerance
from polyhal.conformance.training import TrainingRun, step_graph, training_run
from polyhal.errors import PolyhalError
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.contract import CompileOptions, Device
from polyhal.ir import DType, Graph, GraphBuilder, TensorType
from polyhal.ir.dtypes import FLOAT_TYPES
from polyhal.ops.registry import OpDef, get_op
from polyhal.ops.snn import FLOATS as SNN_FLOATS
from polyhal.passes import replay
from polyhal.runtime.placement import decompose_for, node_reason

DTYPE_PREFERENCE = (DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16)
"""The order in which a profile that limits dtypes picks them."""

HALF_TYPES = frozenset({DType.FLOAT16, DType.BFLOAT16})
"""Dtypes whose op gradients leave out the ``special`` class: where a chain of
half-precision ops overflows to inf (or NaN) depends on where a device rounds,
and a device that keeps a fused chain in float32 is not wrong to differ."""


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L3 cases of a device with ``caps``."""
    yield from _op_gradients(caps, profile)
    yield from _model_gradients(caps, profile)
    yield from _training(caps, profile)


def _float_values(values: Sequence) -> list:
    return [v for v in values if v.type.dtype in FLOAT_TYPES]


def _gradient_dtypes(op: OpDef, caps: Capabilities, profile: Profile) -> list[DType]:
    """The claimed float dtypes of ``op`` (all its claimed dtypes when none is a float:
    ``Where``'s first input is bool), at most ``profile.gradient_dtypes`` of them."""
    claimed = primary_dtypes(op, caps)
    floats = [d for d in DTYPE_PREFERENCE if d in claimed] or claimed
    return floats[:profile.gradient_dtypes] if profile.gradient_dtypes else floats


def _op_gradients(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    classes = profile.gradient_shape_classes or profile.shape_classes
    for name in caps.claimed_ops:
        domain, _, op_name = name.partition(".")
        op = get_op(op_name, domain)
        for dtype in _gradient_dtypes(op, caps, profile):
            taken = 0
            for shape_class in classes:
                if shape_class == "special" and dtype in HALF_TYPES:
                    continue
                found = False
                for forward in op_cases(caps, op, [dtype], [shape_class], profile.seeds):
                    found = True
                    case = gradient_case(caps, f"L3/{forward.id.removeprefix('L1/')}",
                                         forward, op)
                    if case is not None:
                        yield case
                taken += found
                if found and taken == profile.gradient_classes_per_op:  # 0: never
                    break


def _not_applicable(forward: Case, case_id: str, reason: str) -> Case:
    return Case(case_id, "L3", forward.op, forward.dtype, forward.shape_class,
                not_applicable=reason)


def uncovered(caps: Capabilities, graph: Graph, only: Sequence[str] | None = None
              ) -> list[str]:
    """Why ``caps`` does not cover ``graph`` (or its nodes of the ops ``only``): one reason
    per op and dtype, sorted."""
    return sorted({reason for node in graph.nodes
                   if only is None or node.qualified_op in only
                   if (reason := node_reason(caps, graph, node)) is not None})


def gradient_case(caps: Capabilities, case_id: str, forward: Case, op: OpDef | None = None,
                  model: bool = False, hybrid: bool = False) -> Case | None:
    """The vjp case of ``forward`` (an op or model case whose ``expected`` are its
    outputs on the reference); ``None`` when the graph has no float value at all
    (an integer op case has no gradient to speak of).

    ``op``: the op of a one-op case, whose differentiability is checked first;
    ``model``: grade at the model tolerance; ``hybrid``: only the quantum nodes must be
    covered, the others may run on the fallback device (:func:`.l2.hybrid_case`).
    """
    graph = forward.graph
    assert graph is not None
    float_in, float_out = _float_values(graph.inputs), _float_values(graph.outputs)
    if not float_in and not float_out:
        return None
    if not float_in or not float_out:
        return _not_applicable(forward, case_id, "no gradient: the graph has no "
                               f"floating-point {'input' if not float_in else 'output'}")
    if op is not None and not op.differentiable:
        why = ("is not differentiable (piecewise constant or integer-valued)"
               if op.domain == "core" else "has no gradient rule")
        return _not_applicable(forward, case_id, f"no gradient: {op.qualified_name} {why}")
    try:
        gradient = decompose_for(autodiff.vjp(graph), caps)
    except PolyhalError as exc:
        return _not_applicable(forward, case_id, f"no gradient: {type(exc).__name__}: {exc}")
    missing = uncovered(caps, gradient, QUANTUM_OPS if hybrid else None)
    if missing:
        return _not_applicable(forward, case_id, "the gradient graph needs what the device "
                               f"does not claim: {'; '.join(missing)}")
    rng = np.random.default_rng(zlib.crc32(case_id.encode()))
    outputs = [a for v, a in zip(graph.outputs, forward.expected, strict=True)
               if v.type.dtype in FLOAT_TYPES]
    cotangents = [rng.uniform(-1, 1, a.shape).astype(a.dtype) for a in outputs]
    inputs = [*forward.inputs, *cotangents]
    case = Case(case_id, "L3", forward.op, forward.dtype, forward.shape_class, graph=gradient,
                inputs=inputs, expected=reference_outputs(gradient, inputs),
                tolerance=gradient_tolerance(gradient, model=model))
    return hybrid_case(caps, case) if hybrid else case


def as_trained(graph: Graph, inputs: list[np.ndarray]) -> tuple[Graph, list[np.ndarray]]:
    """``graph`` as training differentiates it: its inputs at the concrete shapes of
    ``inputs`` (rules for windowed ops need static shapes) and its float constants,
    the weights, turned into inputs after them; and the inputs to feed it."""
    weights = {n: a for n, a in graph.constants.items() if DType.from_numpy(a.dtype).is_float}
    g = GraphBuilder(graph.name, reserved=[*graph.value_types, *(n.name for n in graph.nodes)])
    env = {v.name: g.input(v.name, TensorType.of(a))
           for v, a in zip(graph.inputs, inputs, strict=True)}
    for name, array in graph.constants.items():
        env[name] = (g.input(name, TensorType.of(array)) if name in weights
                     else g.constant(array, name=name))
    for node in graph.nodes:
        outs = replay(g, node, [env[i] if i else None for i in node.inputs])
        env.update({value.name: var for value, var in zip(node.outputs, outs, strict=True)})
    for value in graph.outputs:
        g.output(env[value.name], name=value.name)
    return g.build(), [*inputs, *weights.values()]


def _model_gradients(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The gradients of the L2 models the device covers, in every claimed float dtype."""
    dtypes = sorted(frozenset().union(*caps.ops.values()) & FLOAT_TYPES, key=lambda d: d.value)
    for name, build in MODELS.items():
        for dtype in dtypes:
            for variant, seed in enumerate(profile.seeds):
                graph, inputs = build(dtype, np.random.default_rng(seed))
                graph = decompose_for(graph, caps)
                if uncovered(caps, graph):
                    continue  # no L2 case either
                graph, inputs = as_trained(graph, inputs)
                forward = Case(f"L2/{name}/{dtype.value}/batch-{variant}", "L2", name,
                               dtype.value, "model", graph=graph, inputs=inputs,
                               expected=reference_outputs(graph, inputs))
                case = gradient_case(caps, f"L3/{name}/{dtype.value}/batch-{variant}", forward,
                                     model=True)
                if case is not None:
                    yield case
    for name, network in NETWORKS.items():
        for dtype in (d for d in dtypes if d in SNN_FLOATS):
            for variant, seed in enumerate(profile.seeds):
                graph, inputs = network(dtype, seed, 1)
                if not uncovered(caps, graph):
                    yield Case(f"L3/{name}/{dtype.value}/batch-{variant}", "L3", name,
                               dtype.value, "model", not_applicable=_snn_reason(graph))
    yield from _hybrid_gradients(caps, profile)


def _hybrid_gradients(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The vjp of each hybrid model and the gradient of its loss, in every dtype of the
    model's L2 case (those the device claims ``quantum.Expectation`` in); not applicable
    where it does not claim ``quantum.ExpectationVJP``."""
    for name, build in HYBRID_MODELS.items():
        for dtype in quantum_dtypes(caps):
            for variant, seed in enumerate(profile.seeds):
                graph, inputs = as_trained(*build(dtype, np.random.default_rng(seed)))
                forward = Case(f"L2/{name}/{dtype.value}/batch-{variant}", "L2", name,
                               dtype.value, "hybrid", graph=graph, inputs=inputs,
                               expected=reference_outputs(graph, inputs))
                case = gradient_case(caps, f"L3/{name}/{dtype.value}/batch-{variant}", forward,
                                     model=True, hybrid=True)
                if case is not None:
                    yield case
                yield _loss_gradient(caps, f"L3/{name}/{dtype.value}/loss-{variant}", name,
                                     graph, inputs)


def with_loss(graph: Graph) -> Graph:
    """``graph`` (whose first output is ``logits [batch, classes]``) followed by the mean
    softmax cross-entropy of an int64 input ``labels [batch, 1]``: one output ``loss``."""
    logits_value = graph.outputs[0]
    g = GraphBuilder(f"{graph.name}_loss", reserved=[*graph.value_types,
                                                     *(n.name for n in graph.nodes)])
    env = {v.name: g.input(v.name, v.type) for v in graph.inputs}
    labels = g.input("labels", TensorType(DType.INT64, (logits_value.type.shape[0], 1)))
    for name, array in graph.constants.items():
        env[name] = g.constant(array, name=name)
    for node in graph.nodes:
        outs = replay(g, node, [env[i] if i else None for i in node.inputs])
        env.update({value.name: var for value, var in zip(node.outputs, outs, strict=True)})
    log_probs = ops.log_softmax(env[logits_value.name], axis=1)
    picked = ops.gather_elements(log_probs, labels, axis=1)
    g.output(-ops.reduce_mean(picked, keepdims=0), name="loss")
    return g.build()


def _loss_gradient(caps: Capabilities, case_id: str, name: str, graph: Graph,
                   inputs: list[np.ndarray]) -> Case:
    """``autodiff.grad`` of the hybrid model's loss with respect to every float input."""
    dtype = graph.inputs[0].type.dtype.value
    gradient = autodiff.grad(with_loss(graph))
    missing = uncovered(caps, gradient, QUANTUM_OPS)
    if missing:
        return Case(case_id, "L3", name, dtype, "hybrid-loss",
                    not_applicable="the gradient graph needs what the device does not "
                                   f"claim: {'; '.join(missing)}")
    rng = np.random.default_rng(zlib.crc32(case_id.encode()))
    labels = rng.integers(0, graph.outputs[0].type.shape[1], (inputs[0].shape[0], 1))
    feeds = [*inputs, labels.astype(np.int64)]
    case = Case(case_id, "L3", name, dtype, "hybrid-loss", graph=gradient, inputs=feeds,
                expected=reference_outputs(gradient, feeds),
                tolerance=gradient_tolerance(gradient, model=True))
    return hybrid_case(caps, case)


def _snn_reason(graph: Graph) -> str:
    ops = sorted({n.qualified_op for n in graph.nodes if n.domain == "snn"})
    return f"no gradient: the spiking ops ({', '.join(ops)}) have no gradient rules"


def _training(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    dtype = DType.FLOAT32
    graph = decompose_for(step_graph(dtype), caps)
    missing = uncovered(caps, graph)
    for variant, seed in enumerate(profile.seeds):
        case_id = f"L3/sgd-momentum/{dtype.value}/mlp-{variant}"
        if missing:
            yield Case(case_id, "L3", "sgd-momentum", dtype.value, "training",
                       not_applicable="the training step needs what the device does not "
                                      f"claim: {'; '.join(missing)}")
            continue
        run = training_run(dtype, seed, profile.training_steps)
        expected = reference_trajectory(graph, run)
        tolerance = gradient_tolerance(graph, model=True)
        yield Case(case_id, "L3", "sgd-momentum", dtype.value, "training", graph=graph,
                   inputs=[*run.state, *(a for batch in run.batches for a in batch)],
                   expected=expected, tolerance=tolerance,
                   check=partial(_train_on, graph, run, expected, tolerance))


def reference_trajectory(graph: Graph, run: TrainingRun) -> list[np.ndarray]:
    """The losses of every step (one array), then the final state, on the reference."""
    state, losses = list(run.state), []
    for batch in run.batches:
        loss, *state = reference_outputs(graph, [*state, *batch])
        losses.append(loss)
    return [np.stack(losses), *state]


def _train_on(graph: Graph, run: TrainingRun, expected: list[np.ndarray], tolerance: Tolerance,
              device: Device) -> Comparison:
    """The steps on ``device``, its output buffers fed back as the next step's state."""
    executable = device.compile(graph, CompileOptions())
    state = [device.upload(a) for a in run.state]
    losses = []
    for batch in run.batches:
        loss, *state = executable.run([*state, *(device.upload(a) for a in batch)])
        losses.append(device.download(loss))
    actual = [np.stack(losses), *(device.download(b) for b in state)]
    names = ["losses", *(v.name for v in graph.outputs[1:])]
    results = [compare(a, e, tolerance) for a, e in zip(actual, expected, strict=True)]
    problems = [f"{n}: {r.message}" for n, r in zip(names, results, strict=True) if not r.ok]
    return Comparison(not problems, max(r.max_abs_err for r in results),
                      max(r.max_rel_err for r in results),
                      "; ".join(problems) or f"{len(losses)} steps, loss {float(losses[0]):.4g} "
                                              f"-> {float(losses[-1]):.4g}")
