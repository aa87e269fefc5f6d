"""The NIR neuron models of the snn domain as brian2 model descriptions.

One function per op returns the ODEs (with ``{I}`` standing for the node's
input current, held over each step), threshold, reset and integration method,
plus the parameters it reads. Each is the ODE of ``polyhal.ops.snn`` written
for brian2: ``method='euler'`` is brian2's forward Euler and ``method='exact'``
its closed-form solver, which is what the reference kernels compute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

SPIKES = "spikes"
"""The output a population records with a SpikeMonitor rather than a state variable."""

CURRENT = "{I}"
"""Where a model's equations read the input current."""

RESETS = {"v_reset": "v = v_reset", "subtract": "v = v - v_threshold"}


@dataclass(frozen=True, eq=False)
class NeuronModel:
    """brian2 equations for some (by default all) elements of one node.

    ``parameters`` maps a name to its values over the model's elements and its
    brian2 unit (``"1"``, ``"second"``, ``"hertz"``). ``outputs`` maps the
    node's output index to the variable holding it (:data:`SPIKES` for spikes).
    ``prepare`` is code run each step between the input's arrival and the
    integration.
    """

    equations: str
    parameters: Mapping[str, tuple[np.ndarray, str]]
    outputs: Mapping[int, str]
    threshold: str | None = None
    reset: str | None = None
    method: str = "euler"
    prepare: str | None = None
    elements: np.ndarray | None = field(default=None)

    def restricted(self, keep: np.ndarray) -> NeuronModel:
        """This model on the elements where ``keep`` is true only."""
        parameters = {k: (v[keep], unit) for k, (v, unit) in self.parameters.items()}
        return NeuronModel(self.equations, parameters, self.outputs, self.threshold,
                           self.reset, self.method, self.prepare, np.flatnonzero(keep))


Params = Mapping[str, np.ndarray]


def _spiking(equations: str, params: Params, units: Mapping[str, str], outputs: Mapping[int, str],
             attrs: Mapping[str, object], prepare: str | None = None) -> NeuronModel:
    return NeuronModel(equations, {k: (params[k], units.get(k, "1")) for k in units},
                       outputs, "v > v_threshold", RESETS[str(attrs["reset"])],
                       str(attrs["method"]), prepare)


def lif(params: Params, attrs: Mapping[str, object]) -> list[NeuronModel]:
    """tau dv/dt = v_leak + r I - v."""
    units = {"tau": "second", "r": "1", "v_leak": "1", "v_threshold": "1", "v_reset": "1"}
    return [_spiking(f"dv/dt = (v_leak + r*({CURRENT}) - v)/tau : 1", params, units,
                     {0: SPIKES, 1: "v"}, attrs)]


def cuba_lif(params: Params, attrs: Mapping[str, object]) -> list[NeuronModel]:
    """tau_syn disyn/dt = w_in I - isyn, tau_mem dv/dt = v_leak - v + r isyn.

    The drive ``w_in I`` is computed once per step into ``drive`` before the
    integration, as the reference does, so that an overflow to inf reaches the
    closed form as inf rather than as factors it regroups. brian2's closed form
    divides by ``tau_mem - tau_syn``; where the two are equal (as the reference
    decides it) the system is solved with one time constant instead, so an
    ``exact`` node may become two models.
    """
    units = {"tau_syn": "second", "tau_mem": "second", "r": "1", "v_leak": "1",
             "v_threshold": "1", "v_reset": "1", "w_in": "1"}
    outputs = {0: SPIKES, 1: "v", 2: "isyn"}
    membrane = "dv/dt = (v_leak - v + r*isyn)/tau_mem : 1\ndrive : 1\n"
    prepare = f"drive = w_in*({CURRENT})"
    general = _spiking(membrane + "disyn/dt = (drive - isyn)/tau_syn : 1", params, units,
                       outputs, attrs, prepare)
    if attrs["method"] != "exact":
        return [general]
    same = np.isclose(params["tau_syn"], params["tau_mem"], rtol=1e-12, atol=0)
    one_tau = {k: u for k, u in units.items() if k != "tau_syn"}
    degenerate = _spiking(membrane + "disyn/dt = (drive - isyn)/tau_mem : 1", params, one_tau,
                          outputs, attrs, prepare)
    if same.all():
        return [degenerate]
    if not same.any():
        return [general]
    return [general.restricted(~same), degenerate.restricted(same)]


def _gain(params: Params, attrs: Mapping[str, object]) -> np.ndarray:
    return float(attrs["dt"]) * params["r"]  # the reference's dt * r, rounded the same way


def integrate_and_fire(params: Params, attrs: Mapping[str, object]) -> list[NeuronModel]:
    """dv/dt = r I, written ``gain I / dt`` with ``gain = dt r``.

    brian2's Euler step of that is ``v + gain I``: the reference's arithmetic,
    rounding (and overflow) included. With the drive held over the step, one
    Euler step *is* the closed form, and brian2's ``exact`` solver refuses an
    ODE whose right side lacks ``v``: both methods integrate with ``euler``.
    """
    gain = {"gain": _gain(params, attrs)}
    units = {"gain": "1", "v_threshold": "1", "v_reset": "1"}
    return [_spiking(f"dv/dt = gain*({CURRENT})/dt : 1", {**params, **gain}, units,
                     {0: SPIKES, 1: "v"}, {**attrs, "method": "euler"})]


def integrator(params: Params, attrs: Mapping[str, object]) -> list[NeuronModel]:
    """dv/dt = r I, no spikes (written and integrated as :func:`integrate_and_fire`)."""
    return [NeuronModel(f"dv/dt = gain*({CURRENT})/dt : 1", {"gain": (_gain(params, attrs), "1")},
                        {0: "v"}, method="euler")]


def leaky_integrator(params: Params, attrs: Mapping[str, object]) -> list[NeuronModel]:
    """tau dv/dt = v_leak + r I - v, no spikes."""
    units = {"tau": "second", "r": "1", "v_leak": "1"}
    return [NeuronModel(f"dv/dt = (v_leak + r*({CURRENT}) - v)/tau : 1",
                        {k: (params[k], u) for k, u in units.items()}, {0: "v"},
                        method=str(attrs["method"]))]


def threshold(params: Params, attrs: Mapping[str, object]) -> list[NeuronModel]:
    """Z = I > threshold, stateless (the name ``theta`` avoids brian2's keywords)."""
    return [NeuronModel("", {"theta": (params["threshold"], "1")}, {0: SPIKES},
                        threshold=f"({CURRENT}) > theta", reset="")]


def probe() -> NeuronModel:
    """A graph output that is a linear value: its current, recorded as ``y``."""
    return NeuronModel(f"y = {CURRENT} : 1", {}, {0: "y"})


MODELS: dict[str, Callable[[Params, Mapping[str, object]], list[NeuronModel]]] = {
    "LIF": lif,
    "CubaLIF": cuba_lif,
    "IF": integrate_and_fire,
    "LI": leaky_integrator,
    "Integrator": integrator,
    "Threshold": threshold,
}
"""Neuron ops and their models."""

DEFAULTS = {"v_reset": 0.0, "w_in": 1.0}
"""Values of the optional parameters the node omits (as the reference kernels)."""
