"""The ``onnx`` level: ONNX's own node test cases, from the installed onnx package.

A case is *eligible* when every node is in the default ONNX domain with an op
polyhal's core set has, and every tensor the model declares has a polyhal
dtype. A device gets the eligible cases whose ops it claims, each compared
with the outputs ONNX ships, at the tolerance ONNX's case gives. Cases whose
model polyhal cannot import (an attribute value it does not support, say) are
graded as failures naming the reason; cases the specification cannot settle
are listed, with reasons, in ``unsettled.toml``.

Collecting the cases runs ONNX's case scripts, which compute every expected
output with ONNX's own reference (about 14 s, most of it 3-D pooling). The
eligible cases are therefore kept on disk, under ``$POLYHAL_CACHE_DIR/onnx``
(:mod:`polyhal.cache`), in one ``.npz`` file read without pickle: the models
as protobuf bytes, the arrays as raw bytes with their dtype and shape, the
rest as JSON. Its name holds a digest of what decides its content (the onnx
version, this module's source, polyhal's core ops and ONNX dtypes); a file
that does not load is collected again and replaced.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polyhal.cache import cache_dir
from polyhal.conformance.cases import Case
from polyhal.conformance.profiles import Profile
from polyhal.conformance.tolerances import Tolerance
from polyhal.errors import ConformanceError, PolyhalError
from polyhal.hal.capabilities import Capabilities
from polyhal.ir import DType
from polyhal.ops.registry import all_ops, lookup
from polyhal.runtime.placement import covers


@dataclass(frozen=True)
class NodeCase:
    """One ONNX node test case, reduced to what grading needs."""

    name: str
    model: Any
    inputs: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray, ...]
    rtol: float
    atol: float
    ops: tuple[str, ...]


def _array(value: Any) -> np.ndarray:
    """A data-set entry as an array (ONNX ships some as TensorProtos, e.g. 16-bit floats)."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def _tensor_types(model: Any) -> list[int]:
    graph = model.graph
    codes = [v.type.tensor_type.elem_type for v in (*graph.input, *graph.output)]
    codes += [t.data_type for t in graph.initializer]
    return codes


def _eligible(model: Any) -> bool:
    from polyhal.interop.onnx.dtypes import FROM_ONNX

    graph = model.graph
    if any(n.domain not in ("", "ai.onnx") or lookup(n.op_type) is None for n in graph.node):
        return False
    if any(not v.type.HasField("tensor_type") for v in (*graph.input, *graph.output)):
        return False
    return all(code in FROM_ONNX for code in _tensor_types(model))


@functools.cache
def node_cases() -> tuple[NodeCase, ...]:
    """Every eligible node test case of the installed onnx (one per data set), from the
    disk cache when it holds them."""
    from google.protobuf.message import DecodeError

    path = cache_dir("onnx", create=False) / f"node-cases-{_content_key()}.npz"
    try:
        return _load(path)
    except (OSError, EOFError, ValueError, KeyError, IndexError, TypeError,
            zipfile.BadZipFile, DecodeError):
        pass  # absent, or not a file this version wrote: collect again
    cases = _collect()
    with contextlib.suppress(OSError, PolyhalError):  # the cache is an aid, never a failure
        _save(path, cases)
    return cases


def _content_key() -> str:
    """A digest of everything the eligible cases depend on."""
    import onnx

    from polyhal.interop.onnx.dtypes import FROM_ONNX

    parts = [onnx.__version__, Path(__file__).read_text(),
             ",".join(sorted(op.name for op in all_ops("core"))),
             ",".join(map(str, sorted(FROM_ONNX)))]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _collect() -> tuple[NodeCase, ...]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        collected = collect_testcases(None)
    cases = []
    for case in sorted(collected, key=lambda c: c.name):
        if case.kind != "node" or case.model is None or not _eligible(case.model):
            continue
        ops = tuple(dict.fromkeys(f"core.{n.op_type}" for n in case.model.graph.node))
        for index, (inputs, outputs) in enumerate(case.data_sets):
            name = case.name if len(case.data_sets) == 1 else f"{case.name}-{index}"
            cases.append(NodeCase(name, case.model, tuple(_array(a) for a in inputs),
                                  tuple(_array(a) for a in outputs), case.rtol, case.atol,
                                  ops))
    return tuple(cases)


