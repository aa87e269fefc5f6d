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

SIMULATOR_ENV = "NUMBA_ENABLE_CUDASIM"
"""The variable numba reads at import to choose the simulator."""

WORKER_ENV = {SIMULATOR_ENV: "1"}
"""What a ``gpu-sim`` worker sets before importing numba."""


def requested() -> bool:
    """True when this process asked numba for the simulator."""
    return os.environ.get(SIMULATOR_ENV, "").strip() not in ("", "0")
