"""2:4 structured sparsity: pruning, the compressed form, and the graph pass."""

from __future__ import annotations

import doctest

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import polyhal
import polyhal.passes.sparsity
from polyhal import ops
from polyhal.errors import PolyhalError
from polyhal.ir import GraphBuilder, f32
from polyhal.passes import (
    compress_2_4,
    decompress_2_4,
    is_2_4_sparse,
    prune_2_4,
    prune_2_4_array,
)

weights = st.tuples(st.integers(1, 4), st.integers(1, 5)).flatmap(
    lambda kn: arrays(np.float32, (4 * kn[0], kn[1]),
                      elements=st.floats(-4, 4, width=32) | st.sampled_from([0.0, -0.0, 1.0])))


def test_doctests():
    assert doctest.testmod(polyhal.passes.sparsity).failed == 0


@settings(max_examples=200, deadline=None)
@given(weights)
def test_pruning_keeps_the_two_largest_magnitudes_of_each_group(w):
    pruned = prune_2_4_array(w)
    assert is_2_4_sparse(pruned)
    groups = np.abs(w).reshape(-1, 4, w.shape[1])
    kept = pruned.reshape(-1, 4, w.shape[1]) != 0
    for g in range(groups.shape[0]):
        for n in range(w.shape[1]):
            column = groups[g, :, n]
            smallest_kept = column[kept[g, :, n]].min(initial=np.inf)
            largest_dropped = column[~kept[g, :, n]].max(initial=0.0)
            assert largest_dropped <= smallest_kept
    assert np.all((pruned == 0) | (pruned == w))  # values are kept, never changed
    np.testing.assert_array_equal(prune_2_4_array(pruned), pruned)  # idempotent


@settings(max_examples=200, deadline=None)
@given(weights)
def test_compression_round_trips_and_halves_the_values(w):
    packed = compress_2_4(prune_2_4_array(w))
    assert packed.values.shape == (w.shape[0] // 2, w.shape[1])
    assert packed.indices.dtype == np.uint8 and packed.indices.max(initial=0) <= 3
    np.testing.assert_array_equal(decompress_2_4(packed), prune_2_4_array(w))
    # positions are distinct and in row order within each group
    pairs = packed.indices.reshape(-1, 2, w.shape[1])
    assert np.all(pairs[:, 0] < pairs[:, 1])
    assert packed.nbytes == packed.values.nbytes + (packed.indices.size * 2 + 7) // 8


def test_batched_weights_and_other_float_dtypes():
    rng = np.random.default_rng(0)
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float64):
        w = rng.standard_normal((3, 8, 5)).astype(dtype)
        pruned = prune_2_4_array(w)
        assert pruned.dtype == w.dtype and is_2_4_sparse(pruned)
        np.testing.assert_array_equal(decompress_2_4(compress_2_4(pruned)), pruned)


def test_nan_is_kept_and_ties_keep_the_earlier_row():
    w = np.array([[np.nan], [1.0], [1.0], [1.0]], np.float32)
    assert np.isnan(prune_2_4_array(w)[0, 0])
    assert prune_2_4_array(w)[1:, 0].tolist() == [1.0, 0.0, 0.0]


def test_dense_or_ungrouped_weights_are_refused():
    with pytest.raises(PolyhalError, match="not 2:4 sparse"):
        compress_2_4(np.ones((4, 2), np.float32))
    with pytest.raises(PolyhalError, match=r"K a multiple of 4, got shape \[6, 2\]"):
        prune_2_4_array(np.ones((6, 2), np.float32))
    assert not is_2_4_sparse(np.zeros((6, 2))) and not is_2_4_sparse(np.zeros(4))
    assert is_2_4_sparse(np.zeros((8, 3)))


def _mlp(w2_shared: bool = False):
    rng = np.random.default_rng(1)
    g = GraphBuilder("mlp")
    x = g.input("x", f32["batch", 8])
    w1 = g.constant(rng.standard_normal((8, 12)).astype(np.float32), name="w1")
    b1 = g.constant(rng.standard_normal(12).astype(np.float32), name="b1")
    w2 = g.constant(rng.standard_normal((12, 6)).astype(np.float32), name="w2")
    w3 = g.constant(rng.standard_normal((6, 6)).astype(np.float32), name="w3")  # K = 6
    h = ops.relu(x @ w1 + b1) @ w2
    y = h @ w3
    g.output(y + ops.reduce_sum(w2) if w2_shared else y, name="y")
    return g.build()


def test_the_pass_prunes_matmul_weights_only():
    graph = _mlp()
    pruned = prune_2_4(graph)
    assert is_2_4_sparse(pruned.constants["w1"]) and is_2_4_sparse(pruned.constants["w2"])
    np.testing.assert_array_equal(pruned.constants["b1"], graph.constants["b1"])  # not a weight
    np.testing.assert_array_equal(pruned.constants["w3"], graph.constants["w3"])  # K = 6
    assert not is_2_4_sparse(graph.constants["w1"])  # the input graph is untouched
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    expected = x @ prune_2_4_array(graph.constants["w1"]) + graph.constants["b1"]
    expected = np.maximum(expected, 0) @ prune_2_4_array(graph.constants["w2"])
    expected = expected @ graph.constants["w3"]
    np.testing.assert_allclose(polyhal.run(pruned, x)["y"], expected, rtol=1e-5, atol=1e-5)


def test_a_weight_read_by_another_op_is_left_dense():
    graph = _mlp(w2_shared=True)
    assert [n for n, v in prune_2_4(graph).constants.items()
            if is_2_4_sparse(v) and not is_2_4_sparse(graph.constants[n])] == ["w1"]
    with pytest.raises(PolyhalError, match="'w2' of graph 'mlp' cannot be pruned: something "
                                           "other than a MatMul's right operand reads it"):
        prune_2_4(graph, names=["w2"])
    with pytest.raises(PolyhalError, match=r"'w3' .* has no K .* multiple of 4"):
        prune_2_4(graph, names=["w3"])
    with pytest.raises(PolyhalError, match="has no constant 'nope'"):
        prune_2_4(graph, names=["nope"])
    only = prune_2_4(graph, names=["w1"])
    assert is_2_4_sparse(only.constants["w1"])
