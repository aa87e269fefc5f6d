"""The ``polyhal`` command line."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from polyhal import __version__
from polyhal.cache import write_atomically
from polyhal.errors import PolyhalError


def _add_row(table: Table, *cells: str) -> None:
    """A table row of plain text: brackets in a cell (``pip install 'polyhal[cpu]'``)
    are not rich markup."""
    table.add_row(*(escape(cell) for cell in cells))


def _cmd_ops(args: argparse.Namespace) -> int:
    from polyhal.ops import all_ops
    from polyhal.ops.registry import domains

    if args.domain is not None and args.domain not in domains():
        raise PolyhalError(f"--domain {args.domain!r}: no such op domain "
                           f"(domains: {', '.join(domains())})")
    table = Table(title="polyhal ops")
    for column in ("op", "ONNX opset", "kind", "dtypes"):
        table.add_column(column)
    for op in all_ops(args.domain):
        kind = "composite" if op.decompose else "primitive"
        dtypes = ", ".join(sorted(d.value for d in op.all_dtypes()))
        _add_row(table, op.qualified_name, str(op.onnx_since or ""), kind, dtypes)
    Console().print(table)
    return 0


def _cmd_gen_docs(args: argparse.Namespace) -> int:
    from polyhal.hal.contract_doc import updated_hal_page
    from polyhal.ops.reference_doc import render_op_reference

    hal_page, out = Path(args.hal), Path(args.out)
    if not hal_page.is_file():
        raise PolyhalError(f"--hal {hal_page}: no such file")
    if out.is_dir():
        raise PolyhalError(f"--out {out}: is a folder, not the op reference page")
    if out.exists() and out.samefile(hal_page):
        raise PolyhalError(f"--out {out} and --hal {hal_page} are the same file: the op "
                           "reference and the contract reference are two pages")
    current = _read_page(hal_page, "--hal")
    if current is None:
        raise PolyhalError(f"--hal {hal_page}: not UTF-8 text")
    pages = {out: render_op_reference(), hal_page: updated_hal_page(current, hal_page)}
    stale = [path for path, text in pages.items()
             if _read_page(path, "--out" if path == out else "--hal") != text]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run `polyhal gen-docs`", file=sys.stderr)
        if not stale:
            print(f"{' and '.join(map(str, pages))} are up to date")
        return 1 if stale else 0
    for path in stale:
        option = "--out" if path == out else "--hal"
        _check_target(path, option, {}, overwrite=True)
        try:
            write_atomically(path, pages[path].encode("utf-8"))
        except OSError as exc:
            raise PolyhalError(f"{option} {path}: cannot write the page "
                               f"({exc.strerror or exc})") from None
        print(f"wrote {path}")
    return 0


def _read_page(path: Path, option: str) -> str | None:
    """The text of the page ``path``; None when it is missing or not UTF-8 (stale)."""
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    except OSError as exc:
        raise PolyhalError(f"{option} {path}: cannot read the page "
                           f"({exc.strerror or exc})") from None


def _builtin(name: str) -> bool:
    from polyhal.hal import adapters

    return adapters()[name].__module__.startswith("polyhal.adapters.")


def _cmd_devices(args: argparse.Namespace) -> int:
    from polyhal.hal import adapters, plugin_failures, probe_all

    table = Table(title="polyhal devices")
    for column in ("adapter", "version", "device", "name", "available", "why not"):
        table.add_column(column)
    classes = adapters()
    for name, devices, error in probe_all():
        version = str(classes[name].version)
        if devices is None:
            _add_row(table, name, version, "-", "-", "no", error)
            continue
        for info in devices:
            _add_row(table, name, version, info.address, info.name,
                          "yes" if info.available else "no", info.reason)
        if not devices:
            _add_row(table, name, version, "-", "-", "no", "probe found no device")
    for failure in plugin_failures():
        _add_row(table, failure.name, "?", "-", failure.source, "no", failure.error)
    Console(width=args.width).print(table)
    return 0


def _cmd_check_adapter(args: argparse.Namespace) -> int:
    from polyhal.hal import adapters, check_adapter_class, plugin_failures

    known = adapters()
    if args.name not in known:
        failure = next((f for f in plugin_failures() if f.name == args.name), None)
        if failure is None:
            raise PolyhalError(f"no adapter named {args.name!r} (available: "
                               f"{', '.join(known) or 'none'})")
        print(f"adapter {args.name!r} ({failure.source}) could not be loaded:\n{failure.error}")
        return 1
    report = check_adapter_class(known[args.name])
    table = Table(title=f"HAL contract: {args.name} ({report.source}), API {report.api_version}")
    for column in ("class", "hook", "required", "implemented", "problem"):
        table.add_column(column)
    for row in report.rows:
        _add_row(table, row.role, row.hook, "required" if row.required else "optional",
                      "yes" if row.implemented else "no (default)" if not row.required else "NO",
                      row.problem)
    console = Console(width=args.width)
    console.print(table)
    for problem in report.problems:
        console.print(f"- {problem}", markup=False)
    if not report.ok:
        console.print("contract BROKEN")
        return 1
    return _check_device(console, args.name)


def _check_device(console: Console, name: str) -> int:
    """Open device 0 of a class that passed the checks: its claims, and the verdict."""
    from polyhal.errors import AdapterContractError, DeviceError
    from polyhal.hal import open_device

    try:
        with open_device(name) as device:
            caps = device.capabilities
    except DeviceError as exc:
        console.print(f"contract OK (class checks); {name}:0 could not be opened, so its "
                      f"capabilities were not checked: {exc}", markup=False)
        return 0
    except AdapterContractError as exc:
        console.print(f"- {exc}", markup=False)
        console.print("contract BROKEN")
        return 1
    dtypes = sorted({d.value for ds in caps.ops.values() for d in ds})
    console.print(f"claims {len(caps.ops)} ops ({', '.join(caps.claimed_ops)}) in "
                  f"{', '.join(dtypes)}", markup=False)
    _print_next_ops(console, caps)
    console.print("contract OK")
    return 0


def _print_next_ops(console: Console, caps: object) -> None:
    from polyhal.conformance.coverage import next_ops

    ranked = next_ops(caps)  # type: ignore[arg-type]
    if not ranked:
        return
    table = Table(title="implement next: L1 cases unlocked (ci)")
    table.add_column("op")
    table.add_column("cases", justify="right")
    for op, count in ranked:
        _add_row(table, op, str(count))
    console.print(table)


def _cmd_conformance(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from polyhal.conformance import run_suite
    from polyhal.conformance.profiles import parse_levels
    from polyhal.conformance.report import write_report
    from polyhal.hal import get_adapter

    if args.compare is not None:
        return _compare(args)
    names = args.adapters or _available_builtins()
    # Everything a run needs is checked before the first case: a typo must not
    # cost a full run, nor a report folder that cannot be written the run's results.
    for name in names:
        if names.count(name) > 1:
            raise PolyhalError(f"conformance: adapter {name!r} given twice")
        get_adapter(name)
    if args.level:
        parse_levels(args.level)
    folders = {name: _report_folder(Path(args.report) / name if len(names) > 1
                                    else Path(args.report), name)
               for name in names} if args.report is not None else {}
    console = Console(width=args.width)
    if not args.level:
        from polyhal.conformance.levels import unavailable_levels

        for level, why in unavailable_levels().items():
            console.print(f"level {level} left out: {why}", markup=False)
    all_ok = True
    for name in names:
        with Progress(TextColumn(f"[bold]{name}[/]"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[failures]} not passed"), console=console,
                      disable=args.quiet) as progress:
            task = progress.add_task(name, total=None, failures=0)
            bad = 0

            def on_result(result, index, total, task=task):
                nonlocal bad
                bad += result.outcome not in ("passed", "xfail", "not_applicable")
                progress.update(task, completed=index + 1, failures=bad)

            report = run_suite(name, levels=args.level, profile=args.profile,
                               precision=args.precision,
                               isolate=not args.no_isolate, timeout=args.timeout,
                               on_result=on_result,
                               on_cases=lambda n, task=task: progress.update(task, total=n))
        summary = ", ".join(f"{v} {k}" for k, v in report.summary.items())
        verdict = "PASS" if report.ok else "FAIL"
        console.print(f"{name}: {verdict} ({summary}) in {report.duration_s:.1f} s; coverage "
                      + ", ".join(f"{d} {c['claimed']}/{c['total']}"
                                  for d, c in report.coverage.items()), markup=False)
        for level in report.levels:
            cases = [c for c in report.cases if c.level == level]
            skipped = sum(c.outcome == "not_applicable" for c in cases)
            ran = len(cases) - skipped
            if cases:
                passed = sum(c.outcome == "passed" for c in cases)
                listed = sum(c.outcome == "xfail" for c in cases)
                console.print(f"  {level}: {ran} cases run, {passed} passed "
                              f"({100 * passed / max(ran, 1):.1f}%), {listed} listed as expected "
                              f"failures, {ran - passed - listed} other"
                              + (f"; {skipped} not applicable (see the report)" if skipped
                                 else ""), markup=False)
        for case in report.cases:
            if case.outcome not in ("passed", "xfail", "not_applicable"):
                console.print(f"  {case.outcome:8} {case.id}: {case.message[:200]}",
                              markup=False)
        if args.report is not None:
            paths = write_report(report, folders[name])
            console.print(f"  report: {', '.join(str(p) for p in paths)}", markup=False)
        all_ok &= report.ok
    return 0 if all_ok else 1


def _available_builtins() -> list[str]:
    """The built-in adapters with an available device; none is an error naming
    ``POLYHAL_ADAPTERS`` when it narrowed the set."""
    from polyhal.hal import adapters, get_adapter

    names = [n for n in adapters() if _builtin(n) and any(
        d.available for d in get_adapter(n).probe())]
    if not names:
        wanted = os.environ.get("POLYHAL_ADAPTERS", "").strip()
        raise PolyhalError(f"conformance: POLYHAL_ADAPTERS={wanted!r} selects no built-in "
                           "adapter with an available device: name adapters to grade, or "
                           "fix or unset the variable" if wanted else
                           "conformance: no built-in adapter has an available device: name "
                           "the adapters to grade")
    return names


def _report_folder(folder: Path, adapter: str) -> Path:
    """``folder``, made, once it is clear that ``adapter``'s report may be written
    there (:func:`~polyhal.conformance.report.check_report_folder`)."""
    from polyhal.conformance.report import check_report_folder
    from polyhal.errors import ConformanceError

    folder = _writable_folder(folder, "--report")
    try:
        check_report_folder(folder, adapter)
    except ConformanceError as exc:
        raise ConformanceError(f"--report {exc}") from None
    return folder


def _compare(args: argparse.Namespace) -> int:
    from polyhal.conformance.compare import compare, resolve_sides

    if args.adapters or args.report is not None:
        raise PolyhalError("conformance --compare A B takes its two sides only (adapter names "
                           "or report.json paths), not NAME arguments or --report")
    options = {"precision": args.precision, "isolate": not args.no_isolate,
               "timeout": args.timeout}
    a, b = resolve_sides(args.compare, args.level, args.profile, **options)
    print(compare(a, b).render())
    return 0


def _cmd_new_adapter(args: argparse.Namespace) -> int:
    from polyhal.scaffold import AdapterNames, scaffold

    target = scaffold(args.name, args.dir)
    names = AdapterNames.of(args.name)
    print(f"wrote {target}: the {args.name!r} adapter in {names.package}/adapter.py "
          f"(hooks marked REQUIRED)\nnext:\n  pip install -e {target}\n"
          f"  polyhal check-adapter {args.name}\n"
          f"  polyhal conformance {args.name} --level L0 --level L1 --profile ci")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
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
        folder = _writable_folder(Path(args.output), "--output")
        files = _output_files(folder, [value.name for value in graph.outputs])
        for path in files.values():
            _check_target(path, "--output", kept, args.overwrite)
    if args.profile is not None:
        _check_trace_path(Path(args.profile), kept, files, args.overwrite)
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


def _check_target(path: Path, option: str, kept: dict[Path, str], overwrite: bool) -> None:
    """Refuse to write ``path`` when it is a symbolic link or not a plain file, one of
    ``kept`` (path: what it is), or an existing file without ``overwrite``."""
    if not os.path.lexists(path):
        return
    if path.is_symlink():
        raise PolyhalError(f"{option} {path}: is a symbolic link; polyhal never writes "
                           "through one (remove it, or choose another path)")
    if not path.is_file():
        raise PolyhalError(f"{option} {path}: exists and is not a file")
    role = next((role for other, role in kept.items()
                 if other.exists() and path.samefile(other)), None)
    if role is not None:
        raise PolyhalError(f"{option} {path}: is {role}; it is never overwritten")
    if not overwrite:
        raise PolyhalError(f"{option} {path}: the file exists; pass --overwrite to "
                           "replace it")


def _check_trace_path(path: Path, kept: dict[Path, str], outputs: dict[str, Path],
                      overwrite: bool) -> None:
    """Refuse a ``--profile`` path that cannot be written, or that would replace
    what it must not (see :func:`_check_target`), an output of this run included."""
    _check_target(path, "--profile", kept, overwrite)
    if any(path.resolve() == output.resolve() for output in outputs.values()):
        raise PolyhalError(f"--profile {path}: is also the file of an --output array")
    if not path.parent.is_dir():
        missing = "is not a folder" if path.parent.exists() else "does not exist"
        raise PolyhalError(f"--profile {path}: {path.parent} {missing}")
    _check_writable(path.parent, f"--profile {path}: the folder {path.parent}")


def _save_npy(path: Path, array: object) -> None:
    """Write ``array`` as the ``.npy`` file ``path``, atomically."""
    import numpy as np

    try:
        write_atomically(path, lambda stream: np.save(stream, array, allow_pickle=False))
    except OSError as exc:
        raise PolyhalError(f"--output: cannot write {path} ({exc.strerror or exc})") from None


_NPY_MAGIC = b"\x93NUMPY"


def _read_npy(name: str, file: Path) -> object:
    """The array of ``--input name=file``: a plain .npy file whose header matches its
    size (a header may claim any shape), never unpickled."""
    import numpy as np

    try:
        if not stat.S_ISREG(file.stat().st_mode):  # before opening: a FIFO would block
            raise PolyhalError(f"--input {name}: {file} is not a plain file")
        with file.open("rb") as stream:
            if stream.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                raise PolyhalError(f"--input {name}: {file} is not a .npy file (it does not "
                                   "start with the NPY header; save arrays with numpy.save)")
            stream.seek(0)
            _check_npy_size(name, file, stream)
            stream.seek(0)
            return np.load(stream, allow_pickle=False)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PolyhalError(f"--input {name}: cannot read {file} as a .npy array "
                           f"({reason})") from None


def _check_npy_size(name: str, file: Path, stream: BinaryIO) -> None:
    """Refuse a .npy file whose header declares more data than the file holds."""
    import numpy as np

    version = np.lib.format.read_magic(stream)
    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                   else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read_header(stream)
    declared = math.prod(shape) * dtype.itemsize
    held = os.fstat(stream.fileno()).st_size - stream.tell()
    if not dtype.hasobject and declared > held:
        raise PolyhalError(f"--input {name}: {file} is truncated or corrupt: its header "
                           f"declares {dtype}{list(shape)} ({declared} bytes) but "
                           f"{held} bytes follow")


def _writable_folder(folder: Path, option: str) -> Path:
    """``folder``, created if missing; a :class:`PolyhalError` naming ``option`` when
    it cannot be created or written."""
    if folder.exists() and not folder.is_dir():
        raise PolyhalError(f"{option} {folder}: exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PolyhalError(f"{option} {folder}: cannot create the folder "
                           f"({exc.strerror or exc})") from None
    _check_writable(folder, f"{option} {folder}: the folder")
    return folder


def _check_writable(folder: Path, what: str) -> None:
    """A :class:`PolyhalError` starting with ``what`` unless a file can be made in
    ``folder`` (tried: permission bits do not tell, for root or on /proc)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise PolyhalError(f"{what} is not writable ({exc.strerror or exc})") from None


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


