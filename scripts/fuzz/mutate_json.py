"""Mutators of a polyhal JSON model: its document and the npz that holds its tensors.

:func:`mutate_json` edits the parsed document (types, numbers, keys, names,
dims, dtypes, ops, attributes); :func:`mutate_npz` replaces, removes or adds
entries of the tensor file, among them a pickled object array that no loader
may ever unpickle (:data:`mutate.UNPICKLED` counts the ones that were).
"""

from __future__ import annotations

import copy
import io
import json
import math
import random
import zipfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from mutate import (
    DTYPE_NAMES,
    ODD_FLOATS,
    ODD_INTS,
    ODD_NAMES,
    ODD_SYMBOLS,
    OP_NAMES,
    Files,
    Tripwire,
    all_op_names,
    mutate_bytes,
    odd_attribute,
    odd_values,
    short_repr,
)
from seeds import SeedModel

ODD_JSON = (None, True, False, 0, -1, 2**64, 10**400, 1.5, float("nan"), "", "x", "nan", "inf",
            "float32", "t0", "batch", [], [1], [-1, 2], ["a"], {}, {"int": 3},
            {"ints": [1, "a"]}, {"tensor": "t0"}, {"float": "nan"}, {"string": 5})
NESTED = "\x00nested\x00"
"""Placeholder for a deeply nested list, expanded in the JSON text (json.dumps recurses)."""


def _short(value: Any) -> str:
    return "<deep list>" if value == NESTED else short_repr(value)


# ----------------------------------------------------------------- document

