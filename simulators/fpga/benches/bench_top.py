"""Bench of polyhal_fpga_sim: every command through the word streams, as the host
link drives them, checked against golden.DeviceModel (statuses, data, counters)."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import cocotb
import numpy as np

from polyhal.simulators.fpga import golden as g
from polyhal.simulators.fpga import stream as s
from polyhal.simulators.fpga.benches.common import params, rngs


class Harness:
    """The device under test beside its model; every command is run on both."""

    def __init__(self, dut: Any) -> None:
        self.dut = dut
        self.p = params()
        self.w = self.p["WORD_BYTES"]
        self.r, self.c = self.p["ROWS"], self.p["COLS"]
        self.model = g.DeviceModel.from_parameters(self.p)
        self.last_cycle = -1

    async def cmd(self, opcode: int, args: Sequence[int] = (), payload: Sequence[int] = (),
                  expect: int | None = None) -> tuple[s.Status, list[int]]:
        """Run one command on the device and the model; check the status (and
        ``expect``), the data, the counters; return the status and the data."""
        args = list(args)
        want_status, want_data = self.model.execute(opcode, args, payload)
        n_data = len(want_data)
        fields, data = await s.command(self.dut, opcode, args, payload)
        st = s.Status.from_fields(fields)
        assert len(data) == n_data, f"op {opcode} args {args}: {len(data)} data words"
        where = f"op {opcode} args {args}"
        assert st.opcode == (opcode & 0xFFFFFFFF), f"{where}: echoed opcode {st.opcode}"
        assert st.status == want_status, f"{where}: status {st.status}, model {want_status}"
        if expect is not None:
            assert st.status == expect, f"{where}: status {st.status}, expected {expect}"
        assert data == want_data, f"{where}: data differs from the model"
        assert st.mac_beats == self.model.mac_beats, \
            f"{where}: MAC beats {st.mac_beats}, model {self.model.mac_beats}"
        assert st.cycle > self.last_cycle, f"{where}: cycle counter not increasing"
        assert 0 < st.cycles <= st.cycle, f"{where}: command cycles {st.cycles}"
        self.last_cycle = st.cycle
        return st, data

    async def sync(self) -> None:
        """Load the model's buffer images from the device (READ of every word)."""
        for buf, depth in self.model.depth.items():
            fields, words = await s.command(self.dut, s.OP_READ, [buf, 0, depth])
            assert fields[1] == s.STATUS_OK, f"READ of buffer {buf} for the model: {fields}"
            self.model.image[buf][:] = g.words_to_bytes(words, self.w)
            self.last_cycle = s.Status.from_fields(fields).cycle

    async def write_bytes(self, buf: int, entry_bytes: int, base: int, data: bytes) -> None:
        """WRITE the words covering ``data`` placed at entry ``base`` (read-modify-write
        of the partial words, through the model's image)."""
        w = self.w
        off = base * entry_bytes
        first, last = off // w, (off + len(data) + w - 1) // w
        img = bytearray(self.model.image[buf][first * w:last * w])
        img[off - first * w:off - first * w + len(data)] = data
        words = g.bytes_to_words(bytes(img), w)
        await self.cmd(s.OP_WRITE, [buf, first, len(words)], words, expect=0)

    async def read_entries(self, buf: int, entry_bytes: int, base: int, count: int) -> bytes:
        """READ the words covering ``count`` entries from entry ``base``; their bytes."""
        w = self.w
        off = base * entry_bytes
        first, last = off // w, (off + count * entry_bytes + w - 1) // w
        _, words = await self.cmd(s.OP_READ, [buf, first, last - first], expect=0)
        raw = g.words_to_bytes(words, w)
        return raw[off - first * w:off - first * w + count * entry_bytes]

    def entries(self, buf: int, entry_bytes: int) -> int:
        """Entries of ``entry_bytes`` bytes that buffer ``buf`` holds."""
        return self.model.depth[buf] * self.w // entry_bytes

    async def gemm(self, a: np.ndarray, b: np.ndarray, a_base: int = 0, b_base: int = 0,
                   c_base: int = 0, load: bool = True) -> s.Status:
        """Load A and B, run GEMM, read C back and compare with golden.gemm_int8."""
        m, k = a.shape
        n = b.shape[1]
        mt, nt = g.tiles(m, self.r), g.tiles(n, self.c)
        if load:
            await self.write_bytes(s.BUF_A, self.r, a_base, g.pack_a(a, self.r))
            await self.write_bytes(s.BUF_B, self.c, b_base, g.pack_b(b, self.c))
        st, _ = await self.cmd(s.OP_GEMM, [mt, nt, k, a_base, b_base, c_base], expect=0)
        got = g.unpack_c(await self.read_entries(s.BUF_C, 4 * self.c, c_base, mt * self.r * nt),
                         m, n, self.c)
        assert np.array_equal(got, g.gemm_int8(a, b)), f"GEMM {m}x{k}x{n} wrong"
        if (self.r, self.c, self.w) == (8, 8, 128):   # the performance contract
            bound = g.gemm_cycle_bound(mt, nt, k, self.r, self.c)
            assert st.cycles <= bound, f"GEMM {m}x{k}x{n}: {st.cycles} cycles > {bound}"
        return st


