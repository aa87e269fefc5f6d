"""``next_ops``: unclaimed ops ranked by the L1 cases claiming them would unlock."""

from __future__ import annotations

from polyhal.conformance.coverage import next_ops
from polyhal.conformance.runner import generate_cases
from polyhal.hal import Capabilities, open_device


def test_the_ranking_counts_the_cases_a_claim_really_adds():
    with open_device("template") as device:
        caps = device.capabilities
    ranked = next_ops(caps, limit=5)
    assert len(ranked) == 5
    assert all(op not in caps.ops for op, _ in ranked)
    assert [c for _, c in ranked] == sorted((c for _, c in ranked), reverse=True)
    op, count = ranked[0]
    claimed = Capabilities(ops={**{k: sorted(d.value for d in v) for k, v in caps.ops.items()},
                                op: ["float32", "float64"]}, dynamic_shapes=True)
    added = [c for c in generate_cases(claimed, ("L1",), "ci") if c.op == op]
    assert len(added) == count
