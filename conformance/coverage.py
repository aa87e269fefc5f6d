"""What to implement next: unclaimed ops ranked by the conformance cases they unlock.

``polyhal check-adapter NAME`` prints this ranking: for every op a device does not
claim, the number of L1 cases (in the given profile) that claiming it would add,
in the dtypes the device already claims (float32 when it claims none the op admits).
"""

from __future__ import annotations

from polyhal.conformance.levels.l1 import op_cases, primary_dtypes
from polyhal.conformance.profiles import get_profile
from polyhal.hal.capabilities import Capabilities
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef, all_ops


def _dtypes_to_claim(op: OpDef, claimed: frozenset[DType]) -> frozenset[DType]:
    """The dtypes a new claim of ``op`` would cover: the device's own dtypes the op admits,
    else float32 when the op admits it, else none."""
    allowed = frozenset().union(*op.type_vars.values())
    own = claimed & allowed
    if own:
        return own
    return frozenset({DType.FLOAT32}) & allowed


def next_ops(caps: Capabilities, profile: str = "ci", limit: int = 10
             ) -> list[tuple[str, int]]:
    """The ops ``caps`` does not claim, each with the number of L1 cases of ``profile``
    that claiming it would unlock, most first (ties by name), at most ``limit`` of them.

    An op is counted in the dtypes the device already claims that the op admits, or in
    float32 when there are none; ops that unlock no case are left out.

    >>> caps = Capabilities(ops={"Add": ["float32"]})
    >>> ranked = next_ops(caps, limit=3)
    >>> len(ranked) == 3 and all(count > 0 for _, count in ranked)
    True
    """
    settings = get_profile(profile)
    claimed = frozenset().union(*caps.ops.values()) if caps.ops else frozenset()
    counts: list[tuple[str, int]] = []
    for op in all_ops():
        if op.qualified_name in caps.ops:
            continue
        dtypes = _dtypes_to_claim(op, claimed)
        if not dtypes:
            continue
        widened = Capabilities(
            ops={**caps.ops, op.qualified_name: dtypes}, dynamic_shapes=caps.dynamic_shapes,
            precisions=caps.precisions, memory_bytes=caps.memory_bytes,
            max_rank=caps.max_rank, tags=caps.tags)
        try:
            count = sum(1 for _ in op_cases(widened, op, primary_dtypes(op, widened),
                                            settings.shape_classes, settings.seeds))
        except ImportError:  # its cases need an optional package not installed here (qiskit)
            continue
        if count:
            counts.append((op.qualified_name, count))
    counts.sort(key=lambda item: (-item[1], item[0]))
    return counts[:max(limit, 0)]
