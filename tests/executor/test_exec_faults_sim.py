"""Fault injection on the sim backend: every fault kind at every step of every migration.

Cases: 3 migrations (workload, P2P, reboot) x 5 faults (kill the source, kill the destination,
kill the controller, fail the destination's start, freeze the source node) x every step of the
migration's unit x 3 points (before the step acts, in the middle, after it acted but before the
journal heard). The harness (:mod:`executor.faultlib`) checks every invariant after each.
"""

from __future__ import annotations

import os

import pytest

from executor import faultlib
from executor.backends.sim import SimBackend
from executor.faultlib import all_cases, run_case
from executor.workers.coordinator import Coordinator


def _backend():
    return SimBackend(faultlib.NODES, ticks_per_call=1)


# Default: every fault kind at every step of every migration, at a rotating point (about 70
# cases); RL_PLANNER_FULL_FAULTS=1 runs every point too (209 cases), as does
# `python -m executor.bench faults --full`.
FULL = os.environ.get("RL_PLANNER_FULL_FAULTS") == "1"
CASES = all_cases() if FULL else faultlib.rotating_cases()


def test_matrix_covers_every_fault_at_every_step_of_every_migration():
    got = {(c.migration, c.fault) for c in CASES}
    assert got == {(m, f) for m in faultlib.MIGRATIONS for f in faultlib.FAULT_KINDS}
    for m in faultlib.MIGRATIONS:
        steps = set(faultlib.unit_steps(m))
        for f in faultlib.FAULT_KINDS:
            covered = {(c.step_kind, c.nth) for c in CASES if c.migration == m and c.fault == f}
            want = {s for s in steps if s[0] == "create"} if f == "fail_destination_start" else steps
            assert covered == want, (m, f)
    points = {(c.fault, c.point) for c in CASES if c.fault != "fail_destination_start"}
    assert {p for _, p in points} == {"before", "mid", "after"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fault(case):
    out = run_case(case, _backend)
    assert out.fired, f"the fault never fired: {case.id}"
    assert out.problems == [], out
    assert out.requests == 60
    if case.fault == "freeze_node" and out.stale_attempts:
        assert out.stale_accepted == 0
    if case.fault == "kill_controller":
        assert out.resumed and out.status == "done"
    if case.fault == "fail_destination_start":
        assert out.status == "rolled_back" and out.layout == "old"


def test_harness_notices_accepted_stale_effects(monkeypatch):
    """Sanity of the harness: with fencing switched off, a thawed frozen rank's step is accepted."""
    monkeypatch.setattr(Coordinator, "_fence", lambda self, w, e, what: True)
    case = faultlib.Case("p2p", "freeze_node", "reshard", 0, "before")
    out = run_case(case, _backend)
    assert out.stale_accepted >= 1 and any("stale" in p for p in out.problems)


def test_harness_notices_a_corrupted_copy_and_the_apply_rolls_back(monkeypatch):
    from executor.migrations import reshard

    real = reshard.unpack

    def corrupt(buf, shards, pcs):
        real(buf, shards, pcs)
        first = next(iter(shards.values()))["param"]
        first.view(-1)[0] += 1.0

    monkeypatch.setattr(reshard, "unpack", corrupt)
    out = run_case(faultlib.Case("p2p", "kill_controller", "stop", 9, "after"), _backend)  # the fault never fires
    assert out.status == "rolled_back" and out.layout == "old" and out.problems == []
