"""Mutators of a NIR model: the HDF5 groups and datasets of the file h5py wrote.

Values, types, edges, links (soft and external), deep nesting, variable-length
and compound dtypes, and datasets that inflate from a few bytes to gigabytes.
Only a file h5py wrote itself is edited, never one damaged at the byte level:
damaged HDF5 metadata can make libhdf5 loop in C, beyond any time limit.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
from mutate import Files, odd_values
from seeds import SeedModel

NIR_TYPES = ("NIRGraph", "Input", "Output", "LIF", "CubaLIF", "IF", "LI", "I", "Affine",
             "Linear", "Conv2d", "Flatten", "CubaLI", "AvgPool2d", "Bogus", "")


def _odd_dataset(rng: random.Random, old: Any) -> Any:
    choices = [np.array([]), np.array([-1.0]), np.array(np.nan), np.array([np.inf]),
               np.zeros((2, 2, 2, 2, 2)), np.array([1e300]), np.array([2**40]), np.array(0),
               np.array([True]), np.array([1 + 2j]), b"x", b"\xff\xfe", "LIF", np.array([b"a"])]
    if isinstance(old, np.ndarray) and old.dtype.kind in "biuf" and old.size:
        with np.errstate(all="ignore"):
            choices += [old * rng.choice((-1, 0, 1e30, np.nan, np.inf)), old.reshape(-1),
                        np.resize(old, old.size + 1), old.T.copy()]
    return rng.choice(choices)


def _nir_edit(handle: Any, rng: random.Random) -> str:
    """One edit of the HDF5 groups and datasets of a NIR file."""
    import h5py

    items: list[str] = []
    handle.visititems(lambda name, _: items.append(name))
    name = rng.choice(items)
    parent, _, leaf = name.rpartition("/")
    group = handle[parent] if parent else handle
    how = rng.choice(["values", "values", "values", "replace", "replace", "delete", "add",
                      "type", "edges", "link", "nest", "vlen", "inflate"])
    if how == "values":
        numeric = [i for i in items if isinstance(handle[i], h5py.Dataset)
                   and handle[i].dtype.kind in "biuf" and handle[i].size <= 1 << 16]
        if not numeric:
            return "nir.values: no small numeric dataset"
        name = rng.choice(numeric)
        handle[name][()] = odd_values(handle[name][()], rng)
        return f"nir.values {name}"
    if how == "type":
        name = rng.choice([i for i in items if i.endswith("type")] or items)
        parent, _, leaf = name.rpartition("/")
        group = handle[parent] if parent else handle
    if how == "edges":
        name = rng.choice([i for i in items if i.endswith("edges")] or items)
        parent, _, leaf = name.rpartition("/")
        group = handle[parent] if parent else handle
    item = group[leaf]
    old = item[()] if isinstance(item, h5py.Dataset) and item.size <= 1 << 16 else None
    del group[leaf]
    if how == "replace":
        group[leaf] = _odd_dataset(rng, old)
    elif how == "add":
        group[leaf] = old if old is not None else np.zeros(1)
        extra = rng.choice(("bogus", "metadata", "type", "input_type"))
        if extra not in group:
            group[extra] = np.array([1.0])
    elif how == "type":
        group[leaf] = rng.choice(NIR_TYPES)
    elif how == "edges":
        nodes = list(handle["node/nodes"]) if "node/nodes" in handle else ["x"]
        a, b = rng.choice(nodes), rng.choice(nodes)
        pairs = rng.choice([[["ghost", a]], [[a, a]], [[a, b], [b, a]], [], [a, b], [[a, b, a]]])
        group[leaf] = np.array(pairs, dtype=h5py.string_dtype()) if rng.random() < 0.9 \
            else np.array([[1, 2]])
    elif how == "link":
        group[leaf] = rng.choice([h5py.SoftLink("/node"), h5py.SoftLink("/missing"),
                                  h5py.ExternalLink("/etc/passwd", "/x"), handle["/node"]])
    elif how == "nest":
        inner = group.create_group(leaf)
        for _ in range(rng.choice((3, 40))):
            inner["type"] = "NIRGraph"
            inner["edges"] = np.zeros((0, 2), dtype=h5py.string_dtype())
            inner = inner.create_group("nodes").create_group("g")
        inner["type"] = "NIRGraph"
    elif how == "vlen":
        kind = rng.choice([h5py.vlen_dtype(np.int64), np.dtype([("a", "i4"), ("b", "f8")]),
                           h5py.enum_dtype({"a": 0, "b": 1})])
        group.create_dataset(leaf, shape=(2,), dtype=kind)
    else:
        count = rng.choice((1 << 21, 1 << 30))
        group.create_dataset(leaf, shape=(count,), dtype="f8", chunks=(1 << 16,),
                             compression="gzip", fillvalue=1.0)
    return f"nir.{how} {name}"


def mutate_nir(files: Files, rng: random.Random, seeds: Sequence[SeedModel]) -> str:
    """Edit the HDF5 groups and datasets of a NIR file that h5py wrote (never of one
    damaged at the byte level)."""
    import h5py

    buffer = io.BytesIO(files["model.nir"])  # type: ignore[arg-type]
    with h5py.File(buffer, "r+") as handle:
        description = _nir_edit(handle, rng)
    files["model.nir"] = buffer.getvalue()
    return description

