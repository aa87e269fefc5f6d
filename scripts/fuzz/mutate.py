"""Mutators: each changes the files of one fuzz case in place and says what it did.

A mutator takes the case's files (name -> bytes or :class:`~seeds.Link`), a
seeded ``random.Random`` and the seeds of the format (for splicing), and
returns a short description. :func:`mutate_bytes` works on any file; the
structure-aware mutators, one module per format (:mod:`mutate_json` for the
polyhal JSON document and its npz, :mod:`mutate_onnx`, :mod:`mutate_nir`),
parse theirs first and fall back to a byte-level mutation of a file that no
longer parses. :func:`mutate` applies one to three of them, structure-aware
first, so that h5py never opens a file damaged on purpose (damaged HDF5
metadata can make libhdf5 loop in C, beyond the reach of any time limit).

This module holds what the formats share: the odd values, the byte-level
mutations and the pickle tripwire.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from seeds import FileContent, SeedModel

Files = dict[str, FileContent]
Mutator = Callable[[Files, random.Random, Sequence[SeedModel]], str]

UNPICKLED: list[str] = []
"""Grows when a pickle planted by :func:`mutate_json.mutate_npz` is loaded: a loader ran
code from a file."""


def record_unpickling(where: str) -> str:
    """What a planted pickle calls if anything unpickles it (nothing should)."""
    UNPICKLED.append(where)
    return where


class Tripwire:
    """Pickles as a call of :func:`record_unpickling`."""

    def __reduce__(self) -> tuple[Any, ...]:
        return record_unpickling, ("npz object array",)


# ----------------------------------------------------------------- odd values

ODD_INTS = (-(2**63), -(2**31), -1, 0, 1, 2, 3, 7, 255, 2**31, 2**32, 2**40, 2**62, 2**63 - 1)
ODD_FLOATS = (float("nan"), float("inf"), -float("inf"), -0.0, 1e-310, 1e308, -1.5)
ODD_NAMES = ("", "ghost", "x" * 5000, "a/b", "..", "\x00", "é", " ")
ODD_SYMBOLS = ("", "n", "-", "n n", "2*batch", "batch*batch", "_x", "é", "-1", "1e3",
               "(" * 40 + "n" + ")" * 40, "n" * 300, "+".join(["n"] * 200))
DTYPE_NAMES = ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16",
               "float32", "float64", "uint64", "complex64", "object", "float8", "", "Float32")
OP_NAMES = ("Relu", "Conv", "Gather", "Reshape", "Expand", "Tile", "Range", "Pad", "LRN",
            "ConstantOfShape", "OneHot", "Split", "Loop", "If", "Scan", "LIF", "Requantize",
            "Expectation", "Bogus", "")
ODD_STRINGS = ("", "bogus", "constant", "reflect", "edge", "wrap", "NOTSET", "SAME_UPPER",
               "VALID", "linear", "nearest", "euler", "exact", "v_reset", "subtract", "tanh",
               "none", "\xff", "x" * 1000)


def odd_attribute(kind: str, rng: random.Random) -> Any:
    """An odd value for an attribute of ``kind`` (``int``, ``floats``, ...; see
    :class:`polyhal.ops.AttrKind`), as a JSON-ready Python value."""
    small = (-2, -1, 0, 1, 2, 3, 4, 5)
    if kind in ("int", "float", "string"):
        pool = {"int": (*ODD_INTS, *small), "float": ODD_FLOATS, "string": ODD_STRINGS}[kind]
        return rng.choice(pool)
    if kind in ("ints", "floats", "strings"):
        pool = {"ints": rng.choice((ODD_INTS, small)), "floats": ODD_FLOATS,
                "strings": ODD_STRINGS}[kind]
        return [rng.choice(pool) for _ in range(rng.choice((0, 1, 2, 2, 3, 4, 6, 40)))]
    return rng.choice(DTYPE_NAMES)


def all_op_names() -> list[tuple[str, str]]:
    """(domain, op) of every op polyhal registers."""
    from polyhal.ops import all_ops

    return sorted((op.domain, op.name) for op in all_ops())


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def odd_values(array: np.ndarray, rng: random.Random) -> np.ndarray:
    """``array``'s dtype and shape, holding odd values (NaN, inf, extremes, small ints)."""
    if array.dtype.kind in "biu":
        info = np.iinfo(array.dtype) if array.dtype.kind != "b" else None
        choices = [0, 1] if info is None else [info.min, info.max, -1, 0, 1, 2, 3, 100]
    else:
        choices = [*ODD_FLOATS[:4], 0.0, 1e30, -1.0, 0.5]
    gen = np.random.default_rng(rng.getrandbits(32))
    values = gen.choice(np.array([c for c in choices if c is not None and (
        array.dtype.kind != "u" or c >= 0)]), array.shape)
    with np.errstate(all="ignore"):
        return values.astype(array.dtype)


