"""Checking an adapter against the HAL contract at registration.

A broken adapter is rejected with one message listing every problem, each
naming the adapter, the class, the method and the fix (pluggy-style).
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from polyhal.errors import AdapterContractError
from polyhal.hal.contract import API_VERSION, Adapter, Device, Executable

ADAPTER_NAME = re.compile(r"[a-z][a-z0-9-]*")  # what `name` of an adapter must match

# (base class, hook, required, positional arguments a call passes, signature to show)
HOOKS: tuple[tuple[type, str, bool, int, str], ...] = (
    (Adapter, "probe", True, 0, "def probe(self) -> list[DeviceInfo]"),
    (Adapter, "open", True, 1, "def open(self, index: int = 0, **options) -> Device"),
    (Device, "capabilities", True, -1, "@property\n    def capabilities(self) -> Capabilities"),
    (Device, "upload", True, 1, "def upload(self, array: np.ndarray) -> Buffer"),
    (Device, "download", True, 1, "def download(self, buffer: Buffer) -> np.ndarray"),
    (Device, "compile", True, 2,
     "def compile(self, graph: Graph, options: CompileOptions) -> Executable"),
    (Device, "close", False, 0, "def close(self) -> None"),
    (Executable, "run", True, 1, "def run(self, inputs: Sequence[Buffer]) -> list[Buffer]"),
    (Executable, "run_async", False, 1,
     "def run_async(self, inputs: Sequence[Buffer]) -> Future[list[Buffer]]"),
    (Executable, "profile", False, 0, "def profile(self) -> Profile | None"),
)


@dataclass
class ContractRow:
    """One hook of the contract as an adapter implements it."""

    role: str
    hook: str
    required: bool
    implemented: bool
    problem: str = ""


@dataclass
class ContractReport:
    """Every hook of an adapter, and every problem found."""

    adapter: str
    source: str
    api_version: str
    rows: list[ContractRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the adapter meets the contract."""
        return not self.problems

    def raise_if_broken(self) -> None:
        """Raise :class:`AdapterContractError` listing every problem."""
        if self.problems:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            raise AdapterContractError(f"adapter {self.adapter!r} ({self.source}) breaks the "
                                       f"HAL contract:\n{lines}")


