"""The NIR paper's single-neuron task: one LIF neuron driven by a spike train.

tau = 2.5 ms, threshold 0.1, dt = 0.1 ms, 1000 steps (100 ms). Input spikes
arrive through one weighted connection; the neuron fires when enough of
them arrive close together. The same graph runs on the reference executor
and on brian2 (the ``neuro`` adapter), and their spike times must agree.

    python examples/single_lif.py
"""

from __future__ import annotations

import numpy as np

import polyhal
from polyhal.ir import DType, GraphBuilder, TensorType
from polyhal.ops import snn

DT, TAU, THRESHOLD, STEPS = 1e-4, 2.5e-3, 0.1, 1000


def build() -> polyhal.Graph:
    """Input spike -> Linear(weight 0.06) -> LIF; r = tau / dt, so a lone spike moves
    V by about 0.06: two within a few ms cross the threshold, one alone leaks away."""
    g = GraphBuilder("single_lif")
    x = g.input("spikes", TensorType(DType.FLOAT64, ("time", "batch", 1)))
    current = snn.linear(x, np.array([[0.06]]))
    z, v = snn.lif(current, np.array([TAU]), np.array([TAU / DT]), np.array([0.0]),
                   np.array([THRESHOLD]), dt=DT, method="euler", reset="v_reset",
                   num_outputs=2)
    g.output(z, name="spikes_out")
    g.output(v, name="membrane")
    return g.build()


def main() -> None:
    rng = np.random.default_rng(0)
    spikes = (rng.random((STEPS, 1, 1)) < 0.02).astype(np.float64)  # ~200 Hz input
    graph = build()
    expected = polyhal.run(graph, spikes)
    actual = polyhal.compile(graph, device="neuro")(spikes)
    times = np.flatnonzero(expected["spikes_out"][:, 0, 0]) * DT * 1e3
    assert np.array_equal(actual["spikes_out"], expected["spikes_out"]), "spike trains differ"
    np.testing.assert_allclose(actual["membrane"], expected["membrane"], rtol=1e-6, atol=1e-9)
    print(f"{int(spikes.sum())} input spikes -> {len(times)} output spikes, identical on "
          f"reference and brian2; first at {', '.join(f'{t:.1f}' for t in times[:5])} ms")


if __name__ == "__main__":
    main()
