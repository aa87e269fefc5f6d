"""Bench of polyhal_gemm_engine: the GEMM sequencer and its array, with the A, B
and C buffers modelled in Python as the device's RAMs (registered reads of one
cycle, lane writes), checked against golden.DeviceModel.gemm: the status, every
C word (including the ones it must not touch), the MAC-beat pulses, ``busy``
and the cycle bound."""

from __future__ import annotations

import random
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge

from polyhal.simulators.fpga import golden as g
from polyhal.simulators.fpga.benches.common import known, params, reset, rngs, start_clock

A, B, C = 0, 1, 2


class Engine:
    """The engine beside a golden.DeviceModel whose A, B and C images are its RAMs."""

    def __init__(self, dut: Any) -> None:
        self.dut = dut
        p = params()
        self.p = p
        self.r, self.c, self.w = p["ROWS"], p["COLS"], p["WORD_BYTES"]
        self.model = g.DeviceModel(self.r, self.c, self.w, p["A_WORDS"], p["B_WORDS"],
                                   p["C_WORDS"], 1, 1)
        self.rams = g.DeviceModel(self.r, self.c, self.w, p["A_WORDS"], p["B_WORDS"],
                                  p["C_WORDS"], 1, 1)      # what the engine really did
        self.rnd = random.Random(0)
        self.a_addr = self.b_addr = 0

    def entries(self, buf: int, size: int) -> int:
        """Entries of ``size`` bytes in buffer ``buf``."""
        return self.model.depth[buf] * self.w // size

    def word(self, buf: int, addr: int) -> int:
        """Word ``addr`` of a RAM image; random garbage beyond its depth."""
        if addr >= self.rams.depth[buf]:
            return self.rnd.getrandbits(8 * self.w)
        return int.from_bytes(self.rams.image[buf][addr * self.w:(addr + 1) * self.w], "little")

    def cycle(self) -> None:
        """At a falling edge: the RAMs' outputs for the addresses of the last edge,
        and the C write the engine presents for the next edge."""
        d = self.dut
        d.a_rdata.value = self.word(A, self.a_addr)
        d.b_rdata.value = self.word(B, self.b_addr)
        # (Addresses are X until the first command sets the engine's counters.)
        self.a_addr = known(d.a_raddr.value)
        self.b_addr = known(d.b_raddr.value)
        we = d.c_we.value.to_unsigned()
        if we:
            addr = d.c_waddr.value.to_unsigned()
            assert addr < self.rams.depth[C], f"C write to word {addr}"
            data = d.c_wdata.value.to_unsigned().to_bytes(self.w, "little")
            lane = 4 * self.c
            for i in range(self.w // lane):
                if we >> i & 1:
                    off = addr * self.w + i * lane
                    self.rams.image[C][off:off + lane] = data[i * lane:(i + 1) * lane]

    def fill(self, buf: int, data: bytes) -> None:
        """The same contents in the model's and the RAMs' images."""
        self.model.image[buf][:] = data
        self.rams.image[buf][:] = data

    async def gemm(self, mt: int, nt: int, k: int, a_base: int, b_base: int, c_base: int,
                   ) -> tuple[int, int]:
        """One command; checks status, C, MAC beats and busy; (status, cycles)."""
        d = self.dut
        args = [mt, nt, k, a_base, b_base, c_base]
        beats_before = self.model.mac_beats
        want = self.model.gemm(*(int(v) & 0xFFFFFFFF for v in args))
        for name, v in zip(("arg_mt", "arg_nt", "arg_k", "arg_a_base", "arg_b_base",
                            "arg_c_base"), args, strict=True):
            getattr(d, name).value = int(v) & 0xFFFFFFFF
        d.start.value = 1
        assert not int(d.busy.value), "busy before start"
        cycles, beats = 0, 0
        while True:
            await FallingEdge(d.clk)
            d.start.value = 0
            cycles += 1
            self.cycle()
            beats += int(d.mac_beat.value)
            if int(d.done.value):
                break
            assert int(d.busy.value), f"GEMM {args}: busy low before done"
            assert cycles < 100 + 4 * (mt * nt * max(k, 1) + 64), f"GEMM {args}: no done"
        status = d.status.value.to_unsigned()
        where = f"GEMM {args}"
        assert status == want, f"{where}: status {status}, model {want}"
        assert beats == self.model.mac_beats - beats_before, f"{where}: {beats} MAC beats"
        for _ in range(2):           # the last C write lands; nothing else follows
            await FallingEdge(d.clk)
            self.cycle()
            assert not int(d.busy.value) and not int(d.done.value), f"{where}: busy after done"
        assert self.rams.image[C] == self.model.image[C], f"{where}: C differs from the model"
        if status == 0 and mt and nt:
            # Tiles of max(K, ROWS, COLS) beats back to back, then the drain; the
            # device's contract (golden.gemm_cycle_bound) adds the decoder's cycles.
            bound = mt * nt * max(k, self.r, self.c) + self.r + self.c + 16
            assert cycles <= bound, f"{where}: {cycles} cycles > {bound}"
            assert cycles <= g.gemm_cycle_bound(mt, nt, k, self.r, self.c)
        return status, cycles


async def start(dut: Any) -> Engine:
    """Clock, reset, RAM images of random contents; returns at a falling edge."""
    start_clock(dut)
    e = Engine(dut)
    dut.start.value = 0
    dut.rst.value = 1
    await reset(dut)
    rnd, rng = rngs(dut, "gemm_engine_images")
    e.rnd = rnd
    for buf in (A, B, C):
        e.fill(buf, rng.integers(0, 256, len(e.model.image[buf]), dtype=np.uint8).tobytes())
    e.cycle()
    return e


def _pack(e: Engine, a: np.ndarray, b: np.ndarray, a_base: int, b_base: int) -> None:
    for buf, size, base, data in ((A, e.r, a_base, g.pack_a(a, e.r)),
                                  (B, e.c, b_base, g.pack_b(b, e.c))):
        image = bytearray(e.model.image[buf])
        g.place(image, size, base, data)
        e.fill(buf, bytes(image))


@cocotb.test()
async def random_gemms(dut: Any) -> None:
    """Random shapes (K below, at and above max(ROWS, COLS)), random bases, random
    operands with -128 / 127 extremes; back-to-back commands."""
    e = await start(dut)
    rnd, rng = rngs(dut, "gemm_engine_random")
    r, c = e.r, e.c
    a_ent, b_ent, c_ent = e.entries(A, r), e.entries(B, c), e.entries(C, 4 * c)
    done = 0
    while done < 10:
        mt, nt = rnd.randint(1, 3), rnd.randint(1, 3)
        k = rnd.choice([1, 2, max(r, c), r + c, rnd.randint(1, 3 * (r + c))])
        if mt * k > a_ent or k * nt > b_ent or mt * r * nt > c_ent:
            continue
        a = rng.integers(-128, 128, (mt * r, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, nt * c), dtype=np.int8)
        a[rng.random(a.shape) < 0.1] = -128
        b[rng.random(b.shape) < 0.1] = -128
        a_base = rnd.randint(0, a_ent - mt * k)
        b_base = rnd.randint(0, b_ent - k * nt)
        c_base = rnd.randint(0, c_ent - mt * r * nt)
        _pack(e, a, b, a_base, b_base)
        status, cycles = await e.gemm(mt, nt, k, a_base, b_base, c_base)
        assert status == 0
        dut._log.info("GEMM MT=%d NT=%d K=%d: %d cycles", mt, nt, k, cycles)
        done += 1


@cocotb.test()
async def extremes_and_empty(dut: Any) -> None:
    """-128 x -128 over the longest K the buffers hold, K = 0 (zeros written),
    MT = 0 and NT = 0 (nothing written, status 0, whatever the bases)."""
    e = await start(dut)
    rngs(dut, "gemm_engine_extremes")
    r, c = e.r, e.c
    k = min(e.entries(A, r), e.entries(B, c))
    a = np.full((r, k), -128, np.int8)
    b = np.full((k, c), -128, np.int8)
    a[0] = 127
    b[:, 0] = 127
    _pack(e, a, b, 0, 0)
    assert (await e.gemm(1, 1, k, 0, 0, 0))[0] == 0
    c_ent = e.entries(C, 4 * c)
    for args in ([1, 1, 0, 0, 0, 1], [2, 1, 0, 7, 9, c_ent - 2 * r],
                 [1, 2, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0], [0, 3, 5, 0, 0, 0], [3, 0, 5, 0, 0, 0],
                 [0, 0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], [0, 1, 0, 0, 0, 0xFFFFFFFF]):
        assert (await e.gemm(*args))[0] == 0, f"GEMM {args}"


@cocotb.test()
async def out_of_range(dut: Any) -> None:
    """Any entry outside its buffer: status 3 and C untouched (ends, overflowing
    products of the arguments, 2^32 - 1 everywhere)."""
    e = await start(dut)
    rngs(dut, "gemm_engine_out_of_range")
    r, c = e.r, e.c
    a_ent, b_ent, c_ent = e.entries(A, r), e.entries(B, c), e.entries(C, 4 * c)
    bad = [[1, 1, 1, a_ent, 0, 0], [1, 1, 2, a_ent - 1, 0, 0], [1, 1, 1, 0, b_ent, 0],
           [1, 2, 1, 0, b_ent - 1, 0], [1, 1, 1, 0, 0, c_ent], [1, 1, 1, 0, 0, c_ent - r + 1],
           [0xFFFFFFFF, 1, 1, 0, 0, 0], [1, 1, 0xFFFFFFFF, 0, 0, 0],
           [0x10000, 0x10000, 0, 0, 0, 0], [1, 0xFFFFFFFF, 1, 0, 0, 0],
           [0xFFFFFFFF] * 6, [1, 1, 0, 0, 0, c_ent - r + 1]]
    for args in bad:
        assert (await e.gemm(*args))[0] == 3, f"GEMM {args}"
