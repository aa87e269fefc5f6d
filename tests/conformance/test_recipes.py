"""Tests of the op recipes: every op has one, every sample it makes is valid (the
reference executor runs it), samples are deterministic, and together the shape
classes cover the classes and options the conformance suite relies on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyhal.conformance.cases import op_case
from polyhal.conformance.recipes import (
    RECIPES,
    SHAPE_CLASSES,
    OpSample,
    dtypes_for,
    generic,
    recipe_for,
    sample,
)
from polyhal.ir.dtypes import DType
from polyhal.ir.types import TensorType
from polyhal.ops import all_ops, get_op
from polyhal.ops.registry import OpDef

OPS = all_ops()
IDS = [op.qualified_name for op in OPS]

NO_SYMBOLIC_INPUT = {
    "core.Constant": "no inputs",
    "core.ConstantOfShape": "its one input is a shape, a constant",
    "core.Range": "its inputs are scalars (its symbolic sample has a run-time length)",
}
"""Ops none of whose inputs can carry a symbolic dim."""

NO_SPECIAL = {"core.Range": "non-finite start/limit/delta are errors",
              "quantum.Expectation": "non-finite angles are errors",
              "quantum.ExpectationVJP": "non-finite angles are errors"}
"""Float ops without a ``special`` sample."""

# Special values make kernels outside the elementwise family (Conv, MatMul, LRN, ...)
# warn about overflow or inf - inf; the results are the defined ones.
quiet = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def preferred_dtype(op: OpDef) -> DType:
    """float32 when the op takes it, else its first dtype."""
    dtypes = dtypes_for(op)
    return DType.FLOAT32 if DType.FLOAT32 in dtypes else dtypes[0]


def samples(op: OpDef, dtype: DType, seed: int = 0) -> Iterator[tuple[str, OpSample]]:
    """``(shape class, sample)`` for every class the recipe answers."""
    for shape_class in SHAPE_CLASSES:
        made = recipe_for(op)(op, dtype, shape_class, np.random.default_rng(seed))
        if made is not None:
            yield shape_class, made


def run_all(op: OpDef, seed: int) -> list[str]:
    """Failures of ``op``'s samples on the reference, one line each."""
    failures = []
    for dtype in dtypes_for(op):
        for shape_class in SHAPE_CLASSES:
            where = f"{op.qualified_name}/{dtype.value}/{shape_class} (seed {seed})"
            try:
                made = recipe_for(op)(op, dtype, shape_class, np.random.default_rng(seed))
                if made is not None:
                    op_case(op, dtype, shape_class, seed, made)
            except Exception as exc:
                failures.append(f"{where}: {type(exc).__name__}: {exc}")
    return failures


# --------------------------------------------------------------------------- validity


@quiet
@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_every_sample_runs_on_the_reference(op: OpDef) -> None:
    failures = run_all(op, 0) + run_all(op, 1)
    assert not failures, "\n".join(failures)


@quiet
@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_samples_run_for_any_seed(data: st.DataObject) -> None:
    op = data.draw(st.sampled_from(OPS), label="op")
    dtype = data.draw(st.sampled_from(dtypes_for(op)), label="dtype")
    shape_class = data.draw(st.sampled_from(SHAPE_CLASSES), label="shape_class")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    made = recipe_for(op)(op, dtype, shape_class, np.random.default_rng(seed))
    if made is not None:
        op_case(op, dtype, shape_class, 0, made)


# --------------------------------------------------------------------------- coverage


def test_every_op_has_a_recipe() -> None:
    missing = [op.qualified_name for op in OPS if op.qualified_name not in RECIPES]
    assert not missing, f"ops without a recipe: {missing}"
    for op in OPS:
        assert recipe_for(op) is RECIPES[op.qualified_name]


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_at_least_four_shape_classes(op: OpDef) -> None:
    dtype = preferred_dtype(op)
    classes = [shape_class for shape_class, _ in samples(op, dtype)]
    assert len(classes) >= 4, f"{op.qualified_name}/{dtype.value}: only {classes}"


def _symbols(t: TensorType) -> bool:
    return any(isinstance(d, str) for d in t.shape)


