"""Hostile model files and paths found by fuzzing: each is refused quickly with an
IRError naming the file and the field, never a bare Python error, a hang or a
second copy of a large tensor."""

from __future__ import annotations

import json
import os
import string
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

import polyhal
from polyhal.errors import (
    InputBindingError,
    IRError,
    LimitExceededError,
    SerializationError,
    VerificationError,
)
from polyhal.interop.loading import load_model
from polyhal.ir import GraphBuilder, Limits, TensorType, f32, load, save
from polyhal.ir import dims as D
from polyhal.reference.executor import bind_inputs


def _value(name, shape):
    return {"name": name, "dtype": "float32", "shape": shape}


def _document(inputs, outputs, nodes=(), constants=()):
    return {"format": "polyhal.graph", "version": 1, "name": "g", "inputs": inputs,
            "outputs": outputs, "constants": list(constants), "nodes": list(nodes)}


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _npy(shape, descr="<f4", fortran=False, data=b"") -> bytes:
    """An npy entry with any header, even one numpy would not write."""
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {tuple(shape)!r}, }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + data


def _with_constant(tmp_path: Path, shape, entry: bytes, method=zipfile.ZIP_STORED) -> Path:
    """model.json with one constant 'c' of ``shape``, stored as ``entry``."""
    path = _write(tmp_path / "model.json", _document(
        [_value("x", [1])], [_value("x", [1])],
        constants=[{"name": "c", "key": "t0", "dtype": "float32", "shape": shape}]))
    with zipfile.ZipFile(tmp_path / "model.npz", "w", method) as archive:
        archive.writestr("t0.npy", entry)
    return path


def _saved(tmp_path: Path, constant: np.ndarray) -> Path:
    g = GraphBuilder("g")
    x = g.input("x", f32[constant.shape[0]])
    g.output(x + g.constant(constant, name="c"), name="y")
    return save(g.build(), tmp_path / "model.json")


# ----------------------------------------------------------------------- dimensions

@pytest.mark.parametrize("dim", ["-5", "0-5", "2-3"])
def test_a_dimension_expression_that_is_a_negative_number_is_refused(tmp_path, dim):
    path = _write(tmp_path / "model.json", _document([_value("x", [dim])], [_value("x", [dim])]))
    with pytest.raises(SerializationError, match=r"model.json: inputs\[0\]\.shape: .*"
                                                 r"dimension -\d+ .* is negative"):
        load(path)


def test_a_negative_constant_shape_is_refused_before_its_header(tmp_path):
    path = _with_constant(tmp_path, ["0-1", "0-1"], _npy((-1, -1)))
    with pytest.raises(SerializationError, match=r"constants\[0\]\.shape: .*is negative"):
        load(path)


@pytest.mark.parametrize("shape", [[0, 2**70], [0, 2**62, 2**62]])
def test_an_empty_tensor_with_a_huge_dimension_is_refused(tmp_path, shape):
    path = _with_constant(tmp_path, shape, _npy(shape))
    with pytest.raises(LimitExceededError, match=rf"model.npz: constants\[0\] \(t0\): "
                                                 rf"dimension {shape[1]} .*exceeds the limit"):
        load(path)


def test_a_dimension_longer_than_the_limit_in_canonical_form_names_itself(tmp_path):
    cube = "(a+b+c+d+e)*(a+b+c+d+e)*(a+b+c+d+e)"
    path = _write(tmp_path / "model.json", _document(
        [_value("x", ["a"])], [_value("x", ["a"])],
        [{"name": "n", "domain": "core", "op": "Identity", "inputs": ["x"],
          "outputs": [_value("y", [cube])]}]))
    with pytest.raises(LimitExceededError, match=r"model.json: nodes\[0\]\.outputs\[0\]\.shape"
                                                 r".*characters in canonical form"):
        load(path)


def test_a_dimension_that_expands_too_far_is_refused_quickly(tmp_path):
    power = "*".join(["(a+b+c+d+e+f+g+h+i+j+z0)"] * 10)
    path = _write(tmp_path / "model.json", _document(
        [_value("x", ["a"])], [_value("x", ["a"])],
        [{"name": "n", "domain": "core", "op": "Identity", "inputs": ["x"],
          "outputs": [_value("y", [power] * 4)]}]))
    start = time.perf_counter()
    with pytest.raises(LimitExceededError, match=r"nodes\[0\]\.outputs\[0\]\.shape: .*"
                                                 r"\(a\+b\+c.* expands to more than 128 terms"):
        load(path)
    assert time.perf_counter() - start < 1.0


