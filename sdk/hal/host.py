"""Building blocks for adapters whose device memory is host memory."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from polyhal.errors import UnsupportedError
from polyhal.hal.contract import Buffer, Device
from polyhal.ir.types import TensorType


class HostMemoryDevice(Device):
    """A device whose buffers are numpy arrays in host memory (copied both ways)."""

    def upload(self, array: np.ndarray) -> Buffer:
        return Buffer(self, TensorType.of(array), np.array(array, copy=True, order="C"))

    def download(self, buffer: Buffer) -> np.ndarray:
        return np.array(buffer.handle, copy=True)


def check_single_device(adapter: str, index: int) -> None:
    """Raise unless ``index`` is 0, for adapters with exactly one device."""
    if index != 0:
        raise UnsupportedError(f"{adapter} has one device (index 0), not {index}")


def check_known_options(adapter: str, options: Mapping[str, Any], known: Collection[str]) -> None:
    """Raise ``UnsupportedError`` naming every option of ``options`` not in ``known``."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UnsupportedError(f"{adapter}: unknown option(s) {', '.join(unknown)} (known: "
                               f"{', '.join(sorted(known)) or 'none'})")


def host_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
