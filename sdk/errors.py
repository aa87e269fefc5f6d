"""The one error tree of polyhal.

Every failure a user can cause is a :class:`PolyhalError` subclass whose
message names what is wrong and where (node, op, input, attribute, file).

::

    PolyhalError
    ├── IRError                  malformed or invalid graph / model file
    │   ├── VerificationError    a graph breaks a structural or typing rule
    │   ├── SerializationError   a model file cannot be read or written
    │   ├── LimitExceededError   a tensor, graph or file exceeds the load limits
    │   └── InputBindingError    run-time inputs do not match the graph's inputs
    ├── ExecutionError           a kernel failed on concrete data
    ├── UnsupportedError         a device lacks an op / dtype / shape
    ├── DeviceError              a device fault (drives recovery)
    │   ├── DeviceCrashError     the device's process died
    │   └── DeviceTimeoutError   a device call ran past its timeout
    ├── AdapterContractError     an adapter breaks the HAL contract
    ├── ConformanceError         the conformance suite cannot proceed
    └── TrainingError            training cannot proceed (data, arguments)
        └── CheckpointError      a checkpoint is unreadable or does not match the run
"""

from __future__ import annotations

import reprlib

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 200


def shown(value: object, limit: int = 60) -> str:
    """``value`` as an error message shows it: its ``repr``, cut to ``limit``
    characters when longer (then ``...`` and the value's type, and a string's
    length), so a huge value from a model file or a caller cannot flood a message
    nor take long to format (containers show their first few items). A value whose
    ``repr`` fails (or an int too long to print) shows as its type."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... (str, {len(value)} characters)"
    try:
        text = _REPR.repr(value)
    except Exception:  # a message must not fail on the value it names
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit]}... ({type(value).__name__})"


class PolyhalError(Exception):
    """Base class of every error polyhal raises on purpose."""


class IRError(PolyhalError):
    """A graph or model file is malformed or invalid."""


class VerificationError(IRError):
    """A graph breaks a structural or typing rule of the IR."""


class SerializationError(IRError):
    """A model file cannot be parsed, or a graph cannot be written."""


class LimitExceededError(IRError):
    """A tensor, graph or file exceeds the configured limits."""


class InputBindingError(IRError):
    """Run-time inputs do not match the graph's declared inputs."""


class ExecutionError(PolyhalError):
    """A kernel failed on concrete data (for example an index out of range)."""


class UnsupportedError(PolyhalError):
    """A device does not support an op, dtype or shape."""


class DeviceError(PolyhalError):
    """A device faulted: crashed, hung, or reported an error."""


class DeviceCrashError(DeviceError):
    """The process hosting a device died during a call."""


class DeviceTimeoutError(DeviceError):
    """A device call ran past its timeout (the device was stopped)."""


class AdapterContractError(PolyhalError):
    """An adapter breaks the HAL contract."""


class ConformanceError(PolyhalError):
    """The conformance suite cannot proceed."""


class TrainingError(PolyhalError):
    """Training cannot proceed: bad data, arguments or state."""


class CheckpointError(TrainingError):
    """A checkpoint cannot be read, or does not match the run resuming from it."""
