"""Every differentiable core op: its gradient graph against central finite
differences in float64, on the conformance recipes' random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal import autodiff
from polyhal.autodiff.check import check_gradients
from polyhal.conformance.cases import op_graph
from polyhal.conformance.recipes import OpSample, sample
from polyhal.ir import DType
from polyhal.ops import all_ops, get_op
from polyhal.passes import decompose

SHAPE_CLASSES = ("scalar", "rank1", "rank2", "rank3", "rank4", "broadcast")
SEEDS = (0, 1, 2)  # recipes vary attributes (pads, strides, groups, modes) with the seed
DIFFERENTIABLE = sorted(op.name for op in all_ops("core") if op.differentiable)


def _float_inputs(graph):
    return [v.name for v in graph.inputs if v.type.dtype is DType.FLOAT64]


def _float_outputs(graph):
    return [v.name for v in graph.outputs if v.type.dtype is DType.FLOAT64]


def _where_samples():
    rng = np.random.default_rng(0)
    yield "rank2", OpSample([rng.random((3, 4)) > 0.5, rng.standard_normal((3, 4)),
                             rng.standard_normal((3, 4))])
    yield "broadcast", OpSample([rng.random((3, 1)) > 0.5, rng.standard_normal(()),
                                 rng.standard_normal((2, 1, 4))])


EXTRA_SAMPLES = {"Where": _where_samples}
"""Ops whose recipes vary the dtype by shape class: float64 samples made here."""


def _cases(name):
    """The float64 samples of ``name`` that have a float64 input and output. A
    composite without a rule of its own is decomposed first: its gradient is its
    decomposition's (whose arithmetic stays in float64, where a kernel may round
    through float32, as LayerNormalization's stash_type does)."""
    op = get_op(name)
    samples = (EXTRA_SAMPLES[name]() if name in EXTRA_SAMPLES else
               ((f"{c}/seed{seed}", sample(op, DType.FLOAT64, c, seed=seed))
                for c in SHAPE_CLASSES for seed in SEEDS))
    found = []
    for shape_class, s in samples:
        if s is None:
            continue
        graph, feeds = op_graph(op, s)
        if op.decompose is not None and f"core.{name}" not in autodiff.RULES:
            graph = decompose(graph)
        if _float_inputs(graph) and _float_outputs(graph):
            found.append((shape_class, graph, feeds))
    return found


FLOAT32_STAGE = {"LayerNormalization": "x0"}
"""Inputs that the op's specification rounds through float32 even in float64
(LayerNormalization's statistics, stash_type=1): finite differences of the
float64 graph are only float32-accurate there, so they are compared at float32
tolerance, with a wider step."""


def _check(name, shape_class, graph, inputs, wrt, **tolerance):
    report = check_gradients(graph, inputs, wrt=wrt, of=_float_outputs(graph), **tolerance)
    assert report.ok, f"{name} {shape_class}: {report}"
    assert report.checked >= 1 and report.rough <= report.checked, (
        f"{name} {shape_class}: {report}")


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradient_matches_finite_differences(name):
    cases = _cases(name)
    assert cases, f"no float64 sample of {name} with a float input and output"
    for shape_class, graph, feeds in cases:
        inputs = dict(zip([v.name for v in graph.inputs], feeds, strict=True))
        rounded = FLOAT32_STAGE.get(name)
        wrt = [x for x in _float_inputs(graph) if x != rounded]
        if wrt:
            _check(name, shape_class, graph, inputs, wrt, rtol=1e-6, atol=1e-9)
        if rounded in inputs:
            _check(name, shape_class, graph, inputs, [rounded], rtol=1e-3, atol=1e-6,
                   step=1e-2)


def test_every_differentiable_core_op_has_a_rule_or_a_decomposition():
    missing = [name for name in DIFFERENTIABLE
               if f"core.{name}" not in autodiff.RULES and get_op(name).decompose is None]
    assert missing == []


def test_cast_passes_the_gradient_through_a_float_round_trip():
    from polyhal.ir import GraphBuilder, TensorType
    from polyhal.reference import run

    g = GraphBuilder("cast")
    x = g.input("x", TensorType(DType.FLOAT64, (3,)))
    y = g.op("Cast", g.op("Cast", x, to=DType.FLOAT32), to=DType.FLOAT64)
    g.output(g.op("ReduceSum", y * y, keepdims=0), name="loss")
    value = np.array([0.5, -1.25, 2.0])
    got = run(autodiff.grad(g.build(), wrt="x"), x=value)["grad_x"]
    np.testing.assert_allclose(got, 2 * value, rtol=1e-7)
