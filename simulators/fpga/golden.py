"""Integer golden models of the FPGA device (docs/fpga.md), in numpy.

They are independent of the rest of polyhal: the exact ``quant.Requantize``
arithmetic, the int8 GEMM with int32 wrap, and the buffer layouts the host's
tiler packs and unpacks (A tiles, B, C, Q, P records, words <-> bytes,
32-bit header / status fields). The test benches check the RTL against them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

#: Byte sizes of one P record and one header / status field.
P_RECORD_BYTES = 16
FIELD_BYTES = 4


_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1

#: quant.Requantize corner cases as (x, multiplier, shift, bias): ties both ways
#: at small and at large shifts, shift 0 and 63, multiplier 0 and 2^31 - 1, the
#: extreme sums and products (|x + bias| up to 2^32, |p| just under 2^63), and
#: saturation at both ends. The benches and the tests use them under every
#: rounding, relu and several zero points.
REQUANT_CORNERS: tuple[tuple[int, int, int, int], ...] = (
    (3, 1, 1, 0), (-3, 1, 1, 0), (5, 1, 1, 0), (-5, 1, 1, 0), (1, 1, 1, 0), (-1, 1, 1, 0),
    (6, 1, 2, 0), (-6, 1, 2, 0), (2, 1, 2, 0), (-2, 1, 2, 0), (10, 1, 2, 0), (-10, 1, 2, 0),
    (0, 0, 0, 0), (12345, 0, 0, 0), (-12345, 0, 63, 0), (127, 1, 0, 0), (128, 1, 0, 0),
    (-128, 1, 0, 0), (-129, 1, 0, 0), (200, 1, 0, 0), (-200, 1, 0, 0),
    (_I32_MAX, _I32_MAX, 63, _I32_MAX), (_I32_MIN, _I32_MAX, 63, _I32_MIN),
    (_I32_MIN, _I32_MAX, 0, _I32_MIN), (_I32_MAX, _I32_MAX, 0, _I32_MAX),
    (_I32_MAX, _I32_MAX, 62, _I32_MAX), (_I32_MIN, _I32_MAX, 62, _I32_MIN),
    (_I32_MAX, _I32_MAX, 31, 0), (_I32_MIN, _I32_MAX, 31, 0), (_I32_MIN, _I32_MAX, 32, 0),
    (-7, 3, 62, 5), (100, 1, 0, -300), (2**30, 2, 31, 0), (-(2**30), 2, 31, 0),
    (3 * 2**29, 1, 30, 0), (-3 * 2**29, 1, 30, 0), (_I32_MAX, _I32_MAX, 61, 1),
    # exact ties of huge products (with the bias: x + bias = -2^32 or +-3 * 2^30):
    # p = -2^62 at shift 63, p = -3 * 2^61 at shift 62, p = +-3 * 2^60 at shift 61
    (_I32_MIN, 2**30, 63, _I32_MIN), (_I32_MIN, 3 * 2**29, 62, _I32_MIN),
    (3 * 2**29, 2**30, 61, 3 * 2**29), (-3 * 2**29, 2**30, 61, -3 * 2**29),
)


def _round_shift(p: int, shift: int, rounding: str) -> int:
    """round(p / 2**shift) in exact integers (shift 0: p itself)."""
    if shift == 0:
        return p
    f = p >> shift                       # floor division by 2**shift (Python ints)
    r = p - (f << shift)
    h = 1 << (shift - 1)
    if rounding == "half_up":
        return f + (1 if r >= h else 0)  # == floor((p + h) / 2**shift)
    if rounding == "half_even":
        return f + (1 if r > h or (r == h and f & 1) else 0)
    raise ValueError(f"rounding must be 'half_up' or 'half_even', not {rounding!r}")


def requantize_scalar(x: int, multiplier: int, shift: int, bias: int = 0,
                      zero_point: int = 0, rounding: str = "half_up", relu: int = 0) -> int:
    """One element of quant.Requantize, in exact Python integers."""
    if not 0 <= multiplier <= 2**31 - 1:
        raise ValueError(f"multiplier {multiplier} outside [0, 2^31 - 1]")
    if not 0 <= shift <= 63:
        raise ValueError(f"shift {shift} outside [0, 63]")
    if not -128 <= zero_point <= 127:
        raise ValueError(f"zero_point {zero_point} outside [-128, 127]")
    s = int(x) + int(bias)
    q = _round_shift(s * int(multiplier), int(shift), rounding)
    lo = zero_point if relu else -128
    return min(127, max(lo, q + zero_point))


def requantize(x: Any, multiplier: Any, shift: Any, bias: Any = None, zero_point: int = 0,
               rounding: str = "half_up", relu: int = 0) -> np.ndarray:
    """quant.Requantize: int32 ``x`` -> int8, per tensor or per channel (last axis).

    ``multiplier``, ``shift`` and ``bias`` (optional) are scalars or 1-D arrays of
    length ``x.shape[-1]``; each broadcasts on its own. The arithmetic is exact
    (Python integers: ``x + bias`` needs 33 bits, the product up to 64).
    """
    xa = np.asarray(x, dtype=np.int64)
    args = [xa, np.asarray(multiplier, dtype=np.int64), np.asarray(shift, dtype=np.int64),
            np.asarray(0 if bias is None else bias, dtype=np.int64)]
    for name, arr in zip(("multiplier", "shift", "bias"), args[1:], strict=True):
        if arr.ndim > 1 or (arr.ndim == 1 and (xa.ndim == 0 or arr.shape[0] != xa.shape[-1])):
            raise ValueError(f"{name} must be a scalar or 1-D of length x.shape[-1]")
    xb, mb, sb, bb = np.broadcast_arrays(*args)
    out = np.empty(xa.shape, dtype=np.int8)
    flat = out.reshape(-1)
    for i, (xv, mv, sv, bv) in enumerate(zip(xb.reshape(-1).tolist(), mb.reshape(-1).tolist(),
                                             sb.reshape(-1).tolist(), bb.reshape(-1).tolist(),
                                             strict=True)):
        flat[i] = requantize_scalar(xv, mv, sv, bv, zero_point, rounding, relu)
    return out


def wrap_int32(v: Any) -> np.ndarray:
    """Two's complement wrap of integers to int32."""
    a = np.asarray(v, dtype=np.int64)
    return (((a + 2**31) & 0xFFFFFFFF) - 2**31).astype(np.int32)


