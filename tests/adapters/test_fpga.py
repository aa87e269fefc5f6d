"""The FPGA adapter on the RTL under simulation: bit-exact against the reference
(tiling, batching, zero points, fused requantization), counters, fault recovery,
placement with CPU fallback and bad input."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import polyhal
from polyhal.errors import DeviceError, ExecutionError, PolyhalError, UnsupportedError
from polyhal.hal import open_device
from polyhal.ir import GraphBuilder, TensorType, i8
from polyhal.reference import run

# Buffers small enough that every dimension of a modest GEMM is cut into chunks.
TINY = {"ROWS": 4, "COLS": 4, "WORD_BYTES": 32, "A_WORDS": 4, "B_WORDS": 4,
        "C_WORDS": 8, "Q_WORDS": 2, "P_WORDS": 2}


@pytest.fixture(scope="module")
def fpga():
    device = open_device("fpga")
    yield device
    device.close()


@pytest.fixture(scope="module")
def tiny():
    """A 4x4 array with tiny buffers, on Icarus (so both simulators serve the adapter)."""
    device = open_device("fpga", simulator="icarus", parameters=TINY)
    yield device
    device.close()


def _int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, shape, dtype=np.int8)


def _matmul_graph(a: np.ndarray, b: np.ndarray, za=None, zb=None):
    g = GraphBuilder("mmi")
    args = [g.input("a", TensorType.of(a)), g.input("b", TensorType.of(b))]
    if za is not None or zb is not None:
        args += [g.constant(za) if za is not None else None,
                 g.constant(zb) if zb is not None else None]
    g.output(g.op("MatMulInteger", *args), name="y")
    return g.build()


def _requant_inputs(rng, n, per_channel=True):
    size = n if per_channel else 1
    multiplier = rng.integers(1 << 30, 1 << 31, size).astype(np.int32)
    shift = rng.integers(31, 45, size).astype(np.int32)
    bias = rng.integers(-(1 << 20), 1 << 20, size).astype(np.int32)
    if not per_channel:
        multiplier, shift, bias = multiplier[0], shift[0], bias[0]
    return multiplier, shift, bias


def _requant_graph(a, b, multiplier, shift, bias, **attrs):
    g = GraphBuilder("mmi_rq")
    acc = g.op("MatMulInteger", g.input("a", TensorType.of(a)), g.constant(b, name="w"))
    y = g.op("Requantize", acc, g.constant(np.asarray(multiplier, np.int32), name="m"),
             g.constant(np.asarray(shift, np.int32), name="s"),
             g.constant(np.asarray(bias, np.int32), name="bias"), domain="quant", **attrs)
    g.output(y, name="y")
    return g.build()


def _same(graph, device, *args):
    want = run(graph, *args)
    got = polyhal.compile(graph, device=device)(*args)
    for name in want:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    return got


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (8, 8, 8), (17, 33, 9), (64, 64, 64),
                                   (2, 0, 3), (0, 4, 3), (3, 4, 0)])
def test_gemm_is_bit_exact(fpga, shape):
    m, k, n = shape
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = _int8(rng, (m, k)), _int8(rng, (k, n))
    _same(_matmul_graph(a, b), fpga, a, b)


def test_extreme_products_wrap_like_the_reference(fpga):
    """-128 x -128 summed over K = 2^17 + 1 wraps int32 (2^14 * (2^17 + 1) > 2^31)."""
    k = (1 << 17) + 1
    a = np.full((2, k), -128, np.int8)
    b = np.full((k, 3), -128, np.int8)
    got = _same(_matmul_graph(a, b), fpga, a, b)["y"]
    assert got[0, 0] == np.int32(np.int64(1 << 14) * k - (1 << 32))


def test_tiling_in_every_dimension_is_bit_exact(tiny):
    rng = np.random.default_rng(1)
    a, b = _int8(rng, (13, 40)), _int8(rng, (40, 11))  # K > the buffers' K, M and N chunks
    _same(_matmul_graph(a, b), tiny, a, b)
    multiplier, shift, bias = _requant_inputs(rng, 11)
    _same(_requant_graph(a, b, multiplier, shift, bias, relu=1, zero_point=-3), tiny, a)


def test_batches_vectors_and_zero_points(fpga):
    rng = np.random.default_rng(2)
    a, b = _int8(rng, (2, 3, 5, 6)), _int8(rng, (3, 6, 4))  # broadcast batch dimensions
    _same(_matmul_graph(a, b), fpga, a, b)
    a, b = _int8(rng, (4, 5, 6)), _int8(rng, (6, 7))  # one B for the whole batch
    _same(_matmul_graph(a, b), fpga, a, b)
    v, b = _int8(rng, (6,)), _int8(rng, (6, 3))
    _same(_matmul_graph(v, b), fpga, v, b)
    a, b = _int8(rng, (5, 6)), _int8(rng, (6, 3))
    za, zb = _int8(rng, (5,)), _int8(rng, (3,))
    _same(_matmul_graph(a, b, za, zb), fpga, a, b)
    _same(_matmul_graph(a, b, np.int8(-7), np.int8(5)), fpga, a, b)


@pytest.mark.parametrize("rounding", ["half_up", "half_even"])
@pytest.mark.parametrize("per_channel", [True, False])
def test_requantize_fused_into_the_gemm_is_bit_exact(fpga, rounding, per_channel):
    rng = np.random.default_rng(3)
    a, b = _int8(rng, (20, 48)), _int8(rng, (48, 24))
    multiplier, shift, bias = _requant_inputs(rng, 24, per_channel)
    graph = _requant_graph(a, b, multiplier, shift, bias, rounding=rounding, relu=1,
                           zero_point=5)
    _same(graph, fpga, a)
    executable = fpga.compile(graph, polyhal.hal.CompileOptions())
    assert len(executable.inner.steps) == 1  # one device operation: the int32 sums stay on chip
    executable.run([fpga.upload(a)])
    profile = executable.profile()
    # 20 rows x 24 columns in int8 are 480 bytes: 4 words of 128 bytes, plus status words
    assert profile.counters["words_out"] < 20 * 24 * 4 / 128


def test_requantize_alone_hits_ties_saturation_and_extremes(fpga):
    x = np.array([[5, -5, 6, -6, 7, -7, 2**31 - 1, -2**31],
                  [1, -1, 3, -3, 0, 1 << 30, -(1 << 30), 12345]], np.int32)
    cases = [(np.int32(1), np.int32(1), np.int32(0)),  # halves: ties everywhere
             (np.int32(2**31 - 1), np.int32(0), np.int32(0)),  # saturation both sides
             (np.int32(2**31 - 1), np.int32(63), np.int32(2**31 - 1)),
             (np.int32(0), np.int32(5), np.int32(-2**31))]
    for multiplier, shift, bias in cases:
        for rounding in ("half_up", "half_even"):
            for relu, zero_point in ((0, 0), (1, -20), (1, 17)):
                g = GraphBuilder("rq")
                y = g.op("Requantize", g.input("x", TensorType.of(x)), g.constant(multiplier),
                         g.constant(shift), g.constant(bias), domain="quant",
                         rounding=rounding, relu=relu, zero_point=zero_point)
                g.output(y, name="y")
                _same(g.build(), fpga, x)


def test_counters_count_cycles_and_every_mac(fpga):
    rng = np.random.default_rng(4)
    a, b = _int8(rng, (64, 64)), _int8(rng, (64, 64))
    executable = fpga.compile(_matmul_graph(a, b), polyhal.hal.CompileOptions())
    executable.run([fpga.upload(a), fpga.upload(b)])
    counters = executable.profile().counters
    assert counters["mac_beats"] == 64 * 64 * 64 // (8 * 8)  # one beat per k per 8x8 tile
    assert counters["mac_beats"] <= counters["cycles"] < 2 * counters["mac_beats"]


def test_a_killed_simulation_is_a_device_error_and_the_next_call_restarts(fpga):
    rng = np.random.default_rng(5)
    a, b = _int8(rng, (256, 256)), _int8(rng, (256, 256))
    g = GraphBuilder("mm")
    g.output(g.op("MatMulInteger", g.input("a", i8["m", 256]), g.input("b", i8[256, 256])),
             name="y")
    graph = g.build()
    compiled = polyhal.compile(graph, device=fpga)
    compiled(a[:8], b)  # the simulation is up
    link = fpga.inner.link
    generation = link.generation

    def kill_soon():
        time.sleep(0.3)
        os.killpg(link.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    with pytest.raises(DeviceError, match="fpga simulation"):
        for _ in range(50):  # long GEMMs: the kill lands during one
            compiled(a, b)
    killer.join()
    np.testing.assert_array_equal(compiled(a[:8], b)["y"], run(graph, a[:8], b)["y"])
    assert link.generation == generation + 1


def test_a_quantized_graph_runs_on_the_fpga_with_float_ops_on_the_cpu(fpga):
    rng = np.random.default_rng(6)
    g = GraphBuilder("qmlp")
    x = g.input("x", TensorType.of(np.zeros((4, 16), np.float32)))
    xq = g.op("QuantizeLinear", x, g.constant(np.float32(0.05)), g.constant(np.int8(0)))
    acc = g.op("MatMulInteger", xq, g.constant(_int8(rng, (16, 8)), name="w"))
    y = g.op("Requantize", acc, g.constant(np.int32(1 << 30)), g.constant(np.int32(38)),
             domain="quant", relu=1)
    yf = g.op("DequantizeLinear", y, g.constant(np.float32(0.1)), g.constant(np.int8(0)))
    g.output(g.op("Softmax", yf, axis=-1), name="p")
    graph = g.build()
    feed = rng.normal(size=(4, 16)).astype(np.float32)
    compiled = polyhal.compile(graph, device=fpga, fallback="cpu")
    placed = compiled.placement.assignment
    assert {placed[n.name].split(":")[0] for n in graph.nodes} == {"cpu", "fpga"}
    assert placed[graph.nodes[-1].name].startswith("cpu")  # Softmax
    np.testing.assert_allclose(compiled(feed)["p"], run(graph, feed)["p"], rtol=1e-6)


def test_bad_requant_values_are_execution_errors_naming_the_node(fpga):
    g = GraphBuilder("bad")
    x = g.input("x", TensorType.of(np.zeros((2, 3), np.int32)))
    y = g.op("Requantize", x, g.input("m", TensorType.of(np.zeros((), np.int32))),
             g.constant(np.int32(3)), domain="quant", name="rq")
    g.output(y, name="y")
    compiled = polyhal.compile(g.build(), device=fpga)
    with pytest.raises(ExecutionError, match=r"'rq'.*multiplier"):
        compiled(np.ones((2, 3), np.int32), np.int32(-1))


def test_unclaimed_ops_and_dtypes_are_refused(fpga):
    g = GraphBuilder("f")
    x = g.input("x", TensorType.of(np.zeros((2, 2), np.float32)))
    g.output(x @ x, name="y")
    with pytest.raises(UnsupportedError, match="MatMul"):
        polyhal.compile(g.build(), device=fpga, fallback=None)
    a = np.zeros((2, 2), np.uint8)
    with pytest.raises(UnsupportedError, match="uint8"):
        polyhal.compile(_matmul_graph(a, a), device=fpga, fallback=None)


@pytest.mark.parametrize("parameters", [{"ROWS": "8; $finish"}, {"ROWS": 8.0}, {"ROWS": 0},
                                        {"COLS": 1000}, {"WORD_BYTES": 24},
                                        {"EVIL": 1}, {"ROWS": True},
                                        {"P_WORDS": 1, "WORD_BYTES": 32}])
def test_hdl_parameters_are_checked_before_anything_is_built(parameters):
    with pytest.raises(PolyhalError, match=next(iter(parameters))):
        open_device("fpga", parameters=parameters)


def test_graph_names_never_reach_the_hdl(fpga):
    """Node and value names are the graph's business: the build is the same device."""
    rng = np.random.default_rng(7)
    a, b = _int8(rng, (3, 4)), _int8(rng, (4, 2))
    g = GraphBuilder('x"); $finish; //')
    y = g.op("MatMulInteger", g.input("a`define X", TensorType.of(a)),
             g.input("b\n$stop", TensorType.of(b)), name="n); $system(\"rm\")")
    g.output(y, name="y")
    generation = fpga.inner.link.generation
    _same(g.build(), fpga, a, b)
    assert fpga.inner.link.generation == generation  # no rebuild, no restart