def test_dims_arithmetic_raises_limit_errors_naming_the_dimension():
    with pytest.raises(LimitExceededError, match=r"'a{60}'\.\.\. \(str, 300 characters\) is "
                                                 r"over the limit of 256 characters"):
        D.to_poly("a" * 300)
    with pytest.raises(LimitExceededError, match=r"nests deeper than 16 levels"):
        D.canonical("(" * 20 + "n" + ")" * 20)
    wide = "+".join(string.ascii_letters)  # 52 terms in 103 characters
    with pytest.raises(LimitExceededError, match=r"\('a\+b\+c.*'\.\.\. \(str, 103 characters\)\)"
                                                 r"\*\('a\+b.*\) expands to more than 128 terms"):
        D.dim_mul(wide, wide)
    long_symbols = [f"symbol_number_{i}" for i in range(20)]
    with pytest.raises(LimitExceededError, match=r"characters in canonical form"):
        D.dim_prod(long_symbols)
    assert D.canonical("(a+b)*(a-b)") == "a*a-b*b"  # ordinary expressions are unaffected


def test_inference_that_builds_a_dimension_too_long_names_the_node():
    g = GraphBuilder("g")
    x = g.input("x", f32[*[f"symbol_number_{i}" for i in range(20)]])
    with pytest.raises(LimitExceededError, match=r"node 'flatten_1' \(core.Flatten\): "
                                                 r"dimension 'symbol_number_0\*"):
        polyhal.ops.flatten(x, axis=20)


# ----------------------------------------------------------------------- JSON and names

def test_an_integer_literal_over_python_digit_limit_is_not_valid_json(tmp_path):
    path = tmp_path / "model.json"
    path.write_text('{"format": "polyhal.graph", "version": 1' + "0" * 5000 + "}")
    with pytest.raises(SerializationError, match=r"model.json: not valid JSON \(.*4300 digits"):
        load(path)


@pytest.mark.parametrize(("edit", "where", "message"), [
    (lambda d: d["inputs"][0].update(name=""), r"inputs\[0\]", "value name"),
    (lambda d: d["nodes"][0].update(name=""), r"nodes\[0\]", "node name"),
    (lambda d: d["nodes"][0].update(op=""), r"nodes\[0\]", "op must be"),
    (lambda d: d["nodes"][0].update(domain=""), r"nodes\[0\]", "domain must be"),
    (lambda d: d["nodes"][0]["outputs"][0].update(name=""), r"nodes\[0\]\.outputs\[0\]",
     "value name"),
])
def test_an_empty_name_names_the_file_and_field(tmp_path, edit, where, message):
    doc = _document([_value("x", [2])], [_value("y", [2])],
                    [{"name": "n", "domain": "core", "op": "Relu", "inputs": ["x"],
                      "outputs": [_value("y", [2])]}])
    edit(doc)
    with pytest.raises(VerificationError, match=rf"model.json: {where}: .*{message}"):
        load(_write(tmp_path / "model.json", doc))


# ----------------------------------------------------------------------- paths

def test_a_folder_a_fifo_and_dev_zero_are_not_model_files(tmp_path):
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(SerializationError, match=r"dir.json: cannot read model file \(a folder"):
        load(tmp_path / "dir.json")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.json")
        with pytest.raises(SerializationError, match=r"fifo.json: .*not a regular file"):
            load(tmp_path / "fifo.json")
    if Path("/dev/zero").exists():
        (tmp_path / "zero.json").symlink_to("/dev/zero")
        with pytest.raises(SerializationError, match=r"zero.json: .*not a regular file"):
            load(tmp_path / "zero.json")


def test_the_npz_beside_must_be_a_regular_file_too(tmp_path):
    path = _saved(tmp_path, np.ones(2, np.float32))
    path.with_suffix(".npz").unlink()
    os.mkfifo(path.with_suffix(".npz"))
    with pytest.raises(SerializationError, match=r"model.npz: cannot read tensor file \(not a "
                                                 r"regular file"):
        load(path)


def test_a_path_with_a_nul_byte_is_a_serialization_error(tmp_path):
    with pytest.raises(SerializationError, match=r"model\\x00.json': cannot read model file "
                                                 r"\(the path holds a NUL byte"):
        load(str(tmp_path / "model\x00.json"))
    with pytest.raises(SerializationError, match=r"NUL byte"):
        load_model(str(tmp_path / "model\x00.json"))


def test_save_names_bad_arguments_and_the_users_path(tmp_path):
    graph = load(_saved(tmp_path, np.ones(2, np.float32)))
    with pytest.raises(SerializationError, match=r"save: expected a file path ending in "
                                                 r"\.json, got int"):
        save(graph, 5)
    with pytest.raises(SerializationError, match=r"save: expected a Graph, got str"):
        save("notagraph", tmp_path / "x.json")
    with pytest.raises(SerializationError, match=r"missing/model.npz: cannot write the file "
                                                 r"\(No such file"):
        save(graph, tmp_path / "missing" / "model.json")
    with pytest.raises(SerializationError, match=r"NUL byte"):
        save(graph, str(tmp_path / "a\x00.json"))


# ----------------------------------------------------------------------- damaged npz