def gemm_int8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C = A x B for int8 A [M, K], B [K, N]: int32 result, two's complement wrap."""
    a64 = np.asarray(a, dtype=np.int8).astype(np.int64)
    b64 = np.asarray(b, dtype=np.int8).astype(np.int64)
    if a64.ndim != 2 or b64.ndim != 2 or a64.shape[1] != b64.shape[0]:
        raise ValueError(f"gemm_int8 shapes {a64.shape} x {b64.shape} do not chain")
    # Each dot product stays below K * 2^14 in magnitude: exact in int64 for any
    # K a buffer can hold; the wrap is then applied once.
    return wrap_int32(a64 @ b64)


def tiles(extent: int, tile: int) -> int:
    """Number of tiles of size ``tile`` covering ``extent``."""
    return -(-extent // tile)


def pack_a(a: np.ndarray, rows: int) -> bytes:
    """Pack A [M, K] int8 into A entries (R bytes each), M padded to MT*R rows.

    Entry ``mt*K + k`` holds ``a[mt*R + r][k]`` at byte r.
    """
    a8 = np.asarray(a, dtype=np.int8)
    m, k = a8.shape
    mt = tiles(m, rows)
    padded = np.zeros((mt * rows, k), dtype=np.int8)
    padded[:m] = a8
    return padded.reshape(mt, rows, k).transpose(0, 2, 1).tobytes()


def pack_b(b: np.ndarray, cols: int) -> bytes:
    """Pack B [K, N] int8 into B entries (C bytes each), N padded to NT*C.

    Entry ``k*NT + nt`` holds ``b[k][nt*C + c]`` at byte c.
    """
    b8 = np.asarray(b, dtype=np.int8)
    k, n = b8.shape
    padded = np.zeros((k, tiles(n, cols) * cols), dtype=np.int8)
    padded[:, :n] = b8
    return padded.tobytes()


def pack_c(c: np.ndarray, cols: int) -> bytes:
    """Pack int32 C [M, N] into C entries (4C bytes each), N padded to NT*C."""
    c32 = np.asarray(c, dtype=np.int32)
    m, n = c32.shape
    padded = np.zeros((m, tiles(n, cols) * cols), dtype="<i4")
    padded[:, :n] = c32
    return padded.tobytes()


def unpack_c(data: bytes, m: int, n: int, cols: int) -> np.ndarray:
    """Unpack M rows of C entries (row-major, N padded to NT*C) to int32 [M, N]."""
    width = tiles(n, cols) * cols
    arr = np.frombuffer(bytes(data[: m * width * 4]), dtype="<i4").reshape(m, width)
    return arr[:, :n].astype(np.int32)


def unpack_q(data: bytes, m: int, n: int, cols: int) -> np.ndarray:
    """Unpack M rows of Q entries (C bytes each, row-major) to int8 [M, N]."""
    width = tiles(n, cols) * cols
    arr = np.frombuffer(bytes(data[: m * width]), dtype=np.int8).reshape(m, width)
    return arr[:, :n].copy()


def pack_p(multiplier: Sequence[int], shift: Sequence[int], bias: Sequence[int] | None = None,
           ) -> bytes:
    """Pack per-column P records (16 bytes): multiplier int32 at bytes 0-3,
    shift at byte 4, bias int32 at bytes 8-11 (0 when ``bias`` is None)."""
    n = len(multiplier)
    rec = np.zeros((n, P_RECORD_BYTES), dtype=np.uint8)
    rec[:, 0:4] = np.asarray(multiplier, dtype="<i4").view(np.uint8).reshape(n, 4)
    rec[:, 4] = np.asarray(shift, dtype=np.int64).astype(np.uint8)
    if bias is not None:
        rec[:, 8:12] = np.asarray(bias, dtype="<i4").view(np.uint8).reshape(n, 4)
    return rec.tobytes()


def place(image: bytearray, entry_bytes: int, base: int, data: bytes) -> None:
    """Copy packed entries into a buffer image at entry index ``base``."""
    off = base * entry_bytes
    if off + len(data) > len(image):
        raise ValueError("entries do not fit in the buffer image")
    image[off:off + len(data)] = data


def bytes_to_words(data: bytes, word_bytes: int) -> list[int]:
    """Little-endian words of ``word_bytes`` bytes (the tail zero-padded)."""
    padded = bytes(data) + bytes(-len(data) % word_bytes)
    return [int.from_bytes(padded[i:i + word_bytes], "little")
            for i in range(0, len(padded), word_bytes)]


def words_to_bytes(words: Iterable[int], word_bytes: int) -> bytes:
    """The inverse of :func:`bytes_to_words`."""
    return b"".join(int(w).to_bytes(word_bytes, "little") for w in words)


def fields_to_word(fields: Sequence[int]) -> int:
    """A word whose 32-bit field i is ``fields[i]`` (values taken modulo 2^32)."""
    word = 0
    for i, f in enumerate(fields):
        word |= (int(f) & 0xFFFFFFFF) << (32 * i)
    return word


def word_to_fields(word: int, count: int = 8) -> list[int]:
    """The first ``count`` 32-bit fields of a word (unsigned)."""
    return [(int(word) >> (32 * i)) & 0xFFFFFFFF for i in range(count)]


def gemm_cycle_bound(mt: int, nt: int, k: int, rows: int, cols: int) -> int:
    """The performance contract of GEMM (docs/fpga.md): at most this many cycles
    (status field 6) for MT x NT tiles of K beats on a ROWS x COLS array."""
    return mt * nt * max(k, rows + cols) + 64


def requant_cycle_bound(m: int, nt: int, cols: int, word_bytes: int) -> int:
    """The performance contract of REQUANT (docs/fpga.md): one entry per cycle once M
    exceeds the P words a column tile spans, plus the scan of the records it uses
    and a short pipeline."""
    per_tile = -(-P_RECORD_BYTES * cols // word_bytes) + 1
    scan = -(-P_RECORD_BYTES * nt * cols // word_bytes) + 1
    return nt * max(m, per_tile) + scan + 24


class DeviceModel:
    """A command-level model of the device: the five buffers as byte images and
    the effect and status of every command (docs/fpga.md, "Commands").

    As the spec states them: an unknown buffer number is status 2; a range with
    no word / entry / record touched (n = 0, MT = 0, NT = 0, M = 0) is never out
    of range; REQUANT answers status 3 (and writes nothing) when a record it uses
    has a shift above 63 or a negative multiplier. The images start at zero, as
    the simulated buffers do at power-up; the device's rst does not clear them,
    so a model of a device that ran before must be loaded from it (the benches
    READ the buffers back).
    """

    BUFFERS = ("A", "B", "C", "P", "Q")

    def __init__(self, rows: int = 8, cols: int = 8, word_bytes: int = 128,
                 a_words: int = 1024, b_words: int = 1024, c_words: int = 4096,
                 q_words: int = 1024, p_words: int = 64) -> None:
        self.rows, self.cols, self.word_bytes = rows, cols, word_bytes
        depths = (a_words, b_words, c_words, p_words, q_words)
        self.depth = dict(enumerate(depths))
        self.image = {i: bytearray(d * word_bytes) for i, d in enumerate(depths)}
        self.mac_beats = 0

    @classmethod
    def from_parameters(cls, params: dict[str, int]) -> DeviceModel:
        """A model for the HDL parameters of polyhal_fpga_sim / polyhal_fpga_top."""
        return cls(params["ROWS"], params["COLS"], params["WORD_BYTES"], params["A_WORDS"],
                   params["B_WORDS"], params["C_WORDS"], params["Q_WORDS"], params["P_WORDS"])

    def _entries(self, buf: int, entry_bytes: int) -> int:
        return self.depth[buf] * self.word_bytes // entry_bytes

    def _xfer_ok(self, buf: int, addr: int, n: int) -> bool:
        return buf in self.depth and (n == 0 or addr + n <= self.depth[buf])

    def write(self, buf: int, addr: int, words: Sequence[int]) -> int:
        """WRITE: store words (or discard them when out of range); the status."""
        if not self._xfer_ok(buf, addr, len(words)):
            return 2
        w = self.word_bytes
        self.image[buf][addr * w:(addr + len(words)) * w] = words_to_bytes(words, w)
        return 0

    def read(self, buf: int, addr: int, n: int) -> tuple[int, list[int]]:
        """READ: (status, words)."""
        if not self._xfer_ok(buf, addr, n):
            return 2, []
        w = self.word_bytes
        return 0, bytes_to_words(bytes(self.image[buf][addr * w:(addr + n) * w]), w)

    def gemm(self, mt: int, nt: int, k: int, a_base: int, b_base: int, c_base: int) -> int:
        """GEMM on the buffer images; the status."""
        r, c = self.rows, self.cols
        needs = ((0, a_base, mt * k, r), (1, b_base, k * nt, c), (2, c_base, mt * r * nt, 4 * c))
        for buf, base, count, size in needs:
            if count and base + count > self._entries(buf, size):
                return 3
        if mt == 0 or nt == 0:
            return 0
        a_ent = np.frombuffer(bytes(self.image[0]), dtype=np.int8).reshape(-1, r)
        b_ent = np.frombuffer(bytes(self.image[1]), dtype=np.int8).reshape(-1, c)
        a = a_ent[a_base:a_base + mt * k].reshape(mt, k, r).transpose(0, 2, 1).reshape(mt * r, k)
        b = b_ent[b_base:b_base + k * nt].reshape(k, nt * c)
        out = gemm_int8(a, b).astype("<i4").tobytes()
        place(self.image[2], 4 * c, c_base, out)
        self.mac_beats += mt * nt * k
        return 0

    def requant(self, m: int, nt: int, zero_point: int, flags: int, c_base: int, q_base: int,
                p_base: int) -> int:
        """REQUANT on the buffer images; the status."""
        c = self.cols
        count = m * nt
        if count == 0:
            return 0
        if (c_base + count > self._entries(2, 4 * c) or q_base + count > self._entries(4, c)
                or p_base + nt * c > self._entries(3, P_RECORD_BYTES)):
            return 3
        rec = np.frombuffer(bytes(self.image[3]), dtype=np.uint8).reshape(-1, P_RECORD_BYTES)
        rec = rec[p_base:p_base + nt * c]
        mult = rec[:, 0:4].copy().view("<i4").reshape(-1).astype(np.int64)
        shift = rec[:, 4].astype(np.int64)
        bias = rec[:, 8:12].copy().view("<i4").reshape(-1).astype(np.int64)
        if (shift > 63).any() or (mult < 0).any():
            return 3
        x = np.frombuffer(bytes(self.image[2]), dtype="<i4").reshape(-1, c)
        x = x[c_base:c_base + count].reshape(m, nt * c)
        zp = ((zero_point & 0xFF) ^ 0x80) - 0x80
        y = requantize(x, mult, shift, bias if flags & 4 else None, zp,
                       "half_even" if flags & 2 else "half_up", flags & 1)
        place(self.image[4], c, q_base, y.tobytes())
        return 0

    def execute(self, opcode: int, args: Sequence[int], payload: Sequence[int] = (),
                ) -> tuple[int, list[int]]:
        """One command: (status, data words)."""
        f = [*(int(a) & 0xFFFFFFFF for a in args), 0, 0, 0, 0, 0, 0, 0][:7]
        if opcode == 1:
            return self.write(f[0], f[1], list(payload)), []
        if opcode == 2:
            return self.read(f[0], f[1], f[2])
        if opcode == 3:
            return self.gemm(*f[:6]), []
        if opcode == 4:
            return self.requant(*f[:7]), []
        if opcode == 5:
            return 0, []
        return 1, []