def _source(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _check_hook(report: ContractReport, cls: type, base: type, hook: str, required: bool,
                positional: int, signature: str) -> None:
    role = base.__name__
    implemented = getattr(cls, hook, None) is not getattr(base, hook)
    row = ContractRow(role, hook, required, implemented)
    report.rows.append(row)
    if not implemented:
        if required:
            row.problem = "missing"
            report.problems.append(
                f"{role}.{hook} is required but {cls.__qualname__} does not define it.\n"
                f"    Fix: define `{signature}` in {cls.__qualname__}.")
        return
    attr = inspect.getattr_static(cls, hook)
    if positional < 0:  # a property
        if callable(attr) and not isinstance(attr, property):
            row.problem = "not a property"
            report.problems.append(f"{role}.{hook} of {cls.__qualname__} must be a property.\n"
                                   f"    Fix: `{signature}`.")
        return
    bound_first = 0 if isinstance(attr, staticmethod) else 1
    if isinstance(attr, staticmethod | classmethod):
        attr = attr.__func__
    if not callable(attr):
        row.problem = "not callable"
        report.problems.append(f"{role}.{hook} of {cls.__qualname__} is not a method.\n"
                               f"    Fix: `{signature}`.")
        return
    try:
        inspect.signature(attr).bind(*([None] * (positional + bound_first)))
    except TypeError as exc:
        row.problem = "bad signature"
        report.problems.append(
            f"{role}.{hook} of {cls.__qualname__} cannot be called the way the HAL calls it "
            f"({exc}).\n    Fix: use the signature `{signature}`.")
    except ValueError:  # no signature available (a builtin): accept it
        pass


def check_adapter_class(cls: type) -> ContractReport:
    """Check ``cls`` (and its ``device_class``/``executable_class``) against the contract."""
    name = getattr(cls, "name", None)
    report = ContractReport(str(name), _source(cls) if isinstance(cls, type) else repr(cls),
                            str(getattr(cls, "api_version", "?")))
    if not isinstance(cls, type) or not issubclass(cls, Adapter):
        report.problems.append(f"{report.source} is not a subclass of polyhal.hal.Adapter.\n"
                               "    Fix: `class MyAdapter(polyhal.hal.Adapter): ...`.")
        return report
    if not isinstance(name, str) or not ADAPTER_NAME.fullmatch(name):
        report.problems.append(f"Adapter.name is {name!r}.\n    Fix: set `name = \"my-device\"` "
                               "(lowercase letters, digits and '-').")
    if not isinstance(getattr(cls, "version", None), str):
        report.problems.append("Adapter.version is missing or not a string.\n"
                               "    Fix: set `version = \"0.1.0\"`.")
    _check_api_version(report, cls)
    _check_isolation_attributes(report, cls)
    device_class = getattr(cls, "device_class", None)
    executable_class = getattr(cls, "executable_class", None)
    classes: list[tuple[type, type | None]] = [(Adapter, cls), (Device, device_class),
                                               (Executable, executable_class)]
    if not (isinstance(device_class, type) and issubclass(device_class, Device)):
        report.problems.append(f"Adapter.device_class of {cls.__qualname__} is "
                               f"{device_class!r}.\n    Fix: set `device_class = MyDevice`, a "
                               "subclass of polyhal.hal.Device.")
        classes[1] = (Device, None)
    if executable_class is not None and not (isinstance(executable_class, type)
                                             and issubclass(executable_class, Executable)):
        report.problems.append(f"Adapter.executable_class of {cls.__qualname__} is not a "
                               "subclass of polyhal.hal.Executable.")
        classes[2] = (Executable, None)
    for base, impl in classes:
        if impl is None:
            continue
        for hook_base, hook, required, positional, signature in HOOKS:
            if hook_base is base:
                _check_hook(report, impl, base, hook, required, positional, signature)
    return report


def _check_api_version(report: ContractReport, cls: type) -> None:
    versions = getattr(cls, "api_version", None)
    if (not isinstance(versions, tuple) or len(versions) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in versions)
            or versions[0] > versions[1]):
        report.problems.append(f"Adapter.api_version is {versions!r}.\n    Fix: set "
                               f"`api_version = ({API_VERSION}, {API_VERSION})` (an inclusive "
                               "range of HAL contract versions).")
        return
    low, high = versions
    if not low <= API_VERSION <= high:
        report.problems.append(
            f"Adapter.api_version {low}..{high} does not include the HAL contract version "
            f"{API_VERSION} of this polyhal.\n    Fix: port the adapter to contract "
            f"{API_VERSION} and set `api_version = ({API_VERSION}, {API_VERSION})`, or install "
            "a polyhal release that speaks its version.")


def _check_isolation_attributes(report: ContractReport, cls: type) -> None:
    """``worker_env``, ``always_isolate`` and ``manifest``: used only when a device is
    isolated or graded, so checked here rather than failing there."""
    env = getattr(cls, "worker_env", None)
    if not (isinstance(env, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        report.problems.append(f"Adapter.worker_env is {env!r}.\n    Fix: set `worker_env = "
                               "{\"NAME\": \"value\"}` (a mapping of strings) or leave it out.")
    isolate = getattr(cls, "always_isolate", None)
    if not isinstance(isolate, bool):
        report.problems.append(f"Adapter.always_isolate is {isolate!r}.\n    Fix: set "
                               "`always_isolate = True` or `False`.")
    manifest = getattr(cls, "manifest", None)
    if manifest is not None and not isinstance(manifest, str | os.PathLike):
        report.problems.append(f"Adapter.manifest is {manifest!r}.\n    Fix: set `manifest = "
                               "\"manifest.toml\"` (a path, relative to the adapter's module) "
                               "or leave it out.")