async def start(dut: Any) -> Harness:
    """Reset the device and return a harness whose model holds the buffers' contents.

    Reset leaves the buffers as they are (docs/fpga.md), so the earlier tests of
    this run left data in them: the model is the one the previous test left if
    it passed (the device then holds just what its model does), else it is read
    back from the device.
    """
    await s.reset(dut)
    h = Harness(dut)
    kept = getattr(dut, "_polyhal_model", None)
    dut._polyhal_model = None
    if kept is None:
        await h.sync()
    else:
        kept.mac_beats = 0        # the counters restart at reset, the buffers do not
        h.model = kept
    return h


def device_test(skip: bool = False) -> Callable[[Callable[..., Awaitable[None]]], Any]:
    """``cocotb.test`` of a body ``(dut, h)`` where ``h`` is a :func:`start`-ed
    harness; when the body returns, its model is kept for the next test."""
    def wrap(body: Callable[..., Awaitable[None]]) -> Any:
        async def test(dut: Any) -> None:
            """(Replaced by the body's docstring.)"""
            h = await start(dut)
            await body(dut, h)
            dut._polyhal_model = h.model
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(test, name, getattr(body, name))
        return cocotb.test(skip=skip)(test)
    return wrap


@device_test()
async def status_and_unknown_opcodes(dut: Any, h: Harness) -> None:
    """STATUS answers ok; unknown opcodes answer status 1 and change nothing."""
    st, _ = await h.cmd(s.OP_STATUS, expect=0)
    assert st.mac_beats == 0
    for op in (0, 6, 7, 255, 0xFFFFFFFF):
        await h.cmd(op, [1, 2, 3], expect=1)
    st2, _ = await h.cmd(s.OP_STATUS, expect=0)
    assert st2.cycle > st.cycle


@device_test()
async def write_read(dut: Any, h: Harness) -> None:
    """WRITE / READ round trips on every buffer, out-of-range and empty transfers."""
    rnd, _ = rngs(dut, "write_read")
    for buf in range(5):
        depth = h.model.depth[buf]
        for _ in range(2):
            n = rnd.randint(1, min(depth, 9))
            addr = rnd.randint(0, depth - n)
            words = [rnd.getrandbits(8 * h.w) for _ in range(n)]
            await h.cmd(s.OP_WRITE, [buf, addr, n], words, expect=0)
            _, back = await h.cmd(s.OP_READ, [buf, addr, n], expect=0)
            assert back == words
        # out of range: the payload is still consumed, nothing written
        await h.cmd(s.OP_WRITE, [buf, depth - 1, 3], [1, 2, 3], expect=2)
        await h.cmd(s.OP_WRITE, [buf, 0xFFFFFFFF, 2], [4, 5], expect=2)
        await h.cmd(s.OP_READ, [buf, depth - 2, 3], expect=2)
        await h.cmd(s.OP_READ, [buf, 0xFFFFFFF0, 0x20], expect=2)
        await h.cmd(s.OP_WRITE, [buf, depth, 0], expect=0)
        await h.cmd(s.OP_READ, [buf, 0, 0], expect=0)
        await h.cmd(s.OP_READ, [buf, depth - 1, 1], expect=0)
    await h.cmd(s.OP_WRITE, [5, 0, 2], [7, 8], expect=2)
    await h.cmd(s.OP_READ, [9, 0, 1], expect=2)


