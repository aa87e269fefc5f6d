"""A :class:`~polyhal.adapters.neuro.plan.NetworkPlan` as brian2 objects.

Each population part is one NeuronGroup of ``batch * size`` neurons (neuron
``b * size + k`` is element ``k`` of batch item ``b``: the batch runs as
independent copies). A group's input current is the sum of

- ``I_acc``: what synapses delivered this step (``on_pre`` adds, a clear at
  order 0 empties it), fed by spikes, by relays of graph inputs and by
  delayed biases; a group whose input *is* a graph input reads it instead;
- ``I_sum<k>``: summed variables over synapses from a continuous state;
- ``I_bias``: the constant (undelayed) bias of Affine/Conv.

Graph inputs reach synapses through a relay group per input, which reads
the input from a TimedArray and fires where it is non-zero; ``on_pre`` then
adds ``w * x_pre``, so spikes and currents alike arrive within the step and
only non-zero inputs cost events. For an input known to hold spikes (0 or 1)
the relay's ``on_pre`` adds ``w`` alone, as for any spike. A delay on a graph
input is a relay column that reads the input shifted on the host. Every
object runs in the order of :mod:`~polyhal.adapters.neuro.schedule`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyhal.adapters.neuro.maps import SynapseMap
from polyhal.adapters.neuro.models import CURRENT, SPIKES, NeuronModel
from polyhal.adapters.neuro.plan import NetworkPlan, Population
from polyhal.adapters.neuro.schedule import Schedule


@dataclass(eq=False)
class Projection:
    """One brian2 Synapses object and what the profile needs to count its events."""

    synapses: Any
    source: Any
    out_degree: np.ndarray
    """Synapses per source neuron (events per source spike)."""
    event_driven: bool


@dataclass(eq=False)
class PopulationIndex:
    """Where each element of one batch item lives: group (part) and index in it."""

    part: np.ndarray
    local: np.ndarray
    sizes: np.ndarray
    """Elements per part."""

    @classmethod
    def of(cls, pop: Population) -> PopulationIndex:
        part = np.zeros(pop.size, np.int64)
        local = np.zeros(pop.size, np.int64)
        sizes = []
        for k, (_, elements) in enumerate(pop.parts()):
            part[elements] = k
            local[elements] = np.arange(elements.size)
            sizes.append(elements.size)
        return cls(part, local, np.asarray(sizes, np.int64))

    def neurons(self, elements: np.ndarray, batch: int) -> np.ndarray:
        """Neuron indices ``[batch, len(elements)]`` within each element's group."""
        return (np.arange(batch)[:, None] * self.sizes[self.part[elements]][None, :]
                + self.local[elements][None, :])


def shifted(x: np.ndarray, lag: int) -> np.ndarray:
    """``x[t - lag]`` along axis 0, zeros before ``lag``."""
    if lag == 0:
        return x
    y = np.zeros_like(x)
    y[lag:] = x[:x.shape[0] - lag]
    return y


