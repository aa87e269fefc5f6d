"""The FPGA path measured: int8 GEMMs on the 8x8 systolic array, and a quantized MLP.

GEMM (M = K = N = 64 and 256, random int8, seed 0), per simulator (Verilator, Icarus):

* ``cycles``: device cycles from the first command of a cold call (weights and
  activations written, GEMM, results read back; the counters' difference
  between a STATUS command before and the last status word) to its last result
  word; ``utilization = M*N*K / (ROWS*COLS * cycles)``.
* ``gemm_cycles``: the GEMM command alone, and its utilization.
* ``sim_rate``: simulated cycles per second while the array computes (a batch of
  one GEMM on resident data: its cycles over its wall time, median of 5).
* ``wall_s``: wall time of a warm call (median of 5) through the adapter; the
  per-call host overhead is ``wall_s - cycles / sim_rate``.

Quantized MLP (``--skip-mlp`` leaves it out): a float 2-hidden-layer MLP trained
on ``gaussian_classes`` (10 classes, 5,000 train / 2,000 test, seed 0), quantized
by ``polyhal.passes.quantize`` (per-channel weights, activations calibrated on
512 training rows), run on ``fpga`` with ``cpu`` fallback; accuracies of float and
int8 and their difference in percentage points.

    python benchmarks/fpga.py            # the full run (Icarus's 256^3 takes minutes)
    python benchmarks/fpga.py --quick    # CI: 64^3 on both simulators, 256^3 on Verilator
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from dataclasses import dataclass

import numpy as np

from polyhal.adapters.fpga import FpgaDevice
from polyhal.hal import CompileOptions
from polyhal.ir import GraphBuilder, TensorType
from polyhal.simulators.fpga import layout
from polyhal.simulators.fpga.protocol import Opcode
from polyhal.simulators.fpga.wire import Command


@dataclass
class GemmRow:
    """One GEMM measurement."""

    simulator: str
    size: int
    pes: int
    cycles: int
    gemm_cycles: int
    sim_rate: float
    wall_s: float

    @property
    def utilization(self) -> float:
        """MACs over PE-cycles, loads and read-back included."""
        return self.size**3 / (self.pes * self.cycles)

    @property
    def gemm_utilization(self) -> float:
        """MACs over PE-cycles of the GEMM command alone."""
        return self.size**3 / (self.pes * self.gemm_cycles)

    @property
    def overhead_ms(self) -> float:
        """Wall time of a warm call beyond its cycles at the measured rate."""
        return 1e3 * (self.wall_s - self.cycles / self.sim_rate)


def _matmul_graph(size: int):
    g = GraphBuilder(f"gemm{size}")
    t = TensorType.of(np.zeros((size, size), np.int8))
    g.output(g.op("MatMulInteger", g.input("a", t), g.input("b", t)), name="y")
    return g.build()


def measure_gemm(device: FpgaDevice, size: int, repeats: int = 5) -> GemmRow:
    """Cold-call cycles, the compute rate and warm wall time of one ``size``^3 GEMM.

    Each repetition times a GEMM command alone on the resident operands (the
    rate) and then a whole call through the adapter (the wall time), so the two
    see the same machine; the medians are reported."""
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (size, size), dtype=np.int8)
    b = rng.integers(-128, 128, (size, size), dtype=np.int8)
    executable = device.compile(_matmul_graph(size), CompileOptions())
    inputs = [device.upload(a), device.upload(b)]
    got = device.download(executable.run(inputs)[0])
    expected = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    if not np.array_equal(got, expected):
        raise SystemExit(f"fpga GEMM {size}^3 on {device.link.simulator} is wrong")
    cycles = int(executable.profile().counters["cycles"])
    rows, cols = device.driver.rows, device.driver.cols
    gemm = Command(Opcode.GEMM, (layout.tiles(size, rows), layout.tiles(size, cols), size,
                                 0, 0, 0))
    rates, walls, gemm_cycles = [], [], 0
    for _ in range(repeats):  # the operands are still in the buffers from the last call
        start = time.perf_counter()
        reply = device.link.transact([gemm])[0]
        rates.append(reply.cycles / (time.perf_counter() - start))
        gemm_cycles = reply.cycles
        start = time.perf_counter()
        executable.run(inputs)
        walls.append(time.perf_counter() - start)
    return GemmRow(device.link.simulator, size, rows * cols, cycles, gemm_cycles,
                   statistics.median(rates), statistics.median(walls))


def gemm_rows(quick: bool) -> list[GemmRow]:
    """Every GEMM row of the run: 64^3 and 256^3 on each simulator (``quick``: 256^3
    on Verilator only; Icarus runs about 30x slower)."""
    rows = []
    for simulator in ("verilator", "icarus"):
        sizes = (64,) if quick and simulator == "icarus" else (64, 256)
        device = FpgaDevice(simulator=simulator)
        try:
            for size in sizes:
                slow = simulator == "icarus" and size > 64
                rows.append(measure_gemm(device, size, repeats=1 if slow else 5))
        finally:
            device.close()
    return rows


def print_gemm(rows: list[GemmRow]) -> None:
    """The GEMM table."""
    print("int8 GEMM on the 8x8 array (WORD_BYTES 128); targets: util >= 0.7 at 64^3 and "
          ">= 0.85 at 256^3, overhead <= 5 ms at 64^3, >= 100k cycles/s on Verilator")
    print(f"{'simulator':<10} {'size':>5} {'cycles':>9} {'util':>6} {'gemm cyc':>9} "
          f"{'gemm util':>9} {'cycles/s':>10} {'wall ms':>8} {'overhead ms':>11}")
    for r in rows:
        print(f"{r.simulator:<10} {r.size:>5} {r.cycles:>9} {r.utilization:>6.3f} "
              f"{r.gemm_cycles:>9} {r.gemm_utilization:>9.3f} {r.sim_rate:>10.0f} "
              f"{1e3 * r.wall_s:>8.1f} {r.overhead_ms:>11.2f}")


@dataclass
class MlpRow:
    """The quantized MLP against its float original."""

    float_accuracy: float
    int8_accuracy: float
    cycles: int
    wall_s: float
    placement: str

    @property
    def drop_points(self) -> float:
        """Accuracy lost to int8, in percentage points."""
        return 100 * (self.float_accuracy - self.int8_accuracy)


def measure_mlp(epochs: int) -> MlpRow:
    """Train a 16-64-64-10 MLP on cpu, quantize it, run the test set on fpga."""
    from polyhal import nn, train
    from polyhal.ir import f32
    from polyhal.passes import quantize
    from polyhal.runtime import compile as compile_graph

    x, y = train.gaussian_classes(7000, seed=0)
    x_train, y_train, x_test, y_test = x[:5000], y[:5000], x[5000:], y[5000:]
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 10)).initialize(seed=0)
    train.fit(model, (x_train, y_train), epochs=epochs, batch_size=100,
              optimizer=train.Adam(3e-3), device="cpu", progress=False, fallback=None)
    graph = model.graph(f32["batch", 16], params="constants")
    calibration = [{"x": x_train[i:i + 512]} for i in range(0, 5000, 512)]
    quantized = quantize(graph, calibration)
    float_logits = compile_graph(graph, device="cpu")(x_test)["y"]
    compiled = compile_graph(quantized, device="fpga", fallback="cpu")
    compiled(x_test[:8])  # warm: the simulation is up
    start = time.perf_counter()
    logits = compiled(x_test)["y"]
    wall = time.perf_counter() - start
    cycles = sum(int(profile.counters.get("cycles", 0)) for _, profile in compiled.profiles()
                 if profile is not None)
    on_fpga = compiled.placement.nodes_on(next(d for d in compiled.placement.devices
                                              if d.startswith("fpga")))
    return MlpRow(float(np.mean(float_logits.argmax(1) == y_test)),
                  float(np.mean(logits.argmax(1) == y_test)), cycles, wall,
                  f"{len(on_fpga)} of {len(quantized.nodes)} nodes on fpga")


def print_mlp(row: MlpRow) -> None:
    """The MLP line."""
    print("\nquantized MLP 16-64-64-10 on gaussian_classes (5,000 train / 2,000 test, "
          "seed 0), fpga with cpu fallback")
    print(f"float accuracy {row.float_accuracy:.4f}, int8 accuracy {row.int8_accuracy:.4f}, "
          f"difference {row.drop_points:+.2f} points (target within 1); "
          f"{row.placement}; 2,000 rows in {row.wall_s:.2f} s, {row.cycles} device cycles")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CI run")
    parser.add_argument("--skip-mlp", action="store_true", help="only the GEMMs")
    args = parser.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, "
          f"python {platform.python_version()}")
    print_gemm(gemm_rows(args.quick))
    if not args.skip_mlp:
        print_mlp(measure_mlp(epochs=5))


if __name__ == "__main__":
    main()
