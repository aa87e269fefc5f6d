"""polyhal: one tensor IR, a reference executor that is its specification, a
checked hardware-abstraction contract, and a conformance suite."""

from polyhal import ops
from polyhal._version import __version__
from polyhal.errors import (
    AdapterContractError,
    CheckpointError,
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
    TrainingError,
    UnsupportedError,
    VerificationError,
)
from polyhal.ir import DType, Graph, GraphBuilder, TensorType, load, save
from polyhal.reference import run
from polyhal.runtime import Session, compile

__all__ = [
    "AdapterContractError", "CheckpointError", "ConformanceError", "DType",
    "DeviceCrashError", "DeviceError", "DeviceTimeoutError", "ExecutionError",
    "Graph", "GraphBuilder", "IRError", "InputBindingError", "LimitExceededError",
    "PolyhalError", "SerializationError", "Session", "TensorType", "TrainingError",
    "UnsupportedError", "VerificationError", "__version__", "compile", "load", "ops", "run", "save",
]
