"""A reallocation is for its iteration: once the job's telemetry is of a later iteration, the plan's layout comes back.

Found driving the daemon on Ray by hand (2026-12-07): a committed reallocation (rollout 8 -> 2 engines, the trainer
6 -> 8 GPUs, log-prob inference 1 -> 6 as the rollout's tail thinned) stayed in force for every later iteration of
the job, whose next rollouts then ran on a quarter of their engines, until some other job's arrival or departure
changed the plan and its apply laid every job out as planned again. The simulator returns to the starting split at
each iteration boundary; the daemon now does too: the first snapshot of a later iteration makes a ``restore``
decision that applies the plan in force again for the job.

In process on a manual clock (as test_daemon_cycle.py), the executor on its simulated backend, the min-over-stages
planner deciding on the tail snapshots of test_daemon_realloc.py.
"""

from __future__ import annotations

import pytest

from planner.daemon.adapters import executor as ex
from planner.daemon.adapters.realloc import DynaRLReallocator
from planner.daemon.cycle import Loop
from planner.daemon.lifecycle import JobState
from planner.daemon.service import Options, _executor, check_job
from planner.schema.scenario import JobSpec
from tests.daemon.test_daemon_cycle import World
from tests.daemon.test_daemon_realloc import JOB, snapshots, spec, state_of

pytestmark = pytest.mark.skipif(ex.available() is not None, reason=f"the executor cannot apply here: {ex.available()}")


def running_on_executor(tmp_path) -> World:
    """The tail job submitted to a loop on the executor's simulated backend with the DynaRL reallocator,
    after its first cycle (admitted and applied)."""
    w = World(tmp_path)
    w.sim = _executor(Options(state=tmp_path / "s.sqlite"), w.cluster, w.store)
    w.loop = Loop(w.store, w.cluster, w.placer, w.sim, w.clock, w.cfg, w.lease, w.metrics, reallocator=DynaRLReallocator(w.cluster))
    js = JobSpec.model_validate(spec())
    w.store.submit_job(JOB, js.model_dump(mode="json"), 0.0, 0.0, check_job(w.cluster, js))
    w.cycle(0.0)
    return w


def _layout(w) -> dict[str, dict[str, int]]:
    return {c["name"]: c["placement"] for c in w.sim.describe()["components"] if c["name"].startswith(JOB + "/")}


def _post(w, snaps: list[dict]) -> None:
    for s in snaps:
        w.store.add_telemetry(JOB, 0.0, s["time_s"], s["iteration"], s)


def test_the_planned_layout_comes_back_at_the_jobs_next_iteration(tmp_path):
    w = running_on_executor(tmp_path)
    assert w.state(JOB) is JobState.RUNNING
    planned = _layout(w)

    _post(w, snapshots(state_of(w.sim.describe())))  # iteration 3's thinning tail
    w.cycle(60.0)
    (d,) = w.decisions("realloc")
    assert d["outcome"] == "applied", d
    moved = _layout(w)
    assert moved != planned

    _post(w, snapshots(state_of(w.sim.describe()))[:1])  # still iteration 3: nothing comes back
    w.cycle(120.0)
    assert _layout(w) == moved and not w.decisions("restore")

    nxt = snapshots(state_of(w.sim.describe()))[0]
    nxt.update(iteration=4, time_s=2.0)
    _post(w, [nxt])
    w.cycle(180.0)
    (r,) = w.decisions("restore")
    assert r["outcome"] == "applied" and r["jobs"] == [JOB], r
    assert f"reallocated in iteration 3 (decision {d['id']})" in r["reasons"][0], r["reasons"]
    assert _layout(w) == planned
    assert w.store.get_kv("realloc_standing") == {}
    w.cycle(240.0)  # and once only
    assert len(w.decisions("restore")) == 1 and w.state(JOB) is JobState.RUNNING
    w.sim.close()


def test_a_refused_reallocation_restores_nothing_at_the_next_iteration(tmp_path):
    """A reallocation the executor refused (telemetry that names a component the executor does not run) moved
    nothing: the job's next iteration makes no restore decision."""
    w = running_on_executor(tmp_path)
    snaps = snapshots(state_of(w.sim.describe()))
    for s in snaps:  # the trainer under another name
        s["components"] = [dict(c, name="actor") if c["name"] == "trainer" else c for c in s["components"]]
        s["workers"] = [dict(x, component="actor") if x["component"] == "trainer" else x for x in s["workers"]]
    _post(w, snaps)
    w.cycle(60.0)
    (d,) = w.decisions("realloc")
    assert d["outcome"] == "failed" and "tail/actor does not run on this cluster" in d["reasons"][-1], d
    nxt = dict(snaps[0], iteration=4, time_s=2.0)
    _post(w, [nxt])
    w.cycle(120.0)
    assert not w.decisions("restore") and w.store.get_kv("realloc_standing", {}) == {}
    w.sim.close()


def test_snapshots_of_the_reallocated_layout_are_not_decided_on_once_an_apply_laid_the_job_out_again(tmp_path):
    """Another job's admission in the same cycle applies the plan, which lays the reallocated job out as planned
    again: its snapshots of this cycle name the workers before that apply, and are not decided on (they were: a
    `not-committed` row reasoned on engines the apply had removed)."""
    w = running_on_executor(tmp_path)
    planned = _layout(w)
    _post(w, snapshots(state_of(w.sim.describe())))
    w.cycle(60.0)
    assert [d["outcome"] for d in w.decisions("realloc")] == ["applied"]
    later = snapshots(state_of(w.sim.describe()))  # the reallocated layout, still iteration 3
    for s in later:
        s["time_s"] += 20.0
    _post(w, later)
    w.submit("b")  # its admission's apply lays the job out as planned again, in the same cycle
    w.cycle(120.0)
    assert [d["jobs"] for d in w.decisions("admit")][-1] == ["b"]
    assert _layout(w) == planned
    assert [d["outcome"] for d in w.decisions("realloc")] == ["applied"], w.decisions("realloc")
    w.sim.close()
