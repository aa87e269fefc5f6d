"""Session: micro-batches over several devices, load balancing and fault recovery, on
real isolated workers and the fault-injecting simulator."""

from __future__ import annotations

import numpy as np
import pytest

import polyhal
from polyhal import ops
from polyhal.errors import DeviceError, InputBindingError, PolyhalError, UnsupportedError
from polyhal.ir import GraphBuilder, f32
from polyhal.runtime import Session
from polyhal.runtime.batching import BatchLayout


def mlp(features: int = 8, seed: int = 0) -> polyhal.Graph:
    rng = np.random.default_rng(seed)
    g = GraphBuilder("mlp")
    x = g.input("x", f32["batch", features])
    w = g.constant(rng.standard_normal((features, 4)).astype(np.float32), name="w")
    b = g.constant(rng.standard_normal(4).astype(np.float32), name="b")
    g.output(ops.relu(x @ w + b), name="y")
    return g.build()


def faulty(index: int, inner: str = "reference", **faults: object) -> tuple[str, dict]:
    return f"faulty:{index}", {"inner": inner, **faults}


def rows(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)


def test_a_call_is_split_into_micro_batches_and_reassembled_in_order():
    graph = mlp()
    x = rows(10)
    with Session([faulty(0), faulty(1)], micro_batch=3, timeout=30) as session:
        out = session.compile(graph)(x=x)
        assert session.stats.micro_batches == 4  # 3 + 3 + 3 + 1 rows
        assert session.stats.completed == 4
        health = session.health()
    # BLAS may round a 3-row product differently from a 10-row one: 1 ulp
    np.testing.assert_allclose(out["y"], polyhal.run(graph, x)["y"], rtol=1e-6, atol=1e-6)
    assert sum(h.completed for h in health.values()) == 4
    assert all(h.faults == 0 for h in health.values())


def test_a_thousand_requests_survive_faults_and_a_hanging_device():
    """Acceptance: 1,000 requests over three devices with a 10% fault rate and one
    device that hangs on every run: every result equals the reference, none is lost
    or duplicated."""
    graph = mlp()
    requests = [rows(2, seed) for seed in range(1000)]
    devices = [faulty(0, error_rate=0.09, crash_rate=0.01, seed=3),
               faulty(1, corrupt_rate=0.1, checksum=True, seed=4),
               faulty(2, hang_rate=1.0)]
    with Session(devices, timeout=2.0, probe_interval=0.2, fallback=None,
                 max_attempts=8) as session:
        compiled = session.compile(graph)
        futures = [compiled.submit(x=x) for x in requests]
        results = [f.result(timeout=300) for f in futures]
        stats, health = session.stats, session.health()
    for x, out in zip(requests, results, strict=True):
        np.testing.assert_array_equal(out["y"], polyhal.run(graph, x)["y"])
    assert stats.micro_batches == stats.completed == 1000
    assert stats.failed == 0
    assert sum(h.completed for h in health.values()) == 1000  # each ran exactly once
    assert health["faulty:2"].completed == 0 and health["faulty:2"].faults >= 1
    assert "timed out" in health["faulty:2"].last_error or "probe" in health["faulty:2"].last_error
    # faulty:0 and faulty:1 ran every micro-batch between them, ~1,100 runs with a 10%
    # fault rate each: ~110 faults, ~10 the standard deviation. How the runs split between
    # them depends on the load (a crash restarts a worker), so only their sum is counted.
    assert health["faulty:0"].faults + health["faulty:1"].faults >= 50
    assert stats.faults == sum(h.faults for h in health.values())
    assert stats.retries == stats.faults  # every fault put its micro-batch back in the queue
    # each micro-batch that faulted (at most 7 times) completed later, and recovered once
    assert stats.faults / 7 <= len(stats.recoveries) <= stats.faults
    assert stats.mean_recovery_seconds > 0


def test_a_micro_batch_fails_with_every_attempt_named_when_there_is_no_fallback():
    with Session([faulty(0, error_rate=1.0)], fallback=None, max_attempts=2,
                 probe_interval=0.01, timeout=30) as session:
        future = session.compile(mlp()).submit(x=rows(2))
        with pytest.raises(DeviceError, match=r"failed on 2 attempts:\n  faulty:0: .*injected"):
            future.result(timeout=60)
        assert session.stats.failed == 1 and session.stats.faults == 2


def test_the_fallback_takes_what_no_healthy_device_can():
    graph = mlp()
    x = rows(5)
    with Session([faulty(0, error_rate=1.0)], micro_batch=2, fallback="reference",
                 max_attempts=1, probe_interval=0.01, timeout=30) as session:
        out = session.compile(graph)(x=x)
        assert session.stats.fallbacks == 3
        assert session.health()["reference:0"].completed == 3
    np.testing.assert_allclose(out["y"], polyhal.run(graph, x)["y"], rtol=1e-6, atol=1e-6)


def test_a_faulted_device_is_probed_and_readmitted():
    graph = mlp()
    with Session([faulty(0, error_rate=0.5, seed=7)], micro_batch=1, fallback=None,
                 max_attempts=50, probe_interval=0.01, timeout=30) as session:
        session.compile(graph)(x=rows(12))
        health = session.health()["faulty:0"]
    assert health.faults >= 1 and health.probes >= health.faults
    assert health.completed == 12 and health.state == "healthy"


