"""The quantum adapter: ``quantum.Expectation`` and its gradient through qiskit.

Forward passes go through qiskit's V2 estimators (:mod:`.primitives`): Aer
(``EstimatorV2`` exact, ``BackendEstimatorV2`` over ``AerSimulator`` with
shots, optionally with a noise model), ``StatevectorEstimator``, or any
``BackendV2`` through ``BackendEstimatorV2`` — except exact forward passes on
an exact device, which by default run on the batched statevector engine that
also computes adjoint gradients (option ``forward``). Gradients
(``quantum.ExpectationVJP``) use adjoint differentiation on a batched
statevector (:mod:`.statevector`) where the device is exact, the
parameter-shift rule otherwise, finite differences on request
(:mod:`.gradients`); every shifted point of a call is one PUB.

Options of ``open`` (``polyhal.hal.open_device("quantum", **options)``):

* ``estimator``: ``"aer"`` (default), ``"statevector"`` or ``"backend"``;
* ``backend``: a qiskit ``BackendV2`` (implies ``estimator="backend"``);
* ``noise_model``: a ``qiskit_aer.noise.NoiseModel`` for the ``aer`` estimator;
* ``forward``: where exact forward passes run. ``"auto"`` (default): on an
  exact device (no backend, no noise model) on the batched statevector engine
  that also computes adjoint gradients, so forward and gradient come from one
  simulation and skip the estimator's per-call cost (about 5 ms for 20 rows of
  a 4-qubit circuit on Aer, near the 7 ms a whole PennyLane training step takes
  in ``benchmarks/hybrid_vs_peers.py``);
  elsewhere on the estimator. ``"estimator"``: always on the estimator.
  ``"statevector"``: always on the engine (exact devices only). Nodes with
  ``shots`` always go to the estimator;
* ``max_rows``: parameter rows per PUB (default 65536);
* ``optimization_level``: of the transpilation for a backend (default 1).

>>> import numpy as np, polyhal
>>> from polyhal.ir import GraphBuilder, f64
>>> from polyhal.ops import quantum
>>> from polyhal.quantum.ansatz import angle_encoded_ansatz, z_observables
>>> qc, x, w = angle_encoded_ansatz(2, 1)
>>> g = GraphBuilder("vqc")
>>> xs, ws = g.input("x", f64["batch", 2]), g.input("w", f64[4])
>>> g.output(quantum.expectation(xs, ws, qc, z_observables(2), x, w), name="z")
>>> run = polyhal.compile(g.build(), device="quantum")
>>> run(np.zeros((1, 2)), np.zeros(4))["z"].round(6).tolist()
[[1.0, 1.0]]
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import threading
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from polyhal.adapters.quantum.gradients import resolve_method, shifted_vjp
from polyhal.adapters.quantum.primitives import ESTIMATORS, EstimatorDriver
from polyhal.adapters.quantum.statevector import StatevectorEngine
from polyhal.errors import InputBindingError, UnsupportedError
from polyhal.hal import (
    Adapter,
    Buffer,
    Capabilities,
    CompileOptions,
    Device,
    DeviceInfo,
    Executable,
    Profile,
)
from polyhal.hal.host import HostMemoryDevice, check_single_device
from polyhal.ir import Graph, TensorType
from polyhal.ir.graph import Node
from polyhal.ir.verify import resolve_attrs
from polyhal.ops.quantum import Spec, check_finite
from polyhal.ops.registry import get_op

OPS = ("quantum.Expectation", "quantum.ExpectationVJP")
OPTIONS = ("estimator", "backend", "noise_model", "forward", "max_rows", "optimization_level")
FORWARDS = ("auto", "estimator", "statevector")
CACHE_SIZE = 64  # engines kept per device (oldest dropped first)


@cache
def quantum_capabilities() -> Capabilities:
    """Both quantum ops in float32 and float64, any batch size."""
    return Capabilities(ops={op: ["float32", "float64"] for op in OPS}, dynamic_shapes=True,
                        tags=frozenset({"quantum", "training"}))


def missing() -> str:
    """Why the adapter cannot run here ("" when it can); cheap: nothing is imported."""
    for module, extra in (("qiskit", "quantum"), ("qiskit_aer", "quantum")):
        if importlib.util.find_spec(module) is None:
            return f"needs {module}: pip install 'polyhal[{extra}]'"
    return ""


class QuantumDevice(HostMemoryDevice):
    """qiskit on the host: one estimator driver and the statevector engine."""

    def __init__(self, driver: EstimatorDriver, forward: str) -> None:
        self.driver = driver
        self.forward = forward
        self.engines: dict[tuple[int, tuple[str, ...]], StatevectorEngine] = {}
        self._lock = threading.Lock()

    @property
    def capabilities(self) -> Capabilities:
        return quantum_capabilities()

    @property
    def exact(self) -> bool:
        """True when exact expectations are exact statevector values (no noise, no backend)."""
        return self.driver.estimator != "backend" and self.driver.noise_model is None

    def engine(self, spec: Spec) -> StatevectorEngine:
        """The statevector engine of a node's program and observables (cached)."""
        key = (id(spec.program), tuple(str(o) for o in spec.observables))
        with self._lock:
            if key not in self.engines:  # the engine holds the program: its id stays unique
                self.engines[key] = StatevectorEngine(spec.program, spec.observables)
                if len(self.engines) > CACHE_SIZE:
                    self.engines.pop(next(iter(self.engines)))
            return self.engines[key]

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        return QuantumExecutable(self, graph)


