"""Which NIR primitives map onto which ops of the ``snn`` domain."""

from __future__ import annotations

from polyhal.errors import UnsupportedError
from polyhal.ops.snn import STATEFUL

OPS = {"LIF": "LIF", "CubaLIF": "CubaLIF", "IF": "IF", "LI": "LI", "I": "Integrator",
       "Threshold": "Threshold", "Delay": "Delay", "Linear": "Linear", "Affine": "Affine",
       "Scale": "Scale", "Conv1d": "Conv1d", "Conv2d": "Conv2d", "SumPool2d": "SumPool2d",
       "Flatten": "Flatten"}
"""NIR primitive -> snn op of the same semantics."""

PRIMITIVES = set(OPS) | {"Input", "Output", "NIRGraph"}
"""Every NIR type polyhal reads."""

STATEFUL_PRIMITIVES = frozenset(name for name, op in OPS.items() if op in STATEFUL)
"""NIR primitives whose output depends on earlier steps: a loop through one is recurrent."""

_WHY = {"AvgPool2d": "polyhal's snn domain has SumPool2d only; divide by the window size "
                     "with a Scale after a SumPool2d",
        "CubaLI": "polyhal's snn domain has no current-based leaky integrator yet"}


def check_supported(kind: str, node: str) -> None:
    """An :class:`UnsupportedError` naming ``node`` unless polyhal reads NIR type ``kind``."""
    if kind in PRIMITIVES:
        return
    why = _WHY.get(kind, f"polyhal reads {', '.join(sorted(PRIMITIVES))}")
    raise UnsupportedError(f"NIR node {node!r} ({kind}): polyhal does not support the NIR "
                           f"primitive {kind} ({why})")
