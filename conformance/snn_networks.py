"""Spiking networks for levels L2 and L4-snn, built from the snn ops.

Each builder takes a float dtype, a seed and the number of time steps and
returns a graph whose input is a Bernoulli spike train ``[time, batch, ...]``
(``time`` and ``batch`` symbolic) plus one seeded input. Time constants are a
few steps long so that every layer fires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from polyhal.ir import DType, Graph, GraphBuilder, TensorType
from polyhal.ops import snn

DT = 1e-3
"""The time step of every network (seconds)."""
BATCH = 2

Network = tuple[Graph, list[np.ndarray]]


def spikes(rng: np.random.Generator, steps: int, shape: tuple[int, ...], dtype: DType,
           rate: float = 0.3) -> np.ndarray:
    """A Bernoulli spike train ``[steps, BATCH, *shape]`` of 0s and 1s."""
    return (rng.random((steps, BATCH, *shape)) < rate).astype(dtype.numpy)


def _u(rng: np.random.Generator, dtype: DType, low: float, high: float,
       shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(dtype.numpy)


def neuron(op: str, x: Any, rng: np.random.Generator, dtype: DType, n: int, method: str,
           reset: str, outputs: int = 1) -> Any:
    """One population of ``n`` neurons of ``op`` with seeded parameters."""
    tau, r, leak = _u(rng, dtype, 4e-3, 1.2e-2, (n,)), _u(rng, dtype, 0.8, 1.2, (n,)), \
        _u(rng, dtype, -0.05, 0.05, (n,))
    threshold, v_reset = _u(rng, dtype, 0.2, 0.5, (n,)), _u(rng, dtype, -0.1, 0.0, (n,))
    timing = {"dt": DT, "method": method}
    spiking = {**timing, "reset": reset, "num_outputs": outputs}
    if op == "LIF":
        return snn.lif(x, tau, r, leak, threshold, v_reset, **spiking)
    if op == "CubaLIF":
        tau_syn = _u(rng, dtype, 2e-3, 6e-3, (n,))
        return snn.cuba_lif(x, tau_syn, tau, r, leak, threshold, v_reset,
                            _u(rng, dtype, 0.8, 1.5, (n,)), **spiking)
    if op == "IF":
        return snn.if_(x, r * 40, threshold, v_reset, **spiking)
    if op == "LI":
        return snn.li(x, tau, r, leak, **timing)
    if op == "Integrator":
        return snn.integrator(x, r * 40, **timing)
    if op == "Threshold":
        return snn.threshold(x, threshold)
    raise ValueError(f"no population builder for snn.{op}")


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, tuple) else value


def population(op: str, dtype: DType, seed: int, steps: int, method: str = "euler",
               reset: str = "v_reset") -> Network:
    """Spikes -> Linear -> ``op`` (every output) -> Linear -> LIF (spiking ``op`` only)."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder(f"snn-{op.lower()}")
    x = g.input("spikes", TensorType(dtype, ("time", "batch", 6)))
    h = snn.linear(x, _u(rng, dtype, 0.0, 1.0, (8, 6)))
    spiking = op in ("LIF", "CubaLIF", "IF")
    outs = neuron(op, h, rng, dtype, 8, method, reset, outputs=3 if op == "CubaLIF" else 2)
    outs = outs if isinstance(outs, tuple) else (outs,)
    if spiking:
        second = snn.lif(snn.linear(outs[0], _u(rng, dtype, -0.5, 1.0, (4, 8))),
                         *(_u(rng, dtype, lo, hi, (4,)) for lo, hi in
                           ((4e-3, 1.2e-2), (0.8, 1.2), (-0.05, 0.05), (0.2, 0.5))),
                         dt=DT, method=method, reset=reset)
        outs = (*outs, second)
    g.output(*outs)
    return g.build(), [spikes(rng, steps, (6,), dtype)]


