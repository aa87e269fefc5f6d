"""File parsers run in a worker process: a loop or a crash there is a clear error here."""

from __future__ import annotations

import os
import time

import pytest

from polyhal.errors import LimitExceededError, SerializationError
from polyhal.interop.worker import call_with_timeout


def _spin() -> None:
    while True:  # as libhdf5 does on some damaged files: nothing Python can interrupt
        pass


def _die() -> None:
    os._exit(3)


def _refuse() -> None:
    raise LimitExceededError("too big")


def test_a_parser_that_loops_is_stopped():
    start = time.monotonic()
    with pytest.raises(SerializationError, match="did not finish within 1 s"):
        call_with_timeout(_spin, (), "reading the file", timeout_s=1.0)
    assert time.monotonic() - start < 10


def test_a_parser_that_dies_is_a_serialization_error():
    with pytest.raises(SerializationError, match="parser process died"):
        call_with_timeout(_die, (), "reading the file")


def test_errors_keep_their_type_and_results_come_back():
    with pytest.raises(LimitExceededError, match="too big"):
        call_with_timeout(_refuse, (), "reading the file")
    assert call_with_timeout(sorted, ([3, 1, 2],), "sorting") == [1, 2, 3]


def _in_daemon(queue) -> None:
    queue.put(call_with_timeout(sorted, ([2, 1],), "sorting"))


def test_a_daemonic_process_parses_in_process():
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=_in_daemon, args=(queue,), daemon=True)
    process.start()
    assert queue.get(timeout=30) == [1, 2]
    process.join(timeout=30)
