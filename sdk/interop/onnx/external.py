"""External tensor data: ONNX tensors whose bytes live in a file beside the model.

Reading is confined to the model's folder: a ``location`` that is absolute,
contains ``..``, or resolves (through symlinks) outside the folder is refused,
as is a missing or non-regular file. ``offset`` and ``length`` are checked
against the file's size and against the tensor's declared size, which the
caller has already checked against :class:`~polyhal.ir.Limits`, before any
byte is read. Every problem is a :class:`SerializationError` naming the
tensor and the file.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from onnx import TensorProto

from polyhal.errors import SerializationError

DATA_SUFFIX = ".data"
ALIGNMENT = 64


def _entries(tensor: TensorProto, where: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key in entries:
            raise SerializationError(f"{where}: external data key {entry.key!r} appears twice")
        entries[entry.key] = entry.value
    return entries


def _count(entries: dict[str, str], key: str, where: str) -> int | None:
    text = entries.get(key)
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise SerializationError(f"{where}: external data {key} {text[:40]!r} is not a "
                                 "non-negative integer")
    return int(text)


def resolve_location(folder: Path, location: str, where: str) -> Path:
    """The file ``location`` names, inside ``folder``; :class:`SerializationError` otherwise."""
    if not location:
        raise SerializationError(f"{where}: external data has no location")
    if "\x00" in location:
        raise SerializationError(f"{where}: external data location {location!r} holds a NUL")
    windows = PureWindowsPath(location)
    if (PurePosixPath(location).is_absolute() or windows.is_absolute() or windows.drive
            or location.startswith(("/", "\\")) or os.path.isabs(location)):
        raise SerializationError(f"{where}: external data location {location!r} is an absolute "
                                 "path; it must be relative to the model's folder")
    if ".." in location.replace("\\", "/").split("/"):
        raise SerializationError(f"{where}: external data location {location!r} contains "
                                 "'..'; it must stay inside the model's folder")
    root = folder.resolve()
    target = (root / location).resolve()
    if not target.is_relative_to(root):
        raise SerializationError(f"{where}: external data location {location!r} resolves to "
                                 f"{target}, outside the model's folder {root}")
    return target


def read_external(tensor: TensorProto, nbytes: int, folder: Path | None, where: str) -> bytes:
    """The ``nbytes`` bytes of an external ``tensor`` (already checked against the limits)."""
    entries = _entries(tensor, where)
    location = entries.get("location", "")
    if folder is None:
        raise SerializationError(f"{where}: external data {location!r} can only be read from "
                                 "a model loaded from its file (its folder is unknown)")
    path = resolve_location(folder, location, where)
    offset = _count(entries, "offset", where) or 0
    length = _count(entries, "length", where)
    if length is not None and length != nbytes:
        raise SerializationError(f"{where}: external data length {length} differs from the "
                                 f"{nbytes} bytes its dims and type need")
    try:
        if not path.exists():
            raise SerializationError(f"{where}: external data file {location!r} is missing "
                                     f"({path})")
        if not path.is_file():
            raise SerializationError(f"{where}: external data {location!r} is not a regular "
                                     "file")
        size = path.stat().st_size
        if offset + nbytes > size:
            raise SerializationError(
                f"{where}: external data at offset {offset} with length {nbytes} runs past the "
                f"end of {location!r} ({size} bytes)")
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(nbytes)
    except OSError as exc:
        raise SerializationError(f"{where}: cannot read external data {location!r} "
                                 f"({exc.strerror or exc})") from None
    if len(data) != nbytes:
        raise SerializationError(f"{where}: external data {location!r} is truncated")
    return data


def move_to_file(tensors: list[TensorProto], path: Path, threshold: int = 1024) -> bytes:
    """Move the raw data of ``tensors`` of at least ``threshold`` bytes into one blob
    (``path``'s name is the location written); returns the blob."""
    blob = bytearray()
    for tensor in tensors:
        raw = tensor.raw_data
        if len(raw) < threshold:
            continue
        blob.extend(b"\0" * (-len(blob) % ALIGNMENT))
        offset = len(blob)
        blob.extend(raw)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", path.name), ("offset", str(offset)),
                           ("length", str(len(raw)))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return bytes(blob)