class BrianNetwork:
    """The brian2 objects of one plan, scheduled and ready to run.

    ``codeobj_class`` selects the runtime target (numpy or Cython code
    objects); ``None`` lets the active device choose (``cpp_standalone``).
    ``spike_inputs`` names the graph inputs that will hold only 0s and 1s.
    """

    def __init__(self, plan: NetworkPlan, codeobj_class: type | None,
                 spike_inputs: frozenset[str] = frozenset()) -> None:
        import brian2 as b2

        self.b2 = b2
        self.plan = plan
        self.spike_inputs = spike_inputs
        self.cc = codeobj_class
        self.clock = b2.Clock(plan.dt * b2.second, name="polyhal_clock")
        self.schedule = Schedule()
        self.feeds: dict[str, tuple[int, list[int] | None]] = {}
        """TimedArray name -> (graph input index, relay lags; ``None`` for a direct read)."""
        self.owners: dict[str, str] = {}
        """brian2 object name stem -> graph node, for error messages."""
        self.groups: dict[str, list[Any]] = {}
        self.index = {pop.name: PopulationIndex.of(pop) for pop in plan.populations}
        self.projections: list[Projection] = []
        self.spike_monitors: dict[str, Any] = {}
        self.state_monitors: dict[str, Any] = {}
        self._direct: dict[str, Any] = {}
        self._prepare: dict[str, Any] = {}
        self._incoming: dict[str, list[Any]] = {}
        self._outgoing: dict[str, list[Any]] = {}

        self.relays = self._input_relays()
        self.bias_relay = self._bias_relay()
        for pop in plan.populations:
            self.groups[pop.name] = [self._group(pop, k, model, elements)
                                     for k, (model, elements) in enumerate(pop.parts())]
            self.owners[pop.name] = pop.node
        for pop in plan.populations:
            self._connect(pop)
        objects = self._schedule()
        self.network = b2.Network(*objects, name="polyhal_network")
        self.schedule.place_rest(self.network.sorted_objects)

    # ------------------------------------------------------------------ groups

    def _input_relays(self) -> dict[str, Any]:
        b2, plan = self.b2, self.plan
        relays = {}
        for k, (name, shape) in enumerate(plan.inputs):
            lags = plan.input_lags(name)
            if not lags:
                continue
            feed = f"ta_in{k}_relay"
            self.feeds[feed] = (k, lags)
            n = len(lags) * plan.batch * math.prod(shape)
            # A subexpression, as brian2 code written by hand reads a TimedArray: the
            # thresholder reads the input, and no code object per step copies it first.
            relay = b2.NeuronGroup(n, f"x = {feed}(t, i) : 1", threshold="x != 0", reset="",
                                   clock=self.clock, namespace={}, name=f"in{k}_relay",
                                   codeobj_class=self.cc)
            self.owners[relay.name] = f"graph input {name!r}"
            relays[name] = relay
        return relays

    def _bias_relay(self) -> Any:
        lags = self.plan.bias_lags()
        if not lags:
            return None
        relay = self.b2.NeuronGroup(len(lags), "lag : integer (constant)",
                                    threshold="t_in_timesteps >= lag", reset="",
                                    clock=self.clock, namespace={}, name="bias_relay",
                                    codeobj_class=self.cc)
        relay.lag = np.asarray(lags, np.int64)
        self.owners[relay.name] = "delayed biases"
        return relay

    def _group(self, pop: Population, part: int, model: NeuronModel, elements: np.ndarray
               ) -> Any:
        b2, batch = self.b2, self.plan.batch
        name = pop.name if len(pop.models) == 1 else f"{pop.name}_part{part}"
        root = pop.input.root
        terms, declarations = [], []
        namespace: dict[str, Any] = {}
        if root.kind in ("input", "spikes") or (pop.input.bias.lag > 0).any():
            terms.append("I_acc")
            declarations.append("I_acc : 1")
        if root.kind == "state":
            for k in range(len(self.groups[root.name])):
                terms.append(f"I_sum{k}")
                declarations.append(f"I_sum{k} : 1")
        bias = pop.input.bias
        undelayed = bias.lag == 0
        bias_values = np.bincount(bias.post[undelayed], weights=bias.weight[undelayed],
                                  minlength=pop.size)[elements]
        values: dict[str, tuple[np.ndarray, str]] = dict(model.parameters)
        if bias_values.any():
            terms.append("I_bias")
            values["I_bias"] = (bias_values, "1")
        current = " + ".join(terms) or "0"
        for key, (per_element, unit) in values.items():
            if per_element.size and np.all(per_element == per_element[0]):
                namespace[key] = float(per_element[0]) * getattr(b2, unit, 1)
            else:
                declarations.append(f"{key} : {unit} (constant)")
        direct = pop.reads_input_directly
        gathered = direct and not np.array_equal(elements, np.arange(pop.size))
        if gathered:
            declarations.append("src : integer (constant)")
        equations = "\n".join([model.equations.replace(CURRENT, current), *declarations])
        threshold = model.threshold.replace(CURRENT, current) if model.threshold else None
        reset = model.reset
        if threshold and SPIKES not in pop.record:
            # Spikes no monitor records are counted by the reset, for the profile: it
            # runs per spike anyway, where a counting monitor would be one more object.
            equations += "\nn_spikes : integer"
            reset = f"{reset}\nn_spikes += 1" if reset else "n_spikes += 1"
        group = b2.NeuronGroup(batch * elements.size, equations, method=model.method,
                               threshold=threshold, reset=reset, clock=self.clock,
                               namespace=namespace, name=name, codeobj_class=self.cc)
        for key, (per_element, unit) in values.items():
            if key not in namespace:
                setattr(group, key, np.tile(per_element, batch) * getattr(b2, unit, 1))
        if model.prepare:  # before the integration, in the schedule
            self._prepare[name] = group.run_regularly(
                model.prepare.replace(CURRENT, current), clock=self.clock,
                name=f"{name}_prepare", codeobj_class=self.cc)
        if direct:
            k = next(i for i, (n, _) in enumerate(self.plan.inputs) if n == root.name)
            feed = f"ta_in{k}_direct"
            self.feeds[feed] = (k, None)
            if gathered:
                group.src = (np.arange(batch)[:, None] * pop.size + elements[None, :]).ravel()
            self._direct[name] = group.run_regularly(
                f"I_acc = {feed}(t, {'src' if gathered else 'i'})", clock=self.clock,
                name=f"{name}_feed", codeobj_class=self.cc)
        elif "I_acc" in terms:
            clear = group.run_regularly("I_acc = 0", clock=self.clock, name=f"{name}_clear",
                                        codeobj_class=self.cc)
            self.schedule.place_clear(clear)
        return group

    # ------------------------------------------------------------------ synapses

    def _connect(self, pop: Population) -> None:
        signal, batch = pop.input, self.plan.batch
        root, entries = signal.root, signal.synapses
        if root.kind == "input" and not pop.reads_input_directly:
            if len(entries):  # none when all arrive after the run ends (and no relay exists)
                size = math.prod(dict(self.plan.inputs)[root.name])
                slot = np.searchsorted(self.plan.input_lags(root.name), entries.lag)
                column = slot * batch * size
                pre = np.arange(batch)[:, None] * size + (column + entries.pre)[None, :]
                code = "I_acc_post += w" if root.name in self.spike_inputs else (
                    "I_acc_post += w * x_pre")
                self._link(self.relays[root.name], pop, entries, pre,
                           np.zeros(len(entries), np.int64), code, "relay")
        elif root.kind in ("spikes", "state"):
            source = self.index[root.name]
            pre = source.neurons(entries.pre, batch)
            groups = self.groups[root.name]
            for k, group in enumerate(groups):
                keep = source.part[entries.pre] == k
                if not keep.any():
                    continue
                if root.kind == "spikes":
                    code, label = "I_acc_post += w", "spikes"
                else:
                    code, label = f"I_sum{k}_post = w * {root.variable}_pre : 1 (summed)", "sum"
                self._link(group, pop, entries.select(keep), pre[:, keep], entries.lag[keep],
                           code, f"{label}{k}")
        delayed = signal.bias.select(signal.bias.lag > 0)
        if len(delayed):
            pre = np.searchsorted(self.plan.bias_lags(), delayed.lag).astype(np.int64)
            self._link(self.bias_relay, pop, delayed, np.broadcast_to(pre, (batch, pre.size)),
                       np.zeros(len(delayed), np.int64), "I_acc_post += w", "bias")

    def _link(self, source: Any, pop: Population, entries: SynapseMap, pre: np.ndarray,
              lag: np.ndarray, code: str, label: str) -> None:
        """Synapses from ``source`` (neurons ``pre[b, e]``) to ``pop``, one object per part."""
        b2, batch, target = self.b2, self.plan.batch, self.index[pop.name]
        summed = code.endswith("(summed)")
        post_all = target.neurons(entries.post, batch)
        for k, group in enumerate(self.groups[pop.name]):
            keep = target.part[entries.post] == k
            if not keep.any():
                continue
            weight = np.broadcast_to(entries.weight[keep], (batch, int(keep.sum()))).ravel()
            lags = np.broadcast_to(lag[keep], (batch, int(keep.sum()))).ravel()
            i, j = pre[:, keep].ravel(), post_all[:, keep].ravel()
            namespace: dict[str, Any] = {}
            model = code if summed else ""
            if np.all(weight == weight[0]):
                namespace["w"] = float(weight[0])
            else:
                model = "w : 1 (constant)\n" + model
            options: dict[str, Any] = {}
            if not summed:
                options["on_pre"] = code
                if np.all(lags == lags[0]):
                    options["delay"] = float(lags[0]) * self.plan.dt * b2.second
            name = f"syn_{source.name}_to_{group.name}_{label}"
            synapses = b2.Synapses(source, group, model=model, clock=self.clock,
                                   namespace=namespace, name=name, codeobj_class=self.cc,
                                   **options)
            synapses.connect(i=i, j=j)
            if "w" not in namespace:
                synapses.w = weight
            if not summed and "delay" not in options:
                synapses.delay = lags * self.plan.dt * b2.second
            self.owners[name] = pop.node
            degree = np.bincount(i, minlength=source.N)
            self.projections.append(Projection(synapses, source, degree, not summed))
            (self._incoming if summed else self._outgoing).setdefault(
                group.name if summed else source.name, []).append(synapses)

    # ------------------------------------------------------------------ schedule

    def _stage(self, group: Any, record: set[str] | None) -> list[Any]:
        """Place one group's step: input, update, threshold, reset, monitors, output."""
        b2, place = self.b2, self.schedule.place
        objects = [group]
        if group.name in self._direct:
            place(self._direct[group.name])
        for synapses in self._incoming.get(group.name, []):
            place(*synapses.summed_updaters.values())
        if group.name in self._prepare:
            place(self._prepare[group.name])
        place(group.state_updater)
        # Objects with no work (no ODE, an empty reset) still cost a call per step.
        group.state_updater.active = bool(group.equations.diff_eq_names)
        if "spike" in group.thresholder:
            place(group.thresholder["spike"])
        if "spike" in group.resetter:
            place(group.resetter["spike"])
            group.resetter["spike"].active = bool(group.event_codes["spike"].strip())
        outgoing = self._outgoing.get(group.name, [])
        record = record or set()
        if SPIKES in record:
            monitor = b2.SpikeMonitor(group, name=f"{group.name}_spikes", codeobj_class=self.cc)
            place(monitor)
            self.spike_monitors[group.name] = monitor
            objects.append(monitor)
        variables = sorted(record - {SPIKES})
        if variables:
            monitor = b2.StateMonitor(group, variables, record=True, clock=self.clock,
                                      name=f"{group.name}_state", codeobj_class=self.cc)
            place(monitor)
            self.state_monitors[group.name] = monitor
            objects.append(monitor)
        for synapses in outgoing:
            place(synapses.pre)
            objects.append(synapses)
        for synapses in self._incoming.get(group.name, []):
            objects.append(synapses)
        return objects

    def _schedule(self) -> list[Any]:
        objects: list[Any] = []
        for relay in self.relays.values():
            objects += self._stage(relay, None)
        if self.bias_relay is not None:
            objects += self._stage(self.bias_relay, None)
        for pop in self.plan.populations:
            for group in self.groups[pop.name]:
                objects += self._stage(group, pop.record)
        return objects

    # ------------------------------------------------------------------ running

    def owner_of(self, object_name: str) -> str:
        """The graph node (or input) behind a brian2 object name."""
        best = max((stem for stem in self.owners if object_name.startswith(stem)), key=len,
                   default=None)
        return self.owners[best] if best is not None else object_name

    def feed_values(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        """The TimedArray values ``[steps, columns]`` for the graph inputs ``arrays``."""
        steps = self.plan.steps
        values = {}
        for name, (index, lags) in self.feeds.items():
            flat = np.asarray(arrays[index], np.float64).reshape(steps, -1)
            values[name] = flat if lags in (None, [0]) else np.concatenate(
                [shifted(flat, lag) for lag in lags], axis=1)
        return values

    def timed_arrays(self, values: dict[str, np.ndarray]) -> dict[str, Any]:
        """TimedArrays named as the network's code reads them."""
        dt = self.plan.dt * self.b2.second
        return {name: self.b2.TimedArray(v, dt=dt, name=name) for name, v in values.items()}

    def collect(self) -> dict[tuple[str, str], np.ndarray]:
        """Recorded outputs by (population, variable), each ``[steps, batch, *shape]``."""
        plan = self.plan
        results = {}
        for pop in plan.populations:
            for variable in pop.record:
                out = np.zeros((plan.steps, plan.batch, pop.size))
                for group, (_, elements) in zip(self.groups[pop.name], pop.parts(), strict=True):
                    if variable == SPIKES:
                        monitor = self.spike_monitors[group.name]
                        neuron = np.asarray(monitor.i[:], np.int64)
                        step = np.rint(np.asarray(monitor.t_[:]) / plan.dt).astype(np.int64)
                        if elements.size == pop.size:  # one part: neuron b * size + k
                            out.reshape(plan.steps, -1)[step, neuron] = 1.0
                        else:
                            b, k = np.divmod(neuron, elements.size)
                            out[step, b, elements[k]] = 1.0
                    else:
                        trace = np.asarray(getattr(self.state_monitors[group.name],
                                                   f"{variable}_"))
                        out[:, :, elements] = trace.T.reshape(plan.steps, plan.batch,
                                                              elements.size)
                results[(pop.name, variable)] = out.reshape(plan.steps, plan.batch, *pop.shape)
        return results

    def counters(self, values: dict[str, np.ndarray]) -> dict[str, float]:
        """Neurons, synapses, spikes and synaptic events of the run fed ``values``.

        ``values`` are that run's :meth:`feed_values`: relays fire where their input
        is non-zero and delayed biases from their lag on, so their spikes are counted
        here rather than by code in every step.
        """
        spikes: dict[str, np.ndarray] = {}
        for groups in self.groups.values():
            for group in groups:
                if group.name in self.spike_monitors:
                    spikes[group.name] = np.asarray(self.spike_monitors[group.name].count[:])
                elif "n_spikes" in group.variables:
                    spikes[group.name] = np.asarray(group.n_spikes[:])
        neuron_spikes = sum(float(count.sum()) for count in spikes.values())
        for relay in self.relays.values():
            spikes[relay.name] = (values[f"ta_{relay.name}"] != 0).sum(axis=0)
        if self.bias_relay is not None:
            spikes[self.bias_relay.name] = np.maximum(
                self.plan.steps - np.asarray(self.bias_relay.lag[:]), 0)
        events = sum(float(spikes[p.source.name] @ p.out_degree) for p in self.projections
                     if p.event_driven)
        return {"neurons": float(self.plan.neurons),
                "synapses": float(sum(int(p.out_degree.sum()) for p in self.projections)),
                "spikes": neuron_spikes, "synaptic_events": events,
                "steps": float(self.plan.steps)}
