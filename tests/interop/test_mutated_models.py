"""Mutated model files: each loads and runs, or is refused with a ``PolyhalError``.

Every case takes a valid model and mutates it at random, seeded so that a
failure names the seed that reproduces it:

- ONNX: attribute values (ints, lists, floats, strings, tensors), node inputs
  and outputs, op types, declared shapes and element types, initializers;
- polyhal's JSON format: any field of the document (replaced, removed,
  nudged or swapped with another field);
- NIR: any dataset of the HDF5 file (removed or replaced).

Loading and running the result on the reference must succeed or raise a
``PolyhalError``, within a time limit; a mutated ONNX model that runs must give
the same results on ``cpu``. Mutations found this way before: an LRN ``size``
of 2**32 made ``cpu`` loop and allocate per unit of size.
"""

from __future__ import annotations

import contextlib
import copy
import json
import random
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import polyhal
from polyhal.errors import PolyhalError
from polyhal.ir import f32, load, save
from polyhal.reference import run

SECONDS_PER_MODEL = 20
BIG_INTS = [-(2**40), -5, -1, 0, 1, 2, 3, 7, 2**31, 2**62]
SMALL_INTS = [-3, -2, -1, 0, 1, 2, 3, 4]
ODD_FLOATS = [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e30, 2.5]


