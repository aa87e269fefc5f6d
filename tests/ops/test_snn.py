"""The snn domain: reference kernels against hand values and independent solutions,
shape inference with symbolic time and batch, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from polyhal.errors import ExecutionError, VerificationError
from polyhal.ir import DType, GraphBuilder, TensorType
from polyhal.ops import snn
from polyhal.reference import run

F64 = DType.FLOAT64
DT = 1e-3


def _graph(build, shape=(None, None, 1), dtype=F64):
    g = GraphBuilder("t")
    dims = tuple("time" if i == 0 else "batch" if i == 1 and d is None else d
                 for i, d in enumerate(shape))
    x = g.input("x", TensorType(dtype, dims))
    outs = build(x)
    g.output(*(outs if isinstance(outs, tuple) else (outs,)))
    return g.build()


def _one(value):
    return np.array([value], np.float64)


def _run(build, x, shape=None):
    graph = _graph(build, shape or (None, None, *x.shape[2:]))
    return list(run(graph, x).values())


def test_lif_euler_hand_values():
    # tau 10 ms, r 2, v_leak 0, threshold 0.05: V += 0.1 * (2 * 1 - V) each step.
    x = np.ones((4, 1, 1))
    z, v = _run(lambda x: snn.lif(x, _one(1e-2), _one(2.0), _one(0.0), _one(0.5), _one(-0.1),
                                  dt=DT, method="euler", reset="v_reset", num_outputs=2), x)
    expected_v = []
    value = 0.0
    spikes = []
    for _ in range(4):
        value = value + 0.1 * (2.0 - value)
        spikes.append(float(value > 0.5))
        value = -0.1 if value > 0.5 else value
        expected_v.append(value)
    assert spikes == [0.0, 0.0, 1.0, 0.0]  # 0.2, 0.38, 0.542 -> reset, ...
    np.testing.assert_allclose(z[:, 0, 0], spikes)
    np.testing.assert_allclose(v[:, 0, 0], expected_v, rtol=1e-15)


def test_lif_exact_is_the_closed_form_and_subtract_keeps_the_excess():
    x = np.full((6, 1, 1), 1.5)
    tau, threshold = 5e-3, 0.6
    z, v = _run(lambda x: snn.lif(x, _one(tau), _one(1.0), _one(0.1), _one(threshold),
                                  dt=DT, method="exact", reset="subtract", num_outputs=2), x)
    value, decay = 0.0, math.exp(-DT / tau)
    for t in range(6):
        value = 1.6 + (value - 1.6) * decay  # drive = v_leak + r x = 1.6
        fired = value > threshold
        assert z[t, 0, 0] == float(fired)
        value = value - threshold if fired else value
        assert v[t, 0, 0] == pytest.approx(value, rel=1e-14)
    assert z.sum() >= 2


def test_threshold_is_strict():
    x = np.array([0.5, 0.5000001, 0.4999999]).reshape(3, 1, 1)
    (z,) = _run(lambda x: snn.threshold(x, _one(0.5)), x)
    assert z[:, 0, 0].tolist() == [0.0, 1.0, 0.0]


def test_if_and_integrator_accumulate_dt_r_x():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (20, 2, 3))
    (v,) = _run(lambda x: snn.integrator(x, np.array([1.0, 2.0, 3.0]), dt=DT, method="euler"), x)
    np.testing.assert_allclose(v, np.cumsum(x * DT * np.array([1, 2, 3]), axis=0), rtol=1e-12)
    z, v = _run(lambda x: snn.if_(x, np.full(3, 1 / DT), np.ones(3), dt=DT, method="exact",
                                  reset="v_reset", num_outputs=2), x)
    value = np.zeros((2, 3))
    for t in range(20):
        value = value + x[t]
        fired = value > 1
        np.testing.assert_array_equal(z[t], fired)
        value = np.where(fired, 0.0, value)
        np.testing.assert_allclose(v[t], value, rtol=1e-12)


def test_li_exact_matches_the_ode_solution_and_euler_converges_to_it():
    x = np.full((10, 1, 1), 2.0)
    tau, r, leak = 4e-3, 0.5, -0.2
    (exact,) = _run(lambda x: snn.li(x, _one(tau), _one(r), _one(leak), dt=DT, method="exact"), x)
    times = DT * np.arange(1, 11)
    drive = leak + r * 2.0
    np.testing.assert_allclose(exact[:, 0, 0], drive * (1 - np.exp(-times / tau)), rtol=1e-12)
    fine = np.full((10000, 1, 1), 2.0)
    graph = _graph(lambda x: snn.li(x, _one(tau), _one(r), _one(leak), dt=DT / 1000,
                                    method="euler"))
    (euler,) = run(graph, fine).values()
    np.testing.assert_allclose(euler[999::1000, 0, 0], exact[:, 0, 0], rtol=2e-3)


@pytest.mark.parametrize("tau_syn", [2e-3, 5e-3])
def test_cuba_lif_exact_matches_fine_euler(tau_syn):
    # No threshold crossing: the exact solution of the linear system over each step.
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (8, 1, 2))
    params = (np.full(2, tau_syn), np.full(2, 5e-3), np.ones(2), np.zeros(2), np.full(2, 1e9))

    def build(dt, method):
        return lambda v: snn.cuba_lif(v, *params, None, np.array([1.0, 0.5]), dt=dt,
                                      method=method, reset="v_reset", num_outputs=3)

    _, v_exact, i_exact = _run(build(DT, "exact"), x)
    fine = np.repeat(x, 2000, axis=0)
    _, v_fine, i_fine = _run(build(DT / 2000, "euler"), fine)
    np.testing.assert_allclose(v_exact, v_fine[1999::2000], rtol=2e-3, atol=1e-6)
    np.testing.assert_allclose(i_exact, i_fine[1999::2000], rtol=2e-3, atol=1e-6)


def test_cuba_lif_equal_taus_is_the_limit_of_nearly_equal_ones():
    x = np.random.default_rng(2).uniform(0, 1, (6, 1, 1))

    def trace(tau_syn):
        return _run(lambda v: snn.cuba_lif(v, _one(tau_syn), _one(5e-3), _one(1.0), _one(0.0),
                                           _one(1e9), dt=DT, method="exact", reset="v_reset",
                                           num_outputs=2), x)[1]

    np.testing.assert_allclose(trace(5e-3), trace(5e-3 * (1 + 1e-7)), rtol=1e-6)


def test_delay_shifts_each_neuron_by_whole_steps():
    x = np.arange(1, 13, dtype=np.float64).reshape(6, 1, 2)
    (y,) = _run(lambda v: snn.delay(v, np.array([0.0, 2 * DT]), dt=DT), x)
    np.testing.assert_array_equal(y[:, 0, 0], x[:, 0, 0])
    np.testing.assert_array_equal(y[:, 0, 1], [0, 0, 2, 4, 6, 8])


def test_linear_affine_scale_per_step():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (4, 3, 5))
    w, b = rng.uniform(-1, 1, (2, 5)), rng.uniform(-1, 1, 2)
    (y,) = _run(lambda v: snn.affine(v, w, b), x)
    np.testing.assert_allclose(y, np.einsum("tbi,oi->tbo", x, w) + b, rtol=1e-12)
    (y,) = _run(lambda v: snn.scale(v, np.arange(5.0)), x)
    np.testing.assert_allclose(y, x * np.arange(5.0))


def test_conv2d_sum_pool_flatten_per_step():
    rng = np.random.default_rng(4)
    x = rng.integers(0, 2, (3, 2, 1, 4, 4)).astype(np.float64)
    w = rng.uniform(-1, 1, (2, 1, 3, 3))
    (y,) = _run(lambda v: snn.conv2d(v, w, pads=[1, 1, 1, 1]), x)
    padded = np.pad(x, [(0, 0)] * 3 + [(1, 1), (1, 1)])
    expected = np.zeros((3, 2, 2, 4, 4))
    for i in range(4):
        for j in range(4):
            expected[..., i, j] = np.einsum("tbckl,ockl->tbo", padded[..., i:i + 3, j:j + 3], w)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
    (pooled,) = _run(lambda v: snn.sum_pool2d(v, kernel_shape=[2, 2]), x)
    np.testing.assert_array_equal(pooled, x.reshape(3, 2, 1, 2, 2, 2, 2).sum(axis=(4, 6)))
    (flat,) = _run(lambda v: snn.flatten(v, start_dim=0), x)
    assert flat.shape == (3, 2, 16)
    np.testing.assert_array_equal(flat, x.reshape(3, 2, 16))


def test_symbolic_time_and_batch_propagate():
    graph = _graph(lambda v: snn.flatten(snn.sum_pool2d(snn.conv2d(
        v, np.ones((4, 2, 3, 3)), strides=[2, 2]), kernel_shape=[2, 2]), start_dim=0),
        (None, None, 2, 9, 9))
    assert graph.outputs[0].type.shape == ("time", "batch", 16)
    graph = _graph(lambda v: snn.lif(snn.linear(v, np.ones((3, 5))), *[np.ones(3)] * 4, dt=DT,
                                     method="euler", reset="subtract"), (None, None, 5))
    assert graph.outputs[0].type.shape == ("time", "batch", 3)


def _lif(tau=1e-2, dt=DT, method="euler", reset="v_reset", params=None):
    params = params or [np.full(3, tau), np.ones(3), np.zeros(3), np.ones(3)]
    return lambda v: snn.lif(v, *params, dt=dt, method=method, reset=reset)


@pytest.mark.parametrize(("build", "shape", "message"), [
    (_lif(tau=-1e-3), (None, None, 3), "tau.*must be > 0"),
    (_lif(tau=0.0), (None, None, 3), "tau.*must be > 0"),
    (_lif(dt=0.0), (None, None, 3), "dt=0.0 must be a finite number > 0"),
    (_lif(dt=float("nan")), (None, None, 3), "dt=nan"),
    (_lif(method="rk4"), (None, None, 3), "method='rk4'"),
    (_lif(reset="zero"), (None, None, 3), "reset='zero'"),
    (_lif(params=[np.ones(4)] * 4), (None, None, 3), "does not broadcast to the neuron shape"),
    (_lif(), (3,), "time-major"),
    (lambda v: snn.linear(v, np.ones((2, 4))), (None, None, 3), "takes 4 inputs"),
    (lambda v: snn.delay(v, np.full(3, 1.5e-3), dt=DT), (None, None, 3), "whole multiples"),
    (lambda v: snn.sum_pool2d(v, kernel_shape=[5, 5]), (None, None, 1, 3, 3), "larger than"),
    (lambda v: snn.flatten(v, start_dim=3), (None, None, 2, 2), "start_dim=3"),
])
def test_bad_snn_nodes_are_verification_errors(build, shape, message):
    with pytest.raises(VerificationError, match=message):
        _graph(build, shape)


def test_time_constants_given_at_run_time_are_checked():
    g = GraphBuilder("t")
    x = g.input("x", TensorType(F64, ("time", "batch", 2)))
    tau = g.input("tau", TensorType(F64, (2,)))
    g.output(snn.li(x, tau, np.ones(2), np.zeros(2), dt=DT, method="euler"))
    graph = g.build()
    assert run(graph, np.ones((3, 1, 2)), np.full(2, 1e-2))
    with pytest.raises(ExecutionError, match="tau must be > 0"):
        run(graph, np.ones((3, 1, 2)), np.array([1e-2, 0.0]))
