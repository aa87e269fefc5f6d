"""Adapters for grading L3: the reference device claiming only the ops of the
training step, as it is and with one defect each: one that only gradients
exercise, one that only repeated runs (training) exercise.

They live at module level so that an isolated worker can import them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from polyhal.adapters.reference import (
    ReferenceAdapter,
    ReferenceDevice,
    reference_capabilities,
)
from polyhal.conformance.training import step_graph
from polyhal.hal import Buffer, Capabilities, CompileOptions, Executable
from polyhal.ir import DType, Graph
from polyhal.passes import rebuild

TRAINING_OPS = sorted({node.qualified_op for node in step_graph().nodes})
"""Every op of the L3 training step (float32 and int64 are all it needs)."""


def _training_capabilities() -> Capabilities:
    everything = reference_capabilities().ops
    kept = {DType.FLOAT32, DType.INT64}
    return Capabilities(ops={op: everything[op] & kept for op in TRAINING_OPS},
                        dynamic_shapes=True)


class TrainingOpsDevice(ReferenceDevice):
    """The reference, claiming the training step's ops in float32 (and int64) only."""

    @property
    def capabilities(self) -> Capabilities:
        return _training_capabilities()


class ScatterAssignDevice(TrainingOpsDevice):
    """Runs ``ScatterElements(reduction="add")`` as a plain scatter: the forward
    ops are right, the gradients of gathers are not."""

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        def assign(builder: Any, node: Any, args: list) -> tuple | None:
            if node.op != "ScatterElements" or node.attrs.get("reduction") != "add":
                return None
            return (builder.op("ScatterElements", *args, axis=node.attrs.get("axis", 0),
                               reduction="none"),)

        return super().compile(rebuild(graph, assign), options)


class ReplayingDevice(TrainingOpsDevice):
    """Caches what an executable's first run returned and returns it on every later
    run: each graph is right once, so only cases that run a graph repeatedly (the
    training steps) can tell."""

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        executable = super().compile(graph, options)
        first: list = []

        def run(inputs: Sequence[Buffer]) -> list[Buffer]:
            if not first:
                first.extend(type(executable).run(executable, inputs))
            return list(first)

        executable.run = run  # type: ignore[method-assign]
        return executable


def _adapter(name: str, class_name: str, device: type[ReferenceDevice]) -> type:
    return type(class_name, (ReferenceAdapter,), {
        "name": name, "device_class": device, "__module__": __name__,
        "open": lambda self, index=0, **options: device()})


TrainingOpsAdapter = _adapter("training-ops", "TrainingOpsAdapter", TrainingOpsDevice)
ScatterAssignAdapter = _adapter("scatter-assign", "ScatterAssignAdapter", ScatterAssignDevice)
ReplayingAdapter = _adapter("replaying", "ReplayingAdapter", ReplayingDevice)
