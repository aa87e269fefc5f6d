"""``cpu``, ``gpu-sim``, ``neuro``, ``fpga`` and ``template`` against the reference on
shapes the conformance recipes do not make.

For every op the device claims or takes decomposed, its samples in each dtype
class it computes differently (float32; int64; float16 and bfloat16, which
``cpu``'s loops widen to float32; bfloat16, which ``gpu-sim`` stores as 16 bits),
with one run-time input's shape changed (tests/op_samples.py: a dimension of 0,
1, 2, 3 or 5, one added, or the first dropped). Where the reference runs the graph, the
device must run it too and give the same results at the conformance tolerance.
(It found, on gpu-sim, a LayerNormalization scale of shape [1, 4] failing in the
plan and LRN's decomposition failing on an empty input; on neuro, a Delay whose
every spike arrives after a one-step run, and a SumPool2d over no channels.)
"""

from __future__ import annotations

import numpy as np
import pytest

import polyhal
from polyhal.conformance.tolerances import compare, tolerance_for
from polyhal.errors import PolyhalError, UnsupportedError
from polyhal.hal import open_device
from polyhal.ir.dtypes import DType
from polyhal.ops.registry import all_ops
from polyhal.runtime.placement import covers
from tests.op_samples import reference_cases

DTYPES = (DType.FLOAT32, DType.INT64, DType.FLOAT16, DType.BFLOAT16)
CASES = [*((device, dtype) for device in ("cpu", "gpu-sim") for dtype in DTYPES
           if (device, dtype) != ("gpu-sim", DType.FLOAT16)),  # bfloat16 covers 16-bit storage
         ("neuro", DType.FLOAT64), ("template", DType.FLOAT32), ("fpga", DType.INT8)]
"""Each about 2-30 s in CI; gpu-sim's simulated kernels take the longest."""


@pytest.mark.parametrize(("device", "dtype"), CASES,
                         ids=[f"{device}-{dtype.value}" for device, dtype in CASES])
def test_a_device_matches_the_reference_on_every_ops_shape_changed_samples(device, dtype):
    compared, wrong = 0, []
    opened = open_device(device)
    claimed = opened.capabilities
    for case in reference_cases(all_ops(), dtype, np.random.default_rng(0)):
        try:
            got = list(polyhal.compile(case.graph, device=opened, fallback=None)(*case.feeds)
                       .values())
        except UnsupportedError:
            if covers(claimed, case.graph):
                raise
            continue  # neither claimed (for every dtype it binds) nor decomposed
        except PolyhalError as error:
            wrong.append(f"{case.where}: refused ({type(error).__name__}: {error})")
            continue
        tolerance = tolerance_for(case.op.qualified_name,
                                  [DType.from_numpy(e.dtype) for e in case.expected])
        compared += 1
        for output, (actual, want) in enumerate(zip(got, case.expected, strict=True)):
            result = compare(np.asarray(actual), want, tolerance)
            if not result.ok:
                wrong.append(f"{case.where}: output {output}: {result.message}")
    assert not wrong, f"{len(wrong)} of {compared} differ:\n" + "\n".join(wrong[:20])
    assert compared > 30, f"only {compared} cases ran"
