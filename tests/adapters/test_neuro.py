"""The neuro adapter: snn graphs on brian2 agree with the reference spike for spike."""

from __future__ import annotations

import gc
import itertools
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import polyhal
from polyhal.adapters.neuro import NeuroAdapter, runner
from polyhal.adapters.neuro.maps import SynapseMap, conv_map
from polyhal.cache import cache_dir
from polyhal.conformance import run_suite
from polyhal.conformance.snn_networks import neuron
from polyhal.errors import (
    DeviceError,
    InputBindingError,
    PolyhalError,
    UnsupportedError,
    VerificationError,
)
from polyhal.hal import CompileOptions, open_device
from polyhal.ir import DType, Graph, GraphBuilder, TensorType
from polyhal.ops import get_op, snn
from polyhal.ops.snn import METHODS, RESETS, SPIKING
from polyhal.reference import run

DT = 1e-3
F64 = DType.FLOAT64


@pytest.fixture(scope="module")
def neuro():
    return open_device("neuro")


def _u(rng, low, high, shape):
    return rng.uniform(low, high, shape)


def _neuron(op, x, rng, n, method, reset, outputs=1):
    """``op`` on ``x`` with seeded parameters that make it fire within a few steps."""
    return neuron(op, x, rng, F64, n, method, reset, outputs)


def _spike_outputs(graph: Graph) -> set[str]:
    return {n.outputs[0].name for n in graph.nodes if n.op in SPIKING}


def check_against_reference(graph: Graph, inputs: list[np.ndarray], device) -> list[np.ndarray]:
    """Spikes identical to the reference, everything else within rtol 1e-6, atol 1e-9."""
    expected = list(run(graph, *inputs).values())
    actual = list(polyhal.compile(graph, device=device)(*inputs).values())
    spikes = _spike_outputs(graph)
    assert len(actual) == len(expected)
    for value, a, e in zip(graph.outputs, actual, expected, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype, value.name
        if value.name in spikes:
            assert np.array_equal(a, e), f"{value.name}: spike trains differ"
        else:
            np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-9, err_msg=value.name)
    return expected


def _graph(shape, build, name="g"):
    g = GraphBuilder(name)
    x = g.input("x", TensorType(F64, shape))
    outs = build(x)
    g.output(*(outs if isinstance(outs, tuple) else (outs,)))
    return g.build()


NEURON_CASES = [(op, method, reset) for op in ("LIF", "CubaLIF", "IF", "LI", "Integrator")
                for method in METHODS
                for reset in (RESETS if op in SPIKING else ("v_reset",))] + [
                    ("Threshold", "euler", "v_reset")]


@pytest.mark.parametrize(("op", "method", "reset"), NEURON_CASES)
def test_each_neuron_matches_the_reference_on_currents_and_on_spikes(neuro, op, method, reset):
    rng = np.random.default_rng(NEURON_CASES.index((op, method, reset)))
    outputs = {"CubaLIF": 3, "LIF": 2, "IF": 2}.get(op, 1)
    # Driven directly by a graph input (the group reads the current itself) ...
    direct = _graph((40, 2, 5), lambda x: _neuron(op, x, rng, 5, method, reset, outputs))
    check_against_reference(direct, [rng.normal(0.4, 1.0, (40, 2, 5))], neuro)
    # ... and through synapses from input spikes.
    linear = _graph((40, 2, 6), lambda x: _neuron(op, snn.linear(x, _u(rng, 0, 1, (5, 6))),
                                                  rng, 5, method, reset, outputs))
    spikes = (rng.random((40, 2, 6)) < 0.3).astype(np.float64)
    expected = check_against_reference(linear, [spikes], neuro)
    if op in SPIKING:
        assert expected[0].any(), "the case should make the population fire"


