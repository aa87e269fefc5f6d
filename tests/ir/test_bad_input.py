"""Malformed graphs and model files: each is an IRError naming the node or field.

Every case here must raise an :class:`IRError` subclass (anything else fails
the test), with a message naming what is wrong, and none may allocate a huge
tensor (peak memory is checked for the size-limit cases).
"""

from __future__ import annotations

import io
import json
import pickle
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from polyhal import ops
from polyhal.errors import IRError, LimitExceededError, SerializationError, VerificationError
from polyhal.ir import Graph, GraphBuilder, Limits, Node, Value, f32, i32, i64, load, save
from polyhal.ir.limits import use_limits


def _graph(nodes, inputs=None, outputs=None, constants=None) -> Graph:
    inputs = inputs or (Value("x", f32[3]),)
    if outputs is None:
        outputs = (nodes[-1].outputs[0],) if nodes else inputs[:1]
    return Graph("bad", tuple(inputs), tuple(outputs), tuple(nodes), constants or {})


def _node(op, name, inputs, out="y", type_=f32[3], **attrs) -> Node:
    return Node(op, name, tuple(inputs), (Value(out, type_),), attrs)


GRAPH_CASES = {
    "unknown op": (lambda: _graph([_node("Frobnicate", "n1", ["x"])]),
                   r"node 'n1' \(core.Frobnicate\): unknown op"),
    "unknown domain": (lambda: _graph([Node("Relu", "n1", ("x",), (Value("y", f32[3]),),
                                            domain="nope")]), r"unknown op nope.Relu"),
    "too few inputs": (lambda: _graph([_node("Add", "n1", ["x"])]),
                       r"node 'n1' \(core.Add\): takes 2 inputs \(A, B\), got 1"),
    "too many inputs": (lambda: _graph([_node("Relu", "n1", ["x", "x"])]),
                        r"node 'n1' \(core.Relu\): takes 1 inputs \(X\), got 2"),
    "no outputs": (lambda: _graph([Node("Relu", "n1", ("x",), ())], outputs=()),
                   r"node 'n1' \(core.Relu\): has 1 outputs \(Y\), got 0"),
    "wrong attribute type": (lambda: _graph([_node("LeakyRelu", "n1", ["x"], alpha="big")]),
                             r"node 'n1' .*attribute 'alpha' must be float"),
    "unknown attribute": (lambda: _graph([_node("Relu", "n1", ["x"], gamma=1.0)]),
                          r"node 'n1' .*unknown attribute 'gamma'"),
    "missing required attribute": (lambda: _graph([_node("Cast", "n1", ["x"])]),
                                   r"node 'n1' .*required attribute 'to'"),
    "unsupported attribute value": (lambda: _graph([_node("Relu", "n1", ["x"], f=object())]),
                                    r"node 'n1' attribute 'f'"),
    "dtype mismatch": (lambda: _graph([_node("Add", "n1", ["x", "k"])],
                                      inputs=(Value("x", f32[3]), Value("k", i32[3]))),
                       r"node 'n1' .*input 1 \(B\) is int32 but input 0 \(A\) is float32"),
    "dtype not allowed": (lambda: _graph([_node("Exp", "n1", ["x"], type_=i32[3])],
                                         inputs=(Value("x", i32[3]),)),
                          r"node 'n1' .*input 0 \(input\) has dtype int32|"
                          r"node 'n1' .*has dtype int32"),
    "incompatible broadcast": (lambda: _graph([_node("Add", "n1", ["x", "z"])],
                                              inputs=(Value("x", f32[3]), Value("z", f32[4]))),
                               r"node 'n1' .*cannot broadcast dimension 1.*3 vs 4"),
    "cycle": (lambda: _graph([_node("Relu", "n1", ["y2"], out="y1"),
                              _node("Relu", "n2", ["y1"], out="y2")]),
              r"node 'n1' .*reads 'y2', which node 'n2' defines later"),
    "self loop": (lambda: _graph([_node("Relu", "n1", ["y"])]),
                  r"node 'n1' .*reads 'y', which node 'n1' defines later"),
    "dangling value": (lambda: _graph([_node("Relu", "n1", ["ghost"])]),
                       r"node 'n1' .*reads 'ghost', which no graph input"),
    "duplicate value names": (lambda: _graph([_node("Relu", "n1", ["x"], out="x")]),
                              r"value name 'x' is defined twice"),
    "duplicate node names": (lambda: _graph([_node("Relu", "n1", ["x"], out="a"),
                                             _node("Relu", "n1", ["a"], out="b")]),
                             r"node name 'n1' is already used"),
    "declared type disagrees": (lambda: _graph([_node("Relu", "n1", ["x"], type_=f32[4])]),
                                r"node 'n1' .*declared float32\[4\] but the op gives "
                                r"float32\[3\]"),
    "undefined graph output": (lambda: _graph([_node("Relu", "n1", ["x"])],
                                              outputs=(Value("zzz", f32[3]),)),
                               r"output 0 names 'zzz'"),
    "required input omitted": (lambda: _graph([_node("Add", "n1", ["x", ""])]),
                               r"node 'n1' .*input 1 \(B\) is required"),
    "axis out of range": (lambda: _graph([_node("Softmax", "n1", ["x"], axis=3)]),
                          r"node 'n1' .*axis"),
    "bad reshape target": (lambda: _graph([_node("Reshape", "n1", ["x", "s"], type_=f32[2, 2])],
                                          constants={"s": np.array([2, 2], np.int64)}),
                           r"node 'n1' \(core.Reshape\)"),
    "expression dim on a graph input": (lambda: _graph([], inputs=(Value("x", f32["2*n"]),)),
                                        r"input 'x' has dimension '2\*n'"),
    "graph field of the wrong type": (lambda: Graph("bad", "x", (), ()),
                                      r"inputs must be a sequence"),
    "node inputs that are not names": (lambda: _graph([_node("Relu", "n1", [3])]),
                                       r"node 'n1' .*inputs must be value names"),
}


