"""Probe 49: a plan applied to a saved simulated cluster may not change the cluster's nodes.

The plan's (or its scenario's) nodes make a *fresh* simulated cluster. Applied over a saved one they
replaced its nodes wholesale: a plan made for nodes of 16 GPUs ran 16 GPUs' workers on the saved
8-GPU node, a plan naming nodes the cluster lacks conjured them (and dropped the saved nodes it did
not name, with their workers). Now such a plan is refused (exit 2) before any step.
"""

from __future__ import annotations

import sqlite3


from tests.executor.helpers import write_target
from tests.conftest import run_cli


def _target(tmp_path, name, nodes, placement):
    body = {"nodes": nodes,
            "components": [{"name": "job/rollout", "role": "rollout", "gpu_type": "H100", "placement": placement,
                            "dram_gb_per_worker": 4}]}
    return write_target(tmp_path / name, body)


def _args(tmp_path):
    return ["--journal", str(tmp_path / "j.db"), "--sim-state", str(tmp_path / "sim.sqlite")]


H100 = {"name": "h100-0", "gpu_type": "H100", "gpus": 8, "dram_gb": 512}


def _applies(tmp_path):
    return sqlite3.connect(tmp_path / "j.db").execute("SELECT plan_name, status FROM applies ORDER BY id").fetchall()


def test_plan_for_bigger_nodes_is_refused_on_a_saved_cluster(tmp_path):
    a = _args(tmp_path)
    r = run_cli("apply", str(_target(tmp_path, "small.yaml", [H100], {"h100-0": 4})), *a)
    assert r.returncode == 0, r.stderr
    before = (tmp_path / "sim.sqlite").read_bytes()
    big = _target(tmp_path, "big.yaml", [dict(H100, gpus=16)], {"h100-0": 12})
    r = run_cli("apply", str(big), *a)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert "h100-0: the plan has H100 x16, 512 GB; the cluster has H100 x8, 512 GB" in r.stderr
    assert (tmp_path / "sim.sqlite").read_bytes() == before
    assert _applies(tmp_path) == [("small.yaml", "done")]
    r = run_cli("status", *a, "--json")
    assert r.returncode == 0, r.stderr
    assert "\"gpus\": 8" in r.stdout and "\"gpus\": 16" not in r.stdout


def test_plan_naming_nodes_the_cluster_lacks_is_refused(tmp_path):
    a = _args(tmp_path)
    r = run_cli("apply", str(_target(tmp_path, "small.yaml", [H100], {"h100-0": 4})), *a)
    assert r.returncode == 0, r.stderr
    ghost = _target(tmp_path, "ghost.yaml", [dict(H100, name="ghost-0")], {"ghost-0": 4})
    r = run_cli("apply", str(ghost), *a, "--allow-stop-all")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "ghost-0 (H100 x8, 512 GB): not in the cluster" in r.stderr
    assert _applies(tmp_path) == [("small.yaml", "done")]
    # the same plan nodes as the cluster's: applied (a plan need not name every node)
    r = run_cli("apply", str(_target(tmp_path, "more.yaml", [H100], {"h100-0": 6})), *a)
    assert r.returncode == 0, r.stderr


def test_an_apply_planned_before_another_apply_changed_the_cluster_is_refused(tmp_path):
    """Two appliers on one simulated cluster: B reads the cluster and plans; A applies (holding the
    journal's lock) meanwhile; B then takes the free lock. B's steps were planned against the cluster
    before A's change: they were carried out on B's old copy and saved over A's work (the trainer's
    records back at A's old ranks, whose rows A had deleted; A's new ranks unregistered). Refused now,
    nothing done; B planning again applies on top of A's change."""
    import pytest

    pytest.importorskip("torch")
    from executor.backends.base import observe
    from executor.backends.sim import SimBackend
    from executor.controller import Executor
    from executor.diff import diff
    from executor.faultlib import NODES, TRAINER, base_body, migration_body, target
    from executor.journal import Journal
    from planner.errors import UserError

    st, jp = tmp_path / "sim.sqlite", tmp_path / "j.db"
    a = SimBackend(NODES, state_path=st, ticks_per_call=1)
    assert Executor(a, Journal(jp)).apply(diff(observe(a), target(base_body())).steps, "base").status == "done"
    b = SimBackend([], state_path=st, ticks_per_call=1)  # apply B reads the cluster and plans a workload move
    steps_b = diff(observe(b), target(migration_body("workload"))).steps
    a2 = SimBackend([], state_path=st, ticks_per_call=1)  # apply A reshapes the trainer meanwhile
    assert Executor(a2, Journal(jp)).apply(diff(observe(a2), target(migration_body("p2p"))).steps, "p2p").status == "done"
    with pytest.raises(UserError, match="changed after this apply read it"):
        Executor(b, Journal(jp)).apply(steps_b, "w")
    now = SimBackend([], state_path=st, ticks_per_call=1)
    recs = [r for r in now.coord("records") if r["component"] == TRAINER]
    assert sorted(r["id"] for r in recs) == sorted(w for w in now.workers if w.startswith("job.trainer."))
    assert {r["generation"] for r in recs} == {2}
    # planned again against the cluster as it is now (B's target has the trainer at its base layout: it moves back)
    assert Executor(b, Journal(jp)).apply(diff(observe(b), target(migration_body("workload"))).steps, "w").status == "done"
    now = SimBackend([], state_path=st, ticks_per_call=1)
    assert not diff(observe(now), target(migration_body("workload"))).steps
    assert sorted(r["id"] for r in now.coord("records")) == sorted(now.workers)