@device_test()
async def reset_keeps_buffers(dut: Any, h: Harness) -> None:
    """rst restarts the counters and leaves every buffer's contents as they were."""
    rnd, _ = rngs(dut, "reset_keeps_buffers")
    await h.cmd(s.OP_GEMM, [1, 1, 1, 0, 0, 0], expect=0)     # counters above zero
    spots = []
    for buf in range(5):
        depth = h.model.depth[buf]
        for addr in sorted({0, depth - 1, rnd.randrange(depth)}):
            word = rnd.getrandbits(8 * h.w)
            await h.cmd(s.OP_WRITE, [buf, addr, 1], [word], expect=0)
            spots.append((buf, addr, word))
    await s.reset(dut)
    h.model.mac_beats = 0
    h.last_cycle = -1
    st, _ = await h.cmd(s.OP_STATUS, expect=0)
    assert st.mac_beats == 0 and st.cycle < 20, f"counters after reset: {st}"
    for buf, addr, word in spots:
        _, back = await h.cmd(s.OP_READ, [buf, addr, 1], expect=0)
        assert back == [word], f"buffer {buf} word {addr} changed across reset"


@device_test()
async def gemm_random(dut: Any, h: Harness) -> None:
    """Random shapes (padding, K below and above R+C) at random entry bases."""
    rnd, rng = rngs(dut, "gemm_random")
    shapes = [(1, 1, 1), (h.r, 1, h.c), (h.r + 1, 3, h.c + 1), (2 * h.r, h.r + h.c + 3, 2 * h.c),
              (3 * h.r - 1, 2 * (h.r + h.c), h.c - 1 or 1)]
    for m, k, n in shapes:
        mt, nt = g.tiles(m, h.r), g.tiles(n, h.c)
        a_base = rnd.randint(0, h.entries(s.BUF_A, h.r) - mt * k)
        b_base = rnd.randint(0, h.entries(s.BUF_B, h.c) - k * nt)
        c_base = rnd.randint(0, h.entries(s.BUF_C, 4 * h.c) - mt * h.r * nt)
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        await h.gemm(a, b, a_base, b_base, c_base)


