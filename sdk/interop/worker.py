"""Running a file parser in a worker process, so that a hostile file cannot hang us.

Some parsers run in C libraries that Python cannot interrupt (libhdf5 can loop
forever on damaged metadata). :func:`call_with_timeout` runs such a parser in
a child process and kills it when it overruns; the parser's result comes back
pickled from our own child (never from the file), and a :class:`PolyhalError`
it raised is raised again here with its type and message.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any

from polyhal import errors
from polyhal.errors import PolyhalError, SerializationError

DEFAULT_TIMEOUT_S = 60.0
"""How long a parse may take (a legitimate file of the size limit parses in seconds)."""


def _child(connection: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        connection.send(("ok", fn(*args)))
    except PolyhalError as exc:
        connection.send(("error", type(exc).__name__, str(exc)))
    except BaseException as exc:  # reported to the parent, which raises a clear error
        connection.send(("crash", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        connection.close()


def call_with_timeout(fn: Callable[..., Any], args: tuple[Any, ...], what: str,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """``fn(*args)`` in a forked child process; a :class:`SerializationError` naming
    ``what`` when it runs past ``timeout_s`` or dies.

    A daemonic process may not start children: there ``fn`` runs in-process,
    without the timeout.
    """
    if multiprocessing.current_process().daemon:
        return fn(*args)
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(child, fn, args), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(timeout_s):
            raise SerializationError(f"{what} did not finish within {timeout_s:g} s (a damaged "
                                     "file can make its parser loop); it was stopped "
                                     "(polyhal.ir.Limits.max_parse_seconds sets the time)")
        try:
            message = parent.recv()
        except EOFError:
            raise SerializationError(f"{what} failed: the parser process died (exit code "
                                     f"{process.exitcode})") from None
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        parent.close()
    if message[0] == "ok":
        return message[1]
    if message[0] == "error":
        kind = getattr(errors, message[1], None)
        if not (isinstance(kind, type) and issubclass(kind, PolyhalError)):
            kind = SerializationError
        raise kind(message[2])
    raise SerializationError(f"{what} failed: {message[1]}")
