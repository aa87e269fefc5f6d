"""A compile cache for Verilator's run-time library objects (stdlib only).

Every Verilator build compiles the same run-time library sources
(``$VERILATOR_ROOT/include/verilated*.cpp``: about 17 s of a 20 s build of a
small module) with the same flags. :func:`polyhal.simulators.fpga.build.build`
passes this script to ``make`` as ``OBJCACHE`` (the hook Verilator's makefiles
provide for ccache), so each compile runs as ``objcache.py --cache DIR -- CXX
ARGS...``:

- a compile of a source under ``$VERILATOR_ROOT/include`` is looked up by a key
  of the whole command line, the compiler's identity and the source's contents;
  a hit copies the cached object (and its ``-MMD`` dependency file), a miss
  compiles and stores them, provided the dependency file shows that the object
  depends on nothing outside ``$VERILATOR_ROOT/include`` (so not on the design);
- every other command (the design's generated C++, cocotb's main) runs as is.

Any failure of the cache itself falls back to running the command.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Bump to invalidate every cached object.
FORMAT = 1


def _output(args: list[str]) -> str | None:
    """The ``-o`` argument of a compile command, if any."""
    for i, arg in enumerate(args[:-1]):
        if arg == "-o":
            return args[i + 1]
    return None


def _cacheable_source(args: list[str]) -> Path | None:
    """The run-time library source a ``-c`` compile builds, or None."""
    root = os.environ.get("VERILATOR_ROOT")
    if not root or "-c" not in args:
        return None
    include = (Path(root) / "include").resolve()
    sources = [Path(a) for a in args if a.endswith(".cpp") and not a.startswith("-")]
    if len(sources) != 1:
        return None
    src = sources[0].resolve()
    return src if src.parent == include and src.is_file() else None


def _compiler_identity(cxx: str) -> dict[str, object]:
    exe = shutil.which(cxx) or cxx
    real = os.path.realpath(exe)
    st = os.stat(real)
    return {"path": real, "size": st.st_size, "mtime": st.st_mtime_ns}


def cache_key(args: list[str], source: Path) -> str:
    """The key of one compile: command line, compiler, environment flags, source."""
    out = _output(args)
    meta = {"format": FORMAT, "args": [a if a != out else "<out>" for a in args],
            "cxx": _compiler_identity(args[0]),
            "env": {k: os.environ.get(k) for k in ("CPATH", "CPLUS_INCLUDE_PATH",
                                                   "VERILATOR_ROOT")}}
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    h.update(source.read_bytes())
    return h.hexdigest()[:32]


def _dep_file(out: str) -> Path:
    return Path(out).with_suffix(".d")


def _self_contained(dep: Path, include: Path) -> bool:
    """Whether the ``-MMD`` file ``dep`` lists only files under ``include``."""
    try:
        words = dep.read_text().replace("\\\n", " ").split()
    except OSError:
        return False
    files = [w for w in words[1:] if w != "\\"]
    return bool(files) and all(Path(f).resolve().is_relative_to(include) for f in files)


def run(cache: Path, args: list[str]) -> int:
    """Run compile command ``args`` through the cache in ``cache``; the exit status."""
    source = _cacheable_source(args)
    out = _output(args)
    if source is None or out is None:
        return subprocess.call(args)
    try:
        entry = cache / cache_key(args, source)
        if (entry / "ok").is_file():
            shutil.copyfile(entry / "obj.o", out)
            if (entry / "obj.d").is_file():
                shutil.copyfile(entry / "obj.d", _dep_file(out))
            return 0
    except OSError:
        return subprocess.call(args)
    status = subprocess.call(args)
    if status == 0 and _self_contained(_dep_file(out), source.parent):
        with contextlib.suppress(OSError):
            cache.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".obj-", dir=cache))
            try:
                shutil.copyfile(out, tmp / "obj.o")
                if _dep_file(out).is_file():
                    shutil.copyfile(_dep_file(out), tmp / "obj.d")
                (tmp / "ok").write_text("")
                os.rename(tmp, entry)     # a concurrent winner leaves this one unused
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return status


def main(argv: list[str]) -> int:
    """``objcache.py --cache DIR -- CXX ARGS...``."""
    if len(argv) < 4 or argv[0] != "--cache" or argv[2] != "--":
        print("usage: objcache.py --cache DIR -- CXX ARGS...", file=sys.stderr)
        return 2
    return run(Path(argv[1]), argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