def test_a_controller_whose_cluster_another_journal_s_apply_changed_stops_without_writing(tmp_path):
    """Two applies on one simulated cluster with different journals (the journal's lock does not
    see the other): B runs while A is between steps. A then saved its old view over B's work (in the
    CLI: A said 'applied' with steps of its plan left undone and workers declared dead). Now A's next
    save finds the file changed since A read it and A stops (Fenced) without writing."""
    import pytest

    pytest.importorskip("torch")
    from executor.backends.base import observe
    from executor.backends.sim import SimBackend
    from executor.controller import Executor
    from executor.diff import diff
    from executor.faultlib import NODES, base_body, migration_body, target
    from executor.journal import Fenced, Journal

    st = tmp_path / "sim.sqlite"
    a = SimBackend(NODES, state_path=st, ticks_per_call=1)
    assert Executor(a, Journal(tmp_path / "a.db")).apply(diff(observe(a), target(base_body())).steps, "base").status == "done"
    ran = []

    def b_runs_now(step, status, *rest):
        if status == "done" and not ran:
            ran.append(step.id)
            b = SimBackend([], state_path=st, ticks_per_call=1)
            Executor(b, Journal(tmp_path / "b.db")).apply(diff(observe(b), target(migration_body("workload"))).steps, "w")

    with pytest.raises(Fenced, match="changed by another apply"):
        Executor(a, Journal(tmp_path / "a.db"), on_step=b_runs_now).apply(diff(observe(a), target(migration_body("workload"))).steps, "w")
    assert ran
    now = SimBackend([], state_path=st, ticks_per_call=1)
    assert sorted(r["id"] for r in now.coord("records")) == sorted(now.workers)  # as B left it: nothing of A's old view


def test_a_load_reads_one_save_while_another_process_saves(tmp_path, monkeypatch):
    """SimBackend._load read the world, the workers and the stamp in separate autocommit reads: a
    save by another process in between gave a torn copy (the world of one save, the stamp of the
    next), which then passed for current and was written back over the newer save. The load is
    one read transaction now: content and stamp of the same save."""
    import pytest

    pytest.importorskip("torch")
    import executor.backends.sim as sim
    from executor.backends.base import observe
    from executor.controller import Executor
    from executor.diff import diff
    from executor.faultlib import NODES, base_body, migration_body, target
    from executor.journal import Journal

    st = tmp_path / "sim.sqlite"
    a = sim.SimBackend(NODES, state_path=st, ticks_per_call=1)
    assert Executor(a, Journal(tmp_path / "a.db")).apply(diff(observe(a), target(base_body())).steps, "base").status == "done"
    old_records = sorted(r["id"] for r in a.coord("records"))
    real = sim.check_worker
    saved = []

    def another_process_saves_now(*args, **kw):
        if not saved:
            saved.append(1)
            o = sim.SimBackend([], state_path=st, ticks_per_call=1)
            Executor(o, Journal(tmp_path / "o.db")).apply(diff(observe(o), target(migration_body("workload"))).steps, "w")
        return real(*args, **kw)

    monkeypatch.setattr(sim, "check_worker", another_process_saves_now)
    b = sim.SimBackend([], state_path=st, ticks_per_call=1)
    monkeypatch.setattr(sim, "check_worker", real)
    assert saved
    assert sorted(r["id"] for r in b.coord("records")) == old_records  # the save it started reading
    assert b.refresh()  # its stamp is that save's: the newer one is seen, and loaded
    assert sorted(r["id"] for r in b.coord("records")) == sorted(b.workers) != old_records
