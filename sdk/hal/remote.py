"""Devices hosted on Ray workers: the isolation mechanism over a Ray actor.

``open_device(address, host="ray")`` (or ``host=RayHost(...)``) is an
:class:`~polyhal.hal.isolation.IsolatedDevice` whose channel is a
:class:`RayChannel`: each worker generation is one Ray actor wrapping a
:class:`~polyhal.hal.worker.WorkerServer`, so a device behaves as it does in
a local worker process — crashes become ``DeviceCrashError``, hangs
``DeviceTimeoutError``, and the next call starts a new actor — but it can run
on any node of a Ray cluster. Needs ``pip install 'polyhal[distributed]'``;
importing this module does not import Ray.

The actor is started with ``runtime_env={"env_vars": spec.env}``, which Ray
applies before the worker process starts, so ``Adapter.worker_env`` is in place
before polyhal, numpy or the adapter's libraries are imported there. The actor
class is sent to the worker by value and imports polyhal only in its
constructor. Polyhal (and the adapter's package) must be importable on every
node that may host a device.

Ray reports an actor's death on the next request, not before: a worker killed
while idle makes that request raise ``DeviceCrashError`` (a local worker
process is seen to be gone and restarted transparently instead). Actors never
restart on their own (``max_restarts=0``); the device starts a new generation.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from polyhal.errors import PolyhalError
from polyhal.hal.channel import Channel, ChannelClosed, ChannelTimeout, WorkerSpec

__all__ = ["RayChannel", "RayHost"]

_KILL_WAIT = 1.0  # seconds kill(wait=True) waits for Ray to report the actor gone
_init_lock = threading.Lock()


def _import_ray() -> ModuleType:
    """The ``ray`` module, or a ``PolyhalError`` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise PolyhalError("hosting a device on a Ray worker needs Ray, which is not installed "
                           f"({exc}); install it with pip install 'polyhal[distributed]'"
                           ) from None
    return ray


def _connect(address: str | None) -> ModuleType:
    """``ray``, connected: to ``address`` (None: a local instance) unless it already is."""
    ray = _import_ray()
    with _init_lock:
        if not ray.is_initialized():
            ray.init(address=address)
    return ray


def _make_actor_class() -> type:
    # Defined in a function, so Ray pickles the class by value: loading it in the
    # worker imports nothing of polyhal; the constructor does, after Ray has applied
    # the runtime environment.
    class PolyhalWorker:
        """A Ray actor serving one device: request bytes in, reply bytes out."""

        def __init__(self) -> None:
            from polyhal.hal.worker import WorkerServer

            self._server = WorkerServer()

        def handle(self, data: bytes) -> bytes:
            return self._server.handle(data)

        def pid(self) -> int:
            import os

            return os.getpid()

        def shutdown(self) -> None:
            self._server.shutdown()

    return PolyhalWorker


@functools.cache
def _actor_class() -> Any:
    """The Ray actor class (exported to the cluster once per process)."""
    return _import_ray().remote(_make_actor_class())


def _one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line, without Ray's boilerplate advice, at most ``limit`` chars."""
    text = re.sub(r"\s+", " ", text.split(" Some common causes")[0]).strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _describe_ray_error(exc: Exception, ray: ModuleType) -> str:
    """A readable reason for an error that ended a request to the Ray actor."""
    errors = ray.exceptions
    if isinstance(exc, errors.RayActorError):
        message = str(exc)
        if exc.actor_init_failed:  # the last line of the constructor's traceback
            lines = [line for line in message.splitlines() if line.strip()] or [message]
            return f"the Ray actor failed to start: {_one_line(lines[-1])}"
        dead = message.find("The actor is dead because")
        return f"the Ray actor died: {_one_line(message[max(dead, 0):])}"
    if isinstance(exc, errors.RayTaskError):
        cause = exc.cause
        return (f"the Ray actor's request handler raised {type(cause).__name__}: "
                f"{_one_line(str(cause))}")
    return f"Ray failed ({type(exc).__name__}: {_one_line(str(exc))})"


