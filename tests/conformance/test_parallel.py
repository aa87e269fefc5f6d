"""Grading several adapters at once (polyhal.conformance.parallel, ``--jobs``)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from polyhal.adapters.template import TemplateAdapter
from polyhal.conformance.parallel import run_suites
from polyhal.conformance.runner import run_suite
from polyhal.errors import ConformanceError, PolyhalError
from polyhal.hal import register, unregister

FAST = {"levels": ["L0"], "profile": "ci"}


def _graders() -> list[multiprocessing.process.BaseProcess]:
    return [p for p in multiprocessing.active_children()
            if p.name.startswith("polyhal-conformance-")]


def test_reports_come_in_the_order_asked_and_match_a_run_here():
    progress: dict[str, list[tuple]] = {"template": [], "reference": []}
    got = list(run_suites(["template", "reference"], jobs=2,
                          on_progress=lambda name, *p: progress[name].append(p), **FAST))
    assert [name for name, _ in got] == ["template", "reference"]
    for name, report in got:
        here = run_suite(name, **FAST)
        assert report.adapter == name and report.ok
        assert report.summary == here.summary and report.case_set_hash == here.case_set_hash
        assert [c.id for c in report.cases] == [c.id for c in here.cases]
        # counted first, then the last case always reported
        assert progress[name][0] == (0, len(here.cases), 0)
        assert progress[name][-1] == (len(here.cases), len(here.cases), 0)
    assert _graders() == []


def test_a_run_that_fails_raises_its_own_error_class_at_its_turn():
    runs = run_suites(["template", "reference"], jobs=2, levels=["L9"], profile="ci")
    with closing(runs), pytest.raises(PolyhalError, match=r"unknown level\(s\) L9 ") as caught:
        next(runs)
    assert type(caught.value) is type(_error_here())
    assert _graders() == []  # the other run was stopped


def _error_here() -> PolyhalError:
    try:
        run_suite("template", levels=["L9"], profile="ci")
    except PolyhalError as exc:
        return exc
    raise AssertionError("L9 was accepted")


def test_a_grading_process_that_dies_is_named_and_the_others_are_stopped():
    def kill_reference(name, done, total, failures):
        if name == "reference":
            (process,) = [p for p in _graders() if p.name.endswith("-reference")]
            os.kill(process.pid, signal.SIGKILL)

    runs = run_suites(["reference", "template"], jobs=2, on_progress=kill_reference, **FAST)
    died = (r"conformance of reference: grading process killed by signal 9 \(SIGKILL\) "
            r"before it sent a report")
    with closing(runs), pytest.raises(ConformanceError, match=died):
        list(runs)
    assert _graders() == []


def test_leaving_the_loop_early_stops_the_other_runs():
    with closing(run_suites(["template", "reference"], jobs=2, levels=["L0", "L1"],
                            profile="ci")) as runs:
        name, _ = next(runs)
        assert name == "template"
        # reference's L1 takes far longer than template's
        (running,) = [p for p in _graders() if p.name.endswith("-reference")]
    assert running.exitcode == -signal.SIGTERM and _graders() == []


def test_jobs_must_be_positive():
    with pytest.raises(PolyhalError, match="jobs=0 must be at least 1"):
        next(run_suites(["template"], jobs=0))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_the_cli_prints_each_adapter_in_the_order_named(tmp_path, jobs):
    result = subprocess.run(
        [sys.executable, "-m", "polyhal.cli", "conformance", "reference", "template",
         "--level", "L0", "--profile", "ci", "--jobs", jobs, "--quiet", "--report", "out"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts = [line.split(":")[0] for line in result.stdout.splitlines()
                if ": PASS" in line or ": FAIL" in line]
    assert verdicts == ["reference", "template"]
    for name in ("reference", "template"):
        assert (tmp_path / "out" / name / "report.json").is_file()


def test_the_main_job_names_each_built_in_adapter_it_leaves_out_and_why(tmp_path):
    from polyhal.hal import get_adapter

    gpu_devices = get_adapter("gpu").probe()
    result = subprocess.run(
        [sys.executable, "-m", "polyhal.cli", "conformance", "--level", "L0", "--profile",
         "ci", "--quiet", "--width", "400"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False,
        env={**os.environ, "POLYHAL_ADAPTERS": "template,gpu"})
    assert result.returncode == 0, result.stdout + result.stderr
    if any(d.available for d in gpu_devices):  # a machine with a GPU grades it
        assert "gpu: PASS" in result.stdout
    else:
        why = gpu_devices[0].reason
        assert why and f"adapter gpu left out: {why}\n" in result.stdout
    assert "template: PASS" in result.stdout


def test_the_cli_refuses_jobs_that_are_not_a_positive_number(tmp_path):
    result = subprocess.run([sys.executable, "-m", "polyhal.cli", "conformance", "--jobs", "0"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120,
                            check=False)
    assert result.returncode == 2 and "'0' must be a positive number of adapters" in result.stderr


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in map(int, task.read_text().split()):
            found |= {child} | _descendants(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ctrl_c_stops_every_run_and_says_so(tmp_path):
    if not Path("/proc/self/task").is_dir():
        pytest.skip("no /proc here")
    cli = subprocess.Popen([sys.executable, "-m", "polyhal.cli", "conformance", "cpu",
                            "reference", "--profile", "ci", "--quiet"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    started: set[int] = set()
    while len(started) < 5 and time.monotonic() < deadline:  # 2 graders, their 2 devices
        started |= _descendants(cli.pid)                       # and a resource tracker
        time.sleep(0.2)
    assert len(started) >= 5, started
    cli.send_signal(signal.SIGINT)
    _, err = cli.communicate(timeout=60)
    assert cli.returncode == 130 and err.strip().endswith("polyhal: error: interrupted")
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while any(map(_alive, started)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, started))


def test_with_one_job_every_adapter_is_graded_here():
    seen = []

    def on_progress(name, done, total, failures):
        assert _graders() == []
        seen.append((name, done, total))

    got = [name for name, _ in run_suites(["template", "reference"], jobs=1,
                                          on_progress=on_progress, **FAST)]
    assert got == ["template", "reference"]
    assert seen[0] == ("template", 0, seen[0][2]) and seen[-1][0] == "reference"
    assert seen[-1][1] == seen[-1][2]


def test_an_adapter_named_twice_is_refused():
    with pytest.raises(PolyhalError, match=r"adapter\(s\) template given twice"):
        next(run_suites(["template", "reference", "template"], jobs=2))


def test_compare_runs_an_adapter_named_on_both_sides_once(monkeypatch):
    from polyhal.conformance import parallel
    from polyhal.conformance.compare import resolve_sides

    calls = []
    monkeypatch.setattr(parallel, "run_suite",
                        lambda name, **kw: calls.append(name) or run_suite(name, **kw))
    a, b = resolve_sides(["template", "template"], ["L0"], "ci", jobs=2)
    assert calls == ["template"] and a == b


class RegisteredHere(TemplateAdapter):
    """An adapter registered at run time, not through an entry point."""

    name = "registered-here"


def test_an_adapter_registered_at_run_time_is_graded_in_its_process():
    register(RegisteredHere)
    try:
        got = dict(run_suites(["registered-here", "template"], jobs=2, **FAST))
    finally:
        unregister("registered-here")
    assert got["registered-here"].ok
    assert got["registered-here"].summary == got["template"].summary
