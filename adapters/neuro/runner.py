"""Running a network on a brian2 target: runtime (numpy, Cython) or cpp_standalone.

brian2 keeps process-wide state (the active device, the working directory a
standalone run changes into), so every build and run holds :data:`BRIAN_LOCK`.

- :class:`RuntimeRunner` builds the network once, stores its initial state,
  and for each run restores it and runs with the inputs in TimedArrays made
  once, whose values each run fills in place. The code objects are generated
  once, by a run of no steps when the runner is built, and reused by every
  run (:func:`reuse_code_objects`); Cython caches the compiled ones by their
  code under :func:`cython_cache_root` unless the user set brian2's own
  folder.
- :class:`StandaloneRunner` generates and compiles a C++ project once, in a
  cache folder named by the network's fingerprint, and reruns the binary
  with the inputs passed as ``run_args`` (new TimedArray values, no rebuild).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from polyhal.adapters.neuro.network import BrianNetwork
from polyhal.adapters.neuro.plan import NetworkPlan
from polyhal.cache import writable_cache_dir
from polyhal.errors import DeviceError

BRIAN_LOCK = threading.RLock()
"""Held around everything that touches brian2."""

TARGETS = ("numpy", "cython", "cpp_standalone")
"""The brian2 code-generation targets the adapter offers."""


def cache_root() -> Path:
    """Where standalone projects (and their locks) live: ``$POLYHAL_CACHE_DIR/neuro`` (or
    ``~/.cache/polyhal``); a folder of this process's own, with a warning, when that
    cannot be written."""
    return writable_cache_dir("neuro", "neuro")


def cython_cache_root() -> Path:
    """Where the ``cython`` target's compiled code objects live:
    ``$POLYHAL_CACHE_DIR/neuro-cython`` (or ``~/.cache/polyhal``), with the same
    fallback as :func:`cache_root`. brian2's own default is Cython's cache under
    the home folder, which a read-only home makes fail the run."""
    return writable_cache_dir("neuro-cython", "neuro")


@contextlib.contextmanager
def _cython_cache_in(folder: Path | None) -> Iterator[None]:
    """brian2's ``prefs.codegen.runtime.cython.cache_dir`` set to ``folder`` for the
    call, unless ``folder`` is None or the user set that preference (theirs wins).
    Hold :data:`BRIAN_LOCK` around it: the preference is process-wide."""
    from brian2 import prefs

    if folder is None or prefs.codegen.runtime.cython.cache_dir is not None:
        yield
        return
    prefs.codegen.runtime.cython.cache_dir = str(folder)
    try:
        yield
    finally:
        prefs.codegen.runtime.cython.cache_dir = None


def device_fault(net: BrianNetwork | None, stage: str, exc: BaseException) -> DeviceError:
    """A brian2 failure as a :class:`DeviceError` naming the node behind the object."""
    name = getattr(exc, "_brian_objname", None)
    where = f" in {name!r} (node {net.owner_of(name)!r})" if name and net is not None else ""
    message = getattr(exc, "_brian_message", "") or f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__  # a BrianObjectException is raised from the original error
    if name and cause is not None:
        message += f" ({type(cause).__name__}: {cause})"
    return DeviceError(f"neuro: brian2 failed to {stage}{where}: {message}")


_NO_COLLECT = types.SimpleNamespace(collect=lambda generation=2: 0)


@contextlib.contextmanager
def _no_collect_in_brian2_run() -> Iterator[None]:
    """Skip the ``gc.collect()`` that starts brian2's ``Network.run``.

    brian2 collects garbage there only to warn of objects that were created but
    left out of a network, and a built network has none. In a process holding
    brian2 and sympy a full collection takes 80-120 ms here, most of a small
    network's run. Python's own collector still runs when it always does.
    Hold :data:`BRIAN_LOCK` around it: the module's ``gc`` is swapped for the
    call.
    """
    from brian2.core import network as network_module

    saved = getattr(network_module, "gc", None)
    if saved is None:  # a brian2 without the call: nothing to skip
        yield
        return
    network_module.gc = _NO_COLLECT
    try:
        yield
    finally:
        network_module.gc = saved


def reuse_code_objects(network: Any) -> None:
    """Have each code runner of brian2 ``network`` reuse, in every later run, the code
    object its last run generated.

    brian2's ``Network.run`` has every code runner generate its code object again
    (``CodeRunner.create_default_code_object``: abstract code, translation, the
    code object), though nothing it is generated from changes between the runs of a
    :class:`RuntimeRunner`: the same objects, the same namespace (TimedArrays whose
    values are filled in place). For a network of 1k neurons that was about 60 of
    the 85 ms of a 100-step run. A runner whose code object was never generated (an
    object that did not run) keeps generating it. Hold :data:`BRIAN_LOCK`."""
    from brian2.groups.group import CodeRunner

    for obj in network.sorted_objects:
        if isinstance(obj, CodeRunner) and hasattr(obj, "codeobj"):
            obj.create_default_code_object = functools.partial(_generated_code_object, obj)


def _generated_code_object(runner: Any, run_namespace: Any) -> Any:
    return runner.codeobj


class RuntimeRunner:
    """A network run in this process, by numpy or by Cython-compiled code objects."""

    def __init__(self, plan: NetworkPlan, target: str, spike_inputs: frozenset[str]) -> None:
        if target == "cython":
            from brian2.codegen.runtime.cython_rt import CythonCodeObject as codeobj_class
        else:
            from brian2.codegen.runtime.numpy_rt import NumpyCodeObject as codeobj_class
        self.plan = plan
        self._cython_cache = cython_cache_root() if target == "cython" else None
        self.net: BrianNetwork | None = None
        with BRIAN_LOCK:
            try:
                self.net = BrianNetwork(plan, codeobj_class, spike_inputs)
                self.net.network.store("initial")
            except Exception as exc:
                raise device_fault(self.net, "build the network", exc) from exc
        zeros = [np.zeros((plan.steps, plan.batch, *shape)) for _, shape in plan.inputs]
        self._feeds = {name: np.array(v, np.float64) for name, v in
                       self.net.feed_values(zeros).items()}
        """The TimedArrays' values, filled in place by each run (its counters read them)."""
        self._namespace = self.net.timed_arrays(self._feeds)
        # A run of no steps generates (and for Cython compiles) every code object now,
        # so compile() pays for it and reports what fails; later runs reuse them.
        self._run(zeros, 0)
        with BRIAN_LOCK:
            reuse_code_objects(self.net.network)

    def run(self, arrays: list[np.ndarray]) -> dict[tuple[str, str], np.ndarray]:
        """Recorded outputs for graph inputs ``arrays``."""
        return self._run(arrays, self.plan.steps)

    def _run(self, arrays: list[np.ndarray], steps: int) -> dict[tuple[str, str], np.ndarray]:
        net = self.net
        assert net is not None
        b2 = net.b2
        # inf and NaN from inf and NaN inputs are IEEE-correct results, not faults.
        with (BRIAN_LOCK, np.errstate(all="ignore"), _no_collect_in_brian2_run(),
              _cython_cache_in(self._cython_cache)):
            try:
                net.network.restore("initial")
                values = net.feed_values(arrays)
                for name, feed in self._feeds.items():
                    feed[...] = values[name]
                net.network.run(steps * self.plan.dt * b2.second,
                                namespace=dict(self._namespace), report=None)
                return net.collect() if steps else {}
            except Exception as exc:
                raise device_fault(net, "run", exc) from exc

    def counters(self) -> dict[str, float]:
        """Counters of the last run."""
        assert self.net is not None
        with BRIAN_LOCK:
            return self.net.counters(self._feeds)


