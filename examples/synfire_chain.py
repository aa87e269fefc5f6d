"""A synfire chain: 5 groups of 100 integrate-and-fire neurons, each group wired
all-to-all into the next through a one-step delay. A volley into the first
group propagates down the chain, one group per step, on the reference
executor and on brian2 alike.

    python examples/synfire_chain.py
"""

from __future__ import annotations

import numpy as np

import polyhal
from polyhal.conformance.snn_networks import synfire
from polyhal.ir import DType


def main() -> None:
    graph, (volley,) = synfire(DType.FLOAT64, seed=0, steps=12, groups=5, size=100)
    expected = polyhal.run(graph, volley)
    actual = polyhal.compile(graph, device="neuro")(volley)
    for (name, want), got in zip(expected.items(), actual.values(), strict=True):
        assert np.array_equal(got, want), f"{name}: spike trains differ"
    arrivals = [int(np.flatnonzero(z[:, 0].sum(axis=1))[0]) for z in expected.values()]
    sizes = [int(z[:, 0].sum()) for z in expected.values()]
    assert arrivals == [1, 2, 3, 4, 5], arrivals
    print(f"volley of {int(volley[:, 0].sum())} spikes; group k fires at steps {arrivals} with "
          f"{sizes} spikes; brian2 agrees spike for spike")


if __name__ == "__main__":
    main()
