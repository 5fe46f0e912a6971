"""Recovery that does not need the journal: a controller killed at every step of a P2P reshard,
the journal lost, and the cluster itself says how to end all-old or all-new, bit for bit.

Also: the journal's default place is tied to the cluster, a missing cluster file with a running
journal is refused, and the journal lock and the daemon's lease share one liveness rule.
"""

from __future__ import annotations

import subprocess
import time

import pytest

torch = pytest.importorskip("torch")

from executor import router  # noqa: E402
from executor.backends.base import observe  # noqa: E402
from executor.backends.sim import SimBackend  # noqa: E402
from executor.controller import Executor, reap  # noqa: E402
from executor.diff import diff  # noqa: E402
from executor.faultlib import NODES, ROLLOUT, TRAINER, base_body, full_state, migration_body, same_state, target, unit_steps  # noqa: E402
from executor.faults import ControllerCrash, Fault, FaultPlan  # noqa: E402
from executor.journal import Journal  # noqa: E402
from executor.recover import settle  # noqa: E402
from executor.workers.engine import expected_output  # noqa: E402

import os  # noqa: E402
from tests.executor.helpers import write_target  # noqa: E402

POINTS = ("before", "mid", "after")
# Every step of the P2P unit; by default one point per step, rotating (each point hit), all three with RL_PLANNER_FULL_FAULTS=1.
CASES = [(k, n, p) for i, (k, n) in enumerate(unit_steps("p2p")) for p in POINTS
         if os.environ.get("RL_PLANNER_FULL_FAULTS") == "1" or p == POINTS[i % len(POINTS)]]


def _cluster():
    b = SimBackend(NODES, ticks_per_call=1)
    Executor(b, Journal(":memory:")).apply(diff(observe(b), target(base_body())).steps, "base")
    router.submit(b, ROLLOUT, router.make_requests(ROLLOUT, 40, prompts=6, min_len=4, max_len=24, seed=7))
    for s in range(2):
        assert all(b.train_step(TRAINER, s))
    b.tick(3)
    old = [r["id"] for r in b.coord("records") if r["component"] == TRAINER]
    before, step, _ = full_state(b, old)
    return b, old, before, step


def _check(b, before, step, want_layout: dict, creates0: dict | None = None) -> list[str]:
    problems = []
    recs = [r for r in b.coord("records") if r["component"] == TRAINER]
    gens = {r["generation"] for r in recs}
    layouts = {tuple(sorted(r["layout"].items())) for r in recs}
    if len(gens) != 1 or layouts != {tuple(sorted({"tp": 1, "pp": 1, "dp": 1, **want_layout}.items()))}:
        problems.append(f"trainer not whole: generations {gens}, layouts {layouts}")
    after, step_after, lost = full_state(b, [r["id"] for r in recs])
    if lost or same_state(before, after) or step_after != step:
        problems.append(f"trainer state differs: lost {lost}, {same_state(before, after)[:3]}, step {step_after} vs {step}")
    for _ in range(200):
        s = b.coord("ledger_summary")
        if s["done"] == s["requests"]:
            break
        b.tick(20)
    recs = b.coord("request_records")
    bad = [r["id"] for r in recs if not r["done"] or r["output"] != expected_output(r)]
    if bad:
        problems.append(f"requests not finished exactly once with their output: {bad[:5]}")
    reap(b)
    if b.leaks():
        problems.append(f"leaks: {b.leaks()}")
    # (a rank discarded by a rollback may be made again under its id by the next apply: counted from then on)
    twice = [w for w, n in b.creates.items() if n - (creates0 or {}).get(w, 0) > 1]
    if twice:
        problems.append(f"created twice: {twice}")
    return problems


