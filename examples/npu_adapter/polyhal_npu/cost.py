"""The NPU's cycle model: what each node would cost on the hardware.

A node takes ``max(compute, memory) + launch`` cycles: compute is its
multiply-accumulates (matrix unit) or elements (vector unit) over the unit's
rate for its dtype, memory is the bytes it reads and writes over the memory
bandwidth, and ``launch`` is a fixed overhead per node. A 2:4-sparse weight
halves the MACs issued (the matrix unit skips the pruned half) and is read
compressed: half the values plus a 2-bit index each.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from polyhal.errors import UnsupportedError


@dataclass(frozen=True)
class NpuConfig:
    """The simulated device's rates; ``open(index, **fields)`` overrides them."""

    clock_hz: float = 1.0e9
    macs_per_cycle: dict[str, int] = field(default_factory=lambda: {
        "int8": 4096, "float16": 2048, "float32": 512})
    """Dense multiply-accumulates per cycle of the matrix unit, per operand dtype."""
    vector_lanes: int = 256
    """Elements per cycle of the vector unit (Add, Mul, Relu)."""
    bytes_per_cycle: int = 128
    """Memory bandwidth."""
    launch_cycles: int = 32
    """Fixed cost of issuing one node."""

    @classmethod
    def from_options(cls, options: dict[str, object]) -> NpuConfig:
        """A config from ``open()`` options; an unknown option is an UnsupportedError."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise UnsupportedError(f"npu: unknown option(s) {', '.join(unknown)} (known: "
                                   f"{', '.join(sorted(known))})")
        return cls(**options)  # type: ignore[arg-type]


@dataclass
class NodeCost:
    """What one node costs: cycles and the work behind them."""

    cycles: int
    macs: int = 0
    """Multiply-accumulates issued."""
    sparse_macs: int = 0
    """Of those, issued in 2:4-sparse mode."""
    skipped_macs: int = 0
    """Multiply-accumulates the sparse mode did not issue (the pruned half)."""
    vector_ops: int = 0
    bytes: int = 0


def matmul_cost(config: NpuConfig, dtype: str, batch: int, m: int, k: int, n: int,
                read_bytes: int, write_bytes: int, sparse: bool) -> NodeCost:
    """A MatMul of ``batch`` products ``[m, k] @ [k, n]``; ``sparse``: a 2:4 weight."""
    dense = batch * m * k * n
    issued = dense // 2 if sparse else dense
    compute = -(-issued // config.macs_per_cycle[dtype])
    moved = read_bytes + write_bytes
    memory = -(-moved // config.bytes_per_cycle)
    return NodeCost(max(compute, memory) + config.launch_cycles, macs=issued,
                    sparse_macs=issued if sparse else 0,
                    skipped_macs=dense - issued, bytes=moved)


def vector_cost(config: NpuConfig, elements: int, read_bytes: int,
                write_bytes: int) -> NodeCost:
    """An elementwise node producing ``elements`` values."""
    moved = read_bytes + write_bytes
    compute = -(-elements // config.vector_lanes)
    memory = -(-moved // config.bytes_per_cycle)
    return NodeCost(max(compute, memory) + config.launch_cycles, vector_ops=elements,
                    bytes=moved)


def total(costs: list[NodeCost], config: NpuConfig) -> dict[str, float]:
    """The counters of a run: sums over its nodes, and the modelled time."""
    cycles = sum(c.cycles for c in costs)
    return {"cycles": float(cycles), "macs": float(sum(c.macs for c in costs)),
            "sparse_macs": float(sum(c.sparse_macs for c in costs)),
            "skipped_macs": float(sum(c.skipped_macs for c in costs)),
            "vector_ops": float(sum(c.vector_ops for c in costs)),
            "bytes": float(sum(c.bytes for c in costs)),
            "modelled_s": cycles / config.clock_hz}


def nbytes(array: np.ndarray) -> int:
    """Bytes of an operand as the device stores it."""
    return int(np.asarray(array).nbytes)
