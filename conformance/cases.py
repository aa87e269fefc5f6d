"""Conformance cases: a graph, its inputs, the reference's outputs and a tolerance."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polyhal.conformance.recipes.base import OpSample
from polyhal.conformance.tolerances import Tolerance, tolerance_for
from polyhal.ir.builder import GraphBuilder
from polyhal.ir.dtypes import DType
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.ops.registry import OpDef
from polyhal.reference import run


@dataclass
class Case:
    """One graded check of a device."""

    id: str
    """A stable path: ``L1/core.Add/float32/broadcast-0``."""
    level: str
    op: str | None
    dtype: str | None
    shape_class: str | None
    graph: Graph | None = None
    inputs: list[np.ndarray] = field(default_factory=list)
    expected: list[np.ndarray] = field(default_factory=list)
    tolerance: Tolerance | None = None
    check: Any = None
    """For cases that are not one graph-vs-reference comparison: a callable
    ``check(device)`` returning ``(ok, message)`` (L0, L5) or a
    :class:`~polyhal.conformance.tolerances.Comparison` (L3's training steps)."""
    not_applicable: str = ""
    """Why the case does not apply to this device (L3: an op without a gradient, a
    gradient graph with ops the device does not claim): graded ``not_applicable``
    without running, and listed in the report with this reason."""


def op_graph(op: OpDef, sample: OpSample) -> tuple[Graph, list[np.ndarray]]:
    """The one-node graph of ``op`` applied to ``sample``, and its run-time inputs."""
    g = GraphBuilder(f"{op.name}")
    args = []
    feeds = []
    for index, array in enumerate(sample.inputs):
        if array is None:
            args.append(None)
        elif index in sample.const_inputs:
            args.append(g.constant(array, name=f"c{index}"))
        else:
            declared = sample.input_types.get(index, TensorType.of(array))
            args.append(g.input(f"x{index}", declared))
            feeds.append(array)
    outs = g.op(op.name, *args, domain=op.domain, num_outputs=sample.num_outputs,
                **sample.attrs)
    g.output(*(outs if isinstance(outs, tuple) else (outs,)))
    return g.build(), feeds


def reference_outputs(graph: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """What the specification says ``graph`` gives on ``inputs``."""
    return list(run(graph, *inputs).values())


def op_case(op: OpDef, dtype: DType, shape_class: str, variant: int,
            sample: OpSample, level: str = "L1") -> Case:
    """The L1 case of one op sample, with the reference's expected outputs."""
    graph, feeds = op_graph(op, sample)
    expected = reference_outputs(graph, feeds)
    return Case(id=f"{level}/{op.qualified_name}/{dtype.value}/{shape_class}-{variant}",
                level=level, op=op.qualified_name, dtype=dtype.value, shape_class=shape_class,
                graph=graph, inputs=feeds, expected=expected,
                tolerance=tolerance_for(op.qualified_name,
                                          [DType.from_numpy(o.dtype) for o in expected]))
