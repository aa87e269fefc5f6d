"""Checkpoint files: round trip, atomic replacement, and every malformation a
clear CheckpointError (never unpickled)."""

from __future__ import annotations

import os
import stat
import zipfile

import numpy as np
import pytest

from polyhal.errors import CheckpointError
from polyhal.ir import Limits, use_limits
from polyhal.train import load_checkpoint, save_checkpoint


def test_round_trip(tmp_path):
    arrays = {"param/0.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
              "state/step": np.float32(3)}
    meta = {"step": 3, "sums": {"loss": 0.1 + 0.2}, "history": {"epochs": []}}
    path = save_checkpoint(tmp_path / "run.ckpt", arrays, meta)
    loaded = load_checkpoint(path)
    assert set(loaded.arrays) == set(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(loaded.arrays[name], array)
        assert loaded.arrays[name].dtype == np.asarray(array).dtype
    assert loaded.meta["sums"]["loss"] == 0.1 + 0.2  # floats round-trip exactly
    assert loaded.meta["step"] == 3


def test_a_failed_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, {"a": np.ones(2)}, {"step": 1})

    def broken_savez(stream, **arrays):
        stream.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(CheckpointError, match=r"run\.ckpt: cannot write it \(disk full\)"):
        save_checkpoint(path, {"a": np.zeros(2)}, {"step": 2})
    monkeypatch.undo()
    assert load_checkpoint(path).meta["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt"]  # no temporary left


def test_a_checkpoint_gets_the_umasks_permissions_and_an_unwritable_folder_is_named(
        tmp_path):
    path = save_checkpoint(tmp_path / "run.ckpt", {"a": np.ones(2)}, {"step": 1})
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CheckpointError, match=r"a-file/run\.ckpt: cannot use this path "
                       r"\(Not a directory\)"):  # refused before a fit trains
        save_checkpoint(tmp_path / "a-file" / "run.ckpt", {"a": np.ones(2)}, {"step": 1})


def test_missing_and_garbage_files(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "none.ckpt")
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"\x00not a zip")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(garbage)
    truncated = tmp_path / "truncated.ckpt"
    save_checkpoint(truncated, {"a": np.ones(1000)}, {"step": 1})
    truncated.write_bytes(truncated.read_bytes()[:300])
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(truncated)


def test_foreign_npz_and_wrong_versions(tmp_path):
    plain = tmp_path / "plain.npz"
    np.savez(plain, a=np.ones(2))
    with pytest.raises(CheckpointError, match="not a polyhal checkpoint"):
        load_checkpoint(plain)
    newer = tmp_path / "newer.ckpt"
    save_checkpoint(newer, {}, {})
    with zipfile.ZipFile(newer) as archive:
        assert "__meta__.npy" in archive.namelist()
    bad_meta = tmp_path / "bad.ckpt"
    with open(bad_meta, "wb") as stream:
        np.savez(stream, __meta__=np.frombuffer(b'{"format": "polyhal-checkpoint", '
                                                b'"version": 99}', np.uint8))
    with pytest.raises(CheckpointError, match="version 99 is not supported"):
        load_checkpoint(bad_meta)


def test_pickled_objects_are_never_loaded(tmp_path):
    path = tmp_path / "evil.ckpt"
    evil = np.empty(1, dtype=object)
    evil[0] = {"payload": "would run on unpickling"}
    with open(path, "wb") as stream:
        np.savez(stream, __meta__=np.frombuffer(b'{"format": "polyhal-checkpoint", '
                                                b'"version": 1}', np.uint8), obj=evil)
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(path)  # an object array would need unpickling: refused


def test_reserved_name(tmp_path):
    with pytest.raises(CheckpointError, match="reserved"):
        save_checkpoint(tmp_path / "x.ckpt", {"__meta__": np.ones(1)}, {})


def _with_meta(path, document: bytes) -> None:
    with open(path, "wb") as stream:
        np.savez(stream, __meta__=np.frombuffer(document, np.uint8))


def test_metadata_nested_too_deeply_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "deep.ckpt"
    _with_meta(path, b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(path)


def test_sizes_are_checked_before_anything_is_decompressed(tmp_path):
    path = tmp_path / "bomb.ckpt"  # 64 MiB of zeros compresses to about 64 KiB
    with open(path, "wb") as stream:
        np.savez_compressed(stream, __meta__=np.frombuffer(
            b'{"format": "polyhal-checkpoint", "version": 1}', np.uint8),
            zeros=np.zeros(1 << 24, np.float32))
    assert path.stat().st_size < 1 << 20
    with use_limits(Limits(max_total_bytes=1 << 20)), \
            pytest.raises(CheckpointError, match=r"bytes of arrays exceed the limit of 1048576"):
        load_checkpoint(path)
    assert load_checkpoint(path).arrays["zeros"].size == 1 << 24  # within the default limits
    _with_meta(path, b" " * 2048)
    with use_limits(Limits(max_file_bytes=1024)), \
            pytest.raises(CheckpointError, match="bytes of metadata exceed the limit of 1024"):
        load_checkpoint(path)
