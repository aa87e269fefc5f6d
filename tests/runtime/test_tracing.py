"""Profiling: a mixed-device run as Chrome trace JSON, checked against its schema."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from importlib import resources

import jsonschema
import numpy as np
import pytest

import polyhal
import polyhal.cli
from polyhal import ops
from polyhal.adapters.template import TemplateAdapter, TemplateDevice
from polyhal.errors import DeviceError
from polyhal.hal import Buffer, CompileOptions, Executable
from polyhal.hal.contract import Profile
from polyhal.ir import Graph, GraphBuilder, f32
from polyhal.runtime import tracing

SCHEMA = json.loads((resources.files("polyhal.runtime") / "chrome_trace.schema.json")
                    .read_text())
X = np.array([[-1.0, 0.5, 2.0], [3.0, -2.0, 0.0]], np.float32)


def mixed_graph() -> Graph:
    """relu -> tanh -> * 2: the template lacks tanh, so three partitions."""
    g = GraphBuilder("mixed")
    h = ops.relu(g.input("x", f32["batch", 3]))
    g.output(ops.tanh(h) * 2.0, h, names=["y", "h"])
    return g.build()


def valid(doc: dict) -> dict:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return doc


def saved(trace: tracing.Trace, folder) -> dict:
    return valid(json.loads(trace.save(folder / "trace.json").read_text()))


def of(doc: dict, ph: str, cat: str | None = None) -> list[dict]:
    return [e for e in doc["traceEvents"]
            if e["ph"] == ph and (cat is None or cat in e["cat"].split(","))]


def lanes(doc: dict) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in of(doc, "M") if e["name"] == "process_name"}


def assert_well_formed(doc: dict) -> None:
    """Named processes and threads; on each thread, spans are nested or disjoint."""
    names = lanes(doc)
    threads = {(e["pid"], e["tid"]) for e in of(doc, "M") if e["name"] == "thread_name"}
    timed = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    assert all(e["pid"] in names and (e["pid"], e["tid"]) in threads for e in timed)
    assert [e["ts"] for e in timed] == sorted(e["ts"] for e in timed)
    for thread in threads:
        spans = sorted(((round(e["ts"] * 1000), round(e["dur"] * 1000), e["name"])
                        for e in of(doc, "X") if (e["pid"], e["tid"]) == thread),
                       key=lambda span: (span[0], -span[1]))  # in nanoseconds, as Perfetto
        open_ends: list[int] = []
        for start, duration, name in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or start + duration <= open_ends[-1], f"{name} overlaps"
            open_ends.append(start + duration)


@pytest.mark.parametrize("breaks", [
    {"ts": -1.0}, {"dur": None}, {"ph": "B"}, {"pid": "cpu:0"}, {"extra": 1},
])
def test_the_schema_rejects_malformed_events(breaks):
    event = {"name": "n", "cat": "run", "ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 1.0,
             "args": {}}
    doc = {"traceEvents": [event], "displayTimeUnit": "ms", "otherData": {}}
    valid(doc)
    event.update(breaks)
    with pytest.raises(jsonschema.ValidationError):
        valid({**doc, "traceEvents": [{k: v for k, v in event.items() if v is not None}]})


def test_a_mixed_device_run_shows_compiles_transfers_and_fallbacks(tmp_path):
    before = time.perf_counter()
    with tracing.recording() as trace:
        compiled = polyhal.compile(mixed_graph(), device="template", fallback="reference")
        compiled(X)
        compiled(X)  # compiled once, run twice
    after = time.perf_counter()
    doc = saved(trace, tmp_path)
    assert_well_formed(doc)
    assert set(lanes(doc).values()) == {"host", "template:0", "reference:0"}
    names = lanes(doc)

    compiles = of(doc, "X", "compile")
    assert sorted(names[e["pid"]] for e in compiles) == ["host", "reference:0", "template:0",
                                                         "template:0"]
    runs = of(doc, "X", "run")
    assert [e["args"]["partition"] for e in runs] == [0, 1, 2] * 2
    for e in runs:
        fell_back = names[e["pid"]] == "reference:0"
        assert e["args"]["fallback"] is fell_back
        assert (e["cat"] == "run,fallback") is fell_back
    assert of(doc, "X", "fallback") == [e for e in runs if e["args"]["fallback"]]

    transfers = of(doc, "X", "transfer")
    assert all(e["args"]["bytes"] == X.nbytes for e in transfers)
    legs = {(e["name"], names[e["pid"]], e["args"]["from_device"], e["args"]["to_device"])
            for e in transfers}
    assert legs == {("upload x", "template:0", "host", "template:0"),
                    ("download h", "template:0", "template:0", "reference:0"),
                    ("upload h", "reference:0", "template:0", "reference:0"),
                    ("download tanh_2", "reference:0", "reference:0", "template:0"),
                    ("upload tanh_2", "template:0", "reference:0", "template:0"),
                    ("download y", "template:0", "template:0", "host"),
                    ("download h", "reference:0", "reference:0", "host")}
    assert len(transfers) == 2 * len(legs)

    spans = trace.spans()
    assert len(spans) == len(of(doc, "X"))
    assert all(before <= s.start <= s.end <= after for s in spans)
    assert trace.spans("fallback") == [s for s in trace.spans("run") if s.args["fallback"]]


class ProfilingExecutable(Executable):
    """The template's executable, with a device profile (or a failing one)."""

    def __init__(self, inner: Executable, fails: bool) -> None:
        self.inner, self.device, self.graph, self.fails = inner, inner.device, inner.graph, fails

    def run(self, inputs: Sequence[Buffer]) -> list[Buffer]:
        return self.inner.run(inputs)

    def profile(self) -> Profile:
        if self.fails:
            raise DeviceError("the profiler is gone")
        return Profile(nodes={n.name: 1.0 for n in self.graph.nodes},  # longer than the run
                       counters={"cycles": np.int64(42), "temperature": 41.5})


