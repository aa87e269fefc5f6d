"""``polyhal.files``: the one way polyhal reads a file a user names and writes one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from polyhal.errors import LimitExceededError, SerializationError
from polyhal.files import open_regular, probe_writable, read_limited, write_atomically


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield 0o644
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_write_that_fails_midway_leaves_the_file_as_it_was(tmp_path):
    (tmp_path / "f").write_text("previous")

    def half(stream):
        stream.write(b"half of it")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomically(tmp_path / "f", half)
    assert (tmp_path / "f").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_an_interrupted_write_leaves_no_temporary_file(tmp_path):
    def interrupted(stream):
        stream.write(b"part")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(tmp_path / "f", interrupted)
    assert list(tmp_path.iterdir()) == []


def test_a_symbolic_link_is_replaced_not_written_through(tmp_path):
    (tmp_path / "precious").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "precious")
    write_atomically(tmp_path / "link", b"new")
    assert (tmp_path / "precious").read_text() == "mine"
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "link").read_bytes() == b"new"


def test_a_folder_or_a_fifo_is_left_alone_not_replaced_by_a_file(tmp_path):
    """Renaming the new file over a FIFO or a device node replaced it (as root, even
    /dev/null): found by fuzzing train.fit(checkpoint=...)."""
    (tmp_path / "folder").mkdir()
    targets = [(tmp_path / "folder", "a folder", stat.S_ISDIR)]
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        targets.append((tmp_path / "fifo", "not a regular file", stat.S_ISFIFO))
    for path, kind, is_kind in targets:
        with pytest.raises(FileExistsError, match=f"{kind}, which is not replaced") as info:
            write_atomically(path, b"data")
        assert info.value.filename == str(path)
        assert is_kind(os.lstat(path).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p, _, _ in targets)


def test_a_path_with_a_nul_byte_is_an_os_error_naming_it(tmp_path):
    with pytest.raises(OSError, match="the path holds a NUL byte"):
        write_atomically(tmp_path / "a\x00b", b"data")


def test_a_new_file_gets_the_umask_permissions_not_mkstemps(tmp_path, umask_022):
    assert _mode(write_atomically(tmp_path / "f", b"x")) == umask_022


def test_a_folder_that_cannot_hold_the_file_is_named_not_the_temporary(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        write_atomically(tmp_path / "missing" / "f.bin", b"x")
    assert error.value.filename == str(tmp_path / "missing" / "f.bin")
    assert ".tmp" not in str(error.value)


def test_a_name_as_long_as_the_file_system_allows_is_written(tmp_path):
    name = "n" * 250 + ".npy"  # the temporary file's name must fit too
    assert write_atomically(tmp_path / name, b"x").read_bytes() == b"x"
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_model_files_get_the_umask_permissions(tmp_path, umask_022):
    from polyhal import ops
    from polyhal.interop.onnx import save_onnx
    from polyhal.ir import GraphBuilder, f32, save

    g = GraphBuilder("m")
    g.output(ops.relu(g.input("x", f32[2])))
    graph = g.build()
    save(graph, tmp_path / "m.json")
    save_onnx(graph, tmp_path / "m.onnx")
    assert {p.name: _mode(p) for p in tmp_path.iterdir()} == {
        "m.json": umask_022, "m.npz": umask_022, "m.onnx": umask_022}


def test_open_regular_refuses_a_folder_and_a_fifo_naming_the_path(tmp_path):
    with pytest.raises(SerializationError, match=rf"{tmp_path}: cannot read model file "
                                                 r"\(a folder\)"):
        open_regular(tmp_path, "model file")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(SerializationError, match=r"fifo: cannot read model file \(not a "
                                                     r"regular file\)"):
            open_regular(tmp_path / "fifo", "model file")


def test_read_limited_reads_at_most_the_limit(tmp_path):
    (tmp_path / "f").write_bytes(b"12345")
    assert read_limited(tmp_path / "f", 5, "model file") == b"12345"
    with pytest.raises(LimitExceededError, match=r"f: 5 bytes exceed the model file limit of "
                                                 r"4; raise it"):
        read_limited(tmp_path / "f", 4, "model file", "; raise it")


def test_probe_writable_makes_no_lasting_file_and_raises_where_none_can_be_made(tmp_path):
    probe_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(OSError):
        probe_writable(tmp_path / "missing")
    with pytest.raises(OSError):
        probe_writable("/proc/self/fd")  # a folder even root cannot add files to