def _matmul_chain(features: int = 256, layers: int = 8) -> polyhal.Graph:
    # Heavy compute, light transfers: a run takes long enough that slowdown shows.
    rng = np.random.default_rng(0)
    g = GraphBuilder("chain")
    h = g.input("x", f32["batch", features])
    for layer in range(layers):
        w = rng.standard_normal((features, features)).astype(np.float32) / features ** 0.5
        h = ops.tanh(h @ g.constant(w, name=f"w{layer}"))
    g.output(h, name="y")
    return g.build()


def test_dynamic_balancing_gives_a_slow_device_less_work_and_static_deals_evenly():
    graph = _matmul_chain()
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    for schedule in ("dynamic", "static"):
        devices = [faulty(0), faulty(1, slowdown=30.0)]
        with Session(devices, micro_batch=4, fallback=None, schedule=schedule,
                     timeout=30) as session:
            compiled = session.compile(graph)
            compiled(x=x)  # compiles on both devices: not what is measured
            before = session.health()
            compiled(x=x)
            after = session.health()
        fast, slow = (after[name].completed - before[name].completed
                      for name in ("faulty:0", "faulty:1"))
        if schedule == "static":
            assert fast == slow == 8
        else:
            assert fast > 2 * slow and fast + slow == 16


def test_a_device_that_cannot_run_the_graph_leaves_it_to_the_others():
    g = GraphBuilder("needs-tanh")
    x = g.input("x", f32["batch", 3])
    g.output(ops.tanh(ops.relu(x)), name="y")
    graph = g.build()
    data = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    with Session(["template", faulty(0)], micro_batch=1, fallback=None, timeout=30) as session:
        out = session.compile(graph)(x=data)
        health = session.health()
    assert health["template:0"].completed == 0 and health["faulty:0"].completed == 4
    np.testing.assert_allclose(out["y"], polyhal.run(graph, data)["y"])
    with Session(["template"], fallback=None, timeout=30) as session, \
            pytest.raises(UnsupportedError, match="no device of the session can run"):
        session.compile(graph)(x=data)


def test_a_graph_whose_outputs_lack_the_batch_axis_runs_whole():
    g = GraphBuilder("total")
    x = g.input("x", f32["batch", 3])
    g.output(ops.reduce_sum(x, keepdims=0), name="s")
    graph = g.build()
    layout = BatchLayout.of(graph)
    assert not layout.splittable and "output 's'" in layout.reason
    data = np.ones((7, 3), np.float32)
    with Session([faulty(0)], micro_batch=2, timeout=30) as session:
        assert float(session.run(graph, x=data)["s"]) == 21.0
        assert session.stats.micro_batches == 1


def test_bad_arguments_and_inputs_are_named():
    with pytest.raises(PolyhalError, match="non-empty list"):
        Session([])
    with pytest.raises(PolyhalError, match="micro_batch=0"):
        Session(["reference"], micro_batch=0)
    with pytest.raises(PolyhalError, match="schedule='round'"):
        Session(["reference"], schedule="round")
    with pytest.raises(PolyhalError, match="a device must be an address"):
        Session([42])
    with pytest.raises(PolyhalError, match="bad device address"):
        Session(["not an address"])
    with pytest.raises(PolyhalError, match="listed twice"):
        Session(["reference", "reference:0"])
    with Session(["reference"], timeout=30) as session:
        compiled = session.compile(mlp())
        with pytest.raises(InputBindingError, match="missing input"):
            compiled.submit()
        with pytest.raises(InputBindingError, match="dtype float64"):
            compiled.submit(x=np.ones((2, 8)))
    with pytest.raises(PolyhalError, match="closed"):
        compiled.submit(x=rows(2))


def test_a_session_trace_shows_runs_transfers_faults_recoveries_and_fallbacks(tmp_path):
    import json

    import jsonschema

    from polyhal.runtime import tracing
    from tests.runtime.test_tracing import SCHEMA

    graph = mlp()
    devices = [faulty(0, error_at=[0]), faulty(1, error_rate=1.0)]
    with tracing.recording() as trace, Session(devices, micro_batch=2, max_attempts=1,
                                               probe_interval=0.01, timeout=30) as session:
        session.compile(graph)(x=rows(6))
        stats = session.stats
    doc = json.loads(trace.save(tmp_path / "session.json").read_text())
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    lanes = {e.lane for e in trace.spans("run")}
    assert {"faulty:0", "reference:0"} <= lanes
    assert trace.spans("transfer") and trace.spans("recovery")  # uploads, probes
    faults = [e for e in trace._sorted() if "fault" in e.categories]
    assert len(faults) == stats.faults >= 1  # faulty:0 fails its first run, always
    recovered = [e for e in trace._sorted() if e.name == "recovered"]
    assert len(recovered) == len(stats.recoveries)
    assert stats.fallbacks == len([e for e in trace.spans("fallback") if "#" in e.name]) >= 1


def test_waiting_work_fails_once_no_device_has_been_healthy_for_give_up_after():
    # The worker cannot even start (its inner adapter cannot be imported): every probe
    # fails, and without a fallback the queued call must not wait forever.
    broken = ("faulty:0", {"inner_adapter": "no.such.module:Adapter"})
    with Session([broken], fallback=None, give_up_after=0.5, probe_interval=0.05,
                 max_attempts=100, timeout=30) as session:
        future = session.compile(mlp()).submit(x=rows(2))
        with pytest.raises(DeviceError, match=r"no device of the session has been healthy "
                                              r"for 0\.5 s: faulty:0: probe: .*cannot import"):
            future.result(timeout=60)
        assert session.health()["faulty:0"].state == "unhealthy"
