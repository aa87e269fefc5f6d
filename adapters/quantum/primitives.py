"""qiskit's V2 estimators, driven with one PUB per call.

The circuit handed to an estimator is the program's occurrence circuit
(:meth:`polyhal.quantum.circuit.Program.occurrence_circuit`): its parameters
are the gate angles, so the forward pass, every parameter-shift point and
every finite-difference point are rows of one parameter array, broadcast
against the observables in a single PUB (split into chunks of at most
``max_rows`` rows). Columns are matched to the circuit's parameters by name,
never by position. Circuits are transpiled for a backend once and cached.

Estimators:

* ``aer`` — ``qiskit_aer.primitives.EstimatorV2`` (exact expectations; with a
  ``noise_model`` it simulates density matrices);
* ``statevector`` — ``qiskit.primitives.StatevectorEstimator``;
* ``backend`` — ``qiskit.primitives.BackendEstimatorV2`` over any
  ``BackendV2`` (a vendor's device, or ``AerSimulator``); it measures, so its
  estimates carry shot noise.

With ``shots`` on a node, the ``aer`` estimator becomes ``BackendEstimatorV2``
over ``AerSimulator`` (real sampling, ``shots`` per measured basis), and the
others take ``precision = 1 / sqrt(shots)``. A node without ``shots`` on the
``backend`` estimator runs at the estimator's default precision (qiskit's
``BackendEstimatorV2``: 0.015625, that is 4096 shots per basis).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polyhal.errors import DeviceError, ExecutionError
from polyhal.quantum.circuit import Program
from polyhal.quantum.observables import Observable

ESTIMATORS = ("aer", "statevector", "backend")
_CONTROLLED = ("crx", "cry", "crz", "cp")


_CACHE_SIZE = 64  # transpiled circuits kept per driver (oldest dropped first)


def _precision(shots: int) -> float:
    """The precision for which qiskit's estimators take exactly ``shots`` shots
    (they take ``ceil(1 / precision**2)``)."""
    return 1.0 / math.sqrt(shots) * (1 + 1e-12)


@dataclass(eq=False)
class EstimatorDriver:
    """One device's estimators and transpiled circuits."""

    estimator: str = "aer"
    backend: Any = None
    noise_model: Any = None
    max_rows: int = 65536
    optimization_level: int = 1
    _circuits: dict[tuple[int, bool], tuple[Any, np.ndarray, Program, Any]] = field(
        default_factory=dict)
    _estimators: dict[tuple[int | None, int | None], Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def sampling(self) -> bool:
        """True when every estimate carries shot noise (a backend measures)."""
        return self.estimator == "backend"

    def _estimator(self, shots: int | None, seed: int | None) -> Any:
        key = (shots, seed)
        with self._lock:
            if key not in self._estimators:
                self._estimators[key] = self._make_estimator(shots, seed)
            return self._estimators[key]

    def _make_estimator(self, shots: int | None, seed: int | None) -> Any:
        from qiskit.primitives import BackendEstimatorV2, StatevectorEstimator

        if self.estimator == "statevector":
            return StatevectorEstimator(seed=seed)
        if self.estimator == "backend":
            options = {} if seed is None else {"seed_simulator": seed}
            return BackendEstimatorV2(backend=self.backend, options=options)
        from qiskit_aer import AerSimulator
        from qiskit_aer.primitives import EstimatorV2

        if shots is not None:
            simulator = AerSimulator(noise_model=self.noise_model)
            options = {} if seed is None else {"seed_simulator": seed}
            return BackendEstimatorV2(backend=simulator, options=options)
        backend_options: dict[str, Any] = {}
        if self.noise_model is not None:
            backend_options = {"noise_model": self.noise_model, "method": "density_matrix"}
        return EstimatorV2(options={"backend_options": backend_options})

    def _target(self, shots: int | None) -> Any:
        """The backend circuits are transpiled for (``None``: no transpilation)."""
        if self.estimator == "backend":
            return self.backend
        if self.estimator == "aer" and shots is not None:
            from qiskit_aer import AerSimulator

            return AerSimulator()
        return None

    def circuit(self, program: Program, shots: int | None) -> tuple[Any, np.ndarray, Any]:
        """(circuit, column of each circuit parameter among the occurrences, layout)."""
        needs_target = self._target(shots) is not None
        key = (id(program), needs_target)
        with self._lock:  # the cache holds the program, so its id is not reused meanwhile
            cached = self._circuits.get(key)
        if cached is not None:
            return cached[0], cached[1], cached[3]
        # qiskit-aer 0.18 binds parameters of controlled rotations wrongly (a crx(t, 2, 0)
        # is off by 0.4 in <Z>; its density-matrix method rejects them), so they go to
        # the estimator through their definitions: cx and single-qubit rotations.
        circuit = program.occurrence_circuit().decompose(gates_to_decompose=list(_CONTROLLED))
        layout = None
        if needs_target:
            from qiskit import transpile

            try:
                circuit = transpile(circuit, self._target(shots),
                                    optimization_level=self.optimization_level)
            except Exception as error:
                raise DeviceError(f"quantum: transpiling for the backend failed: "
                                  f"{type(error).__name__}: {error}") from None
            layout = circuit.layout
        columns = np.array([int(p.name[1:]) for p in circuit.parameters], dtype=np.intp)
        with self._lock:
            self._circuits[key] = (circuit, columns, program, layout)
            if len(self._circuits) > _CACHE_SIZE:
                self._circuits.pop(next(iter(self._circuits)))
        return circuit, columns, layout

    def expectations(self, program: Program, observables: list[Observable], angles: np.ndarray,
                     shots: int | None, seed: int | None) -> np.ndarray:
        """``[N, n_obs]`` expectations for ``[N, n_occ]`` angle rows, in chunks of one PUB."""
        from qiskit.quantum_info import SparsePauliOp

        rows = angles.shape[0]
        if rows == 0:
            return np.zeros((0, len(observables)))
        circuit, columns, layout = self.circuit(program, shots)
        operators = [SparsePauliOp.from_list([(label, c) for c, label in obs.terms])
                     for obs in observables]
        if layout is not None:
            operators = [op.apply_layout(layout) for op in operators]
        estimator = self._estimator(shots, seed)
        precision = None if shots is None else _precision(shots)
        chunks = []
        for start in range(0, rows, self.max_rows):
            values = angles[start:start + self.max_rows][:, columns]
            if not columns.size:  # a circuit without parameters: one evaluation, repeated
                values = np.zeros((1, 0))
            pub = (circuit, [operators], values[:, None, :])
            try:
                result = estimator.run([pub], precision=precision).result()
            except Exception as error:
                raise DeviceError(f"quantum: the {self.estimator} estimator failed: "
                                  f"{type(error).__name__}: {error}") from None
            evs = np.asarray(result[0].data.evs, dtype=float).reshape(-1, len(observables))
            if not columns.size:
                evs = np.repeat(evs, min(self.max_rows, rows - start), axis=0)
            chunks.append(evs)
        values = np.concatenate(chunks)
        if not np.all(np.isfinite(values)):
            raise ExecutionError("quantum: the estimator returned non-finite expectations")
        return values
