"""numba's CUDA simulator as a stand-in GPU: the set-up of its worker processes.

numba reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported, and a
process has either the real CUDA target or the simulator, never both. So the
``gpu-sim`` adapter always runs in a worker process (polyhal's isolation
mechanism) whose environment :data:`WORKER_ENV` sets before anything imports
numba; users never set the variable themselves. In the simulator every CUDA
thread is a Python thread and kernels run as Python: it is for correctness,
and keeps small shapes.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

SIMULATOR_ENV = "NUMBA_ENABLE_CUDASIM"
"""The variable numba reads at import to choose the simulator."""

WORKER_ENV = {SIMULATOR_ENV: "1"}
"""What a ``gpu-sim`` worker sets before importing numba."""


def requested() -> bool:
    """True when this process asked numba for the simulator."""
    return os.environ.get(SIMULATOR_ENV, "").strip() not in ("", "0")


def make_shared_arrays_thread_safe() -> None:
    """Make the simulator's ``cuda.shared.array`` hand every thread of a block the same
    array (idempotent; only in a process running the simulator).

    The simulator runs each CUDA thread of a block as a Python thread and finds a
    block's shared array by the line that asks for it: it looks the line up in a dict
    and, when absent, creates the array and stores it. Two threads that look before
    either stores each create one, and from then on write halves of the data into two
    arrays and read the other half uninitialized: a GEMM then returns garbage. The
    window is small (one ``np.empty``), but the threads of a block start together; a
    float64 GEMM of conformance failed this way once in CI. This replacement makes the
    look-up and the store one step under a lock, and finds the line from the caller's
    frame instead of a formatted stack trace (about 0.1 ms a call).
    """
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "thread_safe", False):
        return
    original = shared.array
    lock = threading.Lock()

    def array(self: Any, shape: Any, dtype: Any, alignment: Any = None) -> Any:
        if shape == 0 or alignment is not None:  # dynamic shared memory: one buffer
            return original(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)  # the simulator's own key
        with lock:
            found = self._allocations.get(key)
            if found is None:
                if isinstance(dtype, kernelapi.types.Type):
                    dtype = kernelapi.numpy_support.as_dtype(dtype)
                found = self._allocations[key] = np.empty(shape, dtype)
        return found

    array.thread_safe = True  # type: ignore[attr-defined]
    shared.array = array
