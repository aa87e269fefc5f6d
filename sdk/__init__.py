"""polyhal: one tensor IR, a reference executor that is its specification, a
checked hardware-abstraction contract, and a conformance suite."""

from polyhal import ops
from polyhal._version import __version__
from polyhal.errors import (
    AdapterContractError,
    ConformanceError,
    DeviceCrashError,
    DeviceError,
    DeviceTimeoutError,
    ExecutionError,
    InputBindingError,
    IRError,
    LimitExceededError,
    PolyhalError,
    SerializationError,
    UnsupportedError,
    VerificationError,
)
from polyhal.ir import DType, Graph, GraphBuilder, TensorType, load, save
from polyhal.reference import run
from polyhal.runtime import compile

__all__ = [
    "AdapterContractError", "ConformanceError", "DType", "DeviceCrashError", "DeviceError",
    "DeviceTimeoutError", "ExecutionError",
    "Graph", "GraphBuilder", "IRError", "InputBindingError", "LimitExceededError",
    "PolyhalError", "SerializationError", "TensorType", "UnsupportedError",
    "VerificationError", "__version__", "compile", "load", "ops", "run", "save",
]