# ----------------------------------------------------------------- bytes

def mutate_bytes(files: Files, rng: random.Random, seeds: Sequence[SeedModel],
                 name: str | None = None) -> str:
    """Flip, set, insert, delete, duplicate, truncate or splice bytes of one file (``name``,
    else most often the main file)."""
    if name is None:
        names = [n for n, content in files.items() if isinstance(content, bytes)]
        name = seeds[0].main if seeds[0].main in names and rng.random() < 0.7 \
            else rng.choice(names)
    data = bytearray(files[name])  # type: ignore[arg-type]
    at = rng.randrange(len(data) + 1)
    how = rng.choice(["flip", "set", "int", "insert", "delete", "duplicate", "truncate",
                      "splice"])
    if not data and how in ("flip", "set"):
        how = "insert"
    if how == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif how == "set":
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
    elif how == "int":
        width = rng.choice((1, 2, 4, 8))
        value = rng.choice(ODD_INTS) % (1 << (8 * width))
        data[at:at + width] = value.to_bytes(width, rng.choice(("little", "big")))
    elif how == "insert":
        data[at:at] = rng.randbytes(rng.randint(1, 64))
    elif how == "delete":
        del data[at:at + rng.randint(1, max(1, len(data) // 4))]
    elif how == "duplicate":
        start = rng.randrange(len(data) + 1)
        data[at:at] = data[start:start + rng.randint(1, 256)]
    elif how == "truncate":
        del data[at:]
    else:
        other = rng.choice(seeds).files.get(name)
        if isinstance(other, bytes):
            data = data[:at] + other[rng.randrange(len(other) + 1):]
    files[name] = bytes(data)
    return f"bytes.{how} {name}@{at}"


# ----------------------------------------------------------------- any format

def structured_mutators(fmt: str) -> tuple[Mutator, ...]:
    """The structure-aware mutators of format ``fmt`` (one listed twice is picked twice as
    often)."""
    # imported here, not at the top: each format's module imports this one's shared values
    from mutate_json import mutate_json, mutate_npz
    from mutate_nir import mutate_nir
    from mutate_onnx import mutate_onnx, mutate_onnx_utf8

    return {"json": (mutate_json, mutate_json, mutate_npz),
            "onnx": (mutate_onnx, mutate_onnx, mutate_onnx, mutate_onnx, mutate_onnx_utf8),
            "nir": (mutate_nir,)}[fmt]


def mutate(fmt: str, files: Files, rng: random.Random, seeds: Sequence[SeedModel]) -> list[str]:
    """Apply one to three mutations to ``files`` of format ``fmt``; what each did.

    >>> mutate("json", files, random.Random("json:0:0"), seeds_of("json"))  # doctest: +SKIP
    ['json.dim .inputs[0].shape[0]=-1']
    """
    count = rng.choice((1, 1, 1, 2, 2, 3))
    structured = sum(rng.random() < 0.7 for _ in range(count))
    done = []
    for _ in range(structured):
        mutator = rng.choice(structured_mutators(fmt))
        before = dict(files)
        try:
            done.append(mutator(files, rng, seeds))
        except Exception as exc:  # an edit h5py or protobuf refuses to write: skip it
            files.clear()
            files.update(before)
            done.append(f"{mutator.__name__} skipped ({type(exc).__name__}: {exc})")
    done += [mutate_bytes(files, rng, seeds) for _ in range(count - structured)]
    return done
