"""The device's command protocol in numbers (docs/fpga.md, "Commands")."""

from __future__ import annotations

from enum import IntEnum


class Opcode(IntEnum):
    """Command opcodes (header field 0)."""

    WRITE = 1
    READ = 2
    GEMM = 3
    REQUANT = 4
    STATUS = 5


class BufferId(IntEnum):
    """On-chip buffers (WRITE/READ field 1)."""

    A = 0
    B = 1
    C = 2
    P = 3
    Q = 4


class Status(IntEnum):
    """Status codes (status field 1)."""

    OK = 0
    UNKNOWN_OPCODE = 1
    OUT_OF_RANGE = 2
    BAD_ARGUMENTS = 3


class RequantFlag(IntEnum):
    """REQUANT field 4 bits."""

    RELU = 1
    HALF_EVEN = 2
    BIAS = 4


BUFFER_WORDS = {BufferId.A: "A_WORDS", BufferId.B: "B_WORDS", BufferId.C: "C_WORDS",
                BufferId.P: "P_WORDS", BufferId.Q: "Q_WORDS"}
"""The parameter that sets each buffer's depth in words."""