@pytest.mark.parametrize(("options", "named"), [
    ({"simulator": "modelsim"}, "modelsim"), ({"speed": 3}, "speed"),
    ({"timeout_s": -1}, "timeout_s"), ({"timeout_s": "1"}, "timeout_s"),
    ({"parameters": [("ROWS", 8)]}, "parameters")])
def test_bad_options_are_refused_by_name(options, named):
    with pytest.raises(UnsupportedError, match=named):
        open_device("fpga", **options)


def test_the_compiled_graph_reports_each_partitions_profile(fpga):
    rng = np.random.default_rng(8)
    g = GraphBuilder("q")
    x = g.input("x", TensorType.of(np.zeros((4, 8), np.float32)))
    xq = g.op("QuantizeLinear", x, g.constant(np.float32(0.05)), g.constant(np.int8(0)))
    acc = g.op("MatMulInteger", xq, g.constant(_int8(rng, (8, 8)), name="w"))
    g.output(g.op("Softmax", g.op("Cast", acc, to="float32"), axis=-1), name="p")
    compiled = polyhal.compile(g.build(), device=fpga, fallback="cpu")
    assert compiled.profiles() == []
    compiled(rng.normal(size=(4, 8)).astype(np.float32))
    profiles = compiled.profiles()
    assert [address.split(":")[0] for address, _ in profiles] == ["fpga", "cpu"]
    assert profiles[0][1].counters["mac_beats"] == 8 * 8 * 1 // 8  # K=8 beats, one tile


