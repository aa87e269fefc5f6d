"""The onnx level's cases come from a disk cache that holds exactly what collecting them
gives, is read without pickle, and is rebuilt when it does not load."""

from __future__ import annotations

import numpy as np
import pytest

from polyhal.conformance.levels import onnx_node


def _same(a: onnx_node.NodeCase, b: onnx_node.NodeCase) -> bool:
    arrays = list(zip((*a.inputs, *a.outputs), (*b.inputs, *b.outputs), strict=True))
    return ((a.name, a.rtol, a.atol, a.ops, a.model) == (b.name, b.rtol, b.atol, b.ops, b.model)
            and all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
                    for x, y in arrays))


def _all_same(xs: tuple[onnx_node.NodeCase, ...], ys: tuple[onnx_node.NodeCase, ...]) -> bool:
    return all(_same(a, b) for a, b in zip(xs, ys, strict=True))


def test_the_cache_holds_every_case_byte_for_byte(tmp_path):
    cases = onnx_node.node_cases()
    path = tmp_path / "cases.npz"
    onnx_node._save(path, cases)
    loaded = onnx_node._load(path)
    assert len(loaded) == len(cases) > 600
    assert _all_same(cases, loaded)
    dtypes = {str(x.dtype) for case in loaded for x in case.inputs}
    assert {"bfloat16", "float16", "bool", "int64"} <= dtypes
    assert all(x.flags.aligned and x.flags.writeable for case in loaded for x in case.inputs)


@pytest.fixture
def collected(tmp_path, monkeypatch):
    """A cache under ``tmp_path`` and a collection that records its calls (it returns a
    few real cases, so the test does not wait for onnx's case scripts)."""
    some = onnx_node.node_cases()[:5]
    calls: list[int] = []
    monkeypatch.setenv("POLYHAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(onnx_node, "_collect", lambda: calls.append(1) or some)
    onnx_node.node_cases.cache_clear()
    yield some, calls
    onnx_node.node_cases.cache_clear()


def _fresh_cases() -> tuple[onnx_node.NodeCase, ...]:
    onnx_node.node_cases.cache_clear()
    return onnx_node.node_cases()


def test_cases_are_collected_once_then_loaded(collected, tmp_path):
    some, calls = collected
    assert _all_same(_fresh_cases(), some)
    assert calls == [1]
    files = list((tmp_path / "onnx").iterdir())
    assert len(files) == 1 and files[0].name.startswith("node-cases-")
    assert _all_same(_fresh_cases(), some)
    assert calls == [1]


@pytest.mark.parametrize("damage", ["empty", "truncated", "not a zip", "pickled", "wrong meta"])
def test_a_damaged_cache_is_collected_again_and_replaced(collected, tmp_path, damage):
    some, calls = collected
    _fresh_cases()
    path = next((tmp_path / "onnx").iterdir())
    good = path.read_bytes()
    if damage == "pickled":  # an object array would need pickle to load: never unpickled
        np.savez(path, blob=np.zeros(4, np.uint8), meta=np.array([{"x": 1}], dtype=object))
    elif damage == "wrong meta":
        np.savez(path, blob=np.zeros(4, np.uint8),
                 meta=np.frombuffer(b'[{"name": "x", "inputs": [[1]]}]', np.uint8))
    else:
        path.write_bytes({"empty": b"", "truncated": good[:len(good) // 2],
                          "not a zip": b"polyhal"}[damage])
    assert _all_same(_fresh_cases(), some)
    assert calls == [1, 1]
    assert _all_same(onnx_node._load(path), some)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left


def test_a_cache_that_cannot_be_written_leaves_the_cases_and_no_partial_file(
        collected, tmp_path):
    some, calls = collected
    (tmp_path / "onnx").write_text("a file where the folder should be")
    assert _all_same(_fresh_cases(), some)
    assert calls == [1]
    assert [p.name for p in tmp_path.iterdir()] == ["onnx"]
