"""polyhal `cpu` against onnxruntime, polyhal `reference` and onnx's ReferenceEvaluator.

Every model runs on every runner in one process, after warm-up; latencies are
medians over interleaved repetitions (runner A, B, C, D, A, B, ...). Peak
memory is measured per (model, runner) in a fresh subprocess (peak RSS above
the process's RSS before the runner was built). First-call compile time is
reported separately, and so is the first call at a batch size the runner has
not seen (polyhal `cpu` builds a plan per shape; onnxruntime plans none).
The `mlp-tiny` row (16-16-16-4 at batch 1) measures the cost of a call
itself. A last table bounds `reference / cpu` by this machine's measured GEMM
peak: no runner does a model's multiply-adds faster than that.

    python benchmarks/cpu_vs_peers.py           # the full run (RESULTS.md)
    python benchmarks/cpu_vs_peers.py --quick   # small shapes, a few reps, one model's
                                                # peak memory (CI)
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models

THREADS = 2
RUNNERS = ("polyhal-cpu", "onnxruntime", "polyhal-reference", "onnx-reference")
NEW_SHAPE_RUNNERS = ("polyhal-cpu", "onnxruntime")
NEW_BATCHES = 3
"""Batch sizes never seen before (the workload's plus 1, 2, ...) timed per model."""
# Issue #5's targets for the full run: cpu / onnxruntime latency at most this,
# and cpu at least SPEEDUP_OVER_REFERENCE times faster than polyhal `reference`.
MAX_RATIO_TO_ORT = {"mlp-b1": 2.0, "mlp-b256": 1.2, "cnn-b32": 2.0, "transformer-b8": 1.5}
SPEEDUP_OVER_REFERENCE = 5.0


def workloads(quick: bool) -> dict[str, tuple[Callable, tuple[int, ...]]]:
    """name -> (graph builder, input shape)."""
    tiny = (lambda: models.mlp((16, 16, 16, 4)), (1, 16))  # the cost of a call itself
    if quick:
        return {
            "mlp-tiny": tiny,
            "mlp-b1": (lambda: models.mlp((64, 32, 32, 10)), (1, 64)),
            "mlp-b8": (lambda: models.mlp((64, 32, 32, 10)), (4, 64)),
            "mlp-b256": (lambda: models.mlp((64, 32, 32, 10)), (16, 64)),
            "cnn-b32": (lambda: models.cnn(4), (2, 3, 32, 32)),
            "transformer-b8": (lambda: models.transformer(16, 32, 4, 64), (2, 16, 32)),
        }
    return {
        "mlp-tiny": tiny,  # no target in #5
        "mlp-b1": (models.mlp, (1, 784)),
        "mlp-b8": (models.mlp, (8, 784)),  # a small batch: no target in #5
        "mlp-b256": (models.mlp, (256, 784)),
        "cnn-b32": (models.cnn, (32, 3, 32, 32)),
        "transformer-b8": (models.transformer, (8, 128, 256)),
    }


def make_runner(name: str, graph, folder: Path) -> Callable[[np.ndarray], object]:
    """A function of the input that runs ``graph`` on runner ``name``."""
    if name == "polyhal-cpu":
        import polyhal
        from polyhal.hal import open_device

        compiled = polyhal.compile(graph, device=open_device("cpu", threads=THREADS))
        return lambda x: compiled(x)
    if name == "polyhal-reference":
        from polyhal.reference import ReferenceExecutor

        executor = ReferenceExecutor(graph)
        return lambda x: executor(x)
    from polyhal.interop.onnx import save_onnx

    path = save_onnx(graph, folder / f"{graph.name}.onnx")
    if name == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = 1
        # A spinning ORT pool keeps both cores busy after each run and would slow
        # whichever runner comes next in the interleaved loop.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        input_name = session.get_inputs()[0].name
        return lambda x: session.run(None, {input_name: x})
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(str(path))
    input_name = graph.inputs[0].name
    return lambda x: evaluator.run(None, {input_name: x})


def peak_memory(model: str, runner: str, quick: bool) -> float:
    """Peak RSS growth in MiB of building and running one runner, in a fresh process."""
    command = [sys.executable, __file__, "--peak", model, runner] + (["--quick"] if quick else [])
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field))