@pytest.mark.parametrize("forward", [True, False], ids=["apply-again", "roll-back"])
def test_journal_lost_after_a_kill_at_every_step_of_a_p2p_reshard(forward):
    """For each step and point: kill the controller, lose the journal, settle from the cluster, then
    apply the new plan again (or the old one): whole on one layout, trainer bit-identical."""
    failures = {}
    outcomes = set()
    for kind, nth, point in CASES:
        b, old, before, step = _cluster()
        steps = diff(observe(b), target(migration_body("p2p"))).steps
        plan = FaultPlan([Fault(kind, point, "crash", nth=nth, unit_kind="p2p")])
        with pytest.raises(ControllerCrash):
            Executor(b, Journal(":memory:"), faults=plan).apply(steps, "p2p")
        notes = settle(b)  # the journal is gone: only the cluster is left
        creates0 = {w: n for w, n in b.creates.items() if not b.worker_alive(w)}
        recs = [r for r in b.coord("records") if r["component"] == TRAINER]
        whole = "old" if {r["id"] for r in recs} <= set(old) else "new"
        outcomes.add(whole)
        assert len({r["generation"] for r in recs}) == 1, (kind, nth, point, notes)
        body = migration_body("p2p") if forward else base_body()
        res = Executor(b, Journal(":memory:")).apply(diff(observe(b), target(body)).steps, "again")
        assert res.status == "done", (kind, nth, point, res.message)
        want = {"tp": 1, "pp": 2} if forward else {"tp": 2}
        problems = _check(b, before, step, want, creates0)
        if problems:
            failures[f"{kind}{nth}-{point} ({whole}; {notes})"] = problems
    assert not failures, failures
    assert outcomes == {"old", "new"}, "some kills left it to roll back, others to roll forward"


def test_settle_leaves_a_whole_cluster_alone_and_undoes_a_half_drain():
    b, old, before, step = _cluster()
    assert settle(b) == []
    steps = diff(observe(b), target(migration_body("workload"))).steps
    with pytest.raises(ControllerCrash):
        Executor(b, Journal(":memory:"), faults=FaultPlan([Fault("drain", "after", "crash")])).apply(steps, "w")
    draining = [r["id"] for r in b.coord("records") if r.get("status") == "draining"]
    assert draining
    notes = settle(b)
    assert len(notes) == len(draining) and all("serves again" in n for n in notes)
    res = Executor(b, Journal(":memory:")).apply(diff(observe(b), target(migration_body("workload"))).steps, "w2")
    assert res.status == "done" and not _check(b, before, step, {"tp": 2})


def test_the_journal_lock_takes_a_zombie_holder_as_dead(tmp_path):
    from estimators.host import pid_gone
    from planner.daemon import lease

    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 120  # a deadline on an event (the child exits at once), reached only on failure
    while not pid_gone(child.pid) and time.monotonic() < deadline:  # exited, not reaped: a zombie
        time.sleep(0.02)
    try:
        assert pid_gone(child.pid), "the exited child should read as gone while a zombie (waited 120 s)"
        assert lease._process_gone is pid_gone
        j = Journal(tmp_path / "j.db")
        j.db.execute("INSERT INTO lock(id, holder, pid, since) VALUES (1, 'zombie', ?, 0)", (child.pid,))
        j.acquire("me")  # not refused: the holder is dead
        j.release()
        assert (tmp_path / "j.db").stat().st_mode & 0o777 == 0o600
    finally:
        child.wait()


# ------------------------------------------------------------------------------------- the CLI
def _plan(tmp_path, name, layout, place):

    body = {"nodes": [{"name": "h20-0", "gpu_type": "H20", "gpus": 8, "dram_gb": 512},
                      {"name": "h100-0", "gpu_type": "H100", "gpus": 8, "dram_gb": 1024}],
            "components": [{"name": "job/rollout", "role": "rollout", "gpu_type": "H20", "placement": {"h20-0": 2}, "dram_gb_per_worker": 20},
                           {"name": "job/trainer", "role": "trainer", "gpu_type": "H100", "layout": layout, "placement": place,
                            "model": {"hidden": 16, "ffn": 32, "layers": 2, "vocab": 32}}]}
    return write_target(tmp_path / name, body)


