"""The valid models the fuzzer starts from, as the bytes of their files.

Each seed is a tiny graph built with the polyhal builder and written by
polyhal's own savers (:func:`polyhal.ir.save`, :func:`polyhal.interop.onnx.save_onnx`,
:func:`polyhal.interop.nir.save_nir`), or, for NIR, a tiny network written with
``nir.write``. Files are named ``model.<ext>`` so that every case of a format
has the same names; the bytes are the same on every run (the npz's zip
timestamps are fixed), so a case id always names the same input.

>>> [seed.name for seed in seeds_of("json")]  # doctest: +SKIP
['mlp', 'conv', 'symbolic', 'mixed', 'embedding']

ONNX cases also start from ONNX's node test cases (:func:`onnx_node_seeds`), half
of them: those reach every op's own attribute and input checks.
"""

from __future__ import annotations

import functools
import io
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polyhal import ops
from polyhal.ir import DType, Graph, GraphBuilder, b8, f16, f32, i8, i64, save

FORMATS = ("json", "onnx", "nir")
"""The model formats the fuzzer reads, by file extension."""


@dataclass(frozen=True)
class Link:
    """A symbolic link among a case's files (pointing outside the folder, for instance)."""

    target: str


FileContent = bytes | Link


@dataclass(frozen=True)
class SeedModel:
    """One valid model: its files by name, and the one a loader opens."""

    name: str
    main: str
    files: dict[str, FileContent]


