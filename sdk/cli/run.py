"""``polyhal run``: a model on a device, its ``--input`` arrays read and its outputs saved."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import tokenize
from pathlib import Path
from typing import BinaryIO

from polyhal.cli.paths import check_target, check_trace_path, writable_folder
from polyhal.errors import PolyhalError
from polyhal.files import open_regular, write_atomically
from polyhal.ir.limits import current_limits


def cmd_run(args: argparse.Namespace) -> int:
    """Run the model on ``--device`` and print (and save) its outputs."""
    import polyhal
    from polyhal.interop.loading import load_model
    from polyhal.runtime import tracing

    options = {k: v for k in ("dt", "method", "reset") if (v := getattr(args, k)) is not None}
    graph = load_model(args.model, **options)
    feeds = {}
    kept = _model_files(Path(args.model))
    for item in args.input:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise PolyhalError(f"--input {item!r}: expected NAME=FILE.npy")
        if name in feeds:
            raise PolyhalError(f"--input {name}: given twice")
        feeds[name] = _read_npy(name, Path(file))
        kept[Path(file)] = f"the --input {name} file"
    # Every file the run writes is checked before it starts: a run must not cost
    # what is on disk, nor be lost to a path that cannot be written.
    files = {}
    if args.output is not None:
        folder = writable_folder(Path(args.output), "--output")
        files = _output_files(folder, [value.name for value in graph.outputs])
        for path in files.values():
            check_target(path, "--output", kept, args.overwrite)
    if args.profile is not None:
        check_trace_path(Path(args.profile), kept, files, args.overwrite)
    with tracing.recording() if args.profile is not None else contextlib.nullcontext() as trace:
        compiled = polyhal.compile(graph, device=args.device, fallback=args.fallback)
        outputs = compiled(**feeds)
    for name, array in outputs.items():
        print(f"{name}: {array.dtype}{list(array.shape)}"
              + (f" -> {files[name]}" if files else ""))
        if files:
            _save_npy(files[name], array)
    if args.show_placement:
        print(compiled.placement)
    if trace is not None:
        try:
            print(f"profile: wrote {trace.save(args.profile)}")
        except PolyhalError as exc:
            raise PolyhalError(f"--profile {exc}") from None
    return 0


def _model_files(model: Path) -> dict[Path, str]:
    """The files of ``model`` (a ``.json`` model's ``.npz`` too), which no output of
    the run may replace."""
    files = {model: "the model"}
    if model.suffix == ".json":
        files[model.with_suffix(".npz")] = "the model's tensors"
    return files


def _save_npy(path: Path, array: object) -> None:
    """Write ``array`` as the ``.npy`` file ``path``, atomically."""
    import numpy as np

    try:
        write_atomically(path, lambda stream: np.save(stream, array, allow_pickle=False))
    except OSError as exc:
        raise PolyhalError(f"--output: cannot write {path} ({exc.strerror or exc})") from None


_NPY_MAGIC = b"\x93NUMPY"
_DAMAGED_NPY = (OSError, ValueError, SyntaxError, TypeError, OverflowError,
                tokenize.TokenError)
"""What numpy's npy reader raises on a damaged header (it parses a Python literal)."""


def _read_npy(name: str, file: Path) -> object:
    """The array of ``--input name=file``: a plain .npy file whose header matches its
    size (a header may claim any shape), never unpickled."""
    import numpy as np

    try:
        with open_regular(file, f"--input {name}") as stream:  # a FIFO is refused, not waited on
            if stream.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                raise PolyhalError(f"--input {name}: {file} is not a .npy file (it does not "
                                   "start with the NPY header; save arrays with numpy.save)")
            stream.seek(0)
            _check_npy_size(name, file, stream)
            stream.seek(0)
            return np.load(stream, allow_pickle=False)
    except _DAMAGED_NPY as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PolyhalError(f"--input {name}: cannot read {file} as a .npy array "
                           f"({type(exc).__name__}: {reason})") from None


def _check_npy_size(name: str, file: Path, stream: BinaryIO) -> None:
    """Refuse a .npy file whose header declares a shape that is not one (a dim that is
    negative or not an integer), one over the limits, or more data than the file holds."""
    import numpy as np

    version = np.lib.format.read_magic(stream)
    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                   else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read_header(stream)
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise PolyhalError(f"--input {name}: {file} is corrupt: its header declares shape "
                           f"{shape!r} (dimensions are integers >= 0)")
    current_limits().check_shape(shape, f"--input {name}: {file}")
    declared = math.prod(shape) * dtype.itemsize
    held = os.fstat(stream.fileno()).st_size - stream.tell()
    if not dtype.hasobject and declared > held:
        raise PolyhalError(f"--input {name}: {file} is truncated or corrupt: its header "
                           f"declares {dtype}{list(shape)} ({declared} bytes) but "
                           f"{held} bytes follow")


def _output_files(folder: Path, names: list[str]) -> dict[str, Path]:
    """A distinct ``.npy`` file in ``folder`` for each output name: characters a
    file name cannot hold become ``_``, and names that then collide get ``-2``,
    ``-3``... so that no output overwrites another."""
    files: dict[str, Path] = {}
    taken: set[str] = set()
    for name in names:
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".")
        stem = stem or "output"
        unique, n = stem, 1
        while unique.lower() in taken:  # case-insensitive file systems collide too
            n += 1
            unique = f"{stem}-{n}"
        taken.add(unique.lower())
        files[name] = folder / f"{unique}.npy"
    return files