@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
def test_malformed_graph(case):
    build, pattern = GRAPH_CASES[case]
    with pytest.raises(IRError, match=pattern) as info:
        build()
    assert isinstance(info.value, VerificationError | LimitExceededError)


def test_expand_to_a_trillion_elements_is_refused_without_allocating():
    g = GraphBuilder("huge")
    x = g.input("x", f32[1])
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceededError, match=r"node 'expand_1'.*1000000000000 elements"):
            g.op("Expand", x, np.array([10**6, 10**6], np.int64))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20


# ---------------------------------------------------------------- model files

def _saved(tmp_path: Path) -> Path:
    g = GraphBuilder("model")
    x = g.input("x", f32["batch", 3])
    w = g.constant(np.ones((3, 2), np.float32), name="w")
    g.output(ops.leaky_relu(x @ w, alpha=0.2), name="y")
    return save(g.build(), tmp_path / "model.json")


def _edit(path: Path, change) -> Path:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    return path


def _npz(path: Path, arrays: dict[str, np.ndarray], raw: dict[str, bytes] | None = None) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for key, array in arrays.items():
            entry = io.BytesIO()
            np.lib.format.write_array(entry, array, allow_pickle=True)
            archive.writestr(f"{key}.npy", entry.getvalue())
        for key, data in (raw or {}).items():
            archive.writestr(f"{key}.npy", data)
    path.write_bytes(buffer.getvalue())


class _Exploit:
    """Unpickling this would create a marker file: loading must never do it."""

    marker = ""

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _pickled_npz(path: Path) -> Path:
    _Exploit.marker = str(path.parent / "pwned")
    _npz(path.with_suffix(".npz"), {"t0": np.array([_Exploit()], dtype=object)})
    return path


def _huge_declared(path: Path) -> Path:
    return _edit(path, lambda d: d["constants"][0].update(shape=[10**6, 10**6]))


def _zip_bomb(path: Path) -> Path:
    entry = io.BytesIO()
    np.lib.format.write_array(entry, np.zeros((3, 2), np.float32))
    _npz(path.with_suffix(".npz"), {}, {"t0": entry.getvalue() + b"\0" * (1 << 20)})
    return path


def _truncated_tensor(path: Path) -> Path:
    entry = io.BytesIO()
    np.lib.format.write_array(entry, np.zeros((3, 2), np.float32))
    _npz(path.with_suffix(".npz"), {}, {"t0": entry.getvalue()[:-8]})
    return path


