"""polyhal `neuro` against the same spiking network written directly in brian2.

One convolutional SNN, scaled from 1k to 100k neurons: input spikes [1, H, W]
-> Conv2d 3x3 (4 maps) -> LIF -> SumPool2d 2x2 -> LIF -> Flatten -> Linear
-> LI (10 readouts); about 5 H W neurons. The hand-written network is what a
brian2 user writes for the same semantics (current held over a step, every
layer in the same step, explicit ``when``/``order``); both run on the same
brian2 target, and their outputs are checked to agree spike for spike (on the
first run and on the last repetition, the network reused).

First-run time (build, code generation, compilation and one run) and
steady-state run time (median over repetitions with fresh inputs, network
reused) are reported separately, with synaptic events per second and the
ratio polyhal / hand-written.

    python benchmarks/snn_vs_brian2.py                        # 1k, 10k, 100k on numpy
    python benchmarks/snn_vs_brian2.py --target cpp_standalone
    python benchmarks/snn_vs_brian2.py --quick                # small, a few seconds (CI)
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

DT = 1e-3
MAPS = 4
READOUT = 10
LIF = {"tau": 1e-2, "r": 1.0, "v_leak": 0.0, "v_threshold": 0.5, "v_reset": 0.0}
LI = {"tau": 2e-2, "r": 1.0, "v_leak": 0.0}
SIZES = {"1k": (10, 20), "10k": (40, 50), "100k": (100, 200)}
"""Network size -> input height and width (neurons ~ 5 H W)."""


def weights(height: int, width: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"conv": rng.uniform(0.0, 0.6, (MAPS, 1, 3, 3)),
            "readout": rng.uniform(-0.5, 1.0, (READOUT, height * width))}


def input_spikes(steps: int, height: int, width: int, seed: int) -> np.ndarray:
    """Bernoulli input spikes [steps, 1, 1, H, W] at 20% per step."""
    rng = np.random.default_rng(seed)
    return (rng.random((steps, 1, 1, height, width)) < 0.2).astype(np.float64)


# ---------------------------------------------------------------------------- polyhal


def polyhal_graph(steps: int, height: int, width: int):
    from polyhal.ir import DType, GraphBuilder, TensorType
    from polyhal.ops import snn

    w = weights(height, width)
    g = GraphBuilder(f"conv-snn-{height}x{width}")
    x = g.input("spikes", TensorType(DType.FLOAT64, (steps, 1, 1, height, width)))

    def lif(h):
        return snn.lif(h, *(np.full((1, 1, 1), LIF[k]) for k in LIF), dt=DT, method="euler",
                       reset="v_reset")

    z1 = lif(snn.conv2d(x, w["conv"], pads=[1, 1, 1, 1]))
    z2 = lif(snn.sum_pool2d(z1, kernel_shape=[2, 2]))
    readout = snn.li(snn.linear(snn.flatten(z2, start_dim=0), w["readout"]),
                     *(np.full(READOUT, LI[k]) for k in LI), dt=DT, method="euler")
    g.output(z2, name="z2")
    g.output(readout, name="readout")
    return g.build()


class Polyhal:
    """The network compiled for the ``neuro`` device, run through the HAL."""

    def __init__(self, steps: int, height: int, width: int, target: str) -> None:
        from polyhal.hal import CompileOptions, open_device

        self.device = open_device("neuro", target=target)
        self.executable = self.device.compile(polyhal_graph(steps, height, width),
                                              CompileOptions())

    def run(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z2, readout = (self.device.download(b)
                       for b in self.executable.run([self.device.upload(x)]))
        return z2.reshape(x.shape[0], -1), readout[:, 0]

    def events(self) -> float:
        return self.executable.profile().counters["synaptic_events"]


# ---------------------------------------------------------------------------- brian2 by hand


def conv_indices(height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pre, post, tap) of a 3x3 'same' convolution from one map to MAPS maps."""
    pre, post, tap = [], [], []
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    for dy, dx in np.ndindex(3, 3):
        y, x = rows + dy - 1, cols + dx - 1
        inside = (y >= 0) & (y < height) & (x >= 0) & (x < width)
        for m in range(MAPS):
            pre.append((y * width + x)[inside])
            post.append(m * height * width + (rows * width + cols)[inside])
            tap.append(np.full(int(inside.sum()), m * 9 + dy * 3 + dx))
    return np.concatenate(pre), np.concatenate(post), np.concatenate(tap)