@device_test()
async def gemm_edges(dut: Any, h: Harness) -> None:
    """Extremes (-128 x -128, 127 x -128), K = 0, MT = 0, NT = 0, out-of-range entries."""
    _, rng = rngs(dut, "gemm_edges")
    k = min(4 * (h.r + h.c), h.entries(s.BUF_A, h.r) // 2, h.entries(s.BUF_B, h.c) // 2)
    a = np.full((h.r, k), -128, dtype=np.int8)
    a[0] = 127
    b = np.full((k, h.c), -128, dtype=np.int8)
    b[:, 0] = 127
    await h.gemm(a, b)
    # Pre-fill C with a pattern, then K = 0 zeroes exactly its entries.
    c_ent = h.entries(s.BUF_C, 4 * h.c)
    count = min(4 * h.r + 2, c_ent - 1)
    pattern = rng.integers(-(2**31), 2**31, (count, h.c), dtype=np.int64).astype(np.int32)
    await h.write_bytes(s.BUF_C, 4 * h.c, 1, pattern.astype("<i4").tobytes())
    await h.cmd(s.OP_GEMM, [1, 1, 0, 0, 0, 1], expect=0)
    if 4 * h.r + 2 <= c_ent:
        await h.cmd(s.OP_GEMM, [2, 2, 0, 5, 7, 2], expect=0)
    await h.cmd(s.OP_GEMM, [0, 3, 5, 0, 0, 0], expect=0)
    await h.cmd(s.OP_GEMM, [3, 0, 5, 0, 0, 0], expect=0)
    await h.cmd(s.OP_GEMM, [0, 0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], expect=0)
    raw = await h.read_entries(s.BUF_C, 4 * h.c, 0, count + 1)
    assert raw == bytes(h.model.image[s.BUF_C][:len(raw)])
    a_ent, b_ent = h.entries(s.BUF_A, h.r), h.entries(s.BUF_B, h.c)
    bad = [[1, 1, 1, a_ent, 0, 0], [1, 1, 2, a_ent - 1, 0, 0], [1, 1, 1, 0, b_ent, 0],
           [1, 2, 1, 0, b_ent - 1, 0], [1, 1, 1, 0, 0, c_ent], [1, 1, 1, 0, 0, c_ent - h.r + 1],
           [0xFFFFFFFF, 1, 1, 0, 0, 0], [1, 1, 0xFFFFFFFF, 0, 0, 0],
           [0x10000, 0x10000, 0, 0, 0, 0], [1, 0xFFFFFFFF, 1, 0, 0, 0]]
    for args in bad:
        await h.cmd(s.OP_GEMM, args, expect=3)
    raw2 = await h.read_entries(s.BUF_C, 4 * h.c, 0, count + 1)
    assert raw2 == raw, "a rejected GEMM wrote C"


def _records(rnd: random.Random, n: int) -> tuple[list[int], list[int], list[int]]:
    mult, shift, bias = [], [], []
    for _ in range(n):
        kind = rnd.random()
        if kind < 0.5:
            mult.append(rnd.randint(2**30, 2**31 - 1))
            shift.append(rnd.randint(28, 45))
        elif kind < 0.8:
            mult.append(rnd.choice([0, 1, 2**31 - 1, rnd.randint(0, 2**31 - 1)]))
            shift.append(rnd.choice([0, 1, 2, 31, 32, 62, 63, rnd.randint(0, 63)]))
        else:
            mult.append(rnd.randint(1, 8))
            shift.append(rnd.randint(0, 4))
        bias.append(rnd.randint(-(2**31), 2**31 - 1))
    return mult, shift, bias


@device_test()
async def requant_random(dut: Any, h: Harness) -> None:
    """Random C, P records and flags; Q compared with golden.requantize."""
    rnd, rng = rngs(dut, "requant_random")
    c_ent, q_ent = h.entries(s.BUF_C, 4 * h.c), h.entries(s.BUF_Q, h.c)
    p_rec = h.entries(s.BUF_P, g.P_RECORD_BYTES)
    for trial in range(6):
        nt = rnd.randint(1, max(1, min(3, p_rec // h.c)))
        m = rnd.randint(1, max(1, min(2 * h.r + 1, c_ent // nt, q_ent // nt)))
        c_base = rnd.randint(0, c_ent - m * nt)
        q_base = rnd.randint(0, q_ent - m * nt)
        p_base = rnd.randint(0, p_rec - nt * h.c)
        x = rng.integers(-(2**31), 2**31, (m, nt * h.c), dtype=np.int64)
        if trial % 2:    # small values: ties and exact rounding matter
            x = rng.integers(-40, 40, (m, nt * h.c), dtype=np.int64)
        await h.write_bytes(s.BUF_C, 4 * h.c, c_base, x.astype("<i4").tobytes())
        mult, shift, bias = _records(rnd, nt * h.c)
        await h.write_bytes(s.BUF_P, g.P_RECORD_BYTES, p_base, g.pack_p(mult, shift, bias))
        flags = trial % 8
        zp = rnd.randint(-128, 127)
        await h.cmd(s.OP_REQUANT, [m, nt, zp & 0xFF | (rnd.getrandbits(8) << 8), flags,
                                   c_base, q_base, p_base], expect=0)
        got = g.unpack_q(await h.read_entries(s.BUF_Q, h.c, q_base, m * nt), m, nt * h.c, h.c)
        want = g.requantize(x, mult, shift, bias if flags & 4 else None, zp,
                            "half_even" if flags & 2 else "half_up", flags & 1)
        assert np.array_equal(got, want), f"REQUANT trial {trial} wrong"


@device_test()
async def requant_edges(dut: Any, h: Harness) -> None:
    """Ties both ways, shifts 0 / 63, multipliers 0 / 2^31-1, relu with zero points,
    saturation, bad records (status 3, nothing written), ranges, M = 0."""
    rnd, _ = rngs(dut, "requant_edges")
    c = h.c
    rows = [
        # (x, multiplier, shift, bias)
        (3, 1, 1, 0), (-3, 1, 1, 0), (5, 1, 1, 0), (-5, 1, 1, 0), (1, 1, 1, 0), (-1, 1, 1, 0),
        (6, 1, 2, 0), (-6, 1, 2, 0), (2**31 - 1, 2**31 - 1, 63, 2**31 - 1),
        (-(2**31), 2**31 - 1, 63, -(2**31)), (-(2**31), 2**31 - 1, 0, -(2**31)),
        (2**31 - 1, 2**31 - 1, 0, 0), (12345, 0, 0, 0), (-7, 3, 62, 5), (100, 1, 0, -300),
        (2**31 - 1, 2**31 - 1, 62, 2**31 - 1), (-200, 1, 0, 0), (200, 1, 0, 0),
    ]
    p_rec = h.entries(s.BUF_P, g.P_RECORD_BYTES)
    for start_i in range(0, len(rows), c):
        chunk = rows[start_i:start_i + c]
        chunk += [(0, 0, 0, 0)] * (c - len(chunk))
        x = np.array([[r[0] for r in chunk]], dtype=np.int64)
        mult, shift, bias = ([r[i] for r in chunk] for i in (1, 2, 3))
        p_base = rnd.randint(0, p_rec - c)
        await h.write_bytes(s.BUF_C, 4 * c, 0, x.astype("<i4").tobytes())
        await h.write_bytes(s.BUF_P, g.P_RECORD_BYTES, p_base, g.pack_p(mult, shift, bias))
        for flags in range(8):
            for zp in (0, -128, 127, -3):
                await h.cmd(s.OP_REQUANT, [1, 1, zp & 0xFF, flags, 0, 1, p_base], expect=0)
                q = await h.read_entries(s.BUF_Q, c, 1, 1)
                want = g.requantize(x, mult, shift, bias if flags & 4 else None, zp,
                                    "half_even" if flags & 2 else "half_up", flags & 1)
                assert q == want.tobytes(), f"REQUANT edges flags {flags} zp {zp}: {q!r}"
    # bad records: shift 64 / 255, negative multiplier -> status 3, Q unchanged
    before = await h.read_entries(s.BUF_Q, c, 0, 2)
    for mult, shift in ((1, 64), (1, 255), (-1, 3), (-(2**31), 0)):
        recs = g.pack_p([1] * (c - 1) + [mult], [0] * (c - 1) + [shift])
        await h.write_bytes(s.BUF_P, g.P_RECORD_BYTES, 0, recs)
        await h.cmd(s.OP_REQUANT, [1, 1, 0, 0, 0, 0, 0], expect=3)
    assert await h.read_entries(s.BUF_Q, c, 0, 2) == before
    c_ent, q_ent = h.entries(s.BUF_C, 4 * c), h.entries(s.BUF_Q, c)
    for args in ([1, 1, 0, 0, c_ent, 0, 0], [1, 1, 0, 0, 0, q_ent, 0],
                 [1, 1, 0, 0, 0, 0, p_rec - c + 1], [0xFFFFFFFF, 2, 0, 0, 0, 0, 0],
                 [1, 0xFFFFFFFF, 0, 0, 0, 0, 0]):
        await h.cmd(s.OP_REQUANT, args, expect=3)
    await h.cmd(s.OP_REQUANT, [0, 5, 0, 0, 0, 0, 0], expect=0)
    await h.cmd(s.OP_REQUANT, [5, 0, 0, 0, 0xFFFFFFFF, 0, 0], expect=0)


@device_test()
async def random_sequence(dut: Any, h: Harness) -> None:
    """A random mix of commands back to back, device and model in lock step."""
    rnd, _ = rngs(dut, "random_sequence")
    for _ in range(40):
        op = rnd.choice([1, 1, 2, 2, 3, 3, 4, 5, 9])
        if op in (1, 2):
            buf = rnd.randint(0, 4)
            depth = h.model.depth[buf]
            n = rnd.randint(0, 4)
            addr = rnd.randint(0, depth + 2)
            payload = [rnd.getrandbits(8 * h.w) for _ in range(n)] if op == 1 else []
            await h.cmd(op, [buf, addr, n], payload)
        elif op == 3:
            mt, nt, k = rnd.randint(0, 2), rnd.randint(0, 2), rnd.randint(0, h.r + h.c + 2)
            await h.cmd(op, [mt, nt, k, rnd.randint(0, 8), rnd.randint(0, 8),
                             rnd.randint(0, 8)])
        elif op == 4:
            # P holds random words: shifts over 63 or negative multipliers give status 3
            await h.cmd(op, [rnd.randint(0, 3), rnd.randint(0, 2), rnd.getrandbits(8),
                             rnd.getrandbits(3), rnd.randint(0, 8), rnd.randint(0, 8),
                             rnd.randint(0, 2)])
        else:
            await h.cmd(op, [])


ENV_PERF = "POLYHAL_FPGA_PERF"
ENV_PERF_SIZES = "POLYHAL_FPGA_PERF_SIZES"
ENV_PERF_OUT = "POLYHAL_FPGA_PERF_OUT"


def perf_sizes() -> list[int]:
    """The square GEMM sizes of the performance test (``$POLYHAL_FPGA_PERF_SIZES``,
    comma-separated; default 64 and 256)."""
    return [int(v) for v in os.environ.get(ENV_PERF_SIZES, "64,256").split(",") if v.strip()]


@device_test(skip=os.environ.get(ENV_PERF) != "1")
async def performance(dut: Any, h: Harness) -> None:
    """GEMM 64^3 and 256^3 (those the buffers hold): the cycles of the GEMM command
    alone against the contract (asserted at the device's 8 x 8, W = 128), its
    utilization MACs / (ROWS * COLS * cycles), end-to-end figures with the
    transfers, a REQUANT of the result, and simulator speed. Set
    ``$POLYHAL_FPGA_PERF_OUT`` to a path to get them as JSON."""
    _, rng = rngs(dut, "performance")
    out: dict[str, Any] = {"params": h.p}
    contract = (h.r, h.c, h.w) == (8, 8, 128)
    for size in perf_sizes():
        mt, nt = g.tiles(size, h.r), g.tiles(size, h.c)
        if (mt * size > h.entries(s.BUF_A, h.r) or size * nt > h.entries(s.BUF_B, h.c)
                or mt * h.r * nt > h.entries(s.BUF_C, 4 * h.c)):
            dut._log.info("GEMM %d^3 does not fit the buffers: skipped", size)
            out[str(size)] = "does not fit the buffers"
            continue
        a = rng.integers(-128, 128, (size, size), dtype=np.int8)
        b = rng.integers(-128, 128, (size, size), dtype=np.int8)
        t0, _ = await h.cmd(s.OP_STATUS, expect=0)
        await h.write_bytes(s.BUF_A, h.r, 0, g.pack_a(a, h.r))
        await h.write_bytes(s.BUF_B, h.c, 0, g.pack_b(b, h.c))
        wall = time.monotonic()
        st, _ = await h.cmd(s.OP_GEMM, [mt, nt, size, 0, 0, 0], expect=0)
        wall = time.monotonic() - wall
        got = g.unpack_c(await h.read_entries(s.BUF_C, 4 * h.c, 0, mt * h.r * nt),
                         size, size, h.c)
        t1, _ = await h.cmd(s.OP_STATUS, expect=0)
        assert np.array_equal(got, g.gemm_int8(a, b)), f"GEMM {size}^3 wrong"
        macs, pes = size ** 3, h.r * h.c
        total = t1.cycle - t0.cycle
        bound = g.gemm_cycle_bound(mt, nt, size, h.r, h.c)
        fig: dict[str, Any] = {
            "gemm_cycles": st.cycles, "bound": bound, "util_gemm": macs / (pes * st.cycles),
            "mac_beats": mt * nt * size, "end_to_end_cycles": total,
            "util_end_to_end": macs / (pes * total), "gemm_wall_s": wall,
            "gemm_cycles_per_s": st.cycles / wall}
        records = nt * h.c
        if (records <= h.entries(s.BUF_P, g.P_RECORD_BYTES)
                and size * nt <= h.entries(s.BUF_Q, h.c)):
            mult = [int(v) for v in rng.integers(2**30, 2**31, records)]
            shift = [int(v) for v in rng.integers(20, 30, records)]
            await h.write_bytes(s.BUF_P, g.P_RECORD_BYTES, 0, g.pack_p(mult, shift))
            rq, _ = await h.cmd(s.OP_REQUANT, [size, nt, 0, 1, 0, 0, 0], expect=0)
            q = g.unpack_q(await h.read_entries(s.BUF_Q, h.c, 0, size * nt), size, size, h.c)
            want = g.requantize(g.gemm_int8(a, b), mult[:size], shift[:size], relu=1)
            assert np.array_equal(q, want), f"REQUANT of GEMM {size}^3 wrong"
            fig.update(requant_cycles=rq.cycles, requant_entries=size * nt,
                       requant_entries_per_cycle=size * nt / rq.cycles,
                       requant_bound=g.requant_cycle_bound(size, nt, h.c, h.w))
            assert rq.cycles <= fig["requant_bound"], f"REQUANT {size} x {nt}: {fig}"
        out[str(size)] = fig
        dut._log.info("GEMM %d^3: %s", size, fig)
        if contract:
            assert st.cycles <= bound, f"GEMM {size}^3: {st.cycles} cycles > contract {bound}"
    path = os.environ.get(ENV_PERF_OUT)
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
