"""L1: every claimed op x dtype x shape class, from the op recipes."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import numpy as np

from polyhal.conformance.cases import Case, op_case
from polyhal.conformance.profiles import Profile
from polyhal.conformance.recipes import recipe_for
from polyhal.hal.capabilities import Capabilities
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import OpDef, get_op
from polyhal.runtime.placement import covers


def primary_dtypes(op: OpDef, caps: Capabilities) -> list[DType]:
    """The claimed dtypes of ``op``'s first type variable, in a stable order."""
    claimed = caps.ops.get(op.qualified_name, frozenset())
    allowed = op.type_vars[op.inputs[0].type_var] if op.inputs else frozenset().union(
        *op.type_vars.values())
    return sorted(claimed & allowed, key=lambda d: d.value)


def covered(caps: Capabilities, case: Case) -> bool:
    """True when the device covers every node of the case's graph."""
    graph = case.graph
    return graph is not None and covers(caps, graph)


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L1 cases a device with ``caps`` must pass."""
    for name in caps.claimed_ops:
        domain, _, op_name = name.partition(".")
        op = get_op(op_name, domain)
        yield from op_cases(caps, op, primary_dtypes(op, caps), profile.shape_classes,
                            profile.seeds)


_shared: ContextVar[dict | None] = ContextVar("polyhal_l1_cases", default=None)


@contextlib.contextmanager
def sharing_op_cases() -> Iterator[None]:
    """Within the block, :func:`op_cases` makes the cases of each op, dtype, shape class
    and seeds once: L3 derives its op gradients from the same cases L1 grades, and made
    them all again. The cases kept are those the first call's capabilities cover, so a
    block is for one device's capabilities (one :func:`~..runner.generate_cases`)."""
    token = _shared.set({})
    try:
        yield
    finally:
        _shared.reset(token)


def op_cases(caps: Capabilities, op: OpDef, dtypes: Sequence[DType],
             shape_classes: Sequence[str], seeds: Sequence[int]) -> Iterator[Case]:
    """The covered L1 cases of ``op`` in ``dtypes`` x ``shape_classes`` x ``seeds``
    (shape classes the op's recipe has no sample for are left out)."""
    shared = _shared.get()
    for dtype in dtypes:
        for shape_class in shape_classes:
            if shared is None:
                yield from _class_cases(caps, op, dtype, shape_class, seeds)
                continue
            key = (op.qualified_name, dtype, shape_class, tuple(seeds))
            if key not in shared:
                shared[key] = list(_class_cases(caps, op, dtype, shape_class, seeds))
            yield from shared[key]


def _class_cases(caps: Capabilities, op: OpDef, dtype: DType, shape_class: str,
                 seeds: Sequence[int]) -> Iterator[Case]:
    make = recipe_for(op)
    for variant, seed in enumerate(seeds):
        rng = np.random.default_rng([seed, zlib_hash(f"{op.qualified_name}/"
                                                     f"{dtype.value}/{shape_class}")])
        sample = make(op, dtype, shape_class, rng)
        if sample is None:
            continue
        case = op_case(op, dtype, shape_class, variant, sample)
        if covered(caps, case):
            yield case


def zlib_hash(text: str) -> int:
    """A stable (process-independent) hash for seeding."""
    return zlib.crc32(text.encode())
