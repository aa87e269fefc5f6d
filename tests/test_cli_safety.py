"""The command line never loses a user's file, and reports bad input, a bad
environment and a failing standard output in one line, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.cli import main
from polyhal.conformance import run_suite
from polyhal.conformance.compare import load_report
from polyhal.conformance.report import write_report
from polyhal.errors import ConformanceError, DeviceError, PolyhalError
from polyhal.ir import GraphBuilder, f32

LINUX = sys.platform.startswith("linux")


def polyhal_cli(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyhal.cli", *args], capture_output=True,
                          text=True, cwd=cwd, check=False, **kwargs)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """``m.json`` (and ``m.npz``: the relu has a constant) and the input ``x.npy``."""
    g = GraphBuilder("m")
    x = g.input("x", f32[2])
    g.output(ops.relu(ops.add(x, g.constant(np.ones(2, np.float32)))), name="y")
    polyhal.save(g.build(), tmp_path / "m.json")
    np.save(tmp_path / "x.npy", np.array([-3, 2], np.float32))
    return tmp_path / "m.json"


def _run(model: Path, *args: str) -> int:
    return main(["run", str(model), "--input", f"x={model.parent / 'x.npy'}", *args])


def _refused(capsys: pytest.CaptureFixture[str], code: int, *words: str) -> None:
    """The command stopped before the run, with one error line holding ``words``."""
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (out, err)
    assert err.startswith("polyhal: error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


# -- polyhal run --profile / --output ------------------------------------------------------

@pytest.mark.parametrize(("victim", "role"), [("m.json", "is the model"),
                                              ("m.npz", "is the model's tensors"),
                                              ("x.npy", "is the --input x file")])
def test_the_trace_never_replaces_the_model_or_an_input(model, capsys, victim, role):
    kept = {p: p.read_bytes() for p in model.parent.iterdir()}
    target = model.parent / victim
    code = _run(model, "--profile", str(target), "--overwrite")
    _refused(capsys, code, f"--profile {target}: {role}; it is never overwritten")
    assert {p: p.read_bytes() for p in model.parent.iterdir()} == kept


def test_an_output_never_replaces_an_input(model, capsys):
    (model.parent / "x.npy").rename(model.parent / "y.npy")  # the output `y` would be y.npy
    kept = (model.parent / "y.npy").read_bytes()
    code = main(["run", str(model), "--input", f"x={model.parent / 'y.npy'}", "--output",
                 str(model.parent), "--overwrite"])
    _refused(capsys, code, "--output", "y.npy: is the --input x file; it is never overwritten")
    assert (model.parent / "y.npy").read_bytes() == kept


def test_existing_outputs_and_traces_are_replaced_only_with_overwrite(model, capsys):
    out, trace = model.parent / "out", model.parent / "trace.json"
    assert _run(model, "--output", str(out), "--profile", str(trace)) == 0
    capsys.readouterr()
    first = json.loads(trace.read_text())
    (out / "y.npy").write_bytes(b"mine")
    _refused(capsys, _run(model, "--output", str(out)), "--output", "y.npy",
             "the file exists; pass --overwrite")
    assert (out / "y.npy").read_bytes() == b"mine"
    _refused(capsys, _run(model, "--profile", str(trace)), f"--profile {trace}",
             "pass --overwrite")
    assert json.loads(trace.read_text()) == first
    assert _run(model, "--output", str(out), "--profile", str(trace), "--overwrite") == 0
    np.testing.assert_array_equal(np.load(out / "y.npy"), [0, 3])
    assert json.loads(trace.read_text())["traceEvents"]
    assert sorted(p.name for p in model.parent.iterdir() if p.name.startswith(".")) == []


def test_a_symbolic_link_is_never_written_through(model, capsys):
    precious = model.parent / "precious"
    precious.write_text("the user's file")
    (model.parent / "o").mkdir()
    (model.parent / "o" / "y.npy").symlink_to(precious)
    (model.parent / "t.json").symlink_to(precious)
    _refused(capsys, _run(model, "--output", str(model.parent / "o"), "--overwrite"),
             "--output", "y.npy: is a symbolic link")
    _refused(capsys, _run(model, "--profile", str(model.parent / "t.json"), "--overwrite"),
             "--profile", "t.json: is a symbolic link")
    assert precious.read_text() == "the user's file"


def test_a_trace_path_that_cannot_be_written_stops_the_run_before_it_starts(model, capsys):
    out = model.parent / "out"
    missing = model.parent / "nowhere" / "t.json"
    _refused(capsys, _run(model, "--output", str(out), "--profile", str(missing)),
             f"--profile {missing}", "does not exist")
    _refused(capsys, _run(model, "--output", str(out), "--profile", str(out / "y.npy")),
             "--profile", "is also the file of an --output array")
    if LINUX:
        _refused(capsys, _run(model, "--output", str(out), "--profile", "/proc/t.json"),
                 "--profile /proc/t.json", "/proc is not writable")
    assert not (out / "y.npy").exists()  # no output was written either


_WRITE_PAST_A_SIZE_LIMIT = """
import resource, signal, sys
from polyhal.runtime.tracing import Trace
trace = Trace()
for i in range(100):
    trace.add_instant(f"event {i}", "run", "host", float(i))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
