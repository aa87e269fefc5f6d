"""Fuzz polyhal's model loaders with mutated model files, repeatably.

polyhal promises that every loader answers a malformed model file with a
:class:`~polyhal.errors.PolyhalError` whose message names what is wrong and
where: never another exception, never a hang, never code run from the file.
This script checks that promise. Each case takes a valid seed model
(:mod:`seeds`), mutates its files (:mod:`mutate`), loads it with
:func:`polyhal.interop.loading.load_model` and, when it loads, runs it on the
reference executor with random inputs. A case is named ``FORMAT:SEED:INDEX``
and is the same on every run, so any case can be run again alone::

    python scripts/fuzz/model_files.py --format all --seed 0 --cases 200
    python scripts/fuzz/model_files.py --format onnx --minutes 5 --keep findings
    python scripts/fuzz/model_files.py --case onnx:0:17 --keep findings

A finding is an exception other than a PolyhalError, a case that runs past
the time limit, a PolyhalError with an empty message, or a planted pickle
that got unpickled. The exit status is 1 when there is one, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # seeds.py and mutate*.py

import mutate
import numpy as np
from seeds import FORMATS, FileContent, Link, onnx_node_seeds, seeds_of

from polyhal.errors import PolyhalError
from polyhal.interop.loading import load_model
from polyhal.ir import DType, Graph, Limits, dims, use_limits
from polyhal.reference import ReferenceExecutor

DEFAULT_TIME_LIMIT_S = 20.0
"""How long one case (loading and running) may take before it is a hang."""
FUZZ_LIMITS = Limits(max_elements=1 << 22, max_total_bytes=1 << 28, max_nodes=10_000,
                     max_file_bytes=1 << 24)
"""The load and run limits in force during a case: tighter than the defaults, so that a
mutated size that passes them cannot exhaust this machine's memory. :func:`run_case` also
sets ``max_parse_seconds`` to half the case's time limit."""
SYMBOL_SIZE = 2
"""The size every symbolic dimension of a graph input is bound to."""
MAX_INPUT_ELEMENTS = 1 << 20
"""A loaded graph whose inputs would be bigger than this is not run."""
Loader = Callable[..., Graph]
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    """One fuzz case: the mutated files of a seed model, and the loader's options."""

    fmt: str
    seed: int
    index: int
    base: str
    mutations: tuple[str, ...]
    files: dict[str, FileContent]
    options: dict[str, Any]

    @property
    def id(self) -> str:
        """``FORMAT:SEED:INDEX``, what ``--case`` takes."""
        return f"{self.fmt}:{self.seed}:{self.index}"

    @property
    def main(self) -> str:
        """The file the loader opens."""
        return f"model.{self.fmt}"


def make_case(fmt: str, seed: int, index: int) -> Case:
    """The case ``fmt:seed:index``: the same files on every run and machine."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    rng = random.Random(f"{fmt}:{seed}:{index}")  # a str seed is hashed the same everywhere
    seeds = seeds_of(fmt)
    base = rng.choice(onnx_node_seeds() if fmt == "onnx" and rng.random() < 0.5 else seeds)
    files = dict(base.files)
    mutations = mutate.mutate(fmt, files, rng, seeds)
    options: dict[str, Any] = {}
    if fmt == "nir":
        options = {"dt": rng.choice((1e-3, 0.5)), "method": rng.choice(("euler", "exact")),
                   "reset": rng.choice(("v_reset", "subtract"))}
    return Case(fmt, seed, index, base.name, tuple(mutations), files, options)


def parse_case_id(text: str) -> tuple[str, int, int]:
    """``FORMAT:SEED:INDEX`` as its three parts; a ValueError naming what is wrong."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in FORMATS or not all(
            p.lstrip("-").isdigit() for p in parts[1:]):
        raise ValueError(f"a case is FORMAT:SEED:INDEX with FORMAT one of "
                         f"{', '.join(FORMATS)}, got {text!r}")
    return parts[0], int(parts[1]), int(parts[2])


