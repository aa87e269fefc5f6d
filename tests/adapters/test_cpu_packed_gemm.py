"""The packed-weights GEMM: every tile remainder, panel edge, bias shape and dtype
against a float64 product; NaN and inf; nothing written past the output; the same
bits on any thread count; and the plan's use of it for Gemm and MatMul nodes whose
weights are constants, compared with the reference."""

from __future__ import annotations

import itertools
import threading
import tracemalloc
import warnings

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.adapters.cpu import threads as cpu_threads
from polyhal.adapters.cpu.kernels import crew, packed_gemm
from polyhal.hal import CompileOptions, open_device
from polyhal.ir import GraphBuilder, f32, f64
from polyhal.reference import run


def _expected(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None, relu: bool
              ) -> np.ndarray:
    y = a.astype(np.float64) @ b.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return np.maximum(y, 0) if relu else y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 2, 3, 4, 5, 7, 9])
@pytest.mark.parametrize("columns", [1, 11, 12, 13, 24, 25, 49])
def test_the_product_matches_float64_for_every_tile_and_panel_edge(dtype, rows, columns):
    rng = np.random.default_rng(rows * 100 + columns)
    for depth, transposed, bias_shape, relu in itertools.product(
            (0, 1, 19), (False, True), (None, (), (1,), (columns,)), (False, True)):
        a = rng.normal(size=(rows, depth)).astype(dtype)
        b = rng.normal(size=(depth, columns)).astype(dtype)
        bias = None if bias_shape is None else rng.normal(size=bias_shape).astype(dtype)
        weights = packed_gemm.pack(np.ascontiguousarray(b.T) if transposed else b, bias,
                                   transposed)
        out = packed_gemm.multiply(a, weights, np.empty((rows, columns), dtype), relu)
        tolerance = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(out, _expected(a, b, bias, relu), rtol=tolerance,
                                   atol=tolerance, err_msg=f"{depth=} {transposed=} "
                                   f"{bias_shape=} {relu=}")


def test_nan_and_inf_propagate_and_nothing_past_the_output_is_written():
    rng = np.random.default_rng(1)
    rows, depth, columns = 6, 5, 13
    a = rng.normal(size=(rows, depth)).astype(np.float32)
    b = rng.normal(size=(depth, columns)).astype(np.float32)
    a[0, 1] = np.nan
    a[1, 2] = np.inf
    b[3, 4] = -np.inf
    memory = np.full(rows * columns + 64, 7.0, np.float32)
    out = memory[:rows * columns].reshape(rows, columns)
    packed_gemm.multiply(a, packed_gemm.pack(b), out, relu=True)
    with np.errstate(invalid="ignore"):
        want = np.maximum(a.astype(np.float64) @ b, 0)  # NaN stays NaN through the Relu
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert np.isnan(out[0]).all() and np.isinf(out).any()
    assert (memory[rows * columns:] == 7.0).all()