def _save(path: Path, cases: tuple[NodeCase, ...]) -> None:
    """Write ``cases`` to ``path`` atomically (a concurrent reader sees the old file or
    the new one): every model and array as bytes in one blob, the rest as JSON."""
    chunks: list[bytes] = []
    size = 0

    def place(data: bytes) -> list[int]:
        nonlocal size
        chunks.append(data)
        size += len(data)
        return [size - len(data), len(data)]

    meta = []
    for case in cases:
        entry: dict[str, Any] = {"name": case.name, "rtol": case.rtol, "atol": case.atol,
                                 "ops": list(case.ops),
                                 "model": place(case.model.SerializeToString())}
        for role, values in (("inputs", case.inputs), ("outputs", case.outputs)):
            entry[role] = [[DType.from_numpy(a.dtype).value, list(a.shape),
                            place(np.ascontiguousarray(a).tobytes())] for a in values]
        meta.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as file:
            np.savez(file, blob=np.frombuffer(b"".join(chunks), np.uint8),
                     meta=np.frombuffer(json.dumps(meta).encode(), np.uint8))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _load(path: Path) -> tuple[NodeCase, ...]:
    """The cases :func:`_save` wrote to ``path``."""
    from onnx import ModelProto

    with np.load(path, allow_pickle=False) as stored:
        blob, meta = stored["blob"], json.loads(stored["meta"].tobytes())

    def array(dtype: str, shape: list[int], where: list[int]) -> np.ndarray:
        start, nbytes = where
        # copied: a view at an odd offset would be unaligned, which some kernels refuse
        return blob[start:start + nbytes].view(DType(dtype).numpy).reshape(shape).copy()

    return tuple(NodeCase(entry["name"],
                          ModelProto.FromString(array("uint8", [-1], entry["model"]).tobytes()),
                          tuple(array(*spec) for spec in entry["inputs"]),
                          tuple(array(*spec) for spec in entry["outputs"]),
                          float(entry["rtol"]), float(entry["atol"]), tuple(entry["ops"]))
                 for entry in meta)


def _refuse(error: PolyhalError, device: Any) -> tuple[bool, str]:
    raise error


def unavailable() -> str | None:
    """Why this level cannot run here (``None`` when it can)."""
    if importlib.util.find_spec("onnx") is None:
        return ("it takes its cases from the onnx package, which is not installed: "
                "pip install 'polyhal[onnx]'")
    return None


def generate(caps: Capabilities, profile: Profile) -> Iterator[Case]:
    """The node test cases whose ops a device with ``caps`` claims."""
    why = unavailable()
    if why is not None:
        raise ConformanceError(f"level onnx cannot run: {why}, or choose levels with --level")
    from polyhal.interop.onnx import load_onnx

    for node_case in node_cases():
        if not all(op in caps.ops for op in node_case.ops):
            continue
        case = Case(f"onnx/{node_case.name}", "onnx", node_case.ops[0], None, "onnx",
                    tolerance=Tolerance(atol=node_case.atol, rtol=node_case.rtol))
        try:
            graph = load_onnx(node_case.model)
        except PolyhalError as error:
            case.check = functools.partial(_refuse, error)
            yield case
            continue
        if not covers(caps, graph):
            continue  # a dtype the device does not claim
        case.graph = graph
        case.inputs = list(node_case.inputs)
        case.expected = list(node_case.outputs)
        case.dtype = graph.outputs[0].type.dtype.value if graph.outputs else None
        yield case