def write_files(case: Case, folder: Path) -> Path:
    """Write the case's files (and symbolic links) into ``folder``; the file to load."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in case.files.items():
        path = folder / name
        if isinstance(content, Link):
            path.symlink_to(content.target)
        else:
            path.write_bytes(content)
    return folder / case.main


# ----------------------------------------------------------------- one case

@dataclass(frozen=True)
class Outcome:
    """What one case did. ``kind`` is ``ran``, ``refused`` (a PolyhalError while loading),
    ``run-refused`` (one while running) or a finding: ``crash``, ``hang``,
    ``empty-message`` or ``unpickled``."""

    case_id: str
    kind: str
    stage: str
    error: str = ""
    message: str = ""
    where: str = ""
    mutations: tuple[str, ...] = ()

    @property
    def is_finding(self) -> bool:
        """True when the case broke polyhal's promise."""
        return self.kind not in ("ran", "refused", "run-refused")

    @property
    def wraps_python_error(self) -> bool:
        """True for a PolyhalError whose message quotes another exception (``KeyError: ...``):
        a refusal, but one a specific check could have worded better."""
        return not self.is_finding and bool(_WRAPPED.search(self.message))

    def describe(self) -> str:
        """A few lines for a person: the case, what happened, where and how it was made."""
        doing = "loading" if self.stage == "load" else "running"
        lines = [f"{self.case_id}: {self.kind} while {doing}"
                 + (f": {self.error}: {_clip(self.message)}" if self.error else "")]
        if self.where:
            lines.append(f"  at {self.where}")
        lines.append(f"  mutations: {'; '.join(self.mutations)}")
        return "\n".join(lines)


_WRAPPED = re.compile(r"\b(?!\w*(?:Serialization|Verification|Limit|Execution|Unsupported|"
                      r"InputBinding|IR|Polyhal)Error)\w+(?:Error|Exception): ")


