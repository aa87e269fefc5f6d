"""Standard output while a command runs: a failed write is an error of its own, and a
closed pipe ends the command quietly."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable


class StdoutError(Exception):
    """Standard output failed (a full disk, an I/O error): not a command's own error."""

    def __init__(self, reason: OSError) -> None:
        super().__init__(str(reason))
        self.reason = reason


class GuardedStdout:
    """``sys.stdout`` while a command runs: a write or flush that fails, other than
    on a closed pipe, raises :class:`StdoutError`."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._guard(self._stream.write, text)  # type: ignore[attr-defined]

    def flush(self) -> None:
        self._guard(self._stream.flush)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)

    @staticmethod
    def _guard(call: Callable[..., object], *args: object) -> object:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(exc) from None


def drop_stdout(stdout: object) -> None:
    """Point file descriptor 1 at /dev/null, so that what is still buffered for
    ``stdout`` is dropped at exit instead of failing again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())  # type: ignore[attr-defined]


def print_error(message: str) -> None:
    """Print ``polyhal: error: message`` to standard error, if there is one."""
    if sys.stderr is not None:
        print(f"polyhal: error: {message}", file=sys.stderr)