def _damage(path: Path, how: str) -> None:
    """Rewrite the npz of ``path`` damaged in one way (the JSON stays valid)."""
    npz = path.with_suffix(".npz")
    entries = {n: zipfile.ZipFile(npz).read(n) for n in zipfile.ZipFile(npz).namelist()}
    method = zipfile.ZIP_DEFLATED if how == "deflate" else zipfile.ZIP_STORED
    with zipfile.ZipFile(npz, "w", method) as archive:
        for name, data in entries.items():
            if how == "header":
                data = data[:10] + b"{'descr': '<f4', " + b" " * (len(data) - 44) + b"\n" \
                    + data[-16:]
            archive.writestr(name, data)
    raw = bytearray(npz.read_bytes())
    if how == "deflate":
        raw[40:46] = b"\xff" * 6
    if how == "encrypted":
        for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            raw[raw.find(signature) + offset] |= 1
    if how == "method":
        for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
            raw[raw.find(signature) + offset] = 99
    npz.write_bytes(bytes(raw))


@pytest.mark.parametrize(("how", "error"), [("deflate", "error"), ("encrypted", "RuntimeError"),
                                            ("method", "NotImplementedError"),
                                            ("header", "TokenError")])
def test_a_damaged_npz_entry_names_the_file_and_entry(tmp_path, how, error):
    path = _saved(tmp_path, np.arange(64, dtype=np.float32))
    _damage(path, how)
    expected = r"model.npz: constants\[0\]: tensor 't0' cannot be read: its entry is damaged"
    with pytest.raises(SerializationError, match=rf"{expected} \({error}"):
        load(path)


def test_a_fortran_ordered_entry_says_so(tmp_path):
    path = _with_constant(tmp_path, [4, 4], _npy((4, 4), fortran=True, data=bytes(64)))
    with pytest.raises(SerializationError, match=r"entry 't0' is stored in Fortran"):
        load(path)


def test_an_entry_larger_in_the_zip_directory_than_its_shape_is_refused(tmp_path):
    path = _with_constant(tmp_path, [4], _npy((4,), data=bytes(16) + bytes(100)))
    with pytest.raises(SerializationError, match=r"entry 't0' is \d+ bytes, more than its "
                                                 r"declared float32\[4\] needs"):
        load(path)


def test_a_large_compressed_constant_is_read_without_a_second_copy(tmp_path):
    n = 1 << 22  # 16 MiB of float32, a few KiB deflated
    path = _saved(tmp_path, np.zeros(n, np.float32))
    npz = path.with_suffix(".npz")
    data = zipfile.ZipFile(npz).read("t0.npy")
    with zipfile.ZipFile(npz, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("t0.npy", data)
    assert npz.stat().st_size < 100_000
    tracemalloc.start()
    try:
        graph = load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert graph.constants["c"].shape == (n,)
    assert peak < 1.3 * 4 * n, f"peak {peak} bytes for a {4 * n}-byte constant"


# ----------------------------------------------------------------------- limits and inputs

def test_limits_check_every_dimension():
    with pytest.raises(LimitExceededError, match=r"t: dimension 11 \(shape \[0, 11\]\) exceeds"):
        Limits(max_elements=10).check_shape([0, 11], "t")


def test_a_ragged_list_input_is_an_input_binding_error():
    g = GraphBuilder("g")
    g.output(g.input("x", f32[3]) * 2.0, name="y")
    with pytest.raises(InputBindingError, match=r"input 'x' \(expects float32\[3\]\): got a "
                                                r"list that is not an array of one shape"):
        bind_inputs(g.build(), [[[1.0, 2, 3], [4, 5]]], {})


def test_a_tensor_type_with_a_negative_expression_is_an_ir_error():
    with pytest.raises(IRError, match=r"dimension -1 \('n-n-1'\) is negative"):
        TensorType("float32", ("n-n-1",))



@pytest.mark.parametrize("attr", [{"float": 10**400}, {"floats": [1.0, 10**400]},
                                  {"int": 10**400}], ids=["float", "floats", "int"])
def test_a_float_attribute_too_large_for_a_float_is_named(tmp_path, attr):
    g = GraphBuilder("leaky")
    g.output(polyhal.ops.leaky_relu(g.input("x", f32[2]), alpha=0.1))
    path = tmp_path / "model.json"
    save(g.build(), path)
    doc = json.loads(path.read_text())
    doc["nodes"][0]["attrs"]["alpha"] = attr
    path.write_text(json.dumps(doc))
    with pytest.raises(IRError, match=r"1000000000.*\.\.\. \(int\)(, too large| is too large) "
                                      "for a float"):
        load_model(path)


def test_a_float_attribute_too_large_for_a_float_is_named_when_building():
    g = GraphBuilder("leaky")
    with pytest.raises(VerificationError, match=r"attribute 'alpha' is 1000.*\(int\), too large"):
        polyhal.ops.leaky_relu(g.input("x", f32[2]), alpha=10**400)