class HandWritten:
    """The same network as a brian2 user writes it (brian2 imported here, not via polyhal)."""

    def __init__(self, steps: int, height: int, width: int, target: str, folder: Path) -> None:
        import brian2 as b2

        self.b2, self.steps, self.target, self.folder = b2, steps, target, folder
        self.device = None
        if target == "cpp_standalone":
            from brian2.devices.cpp_standalone.device import CPPStandaloneDevice

            self.device = CPPStandaloneDevice()
            b2.set_device(self.device, build_on_run=False)
            codeobj = None
        elif target == "cython":
            from brian2.codegen.runtime.cython_rt import CythonCodeObject as codeobj
        else:
            from brian2.codegen.runtime.numpy_rt import NumpyCodeObject as codeobj
        w, n = weights(height, width), height * width
        clock = b2.Clock(DT * b2.second)
        self.stim = b2.TimedArray(np.zeros((steps, n)), dt=DT * b2.second, name="stim")
        lif_ns = {"tau": LIF["tau"] * b2.second, "r": LIF["r"], "v_leak": LIF["v_leak"],
                  "v_threshold": LIF["v_threshold"], "v_reset": LIF["v_reset"]}
        lif_eqs = "dv/dt = (v_leak + r*I - v)/tau : 1\nI : 1"
        common = {"clock": clock, "codeobj_class": codeobj}
        inp = b2.NeuronGroup(n, "x = stim(t, i) : 1", threshold="x > 0.5", reset="",
                             namespace={}, **common)
        layer1 = b2.NeuronGroup(MAPS * n, lif_eqs, threshold="v > v_threshold",
                                reset="v = v_reset", method="euler", namespace=lif_ns, **common)
        layer2 = b2.NeuronGroup(n, lif_eqs, threshold="v > v_threshold", reset="v = v_reset",
                                method="euler", namespace=lif_ns, **common)
        readout = b2.NeuronGroup(READOUT, "dv/dt = (v_leak + r*I - v)/tau : 1\nI : 1",
                                 method="euler", namespace={"tau": LI["tau"] * b2.second,
                                                            "r": LI["r"], "v_leak": LI["v_leak"]},
                                 **common)
        conv = b2.Synapses(inp, layer1, "w : 1", on_pre="I_post += w", namespace={}, **common)
        pre, post, tap = conv_indices(height, width)
        conv.connect(i=pre, j=post)
        conv.w = w["conv"].reshape(-1)[tap]
        pool = b2.Synapses(layer1, layer2, on_pre="I_post += 1", namespace={}, **common)
        m, y, x = np.unravel_index(np.arange(MAPS * n), (MAPS, height, width))
        pool.connect(i=np.arange(MAPS * n),
                     j=(m * (height // 2) + y // 2) * (width // 2) + x // 2)
        dense = b2.Synapses(layer2, readout, "w : 1", on_pre="I_post += w", namespace={},
                            **common)
        dense.connect(i=np.tile(np.arange(n), READOUT), j=np.repeat(np.arange(READOUT), n))
        dense.w = w["readout"].reshape(-1)
        clears = [g.run_regularly("I = 0", **common) for g in (layer1, layer2, readout)]
        self.spikes = b2.SpikeMonitor(layer2, codeobj_class=codeobj)
        self.trace = b2.StateMonitor(readout, "v", record=True, **common)
        # One step: every layer integrates, fires and resets before the next one.
        sequence = [*clears, inp.thresholder["spike"], conv.pre]
        for layer, out in ((layer1, pool), (layer2, dense)):
            sequence += [layer.state_updater, layer.thresholder["spike"],
                         layer.resetter["spike"], out.pre]
        sequence += [self.spikes, readout.state_updater, self.trace]
        for order, obj in enumerate(sequence):
            obj.when, obj.order = "start", order
        self.net = b2.Network(inp, layer1, layer2, readout, conv, pool, dense, *clears,
                              self.spikes, self.trace)
        if self.device is not None:
            self.net.run(steps * DT * b2.second, namespace={"stim": self.stim})
            self.device.build(directory=str(folder / "handwritten"), run=False,
                              with_output=False)
            from brian2.devices.device import reset_device

            reset_device()
        else:
            self.net.store()

    def run(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b2, values = self.b2, x.reshape(self.steps, -1)
        if self.device is not None:
            self.device.run(directory=str(self.folder / "handwritten"), with_output=False,
                            run_args={self.stim: values})
        else:
            self.net.restore()
            stim = b2.TimedArray(values, dt=DT * b2.second, name="stim")
            self.net.run(self.steps * DT * b2.second, namespace={"stim": stim})
        z = np.zeros((self.steps, self.spikes.source.N))
        z[np.rint(self.spikes.t_[:] / DT).astype(int), self.spikes.i[:]] = 1
        return z, np.array(self.trace.v_[:].T)  # a copy: the monitor is reused


# ---------------------------------------------------------------------------- measuring


def measure(size: str, steps: int, reps: int, target: str, folder: Path) -> dict:
    height, width = SIZES[size]
    results: dict = {"neurons": MAPS * height * width + height * width + READOUT,
                     "steps": steps}
    runners = {}
    first: dict[str, float] = {}
    outputs = {}
    for name, make in (("polyhal", lambda: Polyhal(steps, height, width, target)),
                       ("brian2", lambda: HandWritten(steps, height, width, target, folder))):
        start = time.perf_counter()
        runner = make()
        outputs[name] = runner.run(input_spikes(steps, height, width, 0))
        first[name] = time.perf_counter() - start
        runners[name] = runner
    times: dict[str, list[float]] = {name: [] for name in runners}
    last: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for rep in range(reps):
        x = input_spikes(steps, height, width, rep + 1)
        # Interleaved, so drifts hit both alike; who goes first alternates, so neither
        # always pays for touching a fresh input first.
        order = list(runners.items())
        for name, runner in order if rep % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            last[name] = runner.run(x)
            times[name].append(time.perf_counter() - start)
    # The first run of each and the last repetition (a network reused) must agree.
    pairs = [(outputs["polyhal"], outputs["brian2"])] + ([(last["polyhal"], last["brian2"])]
                                                         if reps else [])
    events = runners["polyhal"].events()
    median = {name: float(np.median(t)) for name, t in times.items()}
    results.update(first_run_s=first, steady_s=median, synaptic_events=events,
                   events_per_s={n: events / s for n, s in median.items()},
                   ratio=median["polyhal"] / median["brian2"],
                   spikes_agree=all(np.array_equal(ours[0], hand[0]) for ours, hand in pairs),
                   readout_max_abs_diff=max(float(np.abs(ours[1] - hand[1]).max())
                                            for ours, hand in pairs),
                   readout_close=all(np.allclose(ours[1], hand[1], rtol=1e-6, atol=1e-9)
                                     for ours, hand in pairs))
    return results


def report(results: dict, target: str, quick: bool) -> None:
    import brian2

    machine = platform.processor() or platform.machine()
    print(f"# snn_vs_brian2{' (quick)' if quick else ''}: brian2 {brian2.__version__}, "
          f"target {target}, {machine}")
    header = ("size", "neurons", "steps", "runner", "first run s", "steady s",
              "synaptic events/s", "polyhal / brian2", "agree")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for size, r in results.items():
        agree = "yes" if r["spikes_agree"] and r["readout_close"] else "NO"
        for name in ("polyhal", "brian2"):
            ratio = f"{r['ratio']:.2f}" if name == "polyhal" else ""
            print(f"| {size} | {r['neurons']} | {r['steps']} | {name} | "
                  f"{r['first_run_s'][name]:.2f} | {r['steady_s'][name]:.4f} | "
                  f"{r['events_per_s'][name]:.3g} | {ratio} | {agree} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k neurons, few steps and reps")
    parser.add_argument("--target", default="numpy",
                        choices=("numpy", "cython", "cpp_standalone"))
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated: 1k,10k,100k")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    args = parser.parse_args()
    sizes = ["1k"] if args.quick else args.sizes.split(",")
    steps, reps = (30, 3) if args.quick else (200, 9)
    with tempfile.TemporaryDirectory() as tmp:
        results = {size: measure(size, steps, reps, args.target, Path(tmp)) for size in sizes}
    report(results, args.target, args.quick)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not all(r["spikes_agree"] for r in results.values()):
        raise SystemExit("polyhal and the hand-written network disagree")
    assert math.isfinite(sum(r["ratio"] for r in results.values()))


if __name__ == "__main__":
    main()