def test_feed_forward_network_with_a_batch_of_three(neuro):
    rng = np.random.default_rng(3)

    def network(x):
        z1 = _neuron("LIF", snn.linear(x, _u(rng, 0, 1, (12, 8))), rng, 12, "euler", "v_reset")
        z2, v2 = _neuron("LIF", snn.linear(z1, _u(rng, -0.3, 0.9, (6, 12))), rng, 6, "exact",
                         "subtract", outputs=2)
        readout = _neuron("LI", snn.linear(z2, _u(rng, -1, 1, (3, 6))), rng, 3, "euler", "")
        return z1, z2, v2, readout

    graph = _graph((60, 3, 8), network)
    spikes = (rng.random((60, 3, 8)) < 0.3).astype(np.float64)
    expected = check_against_reference(graph, [spikes], neuro)
    assert expected[0].sum() > 0 and expected[1].sum() > 0
    assert not np.array_equal(expected[1][:, 0], expected[1][:, 1]), "batch items must differ"


def test_layers_see_spikes_of_the_same_step(neuro):
    # Three IF layers with weights that fire on any input spike: a spike entering at
    # step 2 crosses every layer within step 2 (brian2's default schedule would lag).
    chain = _graph((6, 1, 1), lambda x: tuple(itertools.accumulate(
        range(3), lambda z, _: snn.if_(snn.linear(z, np.full((1, 1), 2.0)), np.full(1, 1 / DT),
                                       np.ones(1), dt=DT, method="euler", reset="v_reset"),
        initial=x))[1:])
    x = np.zeros((6, 1, 1))
    x[2] = 1.0
    outs = polyhal.compile(chain, device=neuro)(x)
    for z in outs.values():
        assert np.flatnonzero(z[:, 0, 0]).tolist() == [2]


def test_delays_of_spikes_and_of_graph_inputs(neuro):
    rng = np.random.default_rng(5)

    def network(x):
        h = snn.delay(snn.linear(x, _u(rng, 0, 1, (5, 6))), rng.integers(0, 4, 5) * DT, dt=DT)
        z, v = _neuron("LIF", h, rng, 5, "euler", "v_reset", outputs=2)
        later = snn.delay(z, np.array([0, 1, 2, 3, 50]) * DT, dt=DT)  # 50 steps: never arrives
        return z, v, later, snn.delay(x, rng.integers(0, 3, 6) * DT, dt=DT)

    graph = _graph((30, 2, 6), network)
    expected = check_against_reference(graph, [(rng.random((30, 2, 6)) < 0.4) * 1.0], neuro)
    assert expected[0].any() and not expected[2][:, :, 4].any()


def test_affine_bias_conv_pool_flatten_and_scale_as_synapses(neuro):
    rng = np.random.default_rng(7)

    def network(x):
        h = snn.conv2d(x, _u(rng, -0.2, 0.6, (4, 1, 3, 3)), _u(rng, 0, 0.1, 4),
                       pads=[1, 1, 1, 1], group=2)
        z = snn.if_(h, np.full((4, 1, 1), 40.0), np.full((4, 1, 1), 0.5), dt=DT,
                    method="euler", reset="subtract")
        pooled = snn.flatten(snn.sum_pool2d(z, kernel_shape=[2, 2]), start_dim=0)
        h = snn.scale(snn.affine(pooled, _u(rng, -0.2, 0.4, (5, 24)), _u(rng, 0, 0.2, 5)),
                      _u(rng, 0.5, 1.5, 5))
        return z, h, _neuron("LI", h, rng, 5, "exact", "")

    graph = _graph((20, 2, 2, 4, 6), network)
    expected = check_against_reference(graph, [(rng.random((20, 2, 2, 4, 6)) < 0.3) * 1.0],
                                       neuro)
    assert expected[0].any()


@pytest.mark.parametrize("op", ["Linear", "Affine", "Scale", "Conv1d", "Conv2d", "SumPool2d",
                                "Flatten", "Delay"])