def _path(option: str) -> Callable[[str], str]:
    """An argparse type: a path that is not empty (an empty one names no file)."""
    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"an empty path names no file; give {option} "
                                             "a path")
        return text
    return parse


def _positive(kind: type[float] | type[int], what: str) -> Callable[[str], float | int]:
    """An argparse type: a finite number ``> 0`` of ``kind``."""
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="polyhal", description=__doc__)
    parser.add_argument("--version", action="version", version=f"polyhal {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    ops = sub.add_parser("ops", help="list the registered ops")
    ops.add_argument("--domain", help="only this domain")
    ops.set_defaults(func=_cmd_ops)
    docs = sub.add_parser("gen-docs", help="regenerate docs/ops.md from the op registry and "
                          "the contract reference in docs/hal.md from its docstrings")
    docs.add_argument("--out", default="docs/ops.md", type=_path("--out"),
                      help="the op reference (default: %(default)s)")
    docs.add_argument("--hal", default="docs/hal.md", type=_path("--hal"),
                      help="the page holding the contract reference (default: %(default)s)")
    docs.add_argument("--check", action="store_true", help="only check that the file is current")
    docs.set_defaults(func=_cmd_gen_docs)

    devices = sub.add_parser("devices", help="list adapters, their devices and availability")
    devices.set_defaults(func=_cmd_devices)

    check = sub.add_parser("check-adapter", help="check an adapter against the HAL contract")
    check.add_argument("name", help="adapter name")
    check.set_defaults(func=_cmd_check_adapter)

    conf = sub.add_parser("conformance", help="grade adapters against the reference")
    conf.add_argument("adapters", nargs="*", metavar="NAME",
                      help="adapters to grade (default: every available built-in adapter)")
    conf.add_argument("--level", action="append", metavar="L",
                      help="only this level (repeatable): L0 L1 L2 L3 L4-snn L4-quantum "
                           "L4-quant L4-sparse L5 onnx")
    conf.add_argument("--profile", default="full", choices=["ci", "full"],
                      help="case-space size (default: %(default)s)")
    conf.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "fp16", "bf16"],
                      help="compile every case in this mode; other than fp32 grades L0-L2, "
                           "float32 cases at the mode's tolerance (default: %(default)s)")
    conf.add_argument("--report", metavar="DIR", type=_path("--report"),
                      help="write report.json/.md/.html here (an earlier report of the same "
                           "adapter is replaced; any other file is kept: the run is refused)")
    conf.add_argument("--compare", nargs=2, metavar=("A", "B"),
                      help="list what A passes that B does not and the reverse; each is an "
                           "adapter name (run now) or a path to a report.json or its folder "
                           "(./DIR for a folder spelled like an adapter name)")
    conf.add_argument("--timeout", type=_positive(float, "a positive number of seconds"),
                      help="per-call timeout of the device, seconds (default: "
                           "$POLYHAL_DEVICE_TIMEOUT, else the profile's)")
    conf.add_argument("--no-isolate", action="store_true",
                      help="run the device in this process (faster; a crash ends the run)")
    conf.add_argument("--quiet", action="store_true", help="no progress bar")
    conf.set_defaults(func=_cmd_conformance)

    new = sub.add_parser("new-adapter", help="scaffold an out-of-tree adapter package")
    new.add_argument("name", help="adapter name: lower-case letters, digits, hyphens")
    new.add_argument("--dir", default=".", metavar="D", type=_path("--dir"),
                     help="write D/polyhal-NAME (default: the current folder)")
    new.set_defaults(func=_cmd_new_adapter)

    run = sub.add_parser("run", help="run a model on a device")
    run.add_argument("model", help="a polyhal .json model (its .npz beside it), an .onnx model "
                     "or a .nir spiking network (with --dt)")
    run.add_argument("--device", default="reference", help="ADAPTER[:INDEX] (default: reference)")
    run.add_argument("--fallback", help="device for nodes the first one lacks")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                     help="an input array (repeatable)")
    run.add_argument("--output", metavar="DIR", type=_path("--output"),
                     help="save outputs as DIR/NAME.npy")
    run.add_argument("--show-placement", action="store_true", help="print where nodes ran")
    run.add_argument("--profile", metavar="TRACE.json", type=_path("--profile"),
                     help="record the compile and the run as Chrome trace JSON (open it in "
                     "ui.perfetto.dev)")
    run.add_argument("--overwrite", action="store_true", help="replace existing --output and "
                     "--profile files (never the model, an --input file or a symbolic link)")
    run.add_argument("--dt", type=_positive(float, "a positive number of seconds"),
                     help=".nir: the time step in seconds")
    run.add_argument("--method", choices=["euler", "exact"], help=".nir: integration method "
                     "(default euler)")
    run.add_argument("--reset", choices=["v_reset", "subtract"], help=".nir: reset rule "
                     "(default v_reset)")
    run.set_defaults(func=_cmd_run)
    for command in (ops, docs, devices, check, conf, new, run):
        command.add_argument("--width", type=_positive(int, "a positive number of columns"),
                             default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    if sys.stdout is None:  # started with standard output closed (`polyhal ops >&-`)
        _error("standard output is closed: nothing can be printed")
        return 2
    stdout = sys.stdout
    sys.stdout = _Stdout(stdout)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe or a full disk shows here, not at exit
        return code
    except PolyhalError as exc:
        _error(str(exc))
        return 2
    except BrokenPipeError:  # `polyhal ... | head` closed the pipe: stop quietly, as rich does
        _drop_stdout(stdout)
        return 141
    except _StdoutError as exc:
        _drop_stdout(stdout)
        _error(f"cannot write to standard output ({exc.reason.strerror or exc.reason})")
        return 2
    finally:
        sys.stdout = stdout


class _StdoutError(Exception):
    """Standard output failed (a full disk, an I/O error): not a command's own error."""

    def __init__(self, reason: OSError) -> None:
        super().__init__(str(reason))
        self.reason = reason


class _Stdout:
    """``sys.stdout`` while a command runs: a write or flush that fails, other than
    on a closed pipe, raises :class:`_StdoutError`."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._guard(self._stream.write, text)  # type: ignore[attr-defined]

    def flush(self) -> None:
        self._guard(self._stream.flush)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)

    @staticmethod
    def _guard(call: Callable[..., object], *args: object) -> object:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _StdoutError(exc) from None


def _drop_stdout(stdout: object) -> None:
    """Point file descriptor 1 at /dev/null, so that what is still buffered for
    ``stdout`` is dropped at exit instead of failing again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())  # type: ignore[attr-defined]


def _error(message: str) -> None:
    if sys.stderr is not None:
        print(f"polyhal: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
