"""LLVM IR helpers for the CPU adapter's register-blocked micro-kernels.

The micro-kernels (:mod:`.direct_conv`, :mod:`.packed_gemm`) are numba
intrinsics that emit LLVM IR over vector types of :data:`VECTOR_BYTES`, so that
their accumulators stay in registers (numba's own loop vectorizer cannot be
relied on to do that). The IR is target-independent: each kernel picks a vector
width and a tile that fit the registers of the CPU numba compiles for
(:func:`has_avx512`: 32 registers of 64 bytes, else AVX2's 16 of 32).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils

VECTOR_BYTES = 32
"""Bytes of one AVX2 register: 8 float32 or 4 float64 lanes."""
AVX512_VECTOR_BYTES = 64
"""Bytes of one AVX-512 register: 16 float32 or 8 float64 lanes."""


def compiled_features() -> frozenset[str]:
    """The CPU features numba compiles for: ``NUMBA_CPU_FEATURES`` where set, else
    the host's (as numba's JIT reads them)."""
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features

    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else (
        get_host_cpu_features())
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


def has_avx512() -> bool:
    """Whether numba's code may use AVX-512's 32 vector registers of 64 bytes (and
    the 32-byte ones among them, AVX-512VL)."""
    return {"avx512f", "avx512vl"} <= compiled_features()


class VectorCodegen:
    """LLVM IR helpers over one vector type: ``vector_bytes`` of the array's dtype."""

    def __init__(self, context: Any, builder: ir.IRBuilder, dtype: types.Float,
                 vector_bytes: int = VECTOR_BYTES) -> None:
        self.builder = builder
        self.width = vector_bytes * 8 // dtype.bitwidth
        self.vector = ir.VectorType(context.get_value_type(dtype), self.width)
        self.i32, self.i64 = ir.IntType(32), ir.IntType(64)
        suffix = f"v{self.width}f{dtype.bitwidth}"
        self.fmuladd = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(self.vector, [self.vector] * 3),
            f"llvm.fmuladd.{suffix}")
        mask = ir.VectorType(ir.IntType(1), self.width)
        self.masked_store = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [self.vector, self.vector.as_pointer(), self.i32,
                                            mask]),
            f"llvm.masked.store.{suffix}.p0")
        self.masked_load = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(self.vector, [self.vector.as_pointer(), self.i32, mask,
                                          self.vector]),
            f"llvm.masked.load.{suffix}.p0")

    def accumulators(self, rows: int, vectors: int, initial: ir.Value, offset: ir.Value
                     ) -> list[list[ir.Value]]:
        """``rows`` lists of ``vectors`` stack slots of the vector type (LLVM keeps a
        tile's accumulators in registers), each row starting from the ``vectors``
        vectors at ``initial + offset`` (a bias)."""
        slots = [[cgutils.alloca_once(self.builder, self.vector) for _ in range(vectors)]
                 for _ in range(rows)]
        for row in slots:
            for j, slot in enumerate(row):
                self.builder.store(
                    self.load_vector(initial, self.add(offset, self.const(j * self.width))), slot)
        return slots

    def multiply_add(self, slots: list[ir.Value], spread: ir.Value,
                     weights: list[ir.Value]) -> None:
        """Each ``slot += spread * weight`` (one ``fmuladd`` per vector)."""
        builder = self.builder
        for weight, slot in zip(weights, slots, strict=True):
            builder.store(builder.call(self.fmuladd, [spread, weight, builder.load(slot)]),
                          slot)

    def relu_if(self, value: ir.Value, relu: ir.Value) -> ir.Value:
        """``max(value, 0)`` lane by lane when ``relu`` is true, else ``value``; NaN stays
        NaN (an unordered compare is true for it)."""
        zero = ir.Constant(self.vector, None)
        positive = self.builder.fcmp_unordered(">", value, zero)
        return self.builder.select(relu, self.builder.select(positive, value, zero), value)

    def const(self, value: int) -> ir.Constant:
        return ir.Constant(self.i64, value)

    def add(self, *terms: ir.Value) -> ir.Value:
        total = terms[0]
        for term in terms[1:]:
            total = self.builder.add(total, term)
        return total

    def mul(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.builder.mul(a, b)

    def vector_at(self, pointer: ir.Value, offset: ir.Value) -> ir.Value:
        """``pointer + offset`` as a pointer to a vector."""
        element = self.builder.gep(pointer, [offset], inbounds=True)
        return self.builder.bitcast(element, self.vector.as_pointer())

    def load_vector(self, pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return self.builder.load(self.vector_at(pointer, offset), align=1)

    def splat(self, value: ir.Value) -> ir.Value:
        """A vector of ``width`` copies of ``value``."""
        zeros = ir.Constant(ir.VectorType(self.i32, self.width), [0] * self.width)
        first = self.builder.insert_element(ir.Constant(ir.VectorType(value.type, self.width),
                                                        None), value, ir.Constant(self.i32, 0))
        return self.builder.shuffle_vector(first, first, zeros)

    def first_lanes(self, count: ir.Value) -> ir.Value:
        """The mask of the first ``count`` lanes."""
        lanes = ir.Constant(ir.VectorType(self.i64, self.width), list(range(self.width)))
        return self.builder.icmp_signed("<", lanes, self.splat(count))

    def load_lanes(self, pointer: ir.Value, offset: ir.Value, count: ir.Value) -> ir.Value:
        """The first ``count`` values at ``pointer + offset`` (zeros in the other lanes):
        nothing past them is read."""
        return self.builder.call(self.masked_load, [
            self.vector_at(pointer, offset), ir.Constant(self.i32, 1), self.first_lanes(count),
            ir.Constant(self.vector, None)])

    def store_lanes(self, value: ir.Value, pointer: ir.Value, offset: ir.Value,
                    count: ir.Value) -> None:
        """Stores the first ``count`` lanes of ``value`` (all when ``count >= width``)."""
        builder, target = self.builder, self.vector_at(pointer, offset)
        whole = builder.icmp_signed(">=", count, self.const(self.width))
        with builder.if_else(whole) as (full, partial):
            with full:
                builder.store(value, target, align=1)
            with partial:
                builder.call(self.masked_store, [value, target, ir.Constant(self.i32, 1),
                                                 self.first_lanes(count)])