class TookTooLong(Exception):
    """Raised by :func:`time_limit`; not a PolyhalError, so the test fails on it."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expire(*_: Any) -> None:
        raise TookTooLong(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def failing_on_anything_but_polyhal_errors(where: str) -> Iterator[None]:
    """Let a PolyhalError through; fail the test naming ``where`` on any other
    exception, or when the block takes longer than ``SECONDS_PER_MODEL``."""
    try:
        with time_limit(SECONDS_PER_MODEL):
            yield
    except PolyhalError:
        raise
    except Exception as exc:
        raise AssertionError(f"{where}: {type(exc).__name__}: {exc}") from exc


def load_and_run(where: str, loader: Callable[[], polyhal.Graph],
                 feeds: Callable[[polyhal.Graph], list]
                 ) -> tuple[polyhal.Graph, list[np.ndarray], list[np.ndarray]] | None:
    """The graph, its inputs and reference outputs, or None when refused with a
    PolyhalError; anything else fails the test."""
    try:
        with failing_on_anything_but_polyhal_errors(where):
            graph = loader()
            inputs = feeds(graph)
            return graph, inputs, list(run(graph, *inputs).values())
    except PolyhalError:
        return None


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


# --------------------------------------------------------------------------- ONNX


def _node_cases() -> list[Any]:
    from polyhal.conformance.levels.onnx_node import node_cases

    return list(node_cases())


def _mutate_attribute(node: Any, rng: random.Random, ints: list[int]) -> None:
    kinds = onnx.AttributeProto
    if not node.attribute:
        name = rng.choice(["axis", "alpha", "perm", "mode", "size"])
        node.attribute.append(onnx.helper.make_attribute(name, rng.choice(
            [1, 2.0, [0, 1], "abc", -7])))
        return
    attr = rng.choice(list(node.attribute))
    if attr.type == kinds.INT:
        attr.i = rng.choice(ints)
    elif attr.type == kinds.INTS:
        values = list(attr.ints)
        if values and rng.random() < 0.6:
            values[rng.randrange(len(values))] = rng.choice(ints)
        else:
            values = [*values[:rng.randrange(len(values) + 1)], rng.choice(ints)]
        del attr.ints[:]
        attr.ints.extend(values)
    elif attr.type == kinds.FLOAT:
        attr.f = rng.choice(ODD_FLOATS)
    elif attr.type == kinds.STRING:
        attr.s = rng.choice([b"", b"bogus", b"\xff\xfe", b"NOTSET", b"nearest"])
    elif attr.type == kinds.TENSOR:
        dims = list(attr.t.dims) or [1]
        dims[rng.randrange(len(dims))] = rng.choice(ints)
        del attr.t.dims[:]
        attr.t.dims.extend(dims)
    else:
        attr.type = rng.choice([kinds.INT, kinds.FLOAT, kinds.STRING, kinds.INTS, kinds.GRAPH])


def _mutate_onnx(model: Any, rng: random.Random, ints: list[int], op_types: list[str]) -> None:
    graph = model.graph
    nodes = list(graph.node)
    values = list(graph.input) + list(graph.output)
    what = rng.choice(["attribute"] * 4 + ["inputs", "dims", "dims", "elem", "op", "init"])
    if what == "attribute" and nodes:
        _mutate_attribute(rng.choice(nodes), rng, ints)
    elif what == "inputs" and nodes:
        node = rng.choice(nodes)
        names = list(node.input)
        if names and rng.random() < 0.5:
            names[rng.randrange(len(names))] = rng.choice(["", "ghost", *names])
        else:
            names.append(rng.choice(["", "ghost", *names]))
        del node.input[:]
        node.input.extend(names)
    elif what == "dims" and graph.input:
        shape = rng.choice(list(graph.input)).type.tensor_type.shape
        if shape.dim and rng.random() < 0.8:
            dim = rng.choice(list(shape.dim))
            if rng.random() < 0.7:
                dim.dim_value = rng.choice([d for d in ints if d >= 0])
            else:
                dim.dim_param = rng.choice(["n", "", "2*n", "N N"])
        else:
            shape.dim.add().dim_value = 3
    elif what == "elem" and values:
        rng.choice(values).type.tensor_type.elem_type = rng.choice([0, 1, 6, 7, 9, 10, 16, 99])
    elif what == "op" and nodes:
        rng.choice(nodes).op_type = rng.choice(op_types)
    elif what == "init":
        tensor = onnx.TensorProto(name=rng.choice([i for n in nodes for i in n.input] or ["k"]),
                                  data_type=onnx.TensorProto.FLOAT)
        tensor.dims.extend(rng.choice([[2], [2, 3], [10**12], []]))
        if rng.random() < 0.5:
            tensor.raw_data = b"\0" * rng.choice([0, 3, 8, 24])
        else:
            tensor.float_data.extend([1.0] * rng.choice([0, 1, 6]))
        graph.initializer.append(tensor)


@pytest.mark.parametrize(("seed", "ints"), [(seed, ints) for seed in range(4)
                                            for ints in ("small", "big")])
def test_mutated_onnx_models_run_or_are_refused(tmp_path, seed, ints):
    from polyhal.interop.onnx import load_onnx

    cases = _node_cases()
    op_types = sorted({node.op_type for case in cases for node in case.model.graph.node})
    rng = random.Random(seed)
    path = tmp_path / "mutated.onnx"
    ran = 0
    for attempt in range(60):
        case = rng.choice(cases)
        model = copy.deepcopy(case.model)
        for _ in range(rng.randrange(1, 3)):
            _mutate_onnx(model, rng, SMALL_INTS if ints == "small" else BIG_INTS, op_types)
        path.write_bytes(model.SerializeToString())
        where = f"seed {seed}, attempt {attempt}, from {case.name}"
        result = load_and_run(where, lambda: load_onnx(path),
                              lambda g, case=case: list(case.inputs[:len(g.inputs)]))
        if result is None:
            continue
        graph, inputs, expected = result
        ran += 1
        with failing_on_anything_but_polyhal_errors(f"{where}, on cpu"):
            actual = list(polyhal.compile(graph, device="cpu")(*inputs).values())
        assert same_results(actual, expected), f"{where}: cpu and reference differ"
    print(f"seed {seed} ({ints} ints): {ran} of 60 mutated models ran")


# --------------------------------------------------------------------------- polyhal JSON

ODD_JSON = [None, True, 0, -1, 2**63, 1.5, "", "x", "float32", "t0", [], [1], [-1, 2], {},
            {"int": 3}, {"ints": [1, "a"]}, {"tensor": "t0"}, {"float": "nan"}, {"string": 5}]


def _paths(doc: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    children = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for key, value in children:
        yield from _paths(value, (*prefix, key))


def _mutate_json(doc: Any, rng: random.Random) -> None:
    paths = list(_paths(doc))[1:]
    path = rng.choice(paths)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    how = rng.randrange(4)
    if how == 0:
        parent[key] = copy.deepcopy(rng.choice(ODD_JSON))
    elif how == 1:
        parent.pop(key)
    elif how == 2 and isinstance(parent[key], int) and not isinstance(parent[key], bool):
        parent[key] = rng.choice([parent[key] + 1, parent[key] - 1, -parent[key],
                                  parent[key] * 1000])
    elif how == 2 and isinstance(parent[key], str):
        parent[key] = rng.choice([parent[key] + "_", parent[key][:-1]])
    else:  # a copy of another field of the document
        other = doc
        for step in rng.choice(paths):
            other = other[step]
        parent[key] = copy.deepcopy(other)


def _saved_models(folder: Path) -> list[tuple[dict, bytes, list[np.ndarray]]]:
    from polyhal.conformance import models

    saved = []
    for name in ("mlp", "cnn", "attention"):
        graph, inputs = getattr(models, name)(f32, np.random.default_rng(0))
        path = folder / f"{name}.json"
        save(graph, path)
        saved.append((json.loads(path.read_text()), path.with_suffix(".npz").read_bytes(),
                      inputs))
    return saved


@pytest.mark.parametrize("seed", range(3))
def test_mutated_json_models_run_or_are_refused(tmp_path, seed):
    rng = random.Random(seed)
    seeds = _saved_models(tmp_path)
    path = tmp_path / "mutated.json"
    for attempt in range(100):
        document, tensors, inputs = rng.choice(seeds)
        document = copy.deepcopy(document)
        for _ in range(rng.randrange(1, 3)):
            _mutate_json(document, rng)
        path.write_text(json.dumps(document))
        path.with_suffix(".npz").write_bytes(tensors)
        load_and_run(f"seed {seed}, attempt {attempt}", lambda: load(path),
                     lambda g, inputs=inputs: inputs[:len(g.inputs)])


# --------------------------------------------------------------------------- NIR

ODD_DATASETS = [np.array([]), np.array([-1.0]), np.array([b"x"]), np.array(np.nan),
                np.zeros((2, 2, 2, 2, 2)), np.array([1e300]), np.array([2**40]), b"LIF",
                b"Input", b"bogus"]


def _nir_files(folder: Path) -> list[bytes]:
    import nir
    lif = nir.LIF(tau=np.full(3, 2e-3), r=np.ones(3), v_leak=np.zeros(3),
                  v_threshold=np.full(3, 0.5))
    cuba = nir.CubaLIF(tau_syn=np.full(3, 5e-3), tau_mem=np.full(3, 2e-3), r=np.ones(3),
                       v_leak=np.zeros(3), v_threshold=np.full(3, 0.5), w_in=np.ones(3))
    conv = nir.Conv2d(input_shape=(4, 4), weight=np.ones((2, 1, 3, 3)), stride=1, padding=1,
                      dilation=1, groups=1, bias=np.zeros(2))
    graphs = [nir.NIRGraph.from_list(nir.Affine(weight=np.ones((3, 2)), bias=np.zeros(3)), lif),
              nir.NIRGraph.from_list(nir.Linear(weight=np.ones((3, 2))), cuba),
              nir.NIRGraph.from_list(conv, nir.IF(r=np.ones((2, 4, 4)),
                                                  v_threshold=np.ones((2, 4, 4))))]
    files = []
    for index, graph in enumerate(graphs):
        path = folder / f"seed{index}.nir"
        nir.write(path, graph)
        files.append(path.read_bytes())
    return files


def _mutate_nir(path: Path, rng: random.Random) -> None:
    import h5py

    with h5py.File(path, "r+") as file:
        names: list[str] = []
        file.visititems(lambda name, _: names.append(name))
        name = rng.choice(names)
        item = file.get(name)
        if rng.random() < 0.3 or not isinstance(item, h5py.Dataset):
            del file[name]
            return
        value = rng.choice(ODD_DATASETS)
        if rng.random() < 0.5 and item.dtype.kind in "fiu" and item.shape:
            value = np.asarray(item[()]) * rng.choice([-1, 0, 1e30, np.nan])
        del file[name]
        file[name] = value


def _random_feeds(graph: polyhal.Graph) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(0, 1, [d if isinstance(d, int) else 5 for d in v.type.shape])
            .astype(v.type.dtype.numpy) for v in graph.inputs]


@pytest.mark.parametrize("seed", range(2))
def test_mutated_nir_networks_run_or_are_refused(tmp_path, seed):
    from polyhal.interop.nir import load_nir

    rng = random.Random(seed)
    files = _nir_files(tmp_path)
    path = tmp_path / "mutated.nir"
    for attempt in range(60):
        path.write_bytes(rng.choice(files))
        for _ in range(rng.randrange(1, 3)):
            _mutate_nir(path, rng)
        load_and_run(f"seed {seed}, attempt {attempt}", lambda: load_nir(path, dt=1e-3),
                     _random_feeds)
