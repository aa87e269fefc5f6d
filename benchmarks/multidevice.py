"""Session throughput over 1, 2 and 3 devices; dynamic balancing against an even static
split with one device slowed 4x; and throughput under a 10% fault rate.

The devices are ``faulty:N`` wrappers of the ``--inner`` adapter (``cpu`` by
default), each in its own worker process: with no fault options a wrapper is
its inner device, and ``slowdown=4`` makes every run of one device take 4x as
long (it sleeps 3x the run's own time after it). The workload is an MLP
(256 -> 4 x 1024 -> 10, ReLU, float32) over ``--rows`` rows in micro-batches of
``--micro-batch``, one call, after a warm-up call that compiles on every
device. Throughput is rows per second of the whole call, median of
``--repeat`` calls (3 by default, ``--quick`` too: one call of a few
micro-batches can take several times as long as the next).

Rows printed:

- ``scaling``: 1, 2 and 3 devices, dynamic balancing; ratio against 1 device.
  These machines have 2 cores, so 3 CPU workers cannot run 3x one.
- ``slowed 4x``: 3 devices, one slowed 4x: ``static`` (each device gets a third
  of the micro-batches, dealt round-robin) against ``dynamic`` (a work queue:
  a free device takes the next one). The ideal ratio is 3 (the slow device
  holds a static split back to 4/3 of its work; dynamic runs at 2.25 devices).
- ``faults``: 3 devices, each failing 10% of its runs with a ``DeviceError``;
  the session re-runs them; ratio against the fault-free 3 devices, plus the
  faults recovered and the mean time to recover.

    python benchmarks/multidevice.py           # both tables
    python benchmarks/multidevice.py --quick   # CI: the compute-bound table, small
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from polyhal import ops
from polyhal.ir import GraphBuilder, f32
from polyhal.reference import run as reference_run
from polyhal.runtime import Session


def mlp(seed: int = 0):
    rng = np.random.default_rng(seed)
    g = GraphBuilder("mlp")
    h = g.input("x", f32["batch", 256])
    widths = [256, 1024, 1024, 1024, 1024, 10]
    for i, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
        w = g.constant((rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32),
                       name=f"w{i}")
        h = h @ w
        if n_out != widths[-1]:
            h = ops.relu(h)
    g.output(h, name="y")
    return g.build()


def measure(devices: Sequence[Any], x: np.ndarray, micro_batch: int, repeat: int,
            schedule: str = "dynamic") -> tuple[float, Session]:
    """Rows per second of one call (median of ``repeat``), and the closed session."""
    graph = mlp()
    with Session(list(devices), micro_batch=micro_batch, schedule=schedule, fallback=None,
                 timeout=60, max_attempts=20) as session:
        compiled = session.compile(graph)
        compiled.warm_up(x=x)
        expected = reference_run(graph, x[:micro_batch])["y"]
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            out = compiled(x=x)
            times.append(time.perf_counter() - start)
            np.testing.assert_allclose(out["y"][:micro_batch], expected, rtol=1e-3, atol=1e-4)
    return len(x) / statistics.median(times), session


def device(index: int, inner: str, stretch: float, slowdown: float = 1.0,
           **faults: Any) -> tuple[str, dict[str, Any]]:
    # One thread per worker: several workers share the cores, and BLAS threads that
    # spin while waiting for each other would measure oversubscription, not balancing.
    options = {"threads": 1} if inner == "cpu" else {}
    return f"faulty:{index}", {"inner": inner, "inner_options": options, "seed": index,
                               "slowdown": stretch * slowdown, **faults}


def scenario(label: str, stretch: float, inner: str, x: np.ndarray, mb: int,
             repeat: int) -> None:
    """The table of one kind of device: compute-bound (``stretch`` 1) or latency-bound."""
    print(f"-- {label}")
    single, _ = measure([device(0, inner, stretch)], x, mb, repeat)
    print(f"{'scaling: 1 device':<34}{single:>12.0f}{1.0:>9.2f}")
    for n in (2, 3):
        rate, _ = measure([device(i, inner, stretch) for i in range(n)], x, mb, repeat)
        print(f"{f'scaling: {n} devices':<34}{rate:>12.0f}{rate / single:>9.2f}  vs 1 device")
    clean = rate
    slowed = [device(0, inner, stretch), device(1, inner, stretch),
              device(2, inner, stretch, slowdown=4.0)]
    static, _ = measure(slowed, x, mb, repeat, schedule="static")
    dynamic, session = measure(slowed, x, mb, repeat, schedule="dynamic")
    share = session.health()["faulty:2"].completed / max(session.stats.completed, 1)
    print(f"{'slowed 4x: static even split':<34}{static:>12.0f}{1.0:>9.2f}")
    print(f"{'slowed 4x: dynamic balancing':<34}{dynamic:>12.0f}{dynamic / static:>9.2f}  "
          f"vs static (ideal 3, target >= 2); the slow device ran {share:.0%}")
    faulty = [device(i, inner, stretch, error_rate=0.1) for i in range(3)]
    rate, session = measure(faulty, x, mb, repeat)
    stats = session.stats
    print(f"{'faults: 10% of runs fail':<34}{rate:>12.0f}{rate / clean:>9.2f}  vs fault-free; "
          f"{stats.faults} faults recovered, mean {stats.mean_recovery_seconds * 1e3:.1f} ms "
          f"to recover, {stats.failed} lost")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run for CI")
    parser.add_argument("--inner", default="cpu", help="the adapter the devices wrap")
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--stretch", type=float, default=8.0,
                        help="the latency-bound table stretches every run this many times")
    parser.add_argument("--repeat", type=int, default=3,
                        help="calls timed per row; the row shows their median")
    args = parser.parse_args()
    mb = args.micro_batch
    rows = mb * (12 if args.quick else 96)
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: must be a positive number of calls")
    x = np.random.default_rng(1).standard_normal((rows, 256)).astype(np.float32)
    print(f"polyhal Session over faulty:N(inner={args.inner}) workers; {rows} rows in "
          f"micro-batches of {mb}, median of {args.repeat} calls; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"{'case':<34}{'rows/s':>12}{'ratio':>9}  notes")
    scenario("compute-bound: the devices share this machine's cores", 1.0, args.inner, x, mb,
             args.repeat)
    if not args.quick:  # the same code with every run stretched (8x as long to run)
        scenario(f"latency-bound: every run stretched {args.stretch:g}x (the device waits, "
                 "as an accelerator's host does)", args.stretch, args.inner, x, mb, args.repeat)


if __name__ == "__main__":
    main()
