"""Micro-batching is only for graphs whose output rows each come from their own input row:
a graph that mixes rows runs whole (same numbers as one device), with the node named;
the models that split keep splitting."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.hal import open_device
from polyhal.ir import DType, GraphBuilder, f32, i64
from polyhal.ops import apply
from polyhal.runtime import Session
from polyhal.runtime.batching import BatchLayout

MICRO_BATCH = 3
ROWS = 8


def _rows(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((ROWS, *shape)).astype(np.float32)


def _ints(values: list[int]) -> np.ndarray:
    return np.array(values, np.int64)


@pytest.fixture(scope="module")
def session():
    with Session([open_device("cpu"), open_device("reference")], micro_batch=MICRO_BATCH,
                 fallback=None) as opened:
        yield opened


def _run_both(session: Session, graph: polyhal.Graph, feeds: dict) -> tuple[int, dict, dict]:
    """Micro-batches the session queued for one call, its outputs, the reference's."""
    before = session.stats.micro_batches
    out = session.compile(graph)(**feeds)
    return session.stats.micro_batches - before, out, polyhal.run(graph, **feeds)


# -- graphs that mix rows: refused, with the node named, and run whole


def softmax_over_the_batch():
    g = GraphBuilder("softmax0")
    g.output(ops.softmax(g.input("x", f32["batch", 3]), axis=0), name="y")
    return g.build(), {"x": _rows(3)}


def centred_over_the_batch():
    g = GraphBuilder("centred")
    x = g.input("x", f32["batch", 3])
    g.output(x - ops.reduce_mean(x, g.constant(_ints([0])), keepdims=1), name="y")
    return g.build(), {"x": _rows(3)}


def batch_norm_in_training_mode():
    g = GraphBuilder("bn-train")
    x = g.input("x", f32["batch", 3])
    scale, shift, mean, var = (g.constant(np.full(3, v, np.float32)) for v in (1, 0, 0, 1))
    g.output(ops.batch_normalization(x, scale, shift, mean, var, training_mode=1), name="y")
    return g.build(), {"x": _rows(3)}


def gather_rows_at_batched_indices():
    g = GraphBuilder("gather-rows")
    x, index = g.input("x", f32["batch", 3]), g.input("i", i64["batch"])
    g.output(ops.gather(x, index, axis=0), name="y")
    return g.build(), {"x": _rows(3), "i": np.arange(ROWS)[::-1].copy()}


def softmax_over_the_batch_moved_by_transpose():
    g = GraphBuilder("moved")
    x = ops.transpose(g.input("x", f32["batch", 3, 4]), perm=[1, 0, 2])
    g.output(ops.transpose(ops.softmax(x, axis=1), perm=[1, 0, 2]), name="y")
    return g.build(), {"x": _rows(3, 4)}


def reshape_merging_the_batch():
    g = GraphBuilder("merged")
    merged = ops.reshape(g.input("x", f32["batch", 3, 4]), g.constant(_ints([-1, 4])))
    g.output(ops.reshape(ops.softmax(merged, axis=0), g.constant(_ints([-1, 3, 4]))), name="y")
    return g.build(), {"x": _rows(3, 4)}


def gram_matrix_over_the_batch():
    g = GraphBuilder("gram")
    x = g.input("x", f32["batch", 3])
    g.output(x @ (ops.transpose(x, perm=[1, 0]) @ x), name="y")
    return g.build(), {"x": _rows(3)}


def batch_size_as_data():
    g = GraphBuilder("per-size")
    x = g.input("x", f32["batch", 3])
    g.output(x / ops.cast(apply("Shape", x, end=1), to="float32"), name="y")
    return g.build(), {"x": _rows(3)}


def layer_norm_over_the_batch():
    g = GraphBuilder("ln0")
    x = g.input("x", f32["batch", 3])
    g.output(ops.layer_normalization(x, g.constant(np.ones(3, np.float32)), axis=0), name="y")
    return g.build(), {"x": _rows(3)}


def an_op_not_known_to_act_row_by_row():
    g = GraphBuilder("scatter")
    x = g.input("x", f32["batch", 3])
    g.output(ops.scatter_elements(x, g.constant(_ints([[2, 0, 1]])),
                                  g.constant(np.ones((1, 3), np.float32)), axis=1), name="y")
    return g.build(), {"x": _rows(3)}


