"""What crosses a process boundary: pickled requests and replies, and errors as strings.

An isolated device (:mod:`polyhal.hal.isolation`) pickles each request in the
caller's process; one that cannot be pickled is the caller's error, named here
(:func:`unsendable`). An exception raised in a worker travels back as an
:data:`ErrorPayload` of plain strings (:func:`encode_error`) and is raised again on
the caller's side as the same ``PolyhalError`` class, or as a ``DeviceError``
naming the type (:func:`rebuild_error`). The parallel conformance runner sends its
workers' errors the same way.
"""

from __future__ import annotations

import pickle
import sys
import traceback
from collections.abc import Mapping
from typing import Any

import numpy as np

from polyhal.errors import DeviceError, InputBindingError, PolyhalError
from polyhal.hal.checked import uncopyable
from polyhal.hal.contract import CompileOptions

__all__ = ["ErrorPayload", "dumps", "encode_error", "rebuild_error", "unsendable"]


def dumps(obj: Any) -> bytes:
    """``obj`` pickled with the highest protocol."""
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


_ARGUMENTS = {
    "open": ("the adapter class", "the adapter name", "the index", "options"),
    "compile": ("the graph", "the CompileOptions"),
    "upload": ("the array",),
    "execute": ("the executable", "arrays"),
}
"""What the arguments of each request are called in the error for one that cannot be sent."""


def unsendable(where: str, op: str, args: tuple, exc: Exception) -> PolyhalError:
    """The caller's error for a request ``op`` whose ``args`` cannot be pickled: a
    :class:`PolyhalError` naming the innermost argument that cannot (an
    :class:`InputBindingError` for an array; one that cannot be copied for want of
    memory names its shape and size). Called only once pickling failed."""
    names = _ARGUMENTS.get(op, ())
    found = None
    for index, arg in enumerate(args):
        found = _unpicklable(arg, names[index] if index < len(names) else f"argument {index}")
        if found is not None:
            break
    name, value, error = found or ("the request", args, exc)
    if isinstance(value, np.ndarray) and isinstance(error, MemoryError):
        return uncopyable(where, value, error, name)
    kind = InputBindingError if isinstance(value, np.ndarray) else PolyhalError
    return kind(f"{where}: {name} cannot be sent to the device's worker process, as it "
                f"cannot be pickled ({type(error).__name__}: {error})")


def _unpicklable(value: Any, name: str, depth: int = 0
                 ) -> tuple[str, Any, Exception] | None:
    """The innermost part of ``value`` (called ``name``) that cannot be pickled, with its
    name and the error, looking ``depth`` levels down at most; ``None`` when ``value``
    pickles."""
    try:
        dumps(value)
    except Exception as exc:
        for part_name, part in _parts(value, name) if depth < 4 else ():
            found = _unpicklable(part, part_name, depth + 1)
            if found is not None:
                return found
        return name, value, exc
    return None


def _parts(value: Any, name: str) -> list[tuple[str, Any]]:
    """The named parts of a container that the requests send."""
    if isinstance(value, CompileOptions):
        return [("CompileOptions.precision", value.precision),
                *((f"CompileOptions.extra[{key!r}]", item) for key, item in value.extra.items())]
    if isinstance(value, Mapping):
        return [(f"{name}[{key!r}]", item) for key, item in value.items()]
    if isinstance(value, list | tuple):
        return [(f"{name}[{index}]", item) for index, item in enumerate(value)]
    return []


ErrorPayload = tuple[tuple[tuple[str, str], ...], str, str]
"""An exception as plain strings (always picklable): its classes, most derived first, as
``(module, qualname)``; its message; its traceback text."""


def encode_error(exc: BaseException) -> ErrorPayload:
    """``exc`` as an :data:`ErrorPayload`, to send to another process (the worker's
    errors here; :mod:`polyhal.conformance.parallel`'s too)."""
    cls = type(exc)
    classes = tuple((c.__module__, c.__qualname__) for c in cls.__mro__
                    if c not in (BaseException, Exception, object))
    try:
        message = str(exc)
    except Exception:
        message = f"<{cls.__name__} with an unprintable message>"
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:
        text = f"{cls.__name__}: {message}\n"
    return classes, message, text


def _loaded_class(module: str, qualname: str) -> type | None:
    # Only classes already loaded here: rebuilding an error must never import (an
    # adapter's modules may need the worker's environment, e.g. numba's simulator).
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def rebuild_error(payload: ErrorPayload, where: str) -> PolyhalError:
    """The caller-side exception for an error the worker reported: the same
    ``PolyhalError`` class (or its nearest base loaded here) with the same message;
    anything else as a ``DeviceError`` naming the type and carrying the traceback."""
    classes, message, text = payload
    for module, qualname in classes:
        cls = _loaded_class(module, qualname)
        if cls is None or not issubclass(cls, PolyhalError):
            continue
        try:
            exc = cls(message)
        except Exception:
            continue
        if isinstance(exc, PolyhalError):
            exc.worker_traceback = text  # type: ignore[attr-defined]
            return exc
    module, qualname = classes[0] if classes else ("builtins", "Exception")
    name = qualname if module == "builtins" else f"{module}.{qualname}"
    exc = DeviceError(f"{where} raised {name}: {message}\n"
                      f"worker traceback:\n{text.rstrip()}")
    exc.worker_traceback = text  # type: ignore[attr-defined]
    return exc
