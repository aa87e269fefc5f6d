"""L0 bring-up: buffers round-trip every claimed dtype, trivial graphs compile
and run, and a device refuses what it does not claim with UnsupportedError."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import numpy as np

from polyhal.conformance.cases import Case, op_case
from polyhal.conformance.execute import grade, run_on_device
from polyhal.conformance.profiles import Profile
from polyhal.conformance.recipes import recipe_for
from polyhal.conformance.recipes.base import values
from polyhal.errors import UnsupportedError
from polyhal.hal.capabilities import Capabilities
from polyhal.hal.contract import Device
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import all_ops, get_op

from .l1 import covered, primary_dtypes


def _buffer(dtype: DType, kind: str, large: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    if kind == "empty":
        return values(dtype, (0, 3), rng)
    if kind == "scalar":
        return values(dtype, (), rng)
    if kind == "large":
        return values(dtype, (large,), rng)
    return values(dtype, (6, 8), rng)[::2, ::3].T  # non-contiguous: strided and transposed


def _round_trip(array: np.ndarray, device: Device) -> tuple[bool, str]:
    back = device.download(device.upload(array))
    same = (back.dtype == array.dtype and back.shape == array.shape
            and np.ascontiguousarray(back).tobytes() == np.ascontiguousarray(array).tobytes())
    return same, "" if same else f"downloaded {back.dtype}{list(back.shape)} differs from upload"


def _refuses(case: Case, device: Device) -> tuple[bool, str]:
    try:
        actual = run_on_device(device, case.graph, case.inputs)  # type: ignore[arg-type]
    except UnsupportedError:
        return True, ""
    result = grade(actual, case.expected, case.tolerance)  # type: ignore[arg-type]
    return result.ok, ("" if result.ok else "ran an unclaimed case without UnsupportedError and "
                       f"got wrong results: {result.message}")


def _first_case(caps: Capabilities, claimed: bool, dtype: DType | None = None) -> Case | None:
    """A rank-2 (or rank-1) case of the first claimed op, in a dtype (un)claimed as asked
    (core ops first, then the other domains)."""
    for op in sorted(all_ops(), key=lambda op: (op.domain != "core", op.domain, op.name)):
        if op.qualified_name not in caps.ops:  # an unclaimed op is not an unclaimed dtype
            continue
        dtypes = primary_dtypes(op, caps) if claimed else sorted(
            op.type_vars[op.inputs[0].type_var] - caps.ops[op.qualified_name],
            key=lambda d: d.value) if op.inputs else []
        for d in dtypes if dtype is None else [t for t in dtypes if t == dtype]:
            for shape_class in ("rank2", "rank1"):
                sample = recipe_for(op)(op, d, shape_class, np.random.default_rng(0))
                if sample is None:
                    continue
                case = op_case(op, d, shape_class, 0, sample, level="L0")
                if covered(caps, case) == claimed:
                    return case
    return None


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The L0 cases of a device with ``caps``."""
    dtypes = sorted(frozenset().union(*caps.ops.values()), key=lambda d: d.value)
    for dtype in dtypes:
        for kind in ("empty", "scalar", "large", "non-contiguous"):
            array = _buffer(dtype, kind, profile.large_elements)
            yield Case(f"L0/buffers/{dtype.value}/{kind}", "L0", None, dtype.value, kind,
                       check=partial(_round_trip, array))
    for dtype in dtypes:
        case = _first_case(caps, True, dtype)
        if case is not None:
            case.id = f"L0/compile/{case.op}/{dtype.value}/trivial"
            case.shape_class = "trivial"
            yield case
    for label, case in (("unclaimed-op", _unclaimed_op(caps)),
                        ("unclaimed-dtype", _first_case(caps, False))):
        if case is not None:
            yield Case(f"L0/errors/{label}", "L0", case.op, case.dtype, label,
                       graph=case.graph, inputs=case.inputs, expected=case.expected,
                       tolerance=case.tolerance, check=partial(_refuses, case))


def _unclaimed_op(caps: Capabilities) -> Case | None:
    for name in ("core.Tanh", "core.Sigmoid", "core.Exp", "core.Neg", "core.Abs"):
        if name not in caps.ops:
            op = get_op(name.split(".")[1])
            sample = recipe_for(op)(op, DType.FLOAT32, "rank2", np.random.default_rng(0))
            if sample is not None:
                return op_case(op, DType.FLOAT32, "rank2", 0, sample, level="L0")
    return None