class ProfilingDevice(TemplateDevice):
    adapter = TemplateAdapter()
    index = 7

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails

    def compile(self, graph: Graph, options: CompileOptions) -> Executable:
        return ProfilingExecutable(super().compile(graph, options), self.fails)


def test_per_node_times_are_laid_out_within_the_run_and_counters_recorded(tmp_path):
    g = GraphBuilder("chain")
    g.output(ops.relu(g.input("x", f32[3]) * 2.0) + 1.0, name="y")
    graph = g.build()
    with tracing.recording() as trace:
        polyhal.compile(graph, device=ProfilingDevice())(X[0])
    doc = saved(trace, tmp_path)
    assert_well_formed(doc)
    [run] = of(doc, "X", "run")
    nodes = of(doc, "X", "node")
    assert [e["name"] for e in nodes] == [n.name for n in graph.nodes] and len(nodes) == 3
    assert all(e["args"]["seconds"] == 1.0 for e in nodes)
    assert run["ts"] <= nodes[0]["ts"] and nodes[-1]["ts"] + nodes[-1]["dur"] <= (
        run["ts"] + run["dur"])
    counters = {e["name"]: e["args"] for e in of(doc, "C")}
    assert counters == {"cycles": {"value": 42.0}, "temperature": {"value": 41.5}}
    assert {e["pid"] for e in [run, *nodes, *of(doc, "C")]} == {run["pid"]}


def test_a_failing_profile_is_a_fault_event_not_a_failed_run(tmp_path):
    g = GraphBuilder("one")
    g.output(ops.relu(g.input("x", f32[3])), name="y")
    with tracing.recording() as trace:
        out = polyhal.compile(g.build(), device=ProfilingDevice(fails=True))(X[0])
    np.testing.assert_array_equal(out["y"], np.maximum(X[0], 0))
    [fault] = of(saved(trace, tmp_path), "i", "fault")
    assert fault["args"]["error"] == "the profiler is gone" and fault["s"] == "t"


def test_an_isolated_run_is_traced_the_same_way(tmp_path):
    with tracing.recording() as trace:
        compiled = polyhal.compile(mixed_graph(), device="template", fallback="reference",
                                   isolate=True)
        compiled(X)
    doc = saved(trace, tmp_path)
    assert_well_formed(doc)
    assert len(of(doc, "X", "fallback")) == 1
    assert len(of(doc, "X", "transfer")) == 7