class QuantumExecutable(Executable):
    """The quantum nodes of a partition, run in order."""

    def __init__(self, device: QuantumDevice, graph: Graph) -> None:
        self.device = device
        self.graph = graph
        self.steps: list[tuple[Node, Spec, str | None]] = []
        for node in graph.nodes:
            if node.qualified_op not in OPS:
                raise UnsupportedError(f"quantum: node {node.name!r} is {node.qualified_op}; "
                                       f"this device runs only {', '.join(OPS)}")
            spec = Spec(resolve_attrs(get_op(node.op, node.domain), node.attrs, node.name))
            method = None
            if node.op == "ExpectationVJP":
                method = resolve_method(spec.grad_method, spec.shots, device.exact,
                                        f"node {node.name!r}")
            self.steps.append((node, spec, method))
        self._counters: dict[str, float] = {}

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        if len(inputs) != len(self.graph.inputs):
            raise InputBindingError(f"quantum: the graph takes {len(self.graph.inputs)} "
                                    f"inputs, got {len(inputs)}")
        values: dict[str, np.ndarray] = dict(self.graph.constants)
        for value, buffer in zip(self.graph.inputs, inputs, strict=True):
            if buffer.type.dtype != value.type.dtype or buffer.type.rank != value.type.rank:
                raise InputBindingError(f"quantum: input {value.name!r} must be {value.type}, "
                                        f"got {buffer.type}")
            values[value.name] = np.asarray(buffer.handle)
        counters = {"estimator_calls": 0.0, "estimator_rows": 0.0, "estimator_s": 0.0}
        start = time.perf_counter()
        for node, spec, method in self.steps:
            arrays = [values[name] for name in node.inputs]
            results = self._run_node(node, spec, method, arrays, counters)
            for out, array in zip(node.outputs, results, strict=True):
                values[out.name] = array.astype(arrays[0].dtype)
        counters["run_s"] = time.perf_counter() - start
        self._counters = counters
        return [Buffer(self.device, TensorType.of(values[v.name]), values[v.name])
                for v in self.graph.outputs]

    def _evaluate(self, spec: Spec, counters: dict[str, float], stream: int) -> Any:
        seed = spec.stream_seed(stream)

        def evaluate(angles: np.ndarray) -> np.ndarray:
            start = time.perf_counter()
            result = self.device.driver.expectations(spec.program, spec.observables, angles,
                                                     spec.shots, seed)
            counters["estimator_calls"] += 1
            counters["estimator_rows"] += angles.shape[0]
            counters["estimator_s"] += time.perf_counter() - start
            return result
        return evaluate

    def _run_node(self, node: Node, spec: Spec, method: str | None, arrays: list[np.ndarray],
                  counters: dict[str, float]) -> list[np.ndarray]:
        where = f"node {node.name!r} ({node.qualified_op})"
        angles = spec.angles(arrays[0], arrays[1], where)
        if method is None:
            if self.device.forward == "statevector" and spec.shots is None:
                return [self.device.engine(spec).expectations(angles)]
            return [self._evaluate(spec, counters, 0)(angles)]
        cotangent = arrays[2].astype(np.float64)
        check_finite(cotangent, f"{where}: input 'cotangent'")
        if method == "adjoint":
            d_angles = self.device.engine(spec).angle_vjp(angles, cotangent)
        else:
            d_angles = shifted_vjp(self._evaluate(spec, counters, 1), spec.program, angles,
                                   cotangent, method)
        return list(spec.binding.split(d_angles @ spec.program.coefficients.T))

    def profile(self) -> Profile | None:
        if not self._counters:
            return None
        return Profile(stages={"run": self._counters["run_s"]},
                       counters={k: v for k, v in self._counters.items() if k != "run_s"})