def test_each_linear_op_on_a_continuous_input(neuro, op):
    rng = np.random.default_rng(11)
    shapes = {"Conv1d": (3, 7), "Conv2d": (2, 5, 6), "SumPool2d": (2, 4, 5), "Flatten": (2, 3)}
    shape = shapes.get(op, (6,))
    build = {
        "Linear": lambda x: snn.linear(x, rng.normal(size=(3, 6))),
        "Affine": lambda x: snn.affine(x, rng.normal(size=(3, 6)), rng.normal(size=3)),
        "Scale": lambda x: snn.scale(x, rng.normal(size=6)),
        "Conv1d": lambda x: snn.conv1d(x, rng.normal(size=(4, 3, 3)), rng.normal(size=4),
                                       pads=[1, 0], strides=[2]),
        "Conv2d": lambda x: snn.conv2d(x, rng.normal(size=(2, 2, 2, 2)), dilations=[2, 1],
                                       strides=[1, 2]),
        "SumPool2d": lambda x: snn.sum_pool2d(x, kernel_shape=[3, 2], strides=[1, 1],
                                              pads=[1, 0, 1, 1]),
        "Flatten": lambda x: snn.flatten(x),
        "Delay": lambda x: snn.delay(x, np.array([0, 1, 2, 3, 4, 60]) * DT, dt=DT),
    }[op]
    graph = _graph((25, 2, *shape), build)
    check_against_reference(graph, [rng.normal(size=(25, 2, *shape))], neuro)


def test_cuba_lif_exact_with_equal_unequal_and_mixed_time_constants(neuro):
    rng = np.random.default_rng(13)
    tau = _u(rng, 4e-3, 8e-3, 6)
    other = _u(rng, 2e-3, 3e-3, 6)
    mixed = np.where(np.arange(6) % 2 == 0, tau, other)
    for tau_syn in (tau, other, mixed):
        graph = _graph((40, 2, 6), lambda x, tau_syn=tau_syn: snn.cuba_lif(
            snn.linear(x, _u(rng, 0, 1, (6, 6))), tau_syn, tau, np.ones(6), np.zeros(6),
            np.full(6, 0.3), dt=DT, method="exact", reset="v_reset", num_outputs=3))
        expected = check_against_reference(graph, [(rng.random((40, 2, 6)) < 0.3) * 1.0], neuro)
        assert expected[0].any()


def test_continuous_states_feed_later_layers_through_summed_synapses(neuro):
    rng = np.random.default_rng(17)

    def network(x):
        _, v = _neuron("LIF", x, rng, 5, "exact", "v_reset", outputs=2)
        leaky = _neuron("LI", snn.linear(v, rng.normal(size=(4, 5))), rng, 4, "exact", "")
        return leaky, _neuron("Threshold", snn.scale(leaky, np.full(4, 3.0)), rng, 4, "", "")

    graph = _graph((30, 2, 5), network)
    check_against_reference(graph, [rng.normal(0.5, 1, (30, 2, 5))], neuro)


def test_delayed_bias_reaches_the_target_only_after_its_delay(neuro):
    rng = np.random.default_rng(19)
    graph = _graph((12, 2, 3), lambda x: snn.linear(snn.delay(
        snn.affine(x, rng.normal(size=(4, 3)), np.array([1.0, 2.0, 3.0, 4.0])),
        np.array([0, 1, 2, 3]) * DT, dt=DT), rng.normal(size=(2, 4))))
    check_against_reference(graph, [rng.normal(size=(12, 2, 3))], neuro)


