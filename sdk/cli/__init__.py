"""The ``polyhal`` command line."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

from polyhal import __version__
from polyhal.cli.adapters import cmd_check_adapter, cmd_devices, cmd_new_adapter
from polyhal.cli.conformance import cmd_conformance
from polyhal.cli.docs import cmd_gen_docs
from polyhal.cli.ops import cmd_ops
from polyhal.cli.run import cmd_run
from polyhal.cli.stdout import GuardedStdout, StdoutError, drop_stdout, print_error
from polyhal.errors import PolyhalError


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
    ops.set_defaults(func=cmd_ops)
    docs = sub.add_parser("gen-docs", help="regenerate docs/ops.md from the op registry and "
                          "the contract reference in docs/hal.md from its docstrings")
    docs.add_argument("--out", default="docs/ops.md", type=_path("--out"),
                      help="the op reference (default: %(default)s)")
    docs.add_argument("--hal", default="docs/hal.md", type=_path("--hal"),
                      help="the page holding the contract reference (default: %(default)s)")
    docs.add_argument("--check", action="store_true", help="only check that the file is current")
    docs.set_defaults(func=cmd_gen_docs)

    devices = sub.add_parser("devices", help="list adapters, their devices and availability")
    devices.set_defaults(func=cmd_devices)

    check = sub.add_parser("check-adapter", help="check an adapter against the HAL contract")
    check.add_argument("name", help="adapter name")
    check.set_defaults(func=cmd_check_adapter)

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
    conf.add_argument("--jobs", type=_positive(int, "a positive number of adapters"),
                      help="adapters graded at the same time, each in a process of its own "
                           "(default: one per core)")
    conf.add_argument("--quiet", action="store_true", help="no progress bar")
    conf.set_defaults(func=cmd_conformance)

    new = sub.add_parser("new-adapter", help="scaffold an out-of-tree adapter package")
    new.add_argument("name", help="adapter name: lower-case letters, digits, hyphens")
    new.add_argument("--dir", default=".", metavar="D", type=_path("--dir"),
                     help="write D/polyhal-NAME (default: the current folder)")
    new.set_defaults(func=cmd_new_adapter)

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
    run.set_defaults(func=cmd_run)
    for command in (ops, docs, devices, check, conf, new, run):
        command.add_argument("--width", type=_positive(int, "a positive number of columns"),
                             default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    if sys.stdout is None:  # started with standard output closed (`polyhal ops >&-`)
        print_error("standard output is closed: nothing can be printed")
        return 2
    stdout = sys.stdout
    sys.stdout = GuardedStdout(stdout)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe or a full disk shows here, not at exit
        return code
    except PolyhalError as exc:
        print_error(str(exc))
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what was started is stopped on the way out
        print_error("interrupted")
        return 130
    except BrokenPipeError:  # `polyhal ... | head` closed the pipe: stop quietly, as rich does
        drop_stdout(stdout)
        return 141
    except StdoutError as exc:
        drop_stdout(stdout)
        print_error(f"cannot write to standard output ({exc.reason.strerror or exc.reason})")
        return 2
    finally:
        sys.stdout = stdout
