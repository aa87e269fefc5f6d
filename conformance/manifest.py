"""Manifests: the failures an adapter expects, and the cases the spec cannot settle.

An adapter's ``manifest.toml``::

    expected_failures = [
        { id = "L1/core.Pow/float16/*", reason = "no half-precision pow unit" },
    ]

A case that matches and fails is ``xfail``; one that matches and passes is
``xpass``, which fails the run (the manifest is stale). Cases the
specification itself cannot settle are listed once, for every adapter, in
``unsettled.toml`` beside this module: a failure there is ``xfail`` and a pass
is a pass.
"""

from __future__ import annotations

import fnmatch
import importlib
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from polyhal.errors import ConformanceError


@dataclass(frozen=True)
class Entry:
    """A glob over case ids, and why those cases are listed."""

    pattern: str
    reason: str

    def matches(self, case_id: str) -> bool:
        """True when ``case_id`` matches the glob."""
        return fnmatch.fnmatchcase(case_id, self.pattern)


@dataclass(frozen=True)
class Manifest:
    """The expected failures of one adapter."""

    source: str
    expected_failures: tuple[Entry, ...] = ()

    def match(self, case_id: str) -> Entry | None:
        """The first entry matching ``case_id``."""
        return next((e for e in self.expected_failures if e.matches(case_id)), None)


def _entries(data: object, key: str, source: str) -> tuple[Entry, ...]:
    if not isinstance(data, dict):
        raise ConformanceError(f"{source}: expected a TOML table")
    items = data.get(key, [])
    if not isinstance(items, list):
        raise ConformanceError(f"{source}: {key} must be an array of tables")
    entries = []
    for index, item in enumerate(items):
        if (not isinstance(item, dict) or not isinstance(item.get("id"), str)
                or not isinstance(item.get("reason"), str) or not item["reason"].strip()):
            raise ConformanceError(f"{source}: {key}[{index}] needs an 'id' glob and a "
                                   "non-empty 'reason'")
        entries.append(Entry(item["id"], item["reason"]))
    return tuple(entries)


def read_manifest(path: Path) -> Manifest:
    """Parse a manifest file; a malformed one is a :class:`ConformanceError`."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConformanceError(f"{path}: cannot read manifest ({exc})") from None
    return Manifest(str(path), _entries(data, "expected_failures", str(path)))


def manifest_path(adapter_cls: type) -> Path | None:
    """Where an adapter's manifest lives: its ``manifest`` attribute, or
    ``manifest.toml`` beside its module."""
    declared = getattr(adapter_cls, "manifest", None)
    module = sys.modules.get(adapter_cls.__module__) or importlib.import_module(
        adapter_cls.__module__)
    folder = Path(module.__file__).parent if getattr(module, "__file__", None) else Path(".")
    if declared:
        path = Path(declared)
        return path if path.is_absolute() else folder / path
    candidate = folder / "manifest.toml"
    return candidate if candidate.is_file() else None


def load_manifest(adapter_cls: type) -> Manifest:
    """The manifest of an adapter class (empty if it has none)."""
    path = manifest_path(adapter_cls)
    if path is None:
        return Manifest("(none)")
    if not path.is_file():
        raise ConformanceError(f"adapter {adapter_cls.__name__} names manifest {path}, which "
                               "does not exist")
    return read_manifest(path)


UNSETTLED_PATH = Path(__file__).with_name("unsettled.toml")


def unsettled() -> tuple[Entry, ...]:
    """Cases the specification cannot settle, shared by every adapter."""
    data = tomllib.loads(UNSETTLED_PATH.read_text())
    return _entries(data, "cases", str(UNSETTLED_PATH))
