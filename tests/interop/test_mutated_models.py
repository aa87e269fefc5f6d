"""ONNX models mutated by the model-file fuzzer (``scripts/fuzz``), on ``cpu``.

Where a mutated model loads and runs on the reference, ``cpu`` must run it too and
give the same results, within the fuzzer's time limit. Half the cases start from
ONNX's own node test cases, so every op's attribute handling is reached. (That any
mutated file of any format is answered with a ``PolyhalError`` or runs is
``tests/test_fuzz_model_files.py``'s.) Found this way before: an LRN ``size`` of 2**32
made ``cpu`` loop and allocate per unit of size.
"""

from __future__ import annotations

import numpy as np
import pytest

import polyhal
from polyhal.errors import PolyhalError
from polyhal.interop.loading import load_model
from polyhal.ir import use_limits
from polyhal.reference import run

pytest.importorskip("onnx")

CASES_PER_SEED = 200


def same_results(actual: list[np.ndarray], expected: list[np.ndarray]) -> bool:
    for a, b in zip(actual, expected, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fcV":  # V: ml_dtypes' 16- and 8-bit floats; complex holds all
            a, b = a.astype(np.complex128), b.astype(np.complex128)
            if not np.allclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True):
                return False
        elif not np.array_equal(a, b):
            return False
    return True


@pytest.mark.parametrize("seed", range(4))
def test_mutated_onnx_models_that_run_give_the_reference_results_on_cpu(fuzzer, tmp_path,
                                                                        seed):
    ran = 0
    for index in range(CASES_PER_SEED):
        case = fuzzer.make_case("onnx", seed, index)
        path = fuzzer.write_files(case, tmp_path / f"case-{index}")
        where = f"case {case.id} (from {case.base}: {'; '.join(case.mutations)})"
        with use_limits(fuzzer.FUZZ_LIMITS), fuzzer.time_limit(fuzzer.DEFAULT_TIME_LIMIT_S):
            try:
                graph = load_model(path)
                inputs = fuzzer.random_inputs(graph, np.random.default_rng(index))
                if inputs is None:
                    continue
                expected = list(run(graph, *inputs).values())
            except PolyhalError:
                continue  # refused: the fuzzer's tests check how
            try:
                actual = list(polyhal.compile(graph, device="cpu")(*inputs).values())
            except Exception as exc:
                raise AssertionError(f"{where}: the reference ran it, cpu raised "
                                     f"{type(exc).__name__}: {exc}") from exc
        assert same_results(actual, expected), f"{where}: cpu and reference differ"
        ran += 1
    assert ran > 0
    print(f"seed {seed}: {ran} of {CASES_PER_SEED} mutated models ran on both")