def equal_taus(dtype: DType, seed: int, steps: int) -> Network:
    """CubaLIF with tau_syn == tau_mem under ``exact`` (the degenerate closed form)."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder("snn-cuba-equal")
    x = g.input("spikes", TensorType(dtype, ("time", "batch", 6)))
    h = snn.linear(x, _u(rng, dtype, 0.0, 1.0, (5, 6)))
    tau = _u(rng, dtype, 4e-3, 8e-3, (5,))
    g.output(*snn.cuba_lif(h, tau, tau, np.ones(5, dtype.numpy), np.zeros(5, dtype.numpy),
                           np.full(5, 0.3, dtype.numpy), dt=DT, method="exact",
                           reset="v_reset", num_outputs=3))
    return g.build(), [spikes(rng, steps, (6,), dtype)]


def delayed(dtype: DType, seed: int, steps: int) -> Network:
    """Spikes -> Linear -> Delay (0-3 steps per neuron) -> LIF."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder("snn-delay")
    x = g.input("spikes", TensorType(dtype, ("time", "batch", 6)))
    h = snn.delay(snn.linear(x, _u(rng, dtype, 0.0, 1.0, (5, 6))),
                  (rng.integers(0, 4, 5) * DT).astype(dtype.numpy), dt=DT)
    g.output(*neuron("LIF", h, rng, dtype, 5, "euler", "v_reset", outputs=2))
    return g.build(), [spikes(rng, steps, (6,), dtype)]


def mlp(dtype: DType, seed: int, steps: int) -> Network:
    """A spiking MLP: 12 -> Affine -> LIF(16) -> Linear -> LIF(8) -> Linear -> LI(3) readout."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder("snn-mlp")
    x = g.input("spikes", TensorType(dtype, ("time", "batch", 12)))
    h = snn.affine(x, _u(rng, dtype, 0.0, 0.8, (16, 12)), _u(rng, dtype, 0.0, 0.2, (16,)))
    h = neuron("LIF", h, rng, dtype, 16, "euler", "v_reset")
    h = neuron("LIF", snn.linear(h, _u(rng, dtype, -0.3, 0.8, (8, 16))), rng, dtype, 8,
               "euler", "subtract")
    g.output(neuron("LI", snn.linear(h, _u(rng, dtype, -1, 1, (3, 8))), rng, dtype, 3,
                    "euler", ""), name="readout")
    return g.build(), [spikes(rng, steps, (12,), dtype)]


def conv(dtype: DType, seed: int, steps: int) -> Network:
    """A spiking CNN: Conv2d -> IF -> SumPool2d -> Flatten -> Linear -> Scale -> LI."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder("snn-conv")
    x = g.input("spikes", TensorType(dtype, ("time", "batch", 2, 6, 6)))
    h = snn.conv2d(x, _u(rng, dtype, -0.2, 0.6, (4, 2, 3, 3)), _u(rng, dtype, 0, 0.1, (4,)),
                   pads=[1, 1, 1, 1])
    h = _first(snn.if_(h, np.full((4, 1, 1), 40, dtype.numpy), np.full((4, 1, 1), 0.5,
                                                                     dtype.numpy),
                       dt=DT, method="euler", reset="subtract"))
    h = snn.flatten(snn.sum_pool2d(h, kernel_shape=[2, 2]), start_dim=0)
    h = snn.scale(snn.linear(h, _u(rng, dtype, -0.2, 0.4, (5, 36))),
                  _u(rng, dtype, 0.5, 1.5, (5,)))
    g.output(neuron("LI", h, rng, dtype, 5, "exact", ""), name="readout")
    return g.build(), [spikes(rng, steps, (2, 6, 6), dtype)]


def synfire(dtype: DType, seed: int, steps: int, groups: int = 5, size: int = 20) -> Network:
    """A synfire chain: ``groups`` IF groups of ``size``, each all-to-all into the next
    through a one-step Delay; a volley into the first group at step 1 reaches group k
    at step 1 + k."""
    rng = np.random.default_rng(seed)
    g = GraphBuilder("synfire")
    x = g.input("spikes", TensorType(dtype, ("time", "batch", size)))
    weight = np.full((size, size), 1.5 / size, dtype.numpy)
    h = snn.linear(x, weight)
    outs = []
    for _ in range(groups):
        z = _first(snn.if_(h, np.full(size, 1 / DT, dtype.numpy), np.ones(size, dtype.numpy),
                           dt=DT, method="euler", reset="v_reset"))
        outs.append(z)
        h = snn.delay(snn.linear(z, weight), np.full(size, DT, dtype.numpy), dt=DT)
    g.output(*outs)
    volley = np.zeros((steps, BATCH, size), dtype.numpy)
    volley[1] = (rng.random((BATCH, size)) < 0.9).astype(dtype.numpy)
    return g.build(), [volley]


NETWORKS: dict[str, Callable[[DType, int, int], Network]] = {
    "snn-mlp": mlp,
    "snn-conv": conv,
}
"""The L2 spiking models by name."""