def test_cli_journal_beside_the_cluster_a_lost_one_is_settled_and_a_lost_cluster_is_refused(tmp_path, monkeypatch, capsys):
    """Crashes are real processes (os._exit at a step); the runs after them are the CLI in this process."""
    from planner.cli import main
    from tests.conftest import run_cli

    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    st = tmp_path / "cluster" / "sim.sqlite"
    st.parent.mkdir()
    p1 = _plan(tmp_path, "p1.yaml", {"tp": 2}, {"h100-0": 2})
    p2 = _plan(tmp_path, "p2.yaml", {"tp": 1, "dp": 2}, {"h100-0": 2})
    monkeypatch.chdir(a_dir)
    assert main(["apply", str(p1), "--sim-state", str(st)]) == 0
    journal = st.with_name(st.name + ".journal")
    assert journal.exists() and not (a_dir / ".rl-planner").exists(), "the journal lives beside the cluster, not in the cwd"
    r = run_cli("apply", str(p2), "--sim-state", str(st), cwd=a_dir, env={"RL_PLANNER_EXECUTOR_CRASH_AT": "reshard:after"})
    assert r.returncode == 137
    # Resumed from another directory: the same journal is found, the apply resumed.
    monkeypatch.chdir(b_dir)
    capsys.readouterr()
    assert main(["apply", str(p2), "--sim-state", str(st)]) == 0
    assert "(resumed)" in capsys.readouterr().out
    # Crash again mid-P2P (back to tp2) after the switch, and lose the journal: the cluster itself is settled.
    r = run_cli("apply", str(p1), "--sim-state", str(st), cwd=a_dir, env={"RL_PLANNER_EXECUTOR_CRASH_AT": "stop:before"})
    assert r.returncode == 137
    for suffix in ("", "-wal", "-shm"):
        (journal.parent / (journal.name + suffix)).unlink(missing_ok=True)
    assert main(["apply", str(p1), "--sim-state", str(st)]) == 0
    out = capsys.readouterr().out
    assert "recovered: job/trainer" in out and "forward" in out, out
    b = SimBackend([], state_path=st)
    ranks = [r for r in b.coord("records") if r["component"] == "job/trainer"]
    assert len(ranks) == 2 and len({r["generation"] for r in ranks}) == 1 and {r["layout"]["tp"] for r in ranks} == {2}
    b.close()
    # A running journal whose cluster file is gone: refused, not restarted empty.
    r = run_cli("apply", str(p2), "--sim-state", str(st), cwd=a_dir, env={"RL_PLANNER_EXECUTOR_CRASH_AT": "reshard:before"})
    assert r.returncode == 137
    st.rename(st.with_name("moved.sqlite"))
    assert main(["apply", str(p2), "--sim-state", str(st)]) == 2
    err = capsys.readouterr().err
    assert "is gone" in err and "Traceback" not in err, err
    assert not st.exists(), "no empty cluster was created"


def test_a_staged_save_of_two_generations_of_ranks_refuses_before_anything_stops():
    """The KeyError 'embed' of issue 16: an old and a new rank of one index wrote one checkpoint key, the park
    stopped the trainer saying its state was saved, and every restore failed. Now the save refuses first."""
    from executor.context import Ctx
    from executor.migrations.reboot import run_save
    from executor.steps import Step

    b, old, before, step = _cluster()
    steps = diff(observe(b), target(migration_body("p2p"))).steps
    with pytest.raises(ControllerCrash):
        Executor(b, Journal(":memory:"), faults=FaultPlan([Fault("reshard", "before", "crash", unit_kind="p2p")])).apply(steps, "p2p")
    ranks = [r["id"] for r in b.coord("records") if r["component"] == TRAINER]
    assert len(ranks) == 4
    save = Step(0, "x/park/save", "save", TRAINER, "x/park", "test", {"workers": ranks, "checkpoint": "ck", "generation": 3,
                                                                       "park": {"checkpoint": "ck"}})
    with pytest.raises(RuntimeError, match="both hold rank"):
        run_save(Ctx(b, FaultPlan()), save)
    assert b.coord("parked_components") == {} and all(b.worker_alive(w) for w in ranks)
    assert settle(b)
    creates0 = {w: n for w, n in b.creates.items() if not b.worker_alive(w)}
    assert Executor(b, Journal(":memory:")).apply(diff(observe(b), target(migration_body("p2p")), stage=True).steps).status == "done"
    assert not _check(b, before, step, {"tp": 1, "pp": 2}, creates0)
