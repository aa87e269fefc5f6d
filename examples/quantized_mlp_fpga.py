"""A float MLP trained on the CPU, quantized to int8 and run on the FPGA's RTL.

    python examples/quantized_mlp_fpga.py

Trains a 16-64-64-10 ReLU MLP on ``gaussian_classes`` (5,000 samples, seed 0),
quantizes it with per-channel int8 weights calibrated on the training data,
runs the 2,000 held-out samples through the Verilog systolic array under
simulation (``fpga`` with ``cpu`` fallback), and prints both accuracies and the
device's cycle count.
"""

from __future__ import annotations

import numpy as np

import polyhal
from polyhal import nn, train
from polyhal.ir import f32
from polyhal.passes import quantize


def main() -> None:
    """Train, quantize, run on the FPGA, compare."""
    x, y = train.gaussian_classes(7000, seed=0)
    (x_train, y_train), (x_test, y_test) = (x[:5000], y[:5000]), (x[5000:], y[5000:])
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 10)).initialize(seed=0)
    train.fit(model, (x_train, y_train), epochs=5, batch_size=100,
              optimizer=train.Adam(3e-3), device="cpu", progress=False, fallback=None)
    graph = model.graph(f32["batch", 16], params="constants")
    int8_graph = quantize(graph, [{"x": x_train[i:i + 500]} for i in range(0, 5000, 500)])

    float_logits = polyhal.compile(graph, device="cpu")(x_test)["y"]
    on_fpga = polyhal.compile(int8_graph, device="fpga", fallback="cpu")
    int8_logits = on_fpga(x_test)["y"]
    cycles = sum(p.counters["cycles"] for address, p in on_fpga.profiles()
                 if p is not None and address.startswith("fpga"))

    float_accuracy = float(np.mean(float_logits.argmax(axis=1) == y_test))
    int8_accuracy = float(np.mean(int8_logits.argmax(axis=1) == y_test))
    print(on_fpga.placement)
    print(f"float32 accuracy {float_accuracy:.4f}, int8 on the FPGA {int8_accuracy:.4f} "
          f"({100 * (int8_accuracy - float_accuracy):+.2f} points), {cycles} device cycles")
    assert abs(int8_accuracy - float_accuracy) <= 0.01


if __name__ == "__main__":
    main()