def test_the_operands_must_fit_and_empty_products_are_the_bias_or_nothing():
    weights = packed_gemm.pack(np.ones((3, 4), np.float32), np.arange(4, dtype=np.float32))
    with pytest.raises(ValueError, match=r"\[2, 5\] @ \[3, 4\]"):
        packed_gemm.multiply(np.ones((2, 5), np.float32), weights, np.empty((2, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        packed_gemm.multiply(np.ones((2, 3), np.float32), weights,
                             np.empty((4, 2), np.float32).T)
    empty = packed_gemm.pack(np.ones((0, 4), np.float32), np.arange(4, dtype=np.float32))
    out = packed_gemm.multiply(np.ones((2, 0), np.float32), empty, np.empty((2, 4), np.float32))
    np.testing.assert_array_equal(out, [[0, 1, 2, 3]] * 2)


def test_any_thread_count_gives_the_same_bits(monkeypatch):
    monkeypatch.setattr(packed_gemm, "MIN_WORK_PER_THREAD", 1)
    rng = np.random.default_rng(2)
    a = rng.normal(size=(7, 40)).astype(np.float32)
    weights = packed_gemm.pack(rng.normal(size=(40, 100)).astype(np.float32))
    results = []
    try:
        for count in (1, 2, 3, 5):
            cpu_threads.set_count(count)
            results.append(packed_gemm.multiply(a, weights, np.empty((7, 100), np.float32)))
            out = np.empty((7, 100), np.float32)
            packed_gemm.multiplier(7, weights, False)(a, out)  # what a plan calls
            results.append(out)
    finally:
        cpu_threads.set_count(cpu_threads.available())
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])  # each panel: one thread, one order


def _gemm_graph(rows: int, dtype, trans_b: int, c_shape: tuple[int, ...] | None,
                alpha: float, beta: float, c_constant: bool = True):
    rng = np.random.default_rng(3)
    numpy_dtype = np.dtype(dtype.numpy)
    g = GraphBuilder("gemm")
    x = g.input("x", dtype[rows, 6])
    w = g.constant(rng.normal(size=(5, 6) if trans_b else (6, 5)).astype(numpy_dtype), "w")
    inputs = [x, w]
    if c_shape is not None:
        inputs.append(g.constant(rng.normal(size=c_shape).astype(numpy_dtype), "c")
                      if c_constant else g.input("c", dtype[c_shape]))
    y = g.op("Gemm", *inputs, alpha=alpha, beta=beta, transB=trans_b)
    g.output(ops.relu(y), name="y")
    return g.build()


@pytest.mark.parametrize("rows", [1, 4, packed_gemm.MAX_ROWS, packed_gemm.MAX_ROWS + 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (1, 5), (3, 5), (3, 1)])
@pytest.mark.parametrize("alpha_beta", [(1.0, 1.0), (2.0, 1.0), (1.0, 0.5)])
def test_gemms_on_constant_weights_match_the_reference(rows, trans_b, c_shape, alpha_beta):
    if c_shape is not None and len(c_shape) == 2 and c_shape[0] == 3:
        c_shape = (rows, c_shape[1])  # C varying by row
    graph = _gemm_graph(rows, f32, trans_b, c_shape, *alpha_beta)
    x = np.random.default_rng(4).normal(size=(rows, 6)).astype(np.float32)
    got = polyhal.compile(graph, device="cpu")(x)["y"]
    np.testing.assert_allclose(got, run(graph, x)["y"], rtol=1e-6, atol=1e-6)


def test_packed_weights_are_used_where_they_apply(monkeypatch):
    calls: list[tuple[int, ...]] = []
    make_multiplier = packed_gemm.multiplier

    def counted(rows, weights, relu):
        multiply = make_multiplier(rows, weights, relu)

        def recorded(a, out):
            calls.append(a.shape)
            multiply(a, out)

        return recorded

    monkeypatch.setattr(packed_gemm, "multiplier", counted)
    rng = np.random.default_rng(5)
    cases = {  # graph -> the input's shape, and whether its product is packed
        _gemm_graph(2, f64, 1, (5,), 1.0, 1.0): ((2, 6), True),
        _gemm_graph(packed_gemm.MAX_ROWS + 1, f32, 0, (5,), 1.0, 1.0): ((33, 6), False),
        _gemm_graph(2, f32, 0, (5,), 2.0, 1.0): ((2, 6), False),  # alpha scales the product
        _gemm_graph(2, f32, 0, (2, 5), 1.0, 1.0): ((2, 6), False),  # C varies by row
        _gemm_graph(2, f32, 0, (5,), 1.0, 1.0, c_constant=False): ((2, 6), False),
    }
    for shape in ((2, 3, 6), (6,)):  # MatMul: batch axes folded into rows; a vector
        g = GraphBuilder("matmul")
        x = g.input("x", f32[shape])
        g.output(x @ g.constant(rng.normal(size=(6, 4)).astype(np.float32), "w"), name="y")
        cases[g.build()] = (shape, True)
    for graph, (shape, packed) in cases.items():
        calls.clear()
        inputs = [rng.normal(size=shape).astype(graph.inputs[0].type.dtype.numpy)]
        if len(graph.inputs) == 2:
            inputs.append(rng.normal(size=(5,)).astype(np.float32))
        got = polyhal.compile(graph, device="cpu")(*inputs)["y"]
        np.testing.assert_allclose(got, run(graph, *inputs)["y"], rtol=1e-6, atol=1e-6)
        assert bool(calls) == packed, (graph.name, shape, calls)


def test_a_plan_keeps_packed_weights_instead_of_the_constant():
    def constants_kept(rows: int) -> list[tuple[int, ...]]:
        graph = _gemm_graph(rows, f32, 0, (5,), 1.0, 1.0)
        plan = open_device("cpu").compile(graph, CompileOptions()).inner.plan_for(((rows, 6),))
        return sorted(a.shape for a in plan.template if isinstance(a, np.ndarray))

    assert constants_kept(3) == []
    assert constants_kept(packed_gemm.MAX_ROWS + 1) == [(5,), (6, 5)]  # BLAS reads them


def test_only_operands_that_pack_without_much_padding_are_packed():
    assert packed_gemm.packs_compactly(784, 10, np.dtype(np.float32))  # 2.4x: small
    assert packed_gemm.packs_compactly(10**6, 24, np.dtype(np.float32))  # no padding
    assert not packed_gemm.packs_compactly(10**8, 1, np.dtype(np.float32))  # 24x of 400 MB


def test_a_new_batch_size_packs_no_new_copy_of_the_weights():
    rng = np.random.default_rng(6)
    g = GraphBuilder("mlp")
    x = g.input("x", f32["n", 512])
    weights = [rng.normal(0, 512**-0.5, (512, 512)).astype(np.float32) for _ in range(2)]
    g.output(ops.relu(x @ g.constant(weights[0])) @ g.constant(weights[1]), name="y")
    graph = g.build()  # 2 MiB of weights
    compiled = polyhal.compile(graph, device="cpu")
    compiled(np.ones((1, 512), np.float32))
    tracemalloc.start()
    try:
        for rows in (2, 3, packed_gemm.MAX_ROWS + 1):  # packed, packed, BLAS
            xs = rng.normal(size=(rows, 512)).astype(np.float32)
            np.testing.assert_allclose(compiled(xs)["y"], run(graph, xs)["y"], rtol=1e-5,
                                       atol=1e-5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"{peak / 2**20:.1f} MiB allocated: the weights were copied"


def test_concurrent_calls_with_products_split_between_threads(monkeypatch):
    monkeypatch.setattr(packed_gemm, "MIN_WORK_PER_THREAD", 1)  # every product split
    rng = np.random.default_rng(7)
    g = GraphBuilder("layer")
    x = g.input("x", f32["n", 6])
    weights = g.constant(rng.normal(size=(6, 60)).astype(np.float32))  # 3 panels
    g.output(ops.relu(x @ weights + g.constant(rng.normal(size=60).astype(np.float32))),
             name="y")
    graph = g.build()
    compiled = polyhal.compile(graph, device="cpu")
    split: list[int] = []  # threads each product was split between
    run_on_crew = crew.run

    def counted(calls):
        split.append(len(calls))
        run_on_crew(calls)

    monkeypatch.setattr(crew, "run", counted)
    errors: list[BaseException] = []

    def calls(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                xs = rng.normal(size=(packed_gemm.MAX_ROWS, 6)).astype(np.float32)
                np.testing.assert_allclose(compiled(xs)["y"], run(graph, xs)["y"], rtol=1e-6,
                                           atol=1e-6)
        except BaseException as error:  # handed to the test thread
            errors.append(error)

    workers = [threading.Thread(target=calls, args=(seed,)) for seed in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not errors and not any(w.is_alive() for w in workers), errors[:1]
    assert split and min(split) >= 2, split[:5]


@pytest.mark.parametrize("rows", [2, packed_gemm.MAX_ROWS + 1])  # packed, then BLAS
def test_inf_and_nan_are_values_not_warnings_in_quiet_and_other_plans(rows):
    g = GraphBuilder("layers")
    x = g.input("x", f32["n", 6])
    rng = np.random.default_rng(8)
    bias = g.constant(np.ones(12, np.float32))
    hidden = ops.relu(x @ g.constant(rng.normal(size=(6, 12)).astype(np.float32)) + bias)
    g.output(hidden @ g.constant(np.full((12, 3), 1e30, np.float32)), name="y")
    graph = g.build()
    xs = rng.normal(size=(rows, 6)).astype(np.float32)
    xs[0, 0], xs[1] = np.nan, 3e38  # NaN, and products that overflow to inf
    executable = open_device("cpu").compile(graph, CompileOptions())
    # A plan of packed products only runs without np.errstate; one with BLAS steps in it.
    assert executable.inner.plan_for(((rows, 6),)).quiet == (rows <= packed_gemm.MAX_ROWS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = polyhal.compile(graph, device="cpu")(xs)["y"]
    expected = run(graph, xs)["y"]
    assert np.isinf(got).any() and np.isnan(got).any()
    np.testing.assert_allclose(got, expected, rtol=1e-5, equal_nan=True)
