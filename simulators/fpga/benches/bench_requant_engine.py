"""Bench of polyhal_requant_engine: the REQUANT sequencer with the C, P and Q
buffers modelled in Python as the device's RAMs (registered reads of one cycle,
Q lane writes), checked against golden.DeviceModel.requant: the status, every Q
word (including the ones it must not touch), ``busy`` and the cycle count."""

from __future__ import annotations

import random
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge

from polyhal.simulators.fpga import golden as g
from polyhal.simulators.fpga.benches.common import known, params, reset, rngs, start_clock

C, P, Q = 2, 3, 4
INT32 = (-(2**31), 2**31 - 1)


class Engine:
    """The engine beside a golden.DeviceModel whose C, P and Q images are its RAMs."""

    def __init__(self, dut: Any) -> None:
        self.dut = dut
        p = params()
        self.c, self.w = p["COLS"], p["WORD_BYTES"]
        dims = (1, self.c, self.w, 1, 1, p["C_WORDS"], p["Q_WORDS"], p["P_WORDS"])
        self.model = g.DeviceModel(*dims)
        self.rams = g.DeviceModel(*dims)           # what the engine really did
        self.rnd = random.Random(0)
        self.c_addr = self.p_addr = 0

    def entries(self, buf: int, size: int) -> int:
        """Entries (records) of ``size`` bytes in buffer ``buf``."""
        return self.model.depth[buf] * self.w // size

    def word(self, buf: int, addr: int) -> int:
        """Word ``addr`` of a RAM image; random garbage beyond its depth."""
        if addr >= self.rams.depth[buf]:
            return self.rnd.getrandbits(8 * self.w)
        return int.from_bytes(self.rams.image[buf][addr * self.w:(addr + 1) * self.w], "little")

    def cycle(self) -> None:
        """At a falling edge: the RAMs' outputs for the addresses of the last edge,
        and the Q write the engine presents for the next edge."""
        d = self.dut
        d.c_rdata.value = self.word(C, self.c_addr)
        d.p_rdata.value = self.word(P, self.p_addr)
        self.c_addr = known(d.c_raddr.value)
        self.p_addr = known(d.p_raddr.value)
        we = known(d.q_we.value)
        if we:
            addr = d.q_waddr.value.to_unsigned()
            assert addr < self.rams.depth[Q], f"Q write to word {addr}"
            data = d.q_wdata.value.to_unsigned().to_bytes(self.w, "little")
            for i in range(self.w // self.c):
                if we >> i & 1:
                    off = addr * self.w + i * self.c
                    self.rams.image[Q][off:off + self.c] = data[i * self.c:(i + 1) * self.c]

    def put(self, buf: int, size: int, base: int, data: bytes) -> None:
        """Place entries in the model's and the RAMs' images."""
        for m in (self.model, self.rams):
            g.place(m.image[buf], size, base, data)

    async def requant(self, m: int, nt: int, zp: int, flags: int, c_base: int, q_base: int,
                      p_base: int) -> tuple[int, int]:
        """One command; checks status, Q and busy; (status, cycles)."""
        d = self.dut
        args = [m, nt, zp, flags, c_base, q_base, p_base]
        want = self.model.requant(*(int(v) & 0xFFFFFFFF for v in args))
        for name, v, bits in (("arg_m", m, 32), ("arg_nt", nt, 32), ("arg_zp", zp, 8),
                              ("arg_flags", flags, 3), ("arg_c_base", c_base, 32),
                              ("arg_q_base", q_base, 32), ("arg_p_base", p_base, 32)):
            getattr(d, name).value = int(v) & ((1 << bits) - 1)
        d.start.value = 1
        assert not int(d.busy.value), "busy before start"
        cycles = 0
        where = f"REQUANT {args}"
        while True:
            await FallingEdge(d.clk)
            d.start.value = 0
            cycles += 1
            self.cycle()
            if int(d.done.value):
                break
            assert int(d.busy.value), f"{where}: busy low before done"
            assert cycles < 200 + 4 * (m * nt + nt * self.c), f"{where}: no done"
        status = d.status.value.to_unsigned()
        assert status == want, f"{where}: status {status}, model {want}"
        for _ in range(2):
            await FallingEdge(d.clk)
            self.cycle()
            assert not int(d.busy.value) and not int(d.done.value), f"{where}: busy after done"
        assert self.rams.image[Q] == self.model.image[Q], f"{where}: Q differs from the model"
        if status == 0 and m and nt:
            bound = g.requant_cycle_bound(m, nt, self.c, self.w)
            assert cycles <= bound, f"{where}: {cycles} cycles > {bound}"
        return status, cycles


async def start(dut: Any) -> Engine:
    """Clock, reset, RAM images of random contents with valid P records."""
    start_clock(dut)
    e = Engine(dut)
    dut.start.value = 0
    dut.rst.value = 1
    await reset(dut)
    rnd, rng = rngs(dut, "requant_engine_images")
    e.rnd = rnd
    for buf in (C, Q):
        data = rng.integers(0, 256, len(e.model.image[buf]), dtype=np.uint8).tobytes()
        e.put(buf, 1, 0, data)
    n = e.entries(P, g.P_RECORD_BYTES)
    e.put(P, g.P_RECORD_BYTES, 0, g.pack_p(*records(rnd, n)))
    e.cycle()
    return e


def records(rnd: random.Random, n: int) -> tuple[list[int], list[int], list[int]]:
    """``n`` valid P records: realistic, extreme and small parameters."""
    mult, shift, bias = [], [], []
    for _ in range(n):
        kind = rnd.random()
        if kind < 0.4:
            mult.append(rnd.randint(2**30, 2**31 - 1))
            shift.append(rnd.randint(28, 45))
        elif kind < 0.7:
            mult.append(rnd.choice([0, 1, 2**31 - 1, rnd.randint(0, 2**31 - 1)]))
            shift.append(rnd.choice([0, 1, 31, 32, 62, 63, rnd.randint(0, 63)]))
        else:
            mult.append(rnd.randint(1, 8))
            shift.append(rnd.randint(0, 4))
        bias.append(rnd.choice([*INT32, 0, rnd.randint(*INT32), rnd.randint(-9, 9)]))
    return mult, shift, bias


@cocotb.test()
async def random_requants(dut: Any) -> None:
    """Random M, NT, flags, zero points and bases; C of large and of small values
    (ties); one entry per cycle once the records of a column tile are loaded."""
    e = await start(dut)
    rnd, rng = rngs(dut, "requant_engine_random")
    c = e.c
    c_ent, q_ent = e.entries(C, 4 * c), e.entries(Q, c)
    p_rec = e.entries(P, g.P_RECORD_BYTES)
    for trial in range(16):
        nt = rnd.randint(1, max(1, min(3, p_rec // c)))
        m = rnd.choice([1, 2, c, rnd.randint(1, max(1, min(3 * c, c_ent // nt, q_ent // nt)))])
        m = min(m, c_ent // nt, q_ent // nt)
        c_base = rnd.randint(0, c_ent - m * nt)
        q_base = rnd.randint(0, q_ent - m * nt)
        p_base = rnd.randint(0, p_rec - nt * c)
        lo, hi = (-40, 40) if trial % 2 else INT32
        x = rng.integers(lo, hi, (m, nt * c), endpoint=True, dtype=np.int64)
        e.put(C, 4 * c, c_base, x.astype("<i4").tobytes())
        e.put(P, g.P_RECORD_BYTES, p_base, g.pack_p(*records(rnd, nt * c)))
        flags = trial % 8
        zp = rnd.choice([0, -128, 127, rnd.randint(-128, 127)])
        status, cycles = await e.requant(m, nt, zp, flags, c_base, q_base, p_base)
        assert status == 0
        dut._log.info("REQUANT M=%d NT=%d: %d cycles", m, nt, cycles)


@cocotb.test()
async def bad_records_and_ranges(dut: Any) -> None:
    """Shift 64 / 255 or a negative multiplier in a used record: status 3, Q
    untouched (a bad record outside the used range is fine); entries out of range:
    status 3; M = 0 or NT = 0: status 0, nothing written, whatever the bases."""
    e = await start(dut)
    rnd, _ = rngs(dut, "requant_engine_bad")
    c = e.c
    c_ent, q_ent = e.entries(C, 4 * c), e.entries(Q, c)
    p_rec = e.entries(P, g.P_RECORD_BYTES)
    nt = max(1, min(2, p_rec // c - 1))
    for mult, shift in ((1, 64), (1, 255), (-1, 3), (INT32[0], 0), (1, 63)):
        for where in range(nt * c):
            mults, shifts, biases = records(rnd, nt * c)
            mults[where], shifts[where] = mult, shift
            e.put(P, g.P_RECORD_BYTES, 1, g.pack_p(mults, shifts, biases))
            status, _ = await e.requant(2, nt, 0, where % 8, 0, 1, 1)
            assert status == (0 if shift == 63 and mult >= 0 else 3)
    # a bad record just outside the used range
    mults, shifts, biases = records(rnd, nt * c + 2)
    shifts[0] = shifts[-1] = 200
    e.put(P, g.P_RECORD_BYTES, 0, g.pack_p(mults, shifts, biases))
    assert (await e.requant(3, nt, 5, 7, 2, 0, 1))[0] == 0
    for args in ([1, 1, 0, 0, c_ent, 0, 0], [1, 1, 0, 0, 0, q_ent, 0],
                 [1, 1, 0, 0, 0, 0, p_rec - c + 1], [0xFFFFFFFF, 2, 0, 0, 0, 0, 0],
                 [1, 0xFFFFFFFF, 0, 0, 0, 0, 0], [2, 1, 0, 0, c_ent - 1, 0, 0],
                 [2, 1, 0, 0, 0, q_ent - 1, 0], [0x10000, 0x10000, 0, 0, 0, 0, 0]):
        assert (await e.requant(*args))[0] == 3, f"REQUANT {args}"
    for args in ([0, 5, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0xFFFFFFFF, 0, 0],
                 [0, 0, 0, 7, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF]):
        assert (await e.requant(*args))[0] == 0, f"REQUANT {args}"
