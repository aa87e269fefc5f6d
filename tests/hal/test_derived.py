"""DerivedConstants: data derived from a graph's constants is built once for every
graph specialized from it, and data derived from other arrays is not kept."""

from __future__ import annotations

import numpy as np

from polyhal import ops
from polyhal.hal.derived import DerivedConstants
from polyhal.ir import GraphBuilder, f32
from polyhal.passes import specialize_to


def test_data_derived_from_the_graphs_constants_is_built_once_per_variant():
    g = GraphBuilder("g")
    x = g.input("x", f32["n", 3])
    g.output(ops.relu(x @ g.constant(np.ones((3, 2), np.float32), name="w")), name="y")
    graph = g.build()
    derived = DerivedConstants(graph)
    builds: list[str] = []

    def build(tag: str):
        builds.append(tag)
        return tag

    for rows in (1, 2, 3):  # each specialization holds the graph's own array
        w = specialize_to(graph, [(rows, 3)]).constants["w"]
        assert derived.get((w, None), "packed", lambda: build("packed")) == "packed"
    assert derived.get((w,), "device", lambda: build("device")) == "device"
    assert builds == ["packed", "device"]
    folded = np.ones((3, 2), np.float32)  # equal, but not the graph's: built every time
    derived.get((folded,), "device", lambda: build("folded"))
    derived.get((w, folded), "device", lambda: build("folded"))
    assert builds == ["packed", "device", "folded", "folded"]
    assert sorted(derived.kept()) == ["device", "packed"]