trace.save(sys.argv[1])
"""


@pytest.mark.skipif(os.name != "posix", reason="needs RLIMIT_FSIZE")
def test_a_trace_write_that_fails_midway_leaves_the_file_as_it_was(tmp_path):
    (tmp_path / "t.json").write_text("previous")
    result = subprocess.run([sys.executable, "-c", _WRITE_PAST_A_SIZE_LIMIT,
                             str(tmp_path / "t.json")], capture_output=True, text=True,
                            check=False)
    assert "PolyhalError" in result.stderr
    assert "t.json: cannot write the trace (File too large)" in result.stderr
    assert (tmp_path / "t.json").read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left


@pytest.mark.parametrize("option", ["--output", "--profile"])
def test_an_empty_path_is_refused(model, capsys, option):
    with pytest.raises(SystemExit) as exit_info:
        _run(model, option, "")
    assert exit_info.value.code == 2
    assert f"argument {option}: an empty path names no file" in capsys.readouterr().err


# -- polyhal run --input / --dt ---------------------------------------------------------------

def test_an_npy_header_claiming_more_than_the_file_holds_is_refused(model, capsys):
    huge = model.parent / "huge.npy"
    header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 2), np.float32))
    header["shape"] = (1000, 2)
    with huge.open("wb") as stream:
        np.lib.format.write_array_header_1_0(stream, header)
        stream.write(b"\0" * 16)
    code = main(["run", str(model), "--input", f"x={huge}"])
    _refused(capsys, code, f"--input x: {huge} is truncated or corrupt",
             "float32[1000, 2] (8000 bytes) but 16 bytes follow")


def _npy(header: str, data: bytes) -> bytes:
    """A version 1.0 .npy file with ``header`` as its header text, as written."""
    text = header.encode()
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data


_F4 = "{'descr': '<f4', 'fortran_order': False, 'shape': "


@pytest.mark.parametrize(("header", "data", "words"), [
    (_F4 + "(2,), ", b"\0" * 8, ["cannot read", "(TokenError: "]),  # no closing brace
    (_F4 + "(2, True), }", b"\0" * 8, ["is corrupt", "shape (2, True)", "integers >= 0"]),
    (_F4 + "(-1,), }", b"\0" * 8, ["is corrupt", "shape (-1,)"]),
    (_F4 + "(2.0,), }", b"\0" * 8, ["(2.0,)"]),
    (_F4 + f"({10**30}, 0), }}", b"", [f"dimension {10**30}", "exceeds the limit"]),
    ("{'descr': 'O', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16,
     ["cannot read", "allow_pickle"]),
], ids=["unclosed", "bool-dim", "negative-dim", "float-dim", "huge-empty", "object"])
def test_a_damaged_npy_header_is_refused_in_one_line(model, capsys, header, data, words):
    """numpy's header parser raises TokenError, TypeError or OverflowError on these, or
    reads a -1 dim as "whatever fits": each is one error line naming the flag and file."""
    bad = model.parent / "bad.npy"
    bad.write_bytes(_npy(header, data))
    code = main(["run", str(model), "--input", f"x={bad}"])
    _refused(capsys, code, "--input x: ", str(bad), *words)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_input_is_refused_instead_of_waiting(model):
    os.mkfifo(model.parent / "fifo.npy")
    result = polyhal_cli("run", str(model), "--input", "x=fifo.npy", cwd=model.parent,
                         timeout=120)
    assert result.returncode == 2
    assert "fifo.npy: cannot read --input x (not a regular file)" in result.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_dt_is_checked_by_the_command_line(tmp_path, capsys, value):
    with pytest.raises(SystemExit):
        main(["run", str(tmp_path / "n.nir"), "--dt", value])
    assert f"argument --dt: '{value}' must be a positive number of seconds" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("width", ["0", "-5"])
def test_width_must_be_positive(capsys, width):
    with pytest.raises(SystemExit):
        main(["devices", "--width", width])
    assert f"argument --width: '{width}' must be a positive number" in capsys.readouterr().err


# -- standard output ----------------------------------------------------------------------

@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("command", ["ops", "run {model} --input x={x}"])
def test_a_full_standard_output_is_one_error_line(model, command):
    args = command.format(model=model, x=model.parent / "x.npy").split()
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "polyhal.cli", *args], stdout=full,
                                stderr=subprocess.PIPE, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr == ("polyhal: error: cannot write to standard output (No space "
                             "left on device)\n")


@pytest.mark.skipif(os.name != "posix", reason="closes a file descriptor with sh")
def test_a_closed_standard_output_is_one_error_line():
    result = subprocess.run(["sh", "-c", f"'{sys.executable}' -m polyhal.cli ops >&-"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr == "polyhal: error: standard output is closed: nothing can be printed\n"


# -- check-adapter ----------------------------------------------------------------------

def test_check_adapter_gives_a_verdict_when_the_device_cannot_be_opened(capsys):
    from polyhal import hal
    from polyhal.adapters.template import TemplateAdapter

    class UnpluggedAdapter(TemplateAdapter):
        name = "unplugged"

        def open(self, index=0, **options):
            raise DeviceError("unplugged:0: the board is not connected")

    hal.register(UnpluggedAdapter)
    try:
        code = main(["check-adapter", "unplugged", "--width", "300"])
    finally:
        hal.unregister("unplugged")
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[-1].startswith(
        "contract OK (class checks); unplugged:0 could not be opened, so its capabilities "
        "were not checked: unplugged:0: the board is not connected")


# -- conformance --report ---------------------------------------------------------------

@pytest.fixture(scope="module")
def l0_report():
    return run_suite("template", levels=["L0"], profile="ci", isolate=False)


def test_a_report_replaces_only_an_earlier_report_of_the_same_adapter(tmp_path, l0_report):
    from polyhal.conformance.report import check_report_folder

    folder = tmp_path / "r"
    write_report(l0_report, folder)
    write_report(l0_report, folder)  # a rerun into the same folder
    assert load_report(folder)["adapter"] == "template"
    with pytest.raises(ConformanceError, match=r"r holds the report of adapter 'template': "
                                               r"nothing was written.*'reference'"):
        check_report_folder(folder, "reference")


@pytest.mark.parametrize("existing", ["report.md", "report.json", "report.html"])
def test_a_file_that_is_not_a_report_is_kept(tmp_path, l0_report, existing):
    (tmp_path / existing).write_text("the user's notes")
    with pytest.raises(ConformanceError, match="holds report files that are not a polyhal "
                                               "conformance report: nothing was written"):
        write_report(l0_report, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [existing]
    assert (tmp_path / existing).read_text() == "the user's notes"


def test_a_report_file_that_is_a_link_is_never_written_through(tmp_path, l0_report):
    (tmp_path / "precious").write_text("mine")
    write_report(l0_report, tmp_path / "r")
    (tmp_path / "r" / "report.md").unlink()
    (tmp_path / "r" / "report.md").symlink_to(tmp_path / "precious")
    with pytest.raises(ConformanceError, match=r"report\.md: cannot write the report \(it is "
                                               "a symbolic link"):
        write_report(l0_report, tmp_path / "r")
    assert (tmp_path / "precious").read_text() == "mine"


def test_the_command_refuses_a_report_folder_before_the_run(tmp_path, capsys):
    (tmp_path / "report.md").write_text("notes")
    code = main(["conformance", "template", "--level", "L0", "--profile", "ci", "--quiet",
                 "--no-isolate", "--report", str(tmp_path)])
    _refused(capsys, code, f"--report {tmp_path} holds report files that are not")
    assert (tmp_path / "report.md").read_text() == "notes"


def test_an_adapter_named_twice_is_refused(tmp_path, capsys):
    code = main(["conformance", "template", "template", "--level", "L0", "--profile", "ci",
                 "--report", str(tmp_path / "dup")])
    _refused(capsys, code, "adapter 'template' given twice")


def test_an_empty_report_path_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["conformance", "template", "--report", ""])
    assert "argument --report: an empty path names no file" in capsys.readouterr().err


# -- conformance: environment and timeouts -----------------------------------------------

def test_no_adapter_selected_by_polyhal_adapters_is_an_error(monkeypatch, capsys):
    monkeypatch.setenv("POLYHAL_ADAPTERS", "nope")
    code = main(["conformance", "--profile", "ci", "--level", "L0"])
    _refused(capsys, code, "POLYHAL_ADAPTERS='nope' selects no built-in adapter")


def test_a_bad_polyhal_device_timeout_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("POLYHAL_DEVICE_TIMEOUT", "abc")
    with pytest.raises(PolyhalError, match="POLYHAL_DEVICE_TIMEOUT='abc'"):
        run_suite("template", levels=["L0"], profile="ci", isolate=False)


def test_polyhal_device_timeout_sets_the_timeout_of_the_device_under_test(monkeypatch):
    from polyhal.conformance.runner import device_timeout

    assert device_timeout(None, 60.0) == 60.0
    monkeypatch.setenv("POLYHAL_DEVICE_TIMEOUT", "7.5")
    assert device_timeout(None, 60.0) == 7.5
    assert device_timeout(3, 60.0) == 3.0


@pytest.mark.parametrize("timeout", [0, -1])
def test_a_zero_timeout_is_refused_not_replaced(capsys, timeout):
    with pytest.raises(PolyhalError, match=rf"run_suite: timeout={timeout} must be a positive"):
        run_suite("template", levels=["L0"], profile="ci", timeout=timeout)
    with pytest.raises(SystemExit):
        main(["conformance", "template", "--timeout", str(timeout)])
    assert (f"argument --timeout: '{timeout}' must be a positive number of seconds"
            in capsys.readouterr().err)


# -- conformance --compare ----------------------------------------------------------------

def test_a_deeply_nested_or_endless_report_is_refused(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 200_000)
    with pytest.raises(PolyhalError, match=r"deep\.json is not a conformance report: its JSON "
                                           "is nested too deeply"):
        load_report(tmp_path / "deep.json")
    if Path("/dev/zero").exists():
        with pytest.raises(PolyhalError,
                           match=r"/dev/zero: cannot read report \(not a regular file\)"):
            load_report("/dev/zero")


def test_a_folder_without_a_report_says_what_was_looked_for(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolyhalError, match=r"empty/report\.json: cannot read report \(No such"):
        load_report(tmp_path / "empty")
    (tmp_path / "odd" / "report.json").mkdir(parents=True)
    with pytest.raises(PolyhalError, match=r"odd/report\.json: cannot read report \(a folder\)"):
        load_report(tmp_path / "odd")


def test_the_name_of_an_adapter_is_the_adapter_and_other_names_are_paths(
        tmp_path, monkeypatch, capsys, l0_report):
    monkeypatch.chdir(tmp_path)
    stale = l0_report.to_dict()
    stale["cases"] = stale["cases"][:1]
    (tmp_path / "template").mkdir()
    (tmp_path / "template" / "report.json").write_text(json.dumps(stale))
    (tmp_path / "results").mkdir()
    assert main(["conformance", "--compare", "template", "./template", "--level", "L0",
                 "--profile", "ci", "--no-isolate"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"template: {len(l0_report.cases)} cases, {len(l0_report.cases)} passed; "
                     "template (./template): 1 cases, 1 passed")
    code = main(["conformance", "--compare", "results", "./template"])  # no adapter: a path
    _refused(capsys, code, "results/report.json")
    (tmp_path / "results" / "report.json").write_text(json.dumps(stale))
    assert main(["conformance", "--compare", "results", "./template"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "template (results): 1 cases, 1 passed; template (./template): 1 cases, 1 passed")
    code = main(["conformance", "--compare", "warp-drive", "./template"])
    _refused(capsys, code, "no adapter named 'warp-drive'", "nor is there a report")


def test_both_sides_are_checked_before_either_runs(tmp_path, monkeypatch, capsys):
    import polyhal.conformance.runner as runner

    graded = []
    real = runner.run_suite
    monkeypatch.setattr(runner, "run_suite", lambda name, **kw: graded.append(name) or real(
        name, **kw))
    for sides in (["template", str(tmp_path / "absent.json")], ["template", "warp-drive"]):
        code = main(["conformance", "--compare", *sides, "--level", "L0", "--profile", "ci"])
        _refused(capsys, code, "absent.json" if "absent" in sides[1] else "'warp-drive'")
    assert graded == []


# -- gen-docs -------------------------------------------------------------------------------

@pytest.fixture
def pages(tmp_path: Path) -> tuple[Path, Path]:
    root = Path(__file__).resolve().parents[1] / "docs"
    (tmp_path / "hal.md").write_text((root / "hal.md").read_text())
    return tmp_path / "ops.md", tmp_path / "hal.md"


def test_gen_docs_writes_both_pages_in_a_folder_of_its_own(pages, capsys):
    ops_page, hal_page = pages
    assert main(["gen-docs", "--out", str(ops_page), "--hal", str(hal_page)]) == 0
    assert f"wrote {ops_page}" in capsys.readouterr().out
    assert main(["gen-docs", "--check", "--out", str(ops_page), "--hal", str(hal_page)]) == 0
    assert sorted(p.name for p in ops_page.parent.iterdir()) == ["hal.md", "ops.md"]


def test_gen_docs_refuses_what_it_cannot_check_or_write(pages, capsys):
    ops_page, hal_page = pages
    bad = hal_page.with_name("bad.md")
    bad.write_bytes(b"\xff\xfe not utf-8")
    for args, words in (
            (["--hal", str(bad)], [f"--hal {bad}: not UTF-8 text"]),
            (["--out", str(ops_page.parent), "--hal", str(hal_page)],
             [f"--out {ops_page.parent}: is a folder"]),
            (["--out", str(hal_page), "--hal", str(hal_page)], ["are the same file"])):
        _refused(capsys, main(["gen-docs", "--check", *args]), *words)
    with pytest.raises(SystemExit):
        main(["gen-docs", "--check", "--out", ""])
    assert "argument --out: an empty path names no file" in capsys.readouterr().err