def _weights(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.normal(0, 0.5, shape).astype(np.float32)


def mlp() -> Graph:
    """A ReLU MLP of width 4 over a symbolic batch, ending in a softmax."""
    rng = np.random.default_rng(0)
    g = GraphBuilder("mlp")
    x = g.input("x", f32["batch", 4])
    h = ops.relu(x @ _weights(rng, 4, 4) + np.zeros(4, np.float32))
    g.output(ops.softmax(h @ _weights(rng, 4, 2) + np.ones(2, np.float32), axis=-1), name="y")
    return g.build()


def conv() -> Graph:
    """A 3x3 convolution, max pooling and global average pooling on a 2x6x6 image."""
    rng = np.random.default_rng(1)
    g = GraphBuilder("conv")
    x = g.input("x", f32[1, 2, 6, 6])
    y = ops.conv(x, g.constant(_weights(rng, 3, 2, 3, 3)), g.constant(np.zeros(3, np.float32)),
                 pads=[1, 1, 1, 1], strides=[1, 1])
    y = ops.max_pool(ops.relu(y), kernel_shape=[2, 2], strides=[2, 2])
    g.output(ops.flatten(ops.global_average_pool(y), axis=1), name="y")
    return g.build()


def symbolic() -> Graph:
    """Layer norm, transpose, reduce, concat and reshape over ``[batch, seq, 4]``."""
    g = GraphBuilder("symbolic")
    x = g.input("x", f32["batch", "seq", 4])
    n = ops.layer_normalization(x, g.constant(np.ones(4, np.float32)),
                                g.constant(np.zeros(4, np.float32)), axis=-1)
    mean = ops.reduce_mean(ops.transpose(n, perm=[0, 2, 1]), np.array([2], np.int64), keepdims=0)
    g.output(mean, name="mean")
    g.output(ops.reshape(ops.concat(x, x, axis=1), np.array([0, -1], np.int64)), name="flat")
    return g.build()


def mixed() -> Graph:
    """Several dtypes (int64, float16, bool, int8, bfloat16) and attribute kinds (int, ints,
    float, string, dtype, tensor)."""
    g = GraphBuilder("mixed")
    idx = g.input("idx", i64[3])
    half = g.input("h", f16[2, 3])
    mask = g.input("m", b8[2, 3])
    small = g.input("q", i8[2, 3])
    picked = ops.gather(g.constant(np.arange(12, dtype=np.float32).reshape(4, 3)), idx, axis=0)
    chosen = ops.where(mask, ops.cast(half, to=DType.FLOAT32),
                       g.constant(np.full((2, 3), -1, np.float32)))
    clipped = ops.clip(chosen, g.constant(np.float32(-0.5)), g.constant(np.float32(0.5)))
    ones = ops.cast(g.constant(np.ones(3, DType.BFLOAT16.numpy)), to=DType.FLOAT32)
    g.output(ops.pad(picked + ones, np.array([0, 1, 0, 1], np.int64), mode="reflect"),
             name="padded")
    g.output(ops.leaky_relu(clipped, alpha=0.25), name="leaky")
    g.output(ops.cast(small, to=DType.INT32) + np.int32(3), name="ints")
    g.output(ops.constant_of_shape(g.constant(np.array([2, 2], np.int64)),
                                   value=np.array([7], np.int64)), name="sevens")
    return g.build()


def embedding() -> Graph:
    """A gather from a 64x4 table: 1 KiB of weights, enough for ONNX external data."""
    g = GraphBuilder("embedding")
    tokens = g.input("tokens", i64["batch", "seq"])
    table = g.constant(_weights(np.random.default_rng(2), 64, 4))
    g.output(ops.reduce_sum(ops.gather(table, tokens, axis=0), np.array([1], np.int64),
                            keepdims=0), name="y")
    return g.build()


GRAPHS: tuple[Callable[[], Graph], ...] = (mlp, conv, symbolic, mixed, embedding)
"""The seed graphs of the JSON and ONNX formats."""


def _canonical_npz(data: bytes) -> bytes:
    """The npz ``data`` re-zipped with fixed timestamps, so that its bytes never change."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(zipfile.ZipInfo(info.filename, (1980, 1, 1, 0, 0, 0)),
                            source.read(info))
    return out.getvalue()


def _read_folder(folder: Path) -> dict[str, FileContent]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _json_seeds(scratch: Path) -> list[SeedModel]:
    seeds = []
    for build in GRAPHS:
        folder = scratch / f"json-{build.__name__}"
        folder.mkdir()
        save(build(), folder / "model.json")
        files = _read_folder(folder)
        files["model.npz"] = _canonical_npz(files["model.npz"])  # type: ignore[arg-type]
        seeds.append(SeedModel(build.__name__, "model.json", files))
    return seeds


def _onnx_seeds(scratch: Path) -> list[SeedModel]:
    from polyhal.interop.onnx import save_onnx

    variants: list[tuple[str, Callable[[], Graph], dict]] = [
        (build.__name__, build, {}) for build in GRAPHS]
    variants += [("mlp-opset11", mlp, {"opset": 11}), ("conv-opset9", conv, {"opset": 9}),
                 ("embedding-external", embedding, {"external_data": True})]
    seeds = []
    for name, build, options in variants:
        folder = scratch / f"onnx-{name}"
        folder.mkdir()
        save_onnx(build(), folder / "model.onnx", **options)
        seeds.append(SeedModel(name, "model.onnx", _read_folder(folder)))
    return seeds


def _nir_networks() -> list[tuple[str, object]]:
    import nir

    lif = nir.LIF(tau=np.full(3, 2e-3), r=np.ones(3), v_leak=np.zeros(3),
                  v_threshold=np.full(3, 0.5))
    cuba = nir.CubaLIF(tau_syn=np.full(3, 5e-3), tau_mem=np.full(3, 2e-3), r=np.ones(3),
                       v_leak=np.zeros(3), v_threshold=np.full(3, 0.5), w_in=np.ones(3))
    conv2d = nir.Conv2d(input_shape=(4, 4), weight=np.ones((2, 1, 3, 3)), stride=1, padding=1,
                        dilation=1, groups=1, bias=np.zeros(2))
    sizes = np.array([2, 2])
    return [
        ("affine-lif", nir.NIRGraph.from_list(
            nir.Affine(weight=np.ones((3, 2)), bias=np.zeros(3)), lif)),
        ("linear-cubalif", nir.NIRGraph.from_list(nir.Linear(weight=np.ones((3, 2))), cuba)),
        ("conv-if-pool", nir.NIRGraph.from_list(
            conv2d, nir.IF(r=np.ones((2, 4, 4)), v_threshold=np.ones((2, 4, 4))),
            nir.SumPool2d(kernel_size=sizes, stride=sizes, padding=np.array([0, 0])),
            nir.Flatten(input_type={"input": np.array([2, 2, 2])}, start_dim=0, end_dim=-1))),
        ("leaky-chain", nir.NIRGraph.from_list(
            nir.Scale(scale=np.array([1.0, 2.0])),
            nir.LI(tau=np.full(2, 1e-2), r=np.ones(2), v_leak=np.zeros(2)), nir.I(r=np.ones(2)),
            nir.Delay(delay=np.array([1e-3, 2e-3])), nir.Threshold(threshold=np.full(2, 0.1)))),
    ]


def _nir_seeds(scratch: Path) -> list[SeedModel]:
    import nir

    from polyhal.interop.nir import load_nir, save_nir

    seeds = []
    for name, network in _nir_networks():
        buffer = io.BytesIO()
        nir.write(buffer, network)
        seeds.append(SeedModel(name, "model.nir", {"model.nir": buffer.getvalue()}))
    # One file as polyhal's exporter writes it, read back from the first network.
    first = scratch / "first.nir"
    first.write_bytes(seeds[0].files["model.nir"])  # type: ignore[arg-type]
    exported = scratch / "model.nir"
    save_nir(load_nir(first, dt=1e-3), exported)
    seeds.append(SeedModel("affine-lif-exported", "model.nir",
                           {"model.nir": exported.read_bytes()}))
    return seeds


_BUILDERS = {"json": _json_seeds, "onnx": _onnx_seeds, "nir": _nir_seeds}


@functools.cache
def onnx_node_seeds() -> tuple[SeedModel, ...]:
    """ONNX's own node test cases (one model per op and variant, shipped with the onnx
    package), as seeds that reach every op's attribute checks."""
    from polyhal.conformance.levels.onnx_node import node_cases

    return tuple(SeedModel(f"node:{case.name}", "model.onnx",
                           {"model.onnx": case.model.SerializeToString()})
                 for case in node_cases())


@functools.cache
def seeds_of(fmt: str) -> tuple[SeedModel, ...]:
    """The seed models of format ``fmt`` (``json``, ``onnx`` or ``nir``), built once."""
    with tempfile.TemporaryDirectory(prefix="polyhal-fuzz-seeds-") as scratch:
        return tuple(_BUILDERS[fmt](Path(scratch)))