def test_symbolic_time_and_batch_are_built_per_binding(neuro):
    rng = np.random.default_rng(23)
    g = GraphBuilder("symbolic")
    x = g.input("x", TensorType(F64, ("time", "batch", 4)))
    g.output(*_neuron("LIF", snn.linear(x, _u(rng, 0, 1, (3, 4))), rng, 3, "euler", "v_reset",
                      outputs=2))
    graph = g.build()
    compiled = polyhal.compile(graph, device=neuro)
    for shape in ((20, 1, 4), (35, 3, 4)):
        spikes = (rng.random(shape) < 0.4) * 1.0
        for got, want in zip(compiled(spikes).values(), run(graph, spikes).values(),
                             strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_profile_counts_neurons_synapses_and_synaptic_events(neuro):
    rng = np.random.default_rng(29)
    graph = _graph((25, 2, 6), lambda x: _neuron("LIF", snn.linear(x, _u(rng, 0, 1, (4, 6))),
                                                 rng, 4, "euler", "v_reset"))
    executable = neuro.compile(graph, CompileOptions())
    spikes = (rng.random((25, 2, 6)) < 0.3) * 1.0
    z = neuro.download(executable.run([neuro.upload(spikes)])[0])
    profile = executable.profile()
    assert profile.counters["neurons"] == 2 * 4
    assert profile.counters["synapses"] == 2 * 4 * 6
    assert profile.counters["synaptic_events"] == np.count_nonzero(spikes) * 4
    assert profile.counters["spikes"] == z.sum() > 0
    assert profile.stages["compile"] > 0 and profile.stages["run"] > 0


def test_profile_counts_what_no_monitor_records_currents_and_delayed_biases(neuro):
    lags = np.array([0, 1, 3])

    def network(x, hidden_out):
        rng = np.random.default_rng(41)  # the same parameters in both graphs
        hidden = _neuron("LIF", snn.linear(x, _u(rng, 0, 1, (4, 6))), rng, 4, "euler",
                         "v_reset")
        delayed = snn.delay(snn.affine(hidden, _u(rng, 0, 1, (3, 4)), np.ones(3)),
                            lags * DT, dt=DT)
        out = _neuron("LIF", delayed, rng, 3, "euler", "subtract")
        return (out, hidden) if hidden_out else out

    steps, batch = 25, 2
    x = np.random.default_rng(43).normal(0.4, 1, (steps, batch, 6))
    executable = neuro.compile(_graph(x.shape, lambda v: network(v, False)), CompileOptions())
    out = neuro.download(executable.run([neuro.upload(x)])[0])
    want_out, hidden = run(_graph(x.shape, lambda v: network(v, True)), x).values()
    assert np.array_equal(out, want_out) and hidden.sum() > 0
    counters = executable.profile().counters
    # Events: every non-zero input to 4 neurons (a current input), every hidden spike
    # to 3, and each delayed bias once per step from its lag on, per batch item.
    assert counters["synaptic_events"] == (np.count_nonzero(x) * 4 + hidden.sum() * 3
                                           + batch * sum(steps - lag for lag in lags if lag))
    assert counters["spikes"] == hidden.sum() + out.sum()


def test_runs_are_independent_and_reuse_one_network(neuro):
    rng = np.random.default_rng(31)
    graph = _graph((30, 2, 5), lambda x: _neuron("CubaLIF", x, rng, 5, "exact", "v_reset", 3))
    executable = neuro.compile(graph, CompileOptions())
    first = rng.normal(0.5, 1, (30, 2, 5))
    runs, builds = [], set()
    for x in (first, rng.normal(0.5, 1, (30, 2, 5)), first):
        runs.append([neuro.download(b) for b in executable.run([neuro.upload(x)])])
        builds.add(executable.profile().stages["compile"])
    assert len(builds) == 1, "every run uses the network built at compile"
    for a, b in zip(runs[0], runs[2], strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(runs[0][1], runs[1][1])


def _delayed_network():
    rng = np.random.default_rng(34)

    def network(x):
        h = snn.delay(snn.linear(x, _u(rng, 0, 1, (5, 6))), rng.integers(0, 4, 5) * DT, dt=DT)
        z, v = _neuron("LIF", h, rng, 5, "euler", "v_reset", outputs=2)
        readout = _neuron("LI", snn.linear(z, _u(rng, -1, 1, (3, 5))), rng, 3, "euler", "")
        return z, v, readout, snn.delay(x, rng.integers(0, 3, 6) * DT, dt=DT)

    return _graph((30, 2, 6), network), rng


@pytest.mark.parametrize("target", ["numpy", "cython"])
def test_runs_reuse_the_code_objects_compile_generated_and_match_the_reference(target):
    # brian2's Network.run generates every code object again; a runner generates them
    # once, at compile, and each run only fills the TimedArrays' values in place. (On
    # Cython, the network the other Cython tests compile: its modules are cached.)
    import brian2.groups.group as brian2_group

    device = open_device("neuro", target=target, isolate=False)  # brian2 here, to count
    graph, rng = _delayed_network() if target == "numpy" else _small_lif()
    shape = graph.inputs[0].type.shape
    executable = device.compile(graph, CompileOptions())
    generated: list[str] = []
    original = brian2_group.create_runner_codeobj

    def counting(*args, **kwargs):
        generated.append(kwargs.get("name", "?"))
        return original(*args, **kwargs)

    def draw():  # spikes into the synapses of one network, currents into the other's LIF
        return (rng.random(shape) < 0.4) * 1.0 if target == "numpy" else rng.normal(
            0.5, 1, shape)

    first = draw()
    inputs = [first, draw(), np.zeros(shape), first]
    brian2_group.create_runner_codeobj = counting
    try:
        runs = [[device.download(b) for b in executable.run([device.upload(x)])]
                for x in inputs]
    finally:
        brian2_group.create_runner_codeobj = original
    assert generated == []
    spikes = _spike_outputs(graph)
    for x, outputs in zip(inputs, runs, strict=True):
        for value, got, want in zip(graph.outputs, outputs, run(graph, x).values(),
                                    strict=True):
            if value.name in spikes:
                assert np.array_equal(got, want), value.name
            else:
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9,
                                           err_msg=value.name)
    assert runs[0][0].any() and not runs[2][0].any()
    assert all(np.array_equal(a, b) for a, b in zip(runs[0], runs[3], strict=True))


def test_a_run_skips_the_collection_brian2_starts_each_run_with():
    # brian2's Network.run starts with gc.collect() only to warn of objects left out of
    # a network; with brian2 and sympy loaded it takes 80-120 ms, most of a small run.
    from brian2.core import network as brian2_network

    device = open_device("neuro", isolate=False)  # runs in this process, where gc is seen
    rng = np.random.default_rng(32)
    graph = _graph((10, 1, 3), lambda x: _neuron("LIF", x, rng, 3, "exact", "v_reset"))
    executable = device.compile(graph, CompileOptions())
    x = rng.normal(0.5, 1, (10, 1, 3))
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.disable()  # only explicit collections remain
    gc.callbacks.append(count)
    try:
        outputs = [device.download(b) for b in executable.run([device.upload(x)])]
    finally:
        gc.callbacks.remove(count)
        gc.enable()
    assert collections == []
    assert brian2_network.gc is gc  # brian2 is left as it was
    np.testing.assert_allclose(outputs[0], run(graph, x)[graph.outputs[0].name], rtol=1e-6,
                               atol=1e-9)


# ---------------------------------------------------------------------------- bad input


def test_parameters_must_be_graph_constants(neuro):
    g = GraphBuilder("param-input")
    x = g.input("x", TensorType(F64, (5, 1, 3)))
    tau = g.input("tau", TensorType(F64, (3,)))
    g.output(snn.li(x, tau, np.ones(3), np.zeros(3), dt=DT, method="euler"))
    with pytest.raises(UnsupportedError, match=r"li_\d+.*input tau \('tau'\).*graph constant"):
        neuro.compile(g.build(), CompileOptions())


def test_mixed_dt_is_refused_naming_the_nodes(neuro):
    graph = _graph((5, 1, 3), lambda x: snn.li(
        snn.lif(x, np.ones(3), np.ones(3), np.zeros(3), np.ones(3), dt=DT, method="euler",
                reset="v_reset"), np.ones(3), np.ones(3), np.zeros(3), dt=2 * DT, method="euler"))
    with pytest.raises(UnsupportedError, match=r"disagree on dt.*lif_\d+ dt=0.001.*dt=0.002"):
        neuro.compile(graph, CompileOptions())


def test_unknown_options_targets_and_indices_are_refused():
    with pytest.raises(UnsupportedError, match=r"unknown option.*threads"):
        open_device("neuro", threads=2)
    with pytest.raises(UnsupportedError, match="target 'gpu'"):
        open_device("neuro", target="gpu")
    with pytest.raises(PolyhalError, match="index 0"):
        open_device("neuro:1")


def test_what_neuro_cannot_run_is_unsupported(neuro):
    g = GraphBuilder("core")
    x = g.input("x", TensorType(F64, (4, 1, 3)))
    g.output(polyhal.ops.relu(x))
    with pytest.raises(UnsupportedError, match=r"cannot run: relu_\d+ \(core.Relu\)"):
        neuro.compile(g.build(), CompileOptions())
    f32 = GraphBuilder("f32")
    x = f32.input("x", TensorType(DType.FLOAT32, (4, 1, 3)))
    f32.output(snn.scale(x, np.ones(3, np.float32)))
    with pytest.raises(UnsupportedError, match="float64"):
        neuro.compile(f32.build(), CompileOptions())
    delayed_state = _graph((6, 1, 3), lambda x: snn.li(snn.delay(
        snn.li(x, np.ones(3), np.ones(3), np.zeros(3), dt=DT, method="euler"),
        np.full(3, DT), dt=DT), np.ones(3), np.ones(3), np.zeros(3), dt=DT, method="euler"))
    with pytest.raises(UnsupportedError, match=r"delay_\d+.*continuous value"):
        neuro.compile(delayed_state, CompileOptions())


def test_inputs_of_the_wrong_shape_are_refused():
    device = NeuroAdapter().open()  # unchecked: the executable itself must refuse
    graph = _graph((5, 1, 3), lambda x: snn.scale(x, np.ones(3)))
    executable = device.compile(graph, CompileOptions())
    with pytest.raises(InputBindingError, match="float64\\[5, 1, 3\\]"):
        executable.run([device.upload(np.zeros((5, 2, 3)))])


def test_probe_is_cheap_and_reports_the_targets():
    (info,) = NeuroAdapter().probe()
    assert info.available and info.address == "neuro:0"
    assert "numpy" in info.details["targets"]


# ---------------------------------------------------------------------------- maps


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 1), st.integers(1, 2), st.integers(0, 2**31))
def test_conv_map_is_the_reference_conv(channels, maps, kernel, stride, pad, dilation, seed):
    rng = np.random.default_rng(seed)
    groups = 1 if channels % 2 or maps % 2 else 2
    x = rng.normal(size=(1, channels, 7, 6))
    weight = rng.normal(size=(maps, channels // groups, kernel, kernel))
    attrs = {"auto_pad": "NOTSET", "dilations": [dilation] * 2, "group": groups,
             "kernel_shape": None, "pads": [pad] * 4, "strides": [stride] * 2}
    try:
        want = get_op("Conv").kernel(x, weight, None, **attrs)[0]
    except (ValueError, VerificationError):
        return  # the window does not fit
    if want.size == 0:
        return
    m = conv_map(weight, x.shape[1:], want.shape, [stride] * 2, [pad] * 4, [dilation] * 2,
                 groups)
    got = np.zeros(want.size)
    np.add.at(got, m.post, m.weight * x.reshape(-1)[m.pre])
    np.testing.assert_allclose(got, want.reshape(-1), rtol=1e-12, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31))
def test_composed_maps_multiply_weights_and_add_lags(n_in, n_mid, n_out, seed):
    rng = np.random.default_rng(seed)
    first = SynapseMap.dense(rng.normal(size=(n_mid, n_in)))
    lags = rng.integers(0, 3, n_mid)
    delay = SynapseMap.diagonal(np.ones(n_mid), lags)
    second = SynapseMap.dense(rng.normal(size=(n_out, n_mid)))
    composed = first.then(delay).then(second)
    for lag in range(3):
        keep = composed.lag == lag
        got = np.zeros((n_out, n_in))
        np.add.at(got, (composed.post[keep], composed.pre[keep]), composed.weight[keep])
        w2 = second.weight.reshape(n_out, n_mid) * (lags == lag)
        np.testing.assert_allclose(got, w2 @ first.weight.reshape(n_mid, n_in), atol=1e-12)


# ---------------------------------------------------------------------------- targets and suite


def _small_lif():
    rng = np.random.default_rng(37)
    return _graph((20, 2, 3), lambda x: _neuron("LIF", x, rng, 3, "exact", "v_reset", 2)), rng


def test_cython_target_smoke():
    graph, rng = _small_lif()
    check_against_reference(graph, [rng.normal(0.5, 1, (20, 2, 3))],
                            open_device("neuro", target="cython"))
    from brian2 import prefs
    assert prefs.codegen.runtime.cython.cache_dir is None  # left as it was


_CYTHON_RUN = """
import numpy as np, polyhal
from polyhal.conformance.snn_networks import neuron
from polyhal.hal import open_device
from polyhal.ir import DType, GraphBuilder, TensorType
rng = np.random.default_rng(37)  # test_cython_target_smoke's network: compiled once
g = GraphBuilder("g")
x = g.input("x", TensorType(DType.FLOAT64, (20, 2, 3)))
g.output(*neuron("LIF", x, rng, DType.FLOAT64, 3, "exact", "v_reset", 2))
graph = g.build()
data = rng.normal(0.5, 1, (20, 2, 3))
got = polyhal.compile(graph, device=open_device("neuro", target="cython"))(data)
want = polyhal.run(graph, data)
print(max(float(np.abs(got[k] - want[k]).max()) for k in want))
"""


def test_the_cython_target_compiles_into_the_polyhal_cache_not_the_home_folder(tmp_path):
    """brian2's default Cython cache is under the home folder: a home that cannot be
    written (here HOME names a file, which stops root too) failed every cython run."""
    home = tmp_path / "afile"
    home.write_text("x")
    root = cache_dir("neuro-cython", create=False).parent
    env = {k: v for k, v in os.environ.items() if k not in ("CYTHON_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), POLYHAL_CACHE_DIR=str(root))
    result = subprocess.run([sys.executable, "-c", _CYTHON_RUN], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.split()[-1]) < 1e-9
    assert "cannot be written" not in result.stderr  # no fallback: the cache itself
    assert list((root / "neuro-cython").glob("*.so"))


def test_a_cython_cache_folder_the_user_set_is_kept(tmp_path):
    from brian2 import prefs

    with runner.BRIAN_LOCK, runner._cython_cache_in(tmp_path / "ours"):
        assert prefs.codegen.runtime.cython.cache_dir == str(tmp_path / "ours")
    assert prefs.codegen.runtime.cython.cache_dir is None
    prefs.codegen.runtime.cython.cache_dir = str(tmp_path / "theirs")
    try:
        with runner.BRIAN_LOCK, runner._cython_cache_in(tmp_path / "ours"):
            assert prefs.codegen.runtime.cython.cache_dir == str(tmp_path / "theirs")
        assert prefs.codegen.runtime.cython.cache_dir == str(tmp_path / "theirs")
    finally:
        prefs.codegen.runtime.cython.cache_dir = None


def test_cpp_standalone_builds_once_and_reruns_with_new_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYHAL_CACHE_DIR", str(tmp_path))
    device = open_device("neuro", target="cpp_standalone")
    graph, rng = _small_lif()
    compiled = polyhal.compile(graph, device=device)
    for _ in range(2):
        x = rng.normal(0.5, 1, (20, 2, 3))
        for got, want in zip(compiled(x).values(), run(graph, x).values(), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    (binary,) = (tmp_path / "neuro").glob("standalone-*/main")
    start = time.perf_counter()
    executable = device.compile(graph, CompileOptions())  # the same network: reused
    assert time.perf_counter() - start < 5
    binary.unlink()  # a device fault: the binary is gone
    with pytest.raises(DeviceError, match="standalone binary"):
        executable.run([device.upload(np.zeros((20, 2, 3)))])


def test_neuro_passes_bring_up_and_snn_conformance_with_an_empty_manifest():
    report = run_suite("neuro", levels=["L0", "L4-snn"], profile="ci")
    assert report.ok, [(c.id, c.outcome, c.message) for c in report.cases
                       if c.outcome != "passed"][:10]
    assert report.summary["xfail"] == 0
    assert report.coverage["snn"]["claimed"] == report.coverage["snn"]["total"]


def test_the_same_network_compiled_twice_is_built_once(neuro):
    rng = np.random.default_rng(11)
    weights = rng.uniform(0, 1, (4, 3))

    def build(w):
        return _graph((10, 1, 3), lambda x: _neuron("LIF", snn.linear(x, w),
                                                     np.random.default_rng(0), 4, "euler",
                                                     "v_reset"))

    x = (rng.random((10, 1, 3)) < 0.5).astype(np.float64)
    first, second = (neuro.compile(build(weights), CompileOptions()) for _ in range(2))
    other = neuro.compile(build(weights * 0.5), CompileOptions())
    results = [[neuro.download(b) for b in e.run([neuro.upload(x)])] for e in
               (first, second, other)]
    assert first.inner._last[0] is second.inner._last[0]  # one brian2 network, reused
    assert other.inner._last[0] is not first.inner._last[0]
    np.testing.assert_array_equal(results[0][0], results[1][0])
    check_against_reference(build(weights * 0.5), [x], neuro)