def _clip(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class CaseTimeout(BaseException):
    """Raised in a case that overruns its time limit. A BaseException, so that no
    ``except Exception`` on the way (a kernel's error wrapper) can turn it into a refusal."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the block once it has run ``seconds`` (main thread only;
    C code that never returns to Python cannot be interrupted)."""
    def expire(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def random_inputs(graph: Graph, rng: np.random.Generator) -> list[np.ndarray] | None:
    """Random arrays for the graph's inputs, every symbol bound to :data:`SYMBOL_SIZE`;
    None when a size is unknown, negative or too big to be worth running."""
    symbols = {s for v in graph.inputs for d in v.type.shape for s in dims.free_symbols(d)}
    bindings = dict.fromkeys(symbols, SYMBOL_SIZE)
    arrays = []
    for value in graph.inputs:
        shape = [dims.evaluate(d, bindings) for d in value.type.shape]
        if any(s is None or s < 0 for s in shape) or math.prod(shape) > MAX_INPUT_ELEMENTS:
            return None
        arrays.append(_random_array(rng, value.type.dtype, shape))
    return arrays


def _random_array(rng: np.random.Generator, dtype: DType, shape: list[int]) -> np.ndarray:
    if dtype is DType.BOOL:
        return rng.random(shape) < 0.5
    if dtype.is_float:
        return rng.normal(0, 2, shape).astype(dtype.numpy)
    low = 0 if np.issubdtype(dtype.numpy, np.unsignedinteger) else -5
    return rng.integers(low, 6, shape).astype(dtype.numpy)  # some indices out of range


def _frames(exc: BaseException, count: int = 3) -> str:
    """The innermost ``count`` frames of ``exc``'s traceback, innermost first."""
    frames = traceback.extract_tb(exc.__traceback__)[-count:]
    parts = []
    for frame in reversed(frames):
        path = Path(frame.filename)
        shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path.name
        parts.append(f"{shown}:{frame.lineno} {frame.name}")
    return " <- ".join(parts)


def run_case(case: Case, workdir: Path, *, seconds: float = DEFAULT_TIME_LIMIT_S,
             loader: Loader = load_model) -> Outcome:
    """Load the case's files from a fresh folder in ``workdir`` with ``loader`` and run what
    loads on the reference executor, within ``seconds``; what happened."""
    folder = workdir / case.id.replace(":", "-")
    shutil.rmtree(folder, ignore_errors=True)
    path = write_files(case, folder)
    # Damaged HDF5 metadata can make libhdf5 loop; polyhal then stops its NIR parser process
    # and refuses the file, which should happen well within the case's own time limit.
    limits = dataclasses.replace(FUZZ_LIMITS, max_parse_seconds=seconds / 2)
    unpickled = len(mutate.UNPICKLED)
    stage = "load"
    try:
        with use_limits(limits), time_limit(seconds):
            graph = loader(path, **case.options)
            stage = "run"
            inputs = random_inputs(graph, np.random.default_rng(random.Random(
                f"{case.id}:inputs").getrandbits(64)))
            if inputs is not None:
                ReferenceExecutor(graph)(*inputs)
    except CaseTimeout as exc:
        outcome = Outcome(case.id, "hang", stage, "CaseTimeout", str(exc), _frames(exc),
                          case.mutations)
    except PolyhalError as exc:
        message = _shown(str(exc), folder)
        kind = "refused" if stage == "load" else "run-refused"
        if not re.sub(r"<case>/model\.\w+|[\s:.]", "", message):
            kind = "empty-message"
        outcome = Outcome(case.id, kind, stage, type(exc).__name__, message,
                          _frames(exc) if kind == "empty-message" else "", case.mutations)
    except Exception as exc:  # the findings this script is for
        outcome = Outcome(case.id, "crash", stage, type(exc).__name__,
                          _shown(str(exc), folder), _frames(exc), case.mutations)
    else:
        outcome = Outcome(case.id, "ran", stage, mutations=case.mutations)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if len(mutate.UNPICKLED) > unpickled:
        outcome = Outcome(case.id, "unpickled", stage, "", "a pickle in the model file was "
                          "loaded (and its code run)", "", case.mutations)
    return outcome


def _shown(message: str, folder: Path) -> str:
    """``message`` with the case's temporary folder written ``<case>`` (so that two runs of
    one case give the same text)."""
    for text in {str(folder.resolve()), str(folder)}:
        message = message.replace(text, "<case>")
    return message


# ----------------------------------------------------------------- many cases

@dataclass
class FormatStats:
    """Counts of one format's cases."""

    fmt: str
    cases: int = 0
    loaded: int = 0
    ran: int = 0
    refused: int = 0
    run_refused: int = 0
    findings: int = 0
    wrapped: int = 0

    def add(self, outcome: Outcome) -> None:
        """Count ``outcome``."""
        self.cases += 1
        self.loaded += outcome.stage == "run"
        self.ran += outcome.kind == "ran"
        self.refused += outcome.kind == "refused"
        self.run_refused += outcome.kind == "run-refused"
        self.findings += outcome.is_finding
        self.wrapped += outcome.wraps_python_error

    def summary(self) -> str:
        """One line: cases, loaded (ran or refused at run time), refused, findings."""
        return (f"{self.fmt}: {self.cases} cases, {self.loaded} loaded ({self.ran} ran, "
                f"{self.run_refused} refused at run time), {self.refused} refused with "
                f"PolyhalError, {self.findings} findings ({self.wrapped} refusals quote "
                "another exception)")


@dataclass
class FuzzResult:
    """The counts per format and every finding."""

    stats: dict[str, FormatStats] = field(default_factory=dict)
    findings: list[Outcome] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when there is a finding, else 0."""
        return 1 if self.findings else 0


def fuzz(formats: Sequence[str] = FORMATS, seed: int = 0, cases: int | None = 100,
         minutes: float | None = None, keep: Path | None = None,
         seconds: float = DEFAULT_TIME_LIMIT_S, loader: Loader = load_model,
         workdir: Path | None = None, report: Callable[[str], None] = print,
         verbose: bool = False) -> FuzzResult:
    """Run cases ``fmt:seed:0``, ``fmt:seed:1``, ... of each format: ``cases`` of them, or
    as many as fit in ``minutes`` per format (whichever ends first). Reports each finding
    (its files written to ``keep``) and one summary line per format; returns the counts
    and findings.

    >>> fuzz(["json"], seed=0, cases=50).exit_code  # doctest: +SKIP
    json: 50 cases, 6 loaded (6 ran, 0 refused at run time), 44 refused with ...
    0
    """
    if cases is None and minutes is None:
        raise ValueError("fuzz: give cases, minutes or both")
    result = FuzzResult()
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="polyhal-fuzz-")))
        for fmt in formats:
            stats = result.stats[fmt] = FormatStats(fmt)
            deadline = None if minutes is None else time.monotonic() + 60 * minutes
            index = 0
            while (cases is None or index < cases) and (
                    deadline is None or time.monotonic() < deadline):
                case = make_case(fmt, seed, index)
                outcome = run_case(case, workdir, seconds=seconds, loader=loader)
                stats.add(outcome)
                if verbose:
                    report(f"{case.id}: {outcome.kind} {outcome.error} "
                           f"{_clip(outcome.message, 200)}")
                if outcome.is_finding:
                    result.findings.append(outcome)
                    report("FINDING " + outcome.describe())
                    if keep is not None:
                        report(f"  files: {keep_case(case, outcome, keep)}")
                index += 1
            report(stats.summary())
    return result


def keep_case(case: Case, outcome: Outcome, keep: Path) -> Path:
    """Write the case's files and a note on how to rerun it into ``keep``; the folder."""
    folder = keep / case.id.replace(":", "-")
    shutil.rmtree(folder, ignore_errors=True)
    path = write_files(case, folder)
    options = "".join(f", {k}={v!r}" for k, v in case.options.items())
    (folder / "case.txt").write_text(
        f"{outcome.describe()}\n\nseed model: {case.base} ({case.fmt})\n"
        f"rerun:  python scripts/fuzz/model_files.py --case {case.id}\n"
        f"load:   polyhal.interop.loading.load_model({path.name!r}{options})\n")
    return folder


# ----------------------------------------------------------------- command line

def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", choices=[*FORMATS, "all"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--cases", type=int, help="cases per format (default 100)")
    budget.add_argument("--minutes", type=float, help="minutes per format")
    parser.add_argument("--case", metavar="FORMAT:SEED:INDEX", help="run this one case")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="write the files of each finding (or of --case) here")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S,
                        metavar="SECONDS", help="per case (default %(default)g)")
    parser.add_argument("--memory-gb", type=float, default=8.0,
                        help="address-space limit of this process, 0 for none (default "
                             "%(default)g): an allocation past it is a MemoryError finding")
    parser.add_argument("--verbose", action="store_true", help="print every case's outcome")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, loader: Loader = load_model) -> int:
    """The command line; the exit status (``loader`` stands in for ``load_model`` in tests)."""
    args = _arguments(argv)
    if args.memory_gb > 0:
        limit = int(args.memory_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    if args.case:
        try:
            fmt, seed, index = parse_case_id(args.case)
        except ValueError as exc:
            print(f"model_files.py: {exc}", file=sys.stderr)
            return 2
        case = make_case(fmt, seed, index)
        with tempfile.TemporaryDirectory(prefix="polyhal-fuzz-") as workdir:
            outcome = run_case(case, Path(workdir), seconds=args.time_limit, loader=loader)
        print(("FINDING " if outcome.is_finding else "") + outcome.describe())
        if args.keep is not None:
            print(f"  files: {keep_case(case, outcome, args.keep)}")
        return 1 if outcome.is_finding else 0
    formats = FORMATS if args.format == "all" else (args.format,)
    cases = args.cases if args.cases is not None or args.minutes is not None else 100
    result = fuzz(formats, args.seed, cases, args.minutes, args.keep, args.time_limit,
                  loader=loader, verbose=args.verbose)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
