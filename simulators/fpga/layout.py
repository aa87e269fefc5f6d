"""How tensors lie in the device's buffers (docs/fpga.md, "Layouts").

The host's tiler packs operands into these layouts before a WRITE and unpacks
READ data after; the benches use the same functions against the golden
models. Entries are packed back to back; a payload is padded to whole words.
"""

from __future__ import annotations

import numpy as np

P_RECORD = np.dtype([("multiplier", "<i4"), ("shift", "u1"), ("pad", "u1", 3),
                     ("bias", "<i4"), ("pad2", "<i4")])
"""A P-buffer record: one output column's requantization parameters (16 bytes)."""


def tiles(length: int, size: int) -> int:
    """How many tiles of ``size`` cover ``length``."""
    return -(-length // size)


def words(data: bytes | np.ndarray, word_bytes: int) -> bytes:
    """``data`` padded with zeros to whole words."""
    raw = data.tobytes() if isinstance(data, np.ndarray) else data
    return raw + bytes(-len(raw) % word_bytes)


def pad_to(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` zero-padded at the end of each axis to ``shape``."""
    if array.shape == shape:
        return np.ascontiguousarray(array)
    out = np.zeros(shape, array.dtype)
    out[tuple(slice(0, n) for n in array.shape)] = array
    return out


def pack_a(a: np.ndarray, rows: int) -> np.ndarray:
    """A [M, K] int8 as A entries: per m-tile, the tile's rows transposed ([MT, K, R])."""
    m, k = a.shape
    mt = tiles(m, rows)
    return pad_to(a, (mt * rows, k)).reshape(mt, rows, k).transpose(0, 2, 1).copy()


def pack_b(b: np.ndarray, cols: int) -> np.ndarray:
    """B [K, N] int8 as B entries: row-major with N padded to whole column tiles."""
    k, n = b.shape
    return pad_to(b, (k, tiles(n, cols) * cols))


def pack_c(c: np.ndarray, cols: int) -> np.ndarray:
    """C [M, N] int32 as C entries (little-endian): row-major, N padded to column tiles."""
    m, n = c.shape
    return pad_to(c.astype("<i4"), (m, tiles(n, cols) * cols))


def pack_p(multiplier: np.ndarray, shift: np.ndarray, bias: np.ndarray, columns: int
           ) -> np.ndarray:
    """P records for ``columns`` columns (each parameter a scalar or one per column)."""
    records = np.zeros(columns, P_RECORD)
    for name, values in (("multiplier", multiplier), ("shift", shift), ("bias", bias)):
        values = np.asarray(values).reshape(-1)
        records[name][:values.size if values.size > 1 else columns] = values
    return records


def unpack_c(data: bytes, m: int, n: int, cols: int) -> np.ndarray:
    """C [M, N] int32 from READ data of ``m`` rows of whole column tiles."""
    width = tiles(n, cols) * cols
    return np.frombuffer(data, "<i4", m * width).reshape(m, width)[:, :n].astype(np.int32)


def unpack_q(data: bytes, m: int, n: int, cols: int) -> np.ndarray:
    """Q [M, N] int8 from READ data of ``m`` rows of whole column tiles."""
    width = tiles(n, cols) * cols
    return np.frombuffer(data, np.int8, m * width).reshape(m, width)[:, :n].copy()