class StandaloneRunner:
    """A network compiled to a C++ binary by brian2's cpp_standalone device."""

    def __init__(self, plan: NetworkPlan, directory: Path, spike_inputs: frozenset[str]
                 ) -> None:
        from brian2.devices.cpp_standalone.device import CPPStandaloneDevice
        from brian2.devices.device import reset_device, set_device
        from brian2.utils.filelock import FileLock

        self.plan = plan
        self.directory = directory
        self.lock = FileLock(str(directory) + ".lock")
        self.net: BrianNetwork | None = None
        # A device of our own, so that several projects can live in one process.
        self.device = CPPStandaloneDevice()
        with BRIAN_LOCK, self.lock:
            set_device(self.device, build_on_run=False)
            try:
                self.net = BrianNetwork(plan, None, spike_inputs)
                values = self.net.feed_values(
                    [np.zeros((plan.steps, plan.batch, *shape)) for _, shape in plan.inputs])
                self._values = values
                self.placeholders = self.net.timed_arrays(values)
                self.net.network.run(plan.steps * plan.dt * self.net.b2.second,
                                     namespace=dict(self.placeholders), report=None)
                self.device.build(directory=str(directory), compile=True, run=False,
                                  with_output=False)
            except Exception as exc:
                raise device_fault(self.net, "build the standalone project", exc) from exc
            finally:
                reset_device()

    def run(self, arrays: list[np.ndarray]) -> dict[tuple[str, str], np.ndarray]:
        """Recorded outputs for graph inputs ``arrays`` (the binary reruns, no rebuild)."""
        net = self.net
        assert net is not None
        values = self._values = net.feed_values(arrays)
        run_args: dict[Any, np.ndarray] = {self.placeholders[k]: v for k, v in values.items()}
        with BRIAN_LOCK, self.lock:
            try:
                self.device.run(directory=str(self.directory), with_output=False,
                                run_args=run_args)
                return net.collect()
            except Exception as exc:
                raise device_fault(net, "run the standalone binary", exc) from exc
            finally:
                self._forget_run_args()

    def _forget_run_args(self) -> None:
        # run_args arrays are written next to the project's static arrays, one file per
        # distinct input: remove them so that the cache folder does not grow per run.
        static = self.directory / "static_arrays"
        for name in self.device.run_args_arrays:
            for path in (static / name, static / f"{name}.lock"):
                path.unlink(missing_ok=True)
        self.device.run_args_arrays.clear()

    def counters(self) -> dict[str, float]:
        """Counters of the last run."""
        assert self.net is not None
        with BRIAN_LOCK:
            return self.net.counters(self._values)