@pytest.mark.parametrize("op", [op for op in OPS if op.qualified_name not in NO_SYMBOLIC_INPUT],
                         ids=[i for i in IDS if i not in NO_SYMBOLIC_INPUT])
def test_symbolic_samples_declare_symbolic_dims(op: OpDef) -> None:
    for dtype in dtypes_for(op):
        made = recipe_for(op)(op, dtype, "symbolic", np.random.default_rng(0))
        where = f"{op.qualified_name}/{dtype.value}/symbolic"
        assert made is not None, f"{where}: no sample"
        assert any(_symbols(t) for t in made.input_types.values()), (
            f"{where}: no input is declared with a symbolic dim")
        graph = op_case(op, dtype, "symbolic", 0, made).graph
        assert graph is not None and any(_symbols(v.type) for v in graph.inputs)


@pytest.mark.parametrize("op", [op for op in OPS if any(d.is_float for d in dtypes_for(op))],
                         ids=[op.qualified_name for op in OPS
                              if any(d.is_float for d in dtypes_for(op))])
def test_float_ops_have_special_samples(op: OpDef) -> None:
    for dtype in (d for d in dtypes_for(op) if d.is_float):
        made = recipe_for(op)(op, dtype, "special", np.random.default_rng(0))
        if op.qualified_name in NO_SPECIAL:  # the op rejects special values by definition
            assert made is None, NO_SPECIAL[op.qualified_name]
            continue
        assert made is not None, f"{op.qualified_name}/{dtype.value}: no special sample"
        floats = [a for a in made.inputs if a is not None and a.dtype == dtype.numpy]
        floats += [v for v in made.attrs.values() if isinstance(v, np.ndarray)]
        assert any(not np.isfinite(a.astype(np.float64)).all() for a in floats), (
            f"{op.qualified_name}/{dtype.value}: the special sample has no NaN or inf")


def test_elementwise_special_samples_hold_nan_and_inf() -> None:
    for name in ("Add", "Div", "Exp", "Log", "Sqrt", "Round", "Pow", "Max", "Where", "Cast"):
        op = get_op(name)
        made = sample(op, DType.FLOAT32 if name != "Where" else DType.BOOL, "special")
        assert made is not None, name
        joined = np.concatenate([a.astype(np.float64).reshape(-1) for a in made.inputs
                                 if a is not None and a.dtype.kind == "f"])
        assert np.isnan(joined).any() and np.isinf(joined).any(), name


# --------------------------------------------------------------------------- determinism


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _same_sample(a: OpSample, b: OpSample) -> bool:
    return (_same(a.inputs, b.inputs) and _same(a.attrs, b.attrs)
            and a.const_inputs == b.const_inputs and a.input_types == b.input_types
            and a.num_outputs == b.num_outputs)


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_samples_are_deterministic(op: OpDef) -> None:
    for dtype in dtypes_for(op):
        for shape_class in SHAPE_CLASSES:
            first = recipe_for(op)(op, dtype, shape_class, np.random.default_rng(0))
            second = recipe_for(op)(op, dtype, shape_class, np.random.default_rng(0))
            where = f"{op.qualified_name}/{dtype.value}/{shape_class}"
            if first is None:
                assert second is None, where
            else:
                assert second is not None and _same_sample(first, second), where


def test_sample_convenience() -> None:
    op = get_op("Gemm")
    direct = RECIPES["core.Gemm"](op, DType.FLOAT32, "rank2", np.random.default_rng(3))
    for spelled in (op, "core.Gemm", "Gemm"):
        made = sample(spelled, "float32", "rank2", seed=3)
        assert made is not None and direct is not None and _same_sample(made, direct)
    assert sample("core.MatMul", DType.FLOAT32, "scalar") is None
    with pytest.raises(ValueError, match="shape class"):
        sample("core.Add", DType.FLOAT32, "rank9")


def test_generic_recipe_reads_the_schema() -> None:
    add = get_op("Add")
    for shape_class in SHAPE_CLASSES:
        made = generic(add, DType.INT32, shape_class, np.random.default_rng(0))
        if shape_class == "scalar" or shape_class.startswith("rank"):
            assert made is not None
        if made is not None:
            op_case(add, DType.INT32, shape_class, 0, made)
    assert generic(get_op("Gather"), DType.FLOAT32, "rank2", np.random.default_rng(0)) is None
    assert generic(get_op("Relu"), DType.FLOAT32, "broadcast", np.random.default_rng(0)) is None


