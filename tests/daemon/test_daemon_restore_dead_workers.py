"""A running job whose workers died while still registered (killed on the executor's simulated backend,
in process on a manual clock, as test_daemon_vanished_target.py), not a fresh cluster.

The restore (the plan in force applied again) planned a reboot of the job's resident-state holder
that read its state from the dead worker: every apply rolled back (``WorkerLost``) and the restore
was retried with back-off for ever, the job ``running`` with no worker. Now the executor reaps the
dead workers and creates new ones in their place: the restore applies once, every component of the
job runs again, and the job completes. A job whose trainer had committed optimizer steps has lost
its training state with its ranks (the executor keeps no checkpoint of a running trainer): it fails,
naming why, instead of being restored to a state it never had."""

from __future__ import annotations

import pytest

from planner.daemon.adapters import executor as ex
from planner.daemon.lifecycle import JobState
from tests.daemon.test_daemon_cycle import World
from tests.daemon.test_daemon_vanished_target import _wire

if ex.available() is not None:
    pytest.skip(f"the executor cannot apply here: {ex.available()}", allow_module_level=True)

from executor.backends.base import observe  # noqa: E402


def _running(tmp_path):
    w = World(tmp_path)
    w.submit("a", duration_s=600.0)
    w.submit("b", duration_s=6000.0)
    _wire(w, tmp_path, "executor")
    assert w.cycle(0.0).apply == "ok" and w.state("a") is JobState.RUNNING and w.state("b") is JobState.RUNNING
    return w


def _components(w, job):
    st = observe(w.sim.backend)
    return {c.name: c for c in st.components.values() if c.job == job}


def _kill_job(w, job):
    b = w.sim.backend
    ids = [wk.id for c in _components(w, job).values() for wk in c.workers]
    assert ids
    for wid in ids:
        b.kill(wid)
    w.sim._save()
    return ids


def _restores(w):
    return w.store.decisions(0, 1000, "restore")


def test_a_running_job_whose_workers_died_is_restored_once_runs_again_and_completes(tmp_path):
    w = _running(tmp_path)
    others = {n: [x.id for x in c.workers] for n, c in _components(w, "b").items()}
    dead = _kill_job(w, "a")
    rep = w.cycle(60.0)
    (dec,) = _restores(w)
    assert dec["outcome"] == "applied" and dec["jobs"] == ["a"], dec
    assert rep.apply == "ok", rep
    assert "every worker was dead" in " ".join(dec["reasons"]), dec["reasons"]
    comps = _components(w, "a")
    assert {n.split("/", 1)[1] for n in comps} >= {"trainer", "rollout"}
    for name, c in comps.items():
        live = c.live_workers()
        assert live and all(x.status == "running" and x.id not in dead for x in live), (name, live)
    assert {n: [x.id for x in c.workers] for n, c in _components(w, "b").items()} == others, "the other job was not touched"
    assert w.sim.missing(w.loop.current()[1]) == {}
    t = 60.0
    while w.state("a") is JobState.RUNNING and t < 3000.0:
        t += 60.0
        w.cycle(t)
    assert w.state("a") is JobState.COMPLETED, w.store.get_job("a").reason
    assert len(_restores(w)) == 1, "restored once"
    assert w.state("b") is JobState.RUNNING


def test_a_running_job_whose_trained_trainer_died_fails_naming_why_and_is_not_retried(tmp_path):
    w = _running(tmp_path)
    assert all(w.sim.backend.train_step("a/trainer", 0))  # its ranks hold state no checkpoint keeps
    w.sim._save()
    _kill_job(w, "a")
    rep = w.cycle(60.0)
    assert rep.apply == "ok", rep
    r = w.store.get_job("a")
    assert r.state is JobState.FAILED, (r.state, r.reason)
    assert "training state" in r.reason and "committed 1 optimizer step(s)" in r.reason and "a/trainer" in r.reason, r.reason
    for t in (120.0, 180.0, 300.0):
        w.cycle(t)
    assert _restores(w) == [], "nothing to restore it to: not retried"
    (dep,) = [d for d in w.store.decisions(0, 1000, "departure") if "a" in d["jobs"]]
    assert dep["outcome"] == "applied" and "training state" in " ".join(dep["reasons"]), dep
    assert not _components(w, "a") or all(not c.live_workers() for c in _components(w, "a").values()), "reaped"
    assert w.state("b") is JobState.RUNNING and w.sim.backend.leaks() == []


@pytest.mark.parametrize("component, n", [("a/reference", 1), ("a/resident-rollout", 1), ("a/rollout", 2), ("a/trainer", 1)])
def test_a_running_job_that_lost_some_workers_is_restored_once(tmp_path, component, n):
    """(A job that still ran a trainer rank was not noticed: its dead reference engine, resident-state
    holder, engines or rank stayed dead until an apply touched it, and that apply then rolled back.)"""
    w = _running(tmp_path)
    killed = sorted(x.id for x in _components(w, "a")[component].workers)[:n]
    for wid in killed:
        w.sim.backend.kill(wid)
    w.sim._save()
    assert w.cycle(60.0).apply == "ok"
    (dec,) = _restores(w)
    assert dec["outcome"] == "applied" and dec["jobs"] == ["a"] and component in " ".join(dec["reasons"]), dec
    for name, c in _components(w, "a").items():
        live = c.live_workers()
        assert live and all(x.status == "running" and x.id not in killed for x in live), (name, live)
    for t in (120.0, 180.0, 240.0):
        w.cycle(t)
    assert len(_restores(w)) == 1 and w.state("a") is JobState.RUNNING and w.sim.backend.leaks() == []


def test_a_restore_interrupted_mid_apply_is_resumed_and_the_job_runs_again(tmp_path):
    """(SIGTERM after a few of the restore's steps, the dead workers of some components reaped: the
    next start resumes the journaled steps on an executor built again from its files.)"""
    w = _running(tmp_path)
    dead = _kill_job(w, "a")
    calls = {"n": 0}
    real = w.loop.stop.is_set

    def stop_after_three_steps():
        calls["n"] += 1
        return calls["n"] > 3

    w.loop.stop.is_set = stop_after_three_steps
    assert w.cycle(60.0).apply == "interrupted"
    w.loop.stop.is_set = real
    for t in (120.0, 180.0, 240.0):
        w.cycle(t)
    w.sim = w.loop.executor  # (the loop built it again from its files)
    assert [d["outcome"] for d in _restores(w)] == ["applied"], _restores(w)
    for name, c in _components(w, "a").items():
        live = c.live_workers()
        assert live and all(x.status == "running" and x.id not in dead for x in live), (name, live)
    assert w.sim.backend.leaks() == [] and w.state("a") is JobState.RUNNING