def _paths(doc: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    children = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for key, value in children:
        yield from _paths(value, (*prefix, key))


def _at(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _where(path: tuple) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path) or "document"


_JSON_EDITS: dict[str, tuple[Callable[[tuple, Any], bool], Callable[[Any, random.Random], Any]]]
_JSON_EDITS = {
    # edit: (which paths it applies to, the new value given the document)
    "nudge": (lambda p, v: "attrs" in p and isinstance(v, int) and not isinstance(v, bool),
              lambda d, r: r.choice((-3, -2, -1, 0, 1, 2, 3, 4, 5))),
    "retype": (lambda p, v: True, lambda d, r: copy.deepcopy(r.choice(ODD_JSON))),
    "number": (lambda p, v: isinstance(v, int | float),
               lambda d, r: r.choice((*ODD_INTS, *ODD_FLOATS, "nan", "inf", "1e999"))),
    "nest": (lambda p, v: True, lambda d, r: NESTED),
    "input": (lambda p, v: len(p) == 4 and p[0] == "nodes" and p[2] == "inputs",
              lambda d, r: r.choice([*_names(d), *ODD_NAMES[:2]])),
    "name": (lambda p, v: p[-1] == "name", lambda d, r: r.choice([*_names(d), *ODD_NAMES])),
    "dim": (lambda p, v: len(p) > 1 and p[-2] == "shape",
            lambda d, r: r.choice((*ODD_INTS, *ODD_SYMBOLS, 1.5, None))),
    "shape": (lambda p, v: p[-1] == "shape",
              lambda d, r: r.choice(([1] * 40, [], [2**40, 2**40], [0], "batch", [[2]]))),
    "dtype": (lambda p, v: p[-1] == "dtype", lambda d, r: r.choice(DTYPE_NAMES)),
    "op": (lambda p, v: p[-1] in ("op", "domain"),
           lambda d, r: r.choice((*OP_NAMES, "snn", "quant", "quantum", "core", "ai.onnx"))),
    "attr": (lambda p, v: len(p) == 4 and p[2] == "attrs",
             lambda d, r: {r.choice(("int", "float", "string", "dtype", "tensor", "ints",
                                     "floats", "strings", "graph")): r.choice(ODD_JSON)}),
    "ref": (lambda p, v: p[-1] == "key",
            lambda d, r: r.choice(("t0", "t1", "t9", "", "../t0", "t0.npy", "x" * 300))),
    "header": (lambda p, v: p in (("format",), ("version",)),
               lambda d, r: r.choice((0, -1, 2, 2**70, "1", 1.0, None, "polyhal.graph"))),
    "copy": (lambda p, v: True, lambda d, r: copy.deepcopy(_at(d, r.choice(list(_paths(d)))))),
}


def _names(doc: Any) -> list[str]:
    return [v for p in _paths(doc) if p and p[-1] == "name"
            for v in [_at(doc, p)] if isinstance(v, str)]


def _json_node_edit(doc: Any, rng: random.Random, how: str) -> str:
    """Give a node another registered op, or set an attribute its op declares to an odd
    value (encoded as the attribute's kind, or now and then as another kind)."""
    from polyhal.ops import lookup

    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    nodes = [n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []
    if not nodes:
        return f"json.{how}: no nodes"
    node = rng.choice(nodes)
    if how == "swap":
        node["domain"], node["op"] = rng.choice(all_op_names())
        if rng.random() < 0.5:
            node["attrs"] = {}
        return f"json.swap {node.get('name')!r} -> {node['domain']}.{node['op']}"
    op, domain = node.get("op"), node.get("domain", "core")
    opdef = lookup(op, domain) if isinstance(op, str) and isinstance(domain, str) else None
    specs = list(opdef.attr_specs.values()) if opdef is not None else []
    if not specs or not isinstance(node.get("attrs", {}), dict):
        return f"json.attribute {node.get('name')!r}: no attributes"
    spec = rng.choice(specs)
    kind = spec.kind.value if spec.kind.value != "tensor" or rng.random() < 0.2 else "ints"
    kind = kind if rng.random() < 0.9 else rng.choice(("int", "ints", "float", "string"))
    value = odd_attribute(kind, rng)
    if kind == "tensor":
        value = {"key": "t0", "dtype": rng.choice(DTYPE_NAMES[:10]), "shape": [2]}
    if kind in ("float", "floats"):
        value = json.loads(json.dumps(value).replace("NaN", '"nan"').replace(
            "-Infinity", '"-inf"').replace("Infinity", '"inf"'))
    node.setdefault("attrs", {})[spec.name] = {kind: value}
    return f"json.attribute {node.get('name')!r}.{spec.name}={{{kind!r}: {_short(value)}}}"


def _json_edit(doc: Any, rng: random.Random) -> str:
    """One structure-aware edit of a polyhal JSON document."""
    how = rng.choice([*_JSON_EDITS, "nudge", "nudge", "drop", "add", "order", "attribute",
                      "attribute", "attribute", "swap"])
    if how in ("attribute", "swap"):
        return _json_node_edit(doc, rng, how)
    paths = [p for p in _paths(doc) if p]
    if how == "order":
        nodes = doc.get("nodes") if isinstance(doc, dict) else None
        if isinstance(nodes, list):
            rng.shuffle(nodes)
        return "json.order nodes"
    if how in ("drop", "add"):
        path = rng.choice([p for p in [(), *paths] if isinstance(_at(doc, p), dict | list)])
        holder = _at(doc, path)
        if how == "drop" and holder:
            key = rng.choice(list(holder) if isinstance(holder, dict) else range(len(holder)))
            del holder[key]
            return f"json.drop {_where((*path, key))}"
        value = copy.deepcopy(rng.choice(ODD_JSON))
        if isinstance(holder, list):
            holder.append(value)
            key = len(holder) - 1
        else:
            key = rng.choice(("extra", "name", "axis", "perm", "alpha", "to", "value", "key"))
            holder[key] = value
        return f"json.add {_where((*path, key))}={_short(value)}"
    applies, new_value = _JSON_EDITS[how]
    path = rng.choice([p for p in paths if applies(p, _at(doc, p))] or paths)
    value = new_value(doc, rng)
    _at(doc, path[:-1])[path[-1]] = value
    return f"json.{how} {_where(path)}={_short(value)}"


def mutate_json(files: Files, rng: random.Random, seeds: Sequence[SeedModel]) -> str:
    """Edit the parsed JSON document: types, numbers, keys, names, dims, dtypes, ops."""
    try:
        doc = json.loads(files["model.json"])  # type: ignore[arg-type]
    except (ValueError, KeyError, TypeError, RecursionError):
        return mutate_bytes(files, rng, seeds, "model.json")
    if not isinstance(doc, dict | list) or not doc:
        return mutate_bytes(files, rng, seeds, "model.json")
    description = _json_edit(doc, rng)
    depth = rng.choice((64, 2000, 200_000))
    text = json.dumps(doc).replace(json.dumps(NESTED), "[" * depth + "]" * depth)
    files["model.json"] = text.encode()
    return description


# ----------------------------------------------------------------- npz

def _npy(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=True)
    return buffer.getvalue()


def _small_array(npy: bytes) -> np.ndarray:
    """The array in ``npy``; a stand-in if it does not parse or is big."""
    try:
        stream = io.BytesIO(npy)
        version = np.lib.format.read_magic(stream)
        shape, _, _ = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)(stream)
        if math.prod(shape) <= 1 << 16:
            return np.lib.format.read_array(io.BytesIO(npy), allow_pickle=False)
    except (ValueError, OSError, EOFError, SyntaxError):
        pass
    return np.zeros(3, np.float32)


def _npy_entry(rng: random.Random, npy: bytes) -> tuple[bytes | None, str]:
    """A replacement for the npy entry ``npy`` (None: remove it), and what it is."""
    array = _small_array(npy)
    how = rng.choice(["values", "values", "dtype", "shape", "drop", "pickle", "header",
                      "version", "fortran", "inflate"])
    if how == "values":
        return _npy(odd_values(array, rng)), "odd values"
    if how == "dtype":
        dtype = rng.choice(["float64", "float16", "int8", "int64", "bool", "complex64", ">f4",
                            "<U2", "S3", "V4", "datetime64[s]"])
        return _npy(np.zeros(array.shape, dtype)), f"dtype {dtype}"
    if how == "shape":
        shape = rng.choice([(), (array.size,), (array.size + 1,), (1, *array.shape), (0,),
                            array.shape[::-1]])
        return _npy(np.resize(array, shape)), f"shape {shape}"
    if how == "drop":
        return None, "removed"
    if how == "pickle":
        return _npy(np.array([Tripwire(), 1], dtype=object)), "pickled object array"
    if how == "header":
        shape = rng.choice([(2**40,), (-1,), (2**62, 2**62), (3, 0), (2,) * 40])
        buffer = io.BytesIO()
        np.lib.format.write_array_header_1_0(buffer, {
            "descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False,
            "shape": shape})
        return buffer.getvalue() + array.tobytes(), f"header shape {shape}"
    if how == "version":
        version = rng.choice([(2, 0), (3, 0)])
        return _npy(array, version), f"npy version {version}"
    if how == "fortran":
        return _npy(np.asfortranarray(np.resize(array, (2, 3)))), "fortran order"
    count = rng.choice([1 << 16, 1 << 21])  # small once compressed, large once inflated
    return _npy(np.zeros(count, array.dtype)), f"{count} zeros"


def mutate_npz(files: Files, rng: random.Random, seeds: Sequence[SeedModel]) -> str:
    """Replace, remove, add or re-compress entries of the tensor file."""
    try:
        with zipfile.ZipFile(io.BytesIO(files["model.npz"])) as archive:  # type: ignore[arg-type]
            entries = {info.filename: archive.read(info) for info in archive.infolist()}
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError, RuntimeError,
            TypeError):
        return mutate_bytes(files, rng, seeds, "model.npz" if "model.npz" in files else None)
    name = rng.choice([*entries, "t99.npy", "../evil.npy"])
    replacement, what = _npy_entry(rng, entries.get(name, _npy(np.zeros(2))))
    if replacement is None:
        entries.pop(name, None)
    else:
        entries[name] = replacement
    method = rng.choice([zipfile.ZIP_STORED] * 3 + [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2,
                                                    zipfile.ZIP_LZMA])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for entry, data in entries.items():
            archive.writestr(zipfile.ZipInfo(entry, (1980, 1, 1, 0, 0, 0)), data, method)
    files["model.npz"] = buffer.getvalue()
    return f"npz {name}: {what} (zip method {method})"

