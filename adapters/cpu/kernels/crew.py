"""Worker threads for the CPU adapter's own kernels.

The register-blocked kernels (:mod:`.direct_conv`, :mod:`.packed_gemm`) release
the GIL and split their work between :func:`polyhal.adapters.cpu.threads.count`
threads: the caller and long-lived workers of one process-wide :class:`Crew`.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable


class Crew:
    """Worker threads that each take calls from a queue of their own.

    Splitting a kernel takes one queue hand-off per extra thread (about 16 us here,
    where a ``ThreadPoolExecutor`` future took 40-80 us); the caller runs the first
    share itself. Safe for concurrent callers: every call brings its own reply
    queue. After a ``fork`` the child starts a new crew (the parent's threads do
    not exist there).
    """

    def __init__(self) -> None:
        self._inboxes: list[queue.SimpleQueue] = []
        self._lock = threading.Lock()

    def _inbox(self, index: int) -> queue.SimpleQueue:
        with self._lock:
            while len(self._inboxes) <= index:
                inbox: queue.SimpleQueue = queue.SimpleQueue()
                threading.Thread(target=self._work, args=(inbox,), daemon=True,
                                 name=f"polyhal-cpu-{len(self._inboxes)}").start()
                self._inboxes.append(inbox)
            return self._inboxes[index]

    @staticmethod
    def _work(inbox: queue.SimpleQueue) -> None:
        while True:
            call, replies = inbox.get()
            try:
                call()
                replies.put(None)
            except BaseException as error:  # handed to the caller, which raises it
                replies.put(error)

    def run(self, calls: list[Callable[[], None]]) -> None:
        """Runs ``calls[1:]`` on workers and ``calls[0]`` here; returns when all are
        done (also after an interrupt, so that no worker writes into a buffer its
        caller has given up), raising the first error."""
        replies: queue.SimpleQueue = queue.SimpleQueue()
        for index, call in enumerate(calls[1:]):
            self._inbox(index).put((call, replies))
        errors: list[BaseException] = []
        try:
            calls[0]()
        except BaseException as error:
            errors.append(error)
        pending = len(calls) - 1
        while pending:  # even when interrupted: workers may still be writing the output
            try:
                reply = replies.get()
            except BaseException as error:  # a KeyboardInterrupt while waiting
                errors.append(error)
                continue
            pending -= 1
            if reply is not None:
                errors.append(reply)
        if errors:
            raise errors[0]


_crew = Crew()


def _new_crew_after_fork() -> None:
    global _crew
    _crew = Crew()


os.register_at_fork(after_in_child=_new_crew_after_fork)


def run(calls: list[Callable[[], None]]) -> None:
    """Runs ``calls`` on this process's crew (see :meth:`Crew.run`)."""
    _crew.run(calls)
