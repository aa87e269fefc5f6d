"""A Session across two Ray workers passes the core-domain L2 conformance graphs."""

from __future__ import annotations

from polyhal.conformance.execute import grade
from polyhal.conformance.levels import l2
from polyhal.conformance.models import MODELS
from polyhal.conformance.profiles import get_profile
from polyhal.hal import open_device
from polyhal.runtime import Session


def test_a_session_over_two_ray_workers_passes_the_core_l2_graphs(ray_instance):
    with open_device("reference") as reference:
        caps = reference.capabilities
    cases = [c for c in l2.generate(caps, get_profile("ci")) if c.op in MODELS]
    assert {c.op for c in cases} == set(MODELS)  # the MLP, CNN and attention block
    # micro_batch=1: every row of a batch is a micro-batch, so both workers share each call
    with Session(["cpu", "reference"], host="ray", micro_batch=1, fallback=None,
                 timeout=60) as session:
        pids = {session._lanes[i].device.inner.worker_stats()["pid"] for i in range(2)}
        for case in cases:
            assert case.graph is not None and case.tolerance is not None
            outputs = session.compile(case.graph)(*case.inputs)
            result = grade(list(outputs.values()), case.expected, case.tolerance)
            assert result.ok, f"{case.id}: {result.message}"
        health = session.health()
        stats = session.stats
    assert len(pids) == 2 and ray_instance.is_initialized()
    assert health["cpu:0"].completed > 0 and health["reference:0"].completed > 0
    assert stats.failed == 0 and stats.micro_batches == sum(len(c.inputs[0]) for c in cases)