class QuantumAdapter(Adapter):
    """``quantum``: parameterized-circuit expectations and gradients on qiskit."""

    name = "quantum"
    version = "0.1.0"
    api_version = (1, 1)
    device_class = QuantumDevice
    executable_class = QuantumExecutable

    def probe(self) -> list[DeviceInfo]:
        reason = missing()
        details: dict[str, Any] = {"estimators": list(ESTIMATORS)}
        if not reason:
            details["qiskit"] = importlib.metadata.version("qiskit")
            details["qiskit-aer"] = importlib.metadata.version("qiskit-aer")
        return [DeviceInfo(self.name, 0, "qiskit estimators (Aer by default)", not reason,
                           reason, details=details)]

    def open(self, index: int = 0, **options: Any) -> Device:
        check_single_device(self.name, index)
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise UnsupportedError(f"quantum: unknown option(s) {', '.join(unknown)} "
                                   f"(known: {', '.join(OPTIONS)})")
        reason = missing()
        if reason:
            raise UnsupportedError(f"quantum: {reason}")
        backend = options.get("backend")
        estimator = options.get("estimator", "backend" if backend is not None else "aer")
        if estimator not in ESTIMATORS:
            raise UnsupportedError(f"quantum: estimator {estimator!r} is not one of "
                                   f"{', '.join(ESTIMATORS)}")
        if estimator == "backend" and backend is None:
            raise UnsupportedError("quantum: estimator='backend' needs backend=<a qiskit "
                                   "BackendV2>")
        if backend is not None:
            from qiskit.providers import BackendV2

            if estimator != "backend" or not isinstance(backend, BackendV2):
                raise UnsupportedError(f"quantum: backend= must be a qiskit BackendV2 (with "
                                       f"estimator='backend'), got {type(backend).__name__}")
        noise = options.get("noise_model")
        if noise is not None and estimator != "aer":
            raise UnsupportedError("quantum: noise_model applies to the 'aer' estimator only")
        forward = options.get("forward", "auto")
        if forward not in FORWARDS:
            raise UnsupportedError(f"quantum: forward={forward!r} must be one of "
                                   f"{', '.join(FORWARDS)}")
        max_rows = options.get("max_rows", 65536)
        if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 1:
            raise UnsupportedError(f"quantum: max_rows={max_rows!r} must be a positive integer")
        level = options.get("optimization_level", 1)
        if level not in (0, 1, 2, 3):
            raise UnsupportedError(f"quantum: optimization_level={level!r} must be 0..3")
        driver = EstimatorDriver(estimator, backend, noise, max_rows, level)
        exact = estimator != "backend" and noise is None
        if forward == "statevector" and not exact:
            raise UnsupportedError("quantum: forward='statevector' needs an exact device (no "
                                   "backend, no noise model)")
        if forward == "auto":
            forward = "statevector" if exact else "estimator"
        return QuantumDevice(driver, forward)
