"""The conformance suite: grades any adapter against the reference executor.

Run it as ``polyhal conformance NAME`` or ``pytest --pyargs polyhal.conformance
--adapter NAME``; see ``docs/conformance.md``.
"""

from polyhal.conformance.profiles import LEVELS, PROFILES, Profile
from polyhal.conformance.runner import (
    OUTCOMES,
    SUITE_VERSION,
    CaseResult,
    Report,
    generate_cases,
    run_suite,
)

__all__ = ["LEVELS", "OUTCOMES", "PROFILES", "SUITE_VERSION", "CaseResult", "Profile",
           "Report", "generate_cases", "run_suite"]
