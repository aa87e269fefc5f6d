"""The conformance suite: grades any adapter against the reference executor.

Run it as ``polyhal conformance NAME`` or ``pytest --pyargs polyhal.conformance
--adapter NAME``; see ``docs/conformance.md``. The names below are imported
lazily, so that loading the pytest plugin stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LEVELS": "profiles", "PROFILES": "profiles", "Profile": "profiles",
    "OUTCOMES": "runner", "SUITE_VERSION": "runner", "CaseResult": "runner", "Report": "runner",
    "generate_cases": "runner", "run_suite": "runner", "write_report": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"polyhal.conformance has no attribute {name!r}")
    return getattr(importlib.import_module(f"polyhal.conformance.{_EXPORTS[name]}"), name)