MIXING = [
    (softmax_over_the_batch, r"'softmax_\d+' \(core\.Softmax\) normalizes along axis 0, the "
                             "batch axis"),
    (centred_over_the_batch, r"\(core\.ReduceMean\) reduces over axis 0, the batch axis"),
    (batch_norm_in_training_mode, r"\(core\.BatchNormalization\) computes its statistics over "
                                  r"the batch \(training_mode=1\)"),
    (gather_rows_at_batched_indices, r"\(core\.Gather\) takes both its data and its indices "
                                     "from the batch"),
    (softmax_over_the_batch_moved_by_transpose, r"\(core\.Softmax\) normalizes along axis 1, "
                                                "the batch axis"),
    (reshape_merging_the_batch, r"\(core\.Reshape\) gives float32\[3\*batch, 4\], without "
                                "'batch' as an axis of its own"),
    (gram_matrix_over_the_batch, r"\(core\.MatMul\) sums over the batch axis of "
                                 "'transpose_"),
    (batch_size_as_data, r"\(core\.Div\) uses the batch size as data \('cast_\d+' comes from "
                         "a Shape\\)"),
    (layer_norm_over_the_batch, r"\(core\.LayerNormalization\) normalizes over axes 0\.\., "
                                "the batch axis 0 among them"),
    (an_op_not_known_to_act_row_by_row, r"\(core\.ScatterElements\) is not known to act row "
                                        "by row"),
]


@pytest.mark.parametrize(("case", "reason"), MIXING, ids=[c.__name__ for c, _ in MIXING])
def test_a_graph_that_mixes_rows_is_not_split_and_gives_the_reference_numbers(
        session, case, reason):
    graph, feeds = case()
    layout = BatchLayout.of(graph)
    assert not layout.splittable
    assert layout.reason.startswith("node '"), layout.reason
    assert re.search(reason, layout.reason), layout.reason
    parts, out, want = _run_both(session, graph, feeds)
    assert parts == 1  # the whole batch, on one device
    np.testing.assert_allclose(out["y"], want["y"], rtol=1e-5, atol=1e-6)


# -- graphs that act row by row: still split, same numbers


def embedding_lookup():
    g = GraphBuilder("embed")
    table = g.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
    g.output(ops.gather(table, g.input("i", i64["batch", 2]), axis=0), name="y")
    return g.build(), {"i": np.random.default_rng(0).integers(0, 4, (ROWS, 2))}


def softmax_with_the_batch_moved_and_back():
    g = GraphBuilder("moved-back")
    x = ops.transpose(g.input("x", f32["batch", 3, 4]), perm=[1, 0, 2])
    g.output(ops.transpose(ops.softmax(x, axis=0), perm=[1, 0, 2]), name="y")
    return g.build(), {"x": _rows(3, 4)}


def reshape_keeping_the_batch():
    g = GraphBuilder("kept")
    flat = ops.reshape(g.input("x", f32["batch", 3, 4]), g.constant(_ints([0, 12])))
    g.output(ops.reshape(ops.softmax(flat, axis=1), g.constant(_ints([0, 3, 4]))), name="y")
    return g.build(), {"x": _rows(3, 4)}


def benchmark_mlp():
    from benchmarks import models

    return models.mlp((8, 16, 4)), {"x": _rows(8)}


def benchmark_resnet():
    from benchmarks import models

    return models.cnn(width=4), {"x": _rows(3, 32, 32)}


def benchmark_transformer_block():
    from benchmarks import models

    return models.transformer(seq=4, d=8, heads=2, ffn=16), {"x": _rows(4, 8)}


def conformance_attention_block():
    from polyhal.conformance import models

    graph, _ = models.attention(DType.FLOAT32, np.random.default_rng(0))
    return graph, {"x": _rows(6, 16)}


def conformance_cnn():
    from polyhal.conformance import models

    graph, _ = models.cnn(DType.FLOAT32, np.random.default_rng(0))
    return graph, {"x": _rows(3, 8, 8)}


ROW_BY_ROW = [embedding_lookup, softmax_with_the_batch_moved_and_back, reshape_keeping_the_batch,
              benchmark_mlp, benchmark_resnet, benchmark_transformer_block,
              conformance_attention_block, conformance_cnn]


@pytest.mark.parametrize("case", ROW_BY_ROW, ids=[c.__name__ for c in ROW_BY_ROW])
def test_a_graph_that_acts_row_by_row_still_splits(session, case):
    graph, feeds = case()
    layout = BatchLayout.of(graph)
    assert layout.splittable, layout.reason
    parts, out, want = _run_both(session, graph, feeds)
    assert parts == math.ceil(ROWS / MICRO_BATCH)
    for name in want:
        np.testing.assert_allclose(out[name], want[name], rtol=1e-4, atol=1e-5)