def run_peak(model: str, runner: str, quick: bool) -> None:
    # Import every runtime first: peak memory is what running costs, not library code.
    import numba  # noqa: F401
    import onnx.reference  # noqa: F401
    import onnxruntime  # noqa: F401

    import polyhal.adapters.cpu
    import polyhal.interop.onnx  # noqa: F401

    build, shape = workloads(quick)[model]
    graph = build()
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    # Reset the high-water mark, so that the peak of the imports does not count.
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    with tempfile.TemporaryDirectory() as tmp:
        run = make_runner(runner, graph, Path(tmp))
        for _ in range(2):
            run(x)
    print(max(_status_kib("VmHWM") - before, 0) / 1024)


def bench(quick: bool) -> dict:
    reps = 3 if quick else 30
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model, (build, shape) in workloads(quick).items():
            graph = build()
            x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
            runners = {}
            first: dict[str, float] = {}
            for name in RUNNERS:
                start = time.perf_counter()
                run = make_runner(name, graph, Path(tmp))
                run(x)
                first[name] = time.perf_counter() - start
                runners[name] = run
            slow = {"polyhal-reference", "onnx-reference"}
            times: dict[str, list[float]] = {name: [] for name in RUNNERS}
            for rep in range(reps):
                for name, run in runners.items():
                    if name in slow and rep >= max(3, reps // 6):
                        continue  # the slow peers need fewer samples for a stable median
                    times[name].append(_seconds(run, x))
            reference_out = runners["onnxruntime"](x)[0]
            ours = runners["polyhal-cpu"](x)[0]
            results[model] = {
                "median_ms": {n: 1e3 * float(np.median(t)) for n, t in times.items()},
                "new_batch_ms": _new_batch_ms(runners, x),
                "first_call_s": first,
                "max_abs_diff_vs_ort": float(np.abs(ours - reference_out).max()),
                "multiply_adds": multiply_adds(graph, shape),
                # --quick (CI) measures one model's: the code path, not the figures.
                "peak_mib": {n: peak_memory(model, n, quick) if not (quick and results)
                             else None for n in RUNNERS},
            }
    return results


def multiply_adds(graph, shape: tuple[int, ...]) -> int:
    """The multiply-adds of the MatMul, Gemm and Conv nodes of ``graph`` at input ``shape``:
    the work no runner can skip."""
    from polyhal.passes.specialize import specialize_to

    concrete = specialize_to(graph, [shape])
    total = 0
    for node in concrete.nodes:
        if node.op not in ("MatMul", "Gemm", "Conv"):
            continue
        out, weights = node.outputs[0].type.shape, concrete.value_type(node.inputs[1]).shape
        if node.op == "Conv":  # each output element reads C_in / group x kernel of weights
            per_output = int(np.prod(weights[1:]))
        elif node.op == "Gemm" and node.attrs.get("transB"):
            per_output = weights[1]
        else:
            per_output = weights[-2]
        total += int(np.prod(out)) * per_output
    return total


def gemm_peak_flops(quick: bool) -> float:
    """This machine's float32 GEMM throughput on :data:`THREADS` threads (FLOP/s):
    numpy's BLAS on large square matrices, the best of several calls."""
    from threadpoolctl import threadpool_limits

    n = 256 if quick else 2048
    a, b = (np.random.default_rng(seed).random((n, n), dtype=np.float32) for seed in (0, 1))
    with threadpool_limits(THREADS, user_api="blas"):
        a @ b
        best = min(_seconds(np.matmul, a, b) for _ in range(3 if quick else 7))
    return 2 * n ** 3 / best


def _seconds(fn: Callable[..., object], *args: object) -> float:
    """The wall-clock seconds of one call ``fn(*args)``."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _new_batch_ms(runners: dict[str, Callable], x: np.ndarray) -> dict[str, float]:
    """Median ms of the first call at each of :data:`NEW_BATCHES` unseen batch sizes."""
    times: dict[str, list[float]] = {name: [] for name in NEW_SHAPE_RUNNERS}
    for extra in range(1, NEW_BATCHES + 1):
        batch = np.concatenate([x] + [x[:1]] * extra)
        for name in NEW_SHAPE_RUNNERS:
            times[name].append(_seconds(runners[name], batch))
    return {name: 1e3 * float(np.median(t)) for name, t in times.items()}


def report(results: dict, quick: bool, peak_flops: float) -> None:
    machine = platform.processor() or platform.machine()
    print(f"# cpu_vs_peers{' (quick)' if quick else ''}: {machine}, {THREADS} threads, "
          f"numpy {np.__version__}")
    header = ("model", "runner", "median ms", "vs ORT", "cpu speedup", "first call s", "peak MiB")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for model, r in results.items():
        ort_ms = r["median_ms"]["onnxruntime"]
        cpu_ms = r["median_ms"]["polyhal-cpu"]
        for name in RUNNERS:
            ms = r["median_ms"][name]
            print(f"| {model} | {name} | {ms:.3f} | {ms / ort_ms:.2f} | {ms / cpu_ms:.1f}x | "
                  f"{r['first_call_s'][name]:.2f} | {_mib(r['peak_mib'][name])} |")
        print(f"| {model} | (cpu vs ORT max abs diff) | {r['max_abs_diff_vs_ort']:.2e} | | | | |")
    print("\nFirst call at an unseen batch size (the workload's + 1, 2, 3; median ms):\n")
    print("| model | polyhal-cpu ms | onnxruntime ms | cpu / ORT | steady cpu ms |")
    print("|" + " --- |" * 5)
    for model, r in results.items():
        new = r["new_batch_ms"]
        print(f"| {model} | {new['polyhal-cpu']:.3f} | {new['onnxruntime']:.3f} | "
              f"{new['polyhal-cpu'] / new['onnxruntime']:.2f} | "
              f"{r['median_ms']['polyhal-cpu']:.3f} |")
    if not quick:  # the targets are for the full shapes
        print("\n| model | cpu / ORT | target | met | reference / cpu | target | met |")
        print("|" + " --- |" * 7)
        for model, r in results.items():
            if model not in MAX_RATIO_TO_ORT:
                continue
            ms = r["median_ms"]
            to_ort = ms["polyhal-cpu"] / ms["onnxruntime"]
            speedup = ms["polyhal-reference"] / ms["polyhal-cpu"]
            limit = MAX_RATIO_TO_ORT[model]
            print(f"| {model} | {to_ort:.2f} | <= {limit} | {_yes(to_ort <= limit)} | "
                  f"{speedup:.1f}x | >= {SPEEDUP_OVER_REFERENCE:.0f}x | "
                  f"{_yes(speedup >= SPEEDUP_OVER_REFERENCE)} |")
    print(f"\nThe most `reference / cpu` can be: the reference's time over the least time "
          f"the model's\nMatMul/Gemm/Conv multiply-adds take at this machine's float32 GEMM "
          f"peak\n({peak_flops / 1e9:.0f} GFLOP/s on {THREADS} threads, numpy's BLAS on "
          "square matrices):\n")
    print("| model | GFLOP | ms at the GEMM peak | reference ms | reference / cpu at most |")
    print("|" + " --- |" * 5)
    for model, r in results.items():
        least_ms = 1e3 * 2 * r["multiply_adds"] / peak_flops
        reference_ms = r["median_ms"]["polyhal-reference"]
        print(f"| {model} | {2 * r['multiply_adds'] / 1e9:.3f} | {least_ms:.3f} | "
              f"{reference_ms:.3f} | {reference_ms / least_ms:.1f}x |")


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _yes(met: bool) -> str:
    return "yes" if met else "**no**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repetitions")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    parser.add_argument("--peak", nargs=2, metavar=("MODEL", "RUNNER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak:
        run_peak(*args.peak, args.quick)
        return
    peak_flops = gemm_peak_flops(args.quick)  # first: no runner's threads are up yet
    results = bench(args.quick)
    report(results, args.quick, peak_flops)
    if args.json:
        Path(args.json).write_text(json.dumps({"models": results,
                                               "gemm_peak_flops": peak_flops}, indent=1))


if __name__ == "__main__":
    main()