FILE_CASES = {
    "truncated JSON": (lambda p: (p.write_text(p.read_text()[:40]), p)[1],
                       SerializationError, r"model.json: not valid JSON"),
    "not JSON at all": (lambda p: (p.write_bytes(b"\x89PNG\r\n\x1a\n\0\0"), p)[1],
                        SerializationError, r"model.json: not valid JSON"),
    "JSON nested too deeply": (lambda p: (p.write_text("[" * 100000 + "]" * 100000), p)[1],
                               SerializationError, r"model.json: .*(nested|expected an object)"),
    "document not an object": (lambda p: (p.write_text("[1, 2]"), p)[1],
                               SerializationError, r"document: expected an object"),
    "wrong format name": (lambda p: _edit(p, lambda d: d.update(format="other")),
                          SerializationError, r"format: expected 'polyhal.graph'"),
    "future format version": (lambda p: _edit(p, lambda d: d.update(version=99)),
                              SerializationError, r"version: format version 99 is newer"),
    "missing field": (lambda p: _edit(p, lambda d: d["nodes"][0].pop("op")),
                      SerializationError, r"nodes\[0\]\.op: missing"),
    "field of the wrong type": (lambda p: _edit(p, lambda d: d.update(inputs="x")),
                                SerializationError, r"document\.inputs: expected list"),
    "unknown dtype": (lambda p: _edit(p, lambda d: d["inputs"][0].update(dtype="float128")),
                      IRError, r"inputs\[0\]\.dtype: unknown dtype 'float128'"),
    "unparseable dimension": (lambda p: _edit(p, lambda d: d["inputs"][0].update(
                              shape=["batch+", 3])), SerializationError, r"inputs\[0\]\.shape"),
    "negative dimension": (lambda p: _edit(p, lambda d: d["inputs"][0].update(shape=[-2, 3])),
                           SerializationError, r"inputs\[0\]\.shape.*negative"),
    "unknown attribute kind": (lambda p: _edit(p, lambda d: d["nodes"][1]["attrs"].update(
                               alpha={"complex": [1, 2]})), SerializationError,
                               r"nodes\[1\]\.attrs\.alpha: unknown attribute kind 'complex'"),
    "attribute of the wrong kind": (lambda p: _edit(p, lambda d: d["nodes"][1]["attrs"].update(
                                    alpha={"string": "x"})), VerificationError,
                                    r"node 'leaky_relu_2' .*'alpha' must be float"),
    "unknown op in file": (lambda p: _edit(p, lambda d: d["nodes"][0].update(op="Teleport")),
                           VerificationError, r"model.json: .*unknown op core.Teleport"),
    "tensor file missing": (lambda p: (p.with_suffix(".npz").unlink(), p)[1],
                            SerializationError, r"model.npz: tensor file is missing"),
    "tensor file corrupt": (lambda p: (p.with_suffix(".npz").write_bytes(b"PK\3\4garbage"), p)[1],
                            SerializationError, r"model.npz: not a valid npz"),
    "tensor shape disagrees": (lambda p: (_npz(p.with_suffix(".npz"),
                                               {"t0": np.zeros((2, 3), np.float32)}), p)[1],
                               SerializationError, r"constants\[0\]: entry 't0' holds"),
    "tensor dtype disagrees": (lambda p: (_npz(p.with_suffix(".npz"),
                                               {"t0": np.zeros((3, 2), np.float64)}), p)[1],
                               SerializationError, r"constants\[0\]: entry 't0' holds"),
    "tensor truncated": (_truncated_tensor, SerializationError, r"tensor 't0' is truncated"),
    "npz with pickled objects": (_pickled_npz, SerializationError,
                                 r"constants\[0\]: entry 't0' holds object"),
    "zip bomb entry": (_zip_bomb, SerializationError, r"entry 't0' is \d+ bytes"),
    "tensor over the size limit": (_huge_declared, LimitExceededError,
                                   r"constants\[0\].*1000000000000 elements"),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_malformed_model_file(tmp_path, case):
    corrupt, error, pattern = FILE_CASES[case]
    path = corrupt(_saved(tmp_path))
    tracemalloc.start()
    try:
        with pytest.raises(IRError, match=pattern) as info:
            load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(info.value, error)
    assert peak < 50 << 20
    assert not (tmp_path / "pwned").exists()


def test_limits_are_configurable(tmp_path):
    path = _saved(tmp_path)
    with pytest.raises(LimitExceededError, match="2 nodes exceed the limit of 1"):
        load(path, Limits(max_nodes=1))
    with pytest.raises(LimitExceededError, match=r"6 elements .* limit of 5"):
        load(path, Limits(max_elements=5))
    with pytest.raises(LimitExceededError, match="bytes exceed the model file limit"):
        load(path, Limits(max_file_bytes=10))
    with use_limits(Limits(max_rank=1)), pytest.raises(LimitExceededError, match="rank 2"):
        load(path)


def test_missing_file(tmp_path):
    with pytest.raises(SerializationError, match="cannot read model file"):
        load(tmp_path / "nope.json")


def test_pickle_payload_is_never_unpickled(tmp_path):
    path = _pickled_npz(_saved(tmp_path))
    with pytest.raises(SerializationError):
        load(path)
    assert not (tmp_path / "pwned").exists()
    # The payload is real: unpickling it by hand would have created the marker.
    pickle.loads(pickle.dumps(_Exploit()))
    assert (tmp_path / "pwned").exists()


def test_runtime_shape_inputs_are_limited():
    g = GraphBuilder("dyn")
    x = g.input("x", f32[1])
    shape = g.input("shape", i64[2])
    g.output(g.op("Expand", x, shape))
    graph = g.build()
    from polyhal.reference import run

    with pytest.raises(LimitExceededError, match="elements"):
        run(graph, np.ones(1, np.float32), np.array([10**6, 10**6], np.int64))