@dataclass(frozen=True)
class RayHost:
    """Where Ray places a device's worker: the actor's resources and node.

    ``address`` is the cluster :func:`ray.init` connects to when Ray is not
    initialized yet (None: Ray's default, a local instance); an initialized Ray
    is used as it is.
    """

    num_cpus: float = 1
    num_gpus: float = 0
    resources: Mapping[str, float] = field(default_factory=dict)
    """Custom Ray resources the actor needs, e.g. ``{"fpga": 1}``."""
    node_id: str | None = None
    """Pin the actor to this node (hex id, as ``ray.nodes()`` lists it); it fails if the
    node is gone."""
    address: str | None = None

    def __post_init__(self) -> None:
        amounts = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus,
                   **{f"resources[{k!r}]": v for k, v in self.resources.items()}}
        for name, value in amounts.items():
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise PolyhalError(f"RayHost {name}={value!r}: expected a number >= 0")

    def actor_options(self, spec: WorkerSpec) -> dict[str, Any]:
        """The Ray actor options for ``spec``'s worker (Ray is imported)."""
        options: dict[str, Any] = {
            "num_cpus": self.num_cpus, "num_gpus": self.num_gpus,
            "resources": dict(self.resources), "max_restarts": 0, "max_task_retries": 0,
            "runtime_env": {"env_vars": {str(k): str(v) for k, v in spec.env.items()}},
        }
        if self.node_id is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(self.node_id,
                                                                            soft=False)
        return options

    def channel_factory(self) -> Callable[[WorkerSpec], Channel]:
        """``WorkerSpec -> RayChannel`` for ``IsolatedDevice(channel_factory=)``; raises
        ``PolyhalError`` now if Ray is not installed."""
        _import_ray()
        return functools.partial(RayChannel, host=self)


class RayChannel(Channel):
    """A worker generation in a Ray actor (see the module docstring).

    The actor is created here; Ray starts it asynchronously, so the first request
    (``open``) also waits for it to be scheduled and started.
    """

    def __init__(self, spec: WorkerSpec, host: RayHost | None = None) -> None:
        self.host = host or RayHost()
        self._ray = _connect(self.host.address)
        self._actor = _actor_class().options(**self.host.actor_options(spec)).remote()
        self._pid_ref = self._actor.pid.remote()  # runs before the first request
        self._pid: int | None = None
        self._reply: Any = None  # the ObjectRef of the request in flight
        self._dead = False

    @property
    def pid(self) -> int | None:
        """The actor's process id (on its node), once it has started; None before."""
        if self._pid is None:
            with contextlib.suppress(Exception):
                ready, _ = self._ray.wait([self._pid_ref], timeout=0)
                if ready:
                    self._pid = self._ray.get(self._pid_ref, timeout=0)
        return self._pid

    def send(self, data: bytes) -> None:
        if self._dead:
            raise ChannelClosed("the Ray actor is gone")
        try:
            self._reply = self._actor.handle.remote(data)
        except Exception as exc:
            raise self._closed(exc) from exc

    def receive(self, timeout: float | None) -> bytes:
        reply, self._reply = self._reply, None
        if reply is None:
            raise ChannelClosed("no request is in flight to the Ray actor")
        try:
            return self._ray.get(reply, timeout=timeout)
        except self._ray.exceptions.GetTimeoutError:
            self._reply = reply
            raise ChannelTimeout() from None
        except Exception as exc:
            raise self._closed(exc) from exc

    def _closed(self, exc: Exception) -> ChannelClosed:
        """The actor is gone (or unusable): remember it, and say why."""
        self._dead = True
        reason = _describe_ray_error(exc, self._ray)
        pid = self.pid
        return ChannelClosed(reason if pid is None else f"{reason} (actor pid {pid})")

    def is_alive(self) -> bool:
        """False once killed or seen dead; a death Ray has not reported yet is seen by
        the next request."""
        return not self._dead and self._ray.is_initialized()

    def kill(self, wait: bool = True) -> None:
        actor, self._actor = self._actor, None
        self._dead = True
        if actor is None:
            return
        with contextlib.suppress(Exception):
            self._ray.kill(actor, no_restart=True)
        if wait:  # until Ray reports the actor gone, so its resources are free again
            with contextlib.suppress(Exception):
                self._ray.wait([actor.pid.remote()], timeout=_KILL_WAIT)

    def close(self, timeout: float) -> None:
        if self._actor is not None and not self._dead:
            with contextlib.suppress(Exception):
                self._ray.get(self._actor.shutdown.remote(), timeout=timeout)
        self.kill()