_standalone: dict[str, StandaloneRunner] = {}
_runtime: dict[str, RuntimeRunner] = {}
RUNTIME_CACHE_SIZE = 32
"""numpy/Cython networks kept for reuse in one process (least recently used dropped)."""


Runner = RuntimeRunner | StandaloneRunner


def runner_for(plan: NetworkPlan, target: str, spike_inputs: frozenset[str]
               ) -> tuple[Runner, float]:
    """A runner of ``plan`` on ``target`` and the seconds it took to build.

    ``spike_inputs``: the graph inputs whose values are all 0 or 1. Runners are
    cached by the plan's fingerprint, so compiling the same network again costs
    nothing: numpy and Cython runners in this process (the
    :data:`RUNTIME_CACHE_SIZE` most recently used), standalone projects as runners
    and on disk as compiled projects (a rebuild recompiles only what changed).
    """
    start = time.perf_counter()
    _quiet_brian2()
    import brian2

    key = plan.fingerprint(target, brian2.__version__, sorted(spike_inputs))
    if target != "cpp_standalone":
        with BRIAN_LOCK:  # every run restores the stored initial state, so runners share
            runner = _runtime.pop(key, None) or RuntimeRunner(plan, target, spike_inputs)
            _runtime[key] = runner  # most recently used last
            while len(_runtime) > RUNTIME_CACHE_SIZE:
                _runtime.pop(next(iter(_runtime)))
        return runner, time.perf_counter() - start
    directory = cache_root() / f"standalone-{key[:20]}"
    with BRIAN_LOCK:
        runner = _standalone.get(str(directory))
        if runner is None:
            runner = StandaloneRunner(plan, directory, spike_inputs)
            _standalone[str(directory)] = runner
    return runner, time.perf_counter() - start


@functools.cache
def _quiet_brian2() -> None:
    """Silence brian2's warning about NaN or huge state values: the snn spec defines
    what non-finite inputs give, and the results are compared, not the log."""
    from brian2.utils.logger import BrianLogger

    BrianLogger.suppress_name("invalid_values")
