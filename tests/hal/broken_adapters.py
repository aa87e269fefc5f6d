"""Deliberately broken adapters, each with one defect, for grading tests.

They live at module level so an isolated worker can import them. Each is the
template adapter with one kernel or hook changed.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from polyhal.adapters.template import KERNELS, TemplateAdapter, TemplateDevice
from polyhal.errors import UnsupportedError
from polyhal.hal import CompileOptions, Executable
from polyhal.ir import Graph


def _device(name: str, kernels: dict[str, Any]) -> type[TemplateDevice]:
    return type(f"{name}Device", (TemplateDevice,), {"kernels": {**KERNELS, **kernels},
                                                     "__module__": __name__})


def _adapter(name: str, class_name: str, device: type[TemplateDevice]) -> type[TemplateAdapter]:
    return type(class_name, (TemplateAdapter,), {
        "name": name, "device_class": device, "__module__": __name__,
        "open": lambda self, index=0, **options: device()})


def _hang_on_float64_rank4(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == np.float64 and a.ndim == 4:
        while True:
            pass
    return np.multiply(a, b)


def _crash_on_float64_rank4(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == np.float64 and a.ndim == 4:
        os._exit(7)
    return np.multiply(a, b)


class RefusingDevice(TemplateDevice):
    """Claims Mul but refuses to compile it."""

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        if any(n.op == "Mul" for n in graph.nodes):
            raise UnsupportedError("refusing-mul does not do Mul after all")
        return super().compile(graph, options)


WrongAddDevice = _device("WrongAdd", {"core.Add": lambda a, b: np.add(a, b) + a.dtype.type(1)})
WrongDtypeDevice = _device("WrongDtype", {"core.Relu": lambda x: np.maximum(x, 0.0).astype(
    np.float64 if x.dtype == np.float32 else np.float32)})
CrashingDevice = _device("Crashing", {"core.Mul": _crash_on_float64_rank4})
HangingDevice = _device("Hanging", {"core.Mul": _hang_on_float64_rank4})

WrongAddAdapter = _adapter("wrong-add", "WrongAddAdapter", WrongAddDevice)
WrongDtypeAdapter = _adapter("wrong-dtype", "WrongDtypeAdapter", WrongDtypeDevice)
RefusingAdapter = _adapter("refusing-mul", "RefusingAdapter", RefusingDevice)
CrashingAdapter = _adapter("crashing-mul", "CrashingAdapter", CrashingDevice)
HangingAdapter = _adapter("hanging-mul", "HangingAdapter", HangingDevice)


class MissingUploadDevice(TemplateDevice):
    """Forgets ``upload``: inherits it from the base Device, not the template."""

    upload = TemplateDevice.__mro__[1].upload  # the HAL base's "need upload"


class MissingUploadAdapter(TemplateAdapter):
    """An adapter whose device lacks a required method."""

    name = "missing-upload"
    device_class = MissingUploadDevice


class FutureApiAdapter(TemplateAdapter):
    """Speaks only a future contract version."""

    name = "future-api"
    api_version = (7, 9)
