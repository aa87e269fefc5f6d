"""Hostile NIR files and graphs found by fuzzing: infinite sizes, string-dataset bombs
and malformed ``type`` entries are refused quickly, naming the node and the field."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time

import h5py
import nir
import numpy as np
import pytest

from polyhal.errors import LimitExceededError, SerializationError, VerificationError
from polyhal.interop.nir import load_nir

DT = 0.5


def _lif(n: int = 2) -> nir.LIF:
    return nir.LIF(tau=np.ones(n), r=np.ones(n), v_leak=np.zeros(n), v_threshold=np.ones(n))


def _chain(shape, **nodes) -> nir.NIRGraph:
    names = ["input", *nodes, "output"]
    graph_nodes = {"input": nir.Input(np.array(shape)), **nodes,
                   "output": nir.Output(np.array(shape))}
    return nir.NIRGraph(nodes=graph_nodes, edges=list(itertools.pairwise(names)),
                        type_check=False)


def _conv_file(tmp_path):
    conv = nir.Conv2d(input_shape=(5, 6), weight=np.ones((2, 1, 3, 3)), stride=1, padding=0,
                      dilation=1, groups=1, bias=np.zeros(2))
    path = tmp_path / "conv.nir"
    nir.write(path, _chain([1, 5, 6], conv=conv))
    return path


def _replace(path, key, data=None, **create):
    with h5py.File(path, "r+") as f:
        del f[key]
        if create:
            f.create_dataset(key, **create)
        else:
            f[key] = data


# ----------------------------------------------------------------------- infinite sizes

def test_an_infinite_input_shape_in_a_file_names_the_node_and_field(tmp_path):
    path = tmp_path / "model.nir"
    nir.write(path, nir.NIRGraph.from_list(_lif()))
    _replace(path, "node/nodes/input/shape", np.array([np.inf]))
    with pytest.raises(VerificationError, match=r"model.nir: NIR node 'input' \(Input\): field "
                                                r"'shape' must hold integers >= 0, got \[inf\]"):
        load_nir(path, dt=DT)


def test_sizes_that_overflow_in_nirs_own_shape_arithmetic_print_no_warning(tmp_path):
    """nir computes output shapes from the file's sizes with numpy, in the reading
    worker, whose warnings a user would see on stderr (pytest records them instead,
    so the load runs in a plain interpreter)."""
    path = _conv_file(tmp_path)
    _replace(path, "node/nodes/conv/input_shape", np.array([2**62, 2**62]))
    _replace(path, "node/nodes/conv/padding", np.array([2**62, 2**62]))
    code = ("import sys\nfrom polyhal.interop.nir import load_nir\ntry:\n"
            f"    load_nir({str(path)!r}, dt={DT})\nexcept Exception as error:\n"
            "    print(type(error).__name__, error)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert re.match(r"VerificationError .*conv.nir: NIR node 'conv' \(Conv2d\) declares "
                    r"input_shape \[4611686018427387904, ", result.stdout), result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("stride", np.array([0, 1]), r"integers >= 1, got \[0, 1\]"),
    ("dilation", np.array([np.inf, 1]), r"integers >= 1, got \[inf, 1.0\]"),
    ("padding", np.array([np.inf, 0]), r"integers >= 0, got \[inf, 0.0\]"),
    ("input_shape", np.array([np.inf, 6]), r"integers >= 0, got \[inf, 6.0\]"),
    ("groups", np.inf, r"integers >= 1, got inf"),
])
def test_a_bad_integer_field_in_a_conv_file_names_the_node_and_field(tmp_path, field, value,
                                                                     expected):
    path = _conv_file(tmp_path)
    _replace(path, f"node/nodes/conv/{field}", value)
    with pytest.raises(VerificationError, match=rf"conv.nir: NIR node 'conv' \(Conv2d\): field "
                                                rf"'{field}' must hold {expected}"):
        load_nir(path, dt=DT)


def test_infinite_sizes_in_a_graph_object_name_the_node_and_field():
    graph = _chain([2], lif=_lif())
    graph.nodes["input"].input_type = {"input": np.array([np.inf])}
    with pytest.raises(VerificationError, match=r"NIR node 'input' \(Input\): shape must be a "
                                                r"list of sizes, got \[inf\]"):
        load_nir(graph, dt=DT)
    conv = nir.Conv2d(input_shape=None, weight=np.ones((2, 1, 3, 3)), stride=1, padding=0,
                      dilation=1, groups=1, bias=np.zeros(2))
    conv.groups = np.inf
    with pytest.raises(VerificationError, match=r"NIR node 'conv' \(Conv2d\): field 'groups' "
                                                r"must be 1 integer\(s\), got inf"):
        load_nir(_chain([1, 5, 6], conv=conv), dt=DT)


# ----------------------------------------------------------------------- the type entry

@pytest.mark.parametrize(("value", "shown"), [(np.array([b"NIRGraph"]), r"\[b?'NIRGraph'\]"),
                                              (5, "5")])
def test_a_top_level_type_that_is_not_one_string_says_so(tmp_path, value, shown):
    path = tmp_path / "model.nir"
    nir.write(path, nir.NIRGraph.from_list(_lif()))
    _replace(path, "node/type", value)
    with pytest.raises(SerializationError, match=rf"model.nir: the NIR graph: 'type' must be a "
                                                 rf"string, got {shown}"):
        load_nir(path, dt=DT)


# ----------------------------------------------------------------------- string bombs

@pytest.mark.parametrize(("key", "shape", "expected"), [
    ("node/nodes/lif/type", (1 << 28,), r"NIR node 'lif': 'type' holds 268435456 strings, "
                                        r"more than the 1 it may"),
    ("node/edges", (1 << 26, 2), r"the NIR graph: 'edges' holds 134217728 strings, more than "
                                 r"the 2097152 it may"),
])
def test_a_compressed_string_dataset_is_refused_before_it_is_decoded(tmp_path, key, shape,
                                                                     expected):
    path = tmp_path / "model.nir"
    nir.write(path, nir.NIRGraph.from_list(_lif()))
    _replace(path, key, shape=shape, dtype="S1", chunks=(1 << 18, *shape[1:]),
             compression="gzip", fillvalue=b"a")
    assert path.stat().st_size < 200_000
    start = time.perf_counter()
    with pytest.raises(LimitExceededError, match=rf"model.nir: {expected}"):
        load_nir(path, dt=DT)
    assert time.perf_counter() - start < 10  # it was a 60 s timeout and 2.6 GB


def test_a_very_long_fixed_length_string_is_refused(tmp_path):
    path = tmp_path / "model.nir"
    nir.write(path, nir.NIRGraph.from_list(_lif()))
    _replace(path, "node/nodes/lif/type", np.array(b"LIF".ljust(100_000), dtype="S100000"))
    with pytest.raises(LimitExceededError, match=r"NIR node 'lif': 'type' holds strings of "
                                                 r"100000 bytes, more than the limit of 1024"):
        load_nir(path, dt=DT)


def test_a_path_with_a_nul_byte_is_a_serialization_error(tmp_path):
    with pytest.raises(SerializationError, match=r"cannot read NIR file \(the path holds a NUL "
                                                 r"byte\)"):
        load_nir(str(tmp_path / "a\x00.nir"), dt=DT)


def test_a_delay_too_long_to_count_in_steps_is_refused_not_wrapped_around():
    """1e300 s is 1e303 steps at this dt: cast to int64 it wrapped to a negative count,
    and the reference passed the input straight through."""
    graph = _chain([1], d=nir.Delay(delay=np.array([1e300])))
    with pytest.raises(VerificationError, match=r"node 'd' \(snn.Delay\): a delay of 2e\+300 "
                                                r"steps \(dt=0.5\) is over the limit"):
        load_nir(graph, dt=DT)


def test_a_parse_that_runs_past_the_limit_is_stopped(tmp_path, monkeypatch):
    from polyhal.interop.nir import reader
    from polyhal.ir import Limits, use_limits

    path = tmp_path / "model.nir"
    nir.write(path, nir.NIRGraph.from_list(_lif()))
    monkeypatch.setattr(reader, "_read", lambda *args: time.sleep(30))  # as libhdf5 loops
    start = time.perf_counter()
    with use_limits(Limits(max_parse_seconds=0.5)), pytest.raises(
            SerializationError, match=r"model.nir: reading the NIR file did not finish within "
                                      r"0.5 s .* \(polyhal.ir.Limits.max_parse_seconds"):
        load_nir(path, dt=DT)
    assert time.perf_counter() - start < 10