# --------------------------------------------------------------------------- options


def _attr_values(name: str, attr: str, dtype: DType = DType.FLOAT32) -> set[Any]:
    """The values attribute ``attr`` takes across the classes (``None``: absent)."""
    op = get_op(name)
    found = set()
    for _, made in samples(op, dtype):
        value = made.attrs.get(attr)
        found.add(tuple(value) if isinstance(value, list) else value)
    return found


@pytest.mark.parametrize(("name", "attr", "expected"), [
    ("Gemm", "transA", {None, 1}),
    ("Gemm", "transB", {None, 1}),
    ("Conv", "auto_pad", {None, "SAME_UPPER", "SAME_LOWER", "VALID"}),
    ("Conv", "group", {None, 2, 3}),
    ("MaxPool", "ceil_mode", {None, 1}),
    ("MaxPool", "storage_order", {None, 1}),
    ("AveragePool", "count_include_pad", {None, 1}),
    ("Pad", "mode", {None, "constant", "reflect", "edge", "wrap"}),
    ("ReduceSum", "keepdims", {None, 0, 1}),
    ("ArgMax", "select_last_index", {None, 1}),
    ("Softmax", "axis", {None, 0, 1, 2, -1, -3}),
    ("LayerNormalization", "axis", {None, 0, 1, -1, -2}),
    ("Mod", "fmod", {None, 0, 1}),
    ("Gelu", "approximate", {None, "tanh", "none"}),
    ("ConvTranspose", "auto_pad", {None, "SAME_UPPER", "SAME_LOWER", "VALID"}),
    ("ConvTranspose", "group", {None, 2, 3}),
    ("ScatterElements", "reduction", {None, "add", "mul", "max", "min"}),
    ("ScatterND", "reduction", {None, "add", "mul", "max", "min"}),
    ("GatherElements", "axis", {0, 1, 2, -1, -5}),
    ("OneHot", "axis", {-4, -1, 0, 1, 2, 5}),
])
def test_classes_vary_the_attributes(name: str, attr: str, expected: set[Any]) -> None:
    assert _attr_values(name, attr) >= expected


def test_classes_vary_inputs_and_outputs() -> None:
    def shapes(name: str, dtype: DType = DType.FLOAT32) -> list[OpSample]:
        return [made for _, made in samples(get_op(name), dtype)]

    gemm = shapes("Gemm")
    assert {len(s.inputs) for s in gemm} == {2, 3}
    split = shapes("Split")
    assert {len(s.inputs) for s in split} == {1, 2}
    assert {s.num_outputs for s in split} >= {2, 3}
    steps = [s.inputs[4] for s in shapes("Slice") if len(s.inputs) > 4]
    assert any((st_ < 0).any() for st_ in steps if st_ is not None)
    assert {s.num_outputs for s in shapes("LayerNormalization")} == {None, 3}
    assert {len(s.inputs) for s in shapes("Sum")} == {1, 2, 3}
    clip_inputs = {tuple(a is None for a in s.inputs) for s in shapes("Clip")}
    assert (False, True, False) in clip_inputs and (False,) in clip_inputs
    targets = {made.attrs["to"] for dtype in dtypes_for(get_op("Cast"))
               for _, made in samples(get_op("Cast"), dtype)}
    assert targets == set(DType)
    transposed = shapes("ConvTranspose")
    assert {len(s.inputs) for s in transposed} == {2, 3}
    assert any("output_shape" in s.attrs for s in transposed)
    assert any("output_padding" in s.attrs for s in transposed)
    one_hot = shapes("OneHot")
    assert {s.const_inputs for s in one_hot} == {frozenset(), frozenset({1})}
    assert {s.inputs[1].ndim for s in one_hot} == {0, 1}
    assert {s.inputs[2].dtype for s in one_hot} >= {np.dtype(bool), np.dtype(np.int8)}
