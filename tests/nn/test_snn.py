"""A Module whose forward emits ops of another domain (``snn.LIF``)."""

from __future__ import annotations

import numpy as np
import pytest

import polyhal
from polyhal import nn, ops
from polyhal.errors import IRError
from polyhal.ir import DType, TensorType, Var

DT, TAU = 1e-3, 5e-3


class SpikingLinear(nn.Module):
    """A weight, then a layer of LIF neurons whose constants are frozen parameters."""

    def __init__(self, inputs: int, neurons: int, threshold: float = 0.2) -> None:
        f64 = "float64"
        self.weight = nn.Parameter((inputs, neurons), nn.init.uniform(0.0, 0.6), dtype=f64)
        self.tau = nn.Parameter((neurons,), nn.init.constant(TAU), dtype=f64, trainable=False)
        self.r = nn.Parameter((neurons,), nn.init.ones(), dtype=f64, trainable=False)
        self.v_leak = nn.Parameter((neurons,), nn.init.zeros(), dtype=f64, trainable=False)
        self.v_threshold = nn.Parameter((neurons,), nn.init.constant(threshold), dtype=f64,
                                        trainable=False)

    def forward(self, x: Var) -> Var:  # x: [T, B, inputs] spikes
        current = x @ self.weight  # MatMul broadcasts over the time axis
        return ops.apply("LIF", current, self.tau, self.r, self.v_leak, self.v_threshold,
                         domain="snn", dt=DT, method="euler", reset="subtract")


def _lif_numpy(current: np.ndarray, threshold: float) -> np.ndarray:
    v = np.zeros(current.shape[1:])
    spikes = np.zeros_like(current)
    for t in range(current.shape[0]):
        v = v + DT / TAU * (current[t] - v)
        spikes[t] = v > threshold
        v = np.where(spikes[t] > 0, v - threshold, v)
    return spikes


def test_a_spiking_module_builds_and_runs_on_the_reference():
    model = nn.Sequential(SpikingLinear(4, 6)).initialize(3)
    spikes = (np.random.default_rng(0).random((20, 2, 4)) < 0.5).astype(np.float64)
    graph = model.graph(TensorType(DType.FLOAT64, ("time", "batch", 4)))
    assert [n.qualified_op for n in graph.nodes] == ["core.MatMul", "snn.LIF"]
    assert model.trainable_names() == ["0.weight"]
    out = polyhal.reference.run(graph, **model.feeds(x=spikes))["y"]
    expected = _lif_numpy(spikes @ model[0].weight.data, 0.2)
    np.testing.assert_array_equal(out, expected)
    assert 0 < out.sum() < out.size
    constants = model.graph(TensorType(DType.FLOAT64, ("time", "batch", 4)), params="constants")
    np.testing.assert_array_equal(polyhal.reference.run(constants, x=spikes)["y"], expected)
    np.testing.assert_array_equal(model.predict(spikes, device="cpu"), expected)


def test_spiking_op_errors_name_the_layer():
    model = nn.Sequential(SpikingLinear(4, 6))
    with pytest.raises(IRError, match=r"^layer '0' \(SpikingLinear\): .*snn\.LIF.*time-major"):
        model.graph(TensorType(DType.FLOAT64, (4,)))