def test_a_vendor_link_replaces_the_simulation():
    """The golden model behind the Link interface: the same driver, the same results."""
    from polyhal.simulators.fpga.model_link import ModelLink

    rng = np.random.default_rng(9)
    a, b = _int8(rng, (13, 40)), _int8(rng, (40, 11))
    multiplier, shift, bias = _requant_inputs(rng, 11)
    with open_device("fpga", link=ModelLink(TINY)) as device:
        _same(_matmul_graph(a, b), device, a, b)
        _same(_requant_graph(a, b, multiplier, shift, bias, relu=1, zero_point=-3), device, a)
    with pytest.raises(UnsupportedError, match="Link interface"):
        open_device("fpga", link=object())
    with pytest.raises(UnsupportedError, match="simulator"):
        open_device("fpga", link=ModelLink(), simulator="icarus")


def test_malformed_frames_are_wire_errors():
    from polyhal.simulators.fpga import wire

    good = wire.encode_reply([wire.Reply((2, 0, 5, 0, 0, 0, 1, 0), b"\x01" * 32)])
    assert wire.decode_reply(good)[0].data == b"\x01" * 32
    for bad in (good[:-1], good[:10], good + b"\x00", b""):
        with pytest.raises(wire.WireError):
            wire.decode_reply(bad)
    request = wire.encode_request(wire.BATCH, [wire.Command(1, (0, 0, 1), b"\x00" * 32)])
    for bad in (request[:-3], request[:6], request + b"\x00"):
        with pytest.raises(wire.WireError):
            wire.decode_request(bad)