def test_nothing_is_recorded_without_a_recording():
    assert not tracing.active()
    with tracing.span("idle", "run", "host", given=1) as args:
        args["added"] = 2
    assert args == {"given": 1, "added": 2}
    tracing.instant("idle", "fault", "host")
    tracing.add_span("idle", "node", "host", 0.0, 1.0)
    with tracing.recording() as trace:
        assert tracing.active()
    assert not tracing.active()
    assert trace.spans() == [] and of(trace.to_chrome(), "i") == []


def test_concurrent_recordings_each_get_every_event_from_every_thread():
    def work() -> None:
        with tracing.span("work", "run", "cpu:0", step=1):
            tracing.instant("tick", "queue", "cpu:0")

    with tracing.recording() as outer:
        with tracing.recording() as inner:
            worker = threading.Thread(target=work, name="worker")
            worker.start()
            worker.join()
        work()
    assert [s.thread for s in inner.spans()] == ["worker"]
    assert [s.thread for s in outer.spans()] == ["worker", "MainThread"]
    assert inner.spans() == outer.spans()[:1]
    threads = {e["args"]["name"] for e in of(outer.to_chrome(), "M")
               if e["name"] == "thread_name"}
    assert threads == {"worker", "MainThread"}
    assert len(of(outer.to_chrome(), "i", "queue")) == 2


def test_exceptions_leaving_a_span_are_recorded():
    with tracing.recording() as trace, pytest.raises(ValueError), tracing.span(
            "boom", "run", "host"):
        raise ValueError("no")
    assert trace.spans()[0].args == {"error": "ValueError"}


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")


def test_odd_args_are_made_json_safe(tmp_path):
    with tracing.recording() as trace:
        tracing.instant("odd", "run", "host", thread="t", n=np.int64(3), f=np.float32(0.5),
                        b=np.bool_(True), nan=float("nan"), array=np.arange(3), obj=object(),
                        bad=Unprintable(), nested={1: [np.float64(2.0), {"deep": (1, 2)}]},
                        path=tmp_path)
        tracing.instant("levels", "counter", "cpu:0", level=3, flag=True, label="text")
        trace.add_span("explicit", "node", "cpu:0", 5.0, 4.0)  # end before start: zero length
    doc = saved(trace, tmp_path)
    [odd] = of(doc, "i")
    args = odd["args"]
    assert (args["n"], args["f"], args["b"], args["nan"]) == (3, 0.5, True, "nan")
    assert args["array"] == "[0 1 2]" and args["obj"].startswith("<object object")
    assert args["bad"] == "<Unprintable>" and args["path"] == str(tmp_path)
    assert args["nested"] == {"1": [2.0, {"deep": [1, 2]}]}
    assert of(doc, "C")[0]["args"] == {"level": 3.0, "flag": 1.0}
    assert of(doc, "X")[0]["dur"] == 0


def write_model(folder) -> list[str]:
    polyhal.save(mixed_graph(), folder / "m.json")
    np.save(folder / "x.npy", X)
    return ["run", str(folder / "m.json"), "--device", "template", "--fallback", "reference",
            "--input", f"x={folder / 'x.npy'}"]


def test_cli_run_writes_a_profile(tmp_path, capsys):
    path = tmp_path / "trace.json"
    assert polyhal.cli.main([*write_model(tmp_path), "--profile", str(path)]) == 0
    assert f"profile: wrote {path}" in capsys.readouterr().out
    doc = valid(json.loads(path.read_text()))
    assert of(doc, "X", "compile") and of(doc, "X", "fallback") and of(doc, "X", "transfer")


@pytest.mark.parametrize(("where", "why"), [
    ("missing/trace.json", "missing does not exist"),
    ("file.txt/trace.json", "file.txt is not a folder"),
    (".", "exists and is not a file")])
def test_cli_profile_that_cannot_be_written_is_a_clear_error(tmp_path, capsys, where, why):
    (tmp_path / "file.txt").write_text("")
    path = tmp_path / where
    assert polyhal.cli.main([*write_model(tmp_path), "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"polyhal: error: --profile {path}: ") and why in err
    assert "Traceback" not in err
