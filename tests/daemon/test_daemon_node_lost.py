"""A node the executor reports dead: the daemon moves the groups on it to live nodes (session 58).

Before, the daemon planned on its scenario's fleet whatever the cluster said: a job whose node died
stayed in the plan in force on that node, its restore (the plan applied again) was refused by the
executor (``node ... is dead``), and it was retried with back-off for ever. Now the dead node is
taken out of every placement (``PlanningContext.unavailable``), the groups holding it leave the plan
and their members are admitted again on live nodes (a ``repair`` decision, trigger ``node-lost``),
and the executor replaces what the node took with it: engines, resident state, a trainer that never
trained. A trainer that had trained lost its state with the node: its job fails, naming why. In
process, on the executor's simulated backend and a manual clock, as test_daemon_restore_dead_workers.py."""

from __future__ import annotations

import pytest

from planner.daemon.adapters import executor as ex
from planner.daemon.lifecycle import JobState
from tests.daemon.test_daemon_cycle import World
from tests.daemon.test_daemon_vanished_target import _wire

if ex.available() is not None:
    pytest.skip(f"the executor cannot apply here: {ex.available()}", allow_module_level=True)

from executor.backends.base import observe  # noqa: E402


def _running(tmp_path, placer: str = "solo"):
    w = World(tmp_path)
    w.submit("a", duration_s=1200.0)
    w.submit("b", duration_s=6000.0)
    _wire(w, tmp_path, "executor")
    if placer == "weave":  # the daemon's default placer (co-execution groups)
        from planner.daemon.adapters.placement import WeavePlacer

        w.loop.placer = WeavePlacer(w.cluster)
    assert w.cycle(0.0).apply == "ok" and w.state("a") is JobState.RUNNING and w.state("b") is JobState.RUNNING
    return w


def _nodes_of(w, job) -> set[str]:
    g = w.loop.current()[1].job_groups()[job]
    return {*g.rollout_nodes, *g.train_nodes}


def _kill_node(w, node):
    """The node dies: every worker on it is gone and the executor holds it dead."""
    b = w.sim.backend
    for r in b.coord("records"):
        if r["node"] == node:
            b.kill(r["id"])
    b.coord("mark_node_dead", node, "test: the node stopped answering")
    w.sim._save()


def _lost(w):
    return [d for d in w.store.decisions(0, 1000, "repair") if "node-lost" in d["triggers"]]


@pytest.mark.parametrize("side, placer", [("rollout", "solo"), ("train", "solo"), ("rollout", "weave"), ("train", "weave")])
def test_the_jobs_on_a_dead_node_move_to_live_nodes_and_run_on(tmp_path, side, placer):
    w = _running(tmp_path, placer)
    g = w.loop.current()[1].job_groups()["a"]
    node = (g.rollout_nodes if side == "rollout" else g.train_nodes)[0]
    on_it = {j for j in ("a", "b") if node in _nodes_of(w, j)}
    untouched = {j: _nodes_of(w, j) for j in ("a", "b") if j not in on_it}
    _kill_node(w, node)
    rep = w.cycle(60.0)
    assert rep.apply == "ok", rep
    (dec,) = _lost(w)
    assert dec["outcome"] == "applied" and set(dec["jobs"]) == on_it, dec
    assert any(node in r and "dead node" in r for r in dec["reasons"]), dec["reasons"]
    plan = w.loop.current()[1]
    assert node not in plan.nodes_in_use(), plan.as_dict()
    for j in on_it:
        assert w.state(j) is JobState.RUNNING
    for j, nodes in untouched.items():
        assert _nodes_of(w, j) == nodes, "a job off the dead node stays where it is"
    st = observe(w.sim.backend)
    for c in st.components.values():
        if c.job in on_it:
            live = c.live_workers()
            assert live and all(x.status == "running" and x.node != node for x in live), (c.name, live)
    t = 60.0
    while w.state("a") is JobState.RUNNING and t < 4000.0:
        t += 60.0
        assert w.cycle(t).apply in ("ok", "none", None, "nothing"), "later cycles apply"
        assert node not in w.loop.current()[1].nodes_in_use(), "the dead node is never placed on again"
    assert w.state("a") is JobState.COMPLETED, w.store.get_job("a").reason
    assert len(_lost(w)) == 1, "moved once"
    assert not [d for d in w.store.decisions(0, 1000, "restore") if set(d["jobs"]) & on_it], "moved, not restored in place"


def test_a_job_whose_trained_trainer_was_on_the_dead_node_fails_naming_why(tmp_path):
    w = _running(tmp_path)
    assert all(w.sim.backend.train_step("a/trainer", 0))  # its ranks hold state no checkpoint keeps
    w.sim._save()
    node = w.loop.current()[1].job_groups()["a"].train_nodes[0]
    b_nodes = _nodes_of(w, "b")
    _kill_node(w, node)
    w.cycle(60.0)
    r = w.store.get_job("a")
    assert r.state is JobState.FAILED, (r.state, r.reason)
    assert "training state" in r.reason and "committed 1 optimizer step(s)" in r.reason, r.reason
    plan = w.loop.current()[1]
    assert "a" not in plan.jobs() and node not in plan.nodes_in_use()
    if node not in b_nodes:
        assert w.state("b") is JobState.RUNNING and _nodes_of(w, "b") == b_nodes
    for t in (120.0, 180.0):
        w.cycle(t)
    assert w.store.get_job("a").state is JobState.FAILED and len(_lost(w)) <= 1


class _Placer:
    """A stand-in placer: each admitted job gets a group of its own on the first live H20 and H800
    nodes no group holds (what the solo placer does), and every plan meets its SLOs."""

    def admit(self, ctx, current, job):
        from planner.daemon.ports import Admission, Group, Placement

        used = set(current.nodes_in_use()) | set(ctx.unavailable)
        r = next(n for n in ("h20-0", "h20-1", "h20-2", "h20-3") if n not in used)
        t = next(n for n in ("h800-0", "h800-1", "h800-2", "h800-3") if n not in used)
        return Admission(job, Placement(current.groups + (Group(f"g-{job}", "H20", (r,), "H800", (t,), (job,), 24.0),)),
                         "new-group", 24.0, f"on {r} and {t}")

    def evaluate(self, ctx, placement):
        return placement, []


@pytest.mark.parametrize("dead, leave", [
    ("h20-1", {"b"}),             # b's own rollout node: b leaves alone, a and c stay on theirs
    ("h800-0", {"a", "b", "c"}),  # the shared training node: the whole group
])
def test_a_pinned_member_whose_own_rollout_node_died_leaves_alone(dead, leave):
    from planner.daemon import solve
    from planner.daemon.ports import Group, Observation, Placement, PlanningContext
    from types import SimpleNamespace

    g = Group("g0", "H20", ("h20-0", "h20-1", "h20-2"), "H800", ("h800-0",), ("a", "b", "c"), 40.0,
              member_rollout=(("h20-0",), ("h20-1",), ("h20-2",)))
    plan = Placement((g,))
    jobs = {n: SimpleNamespace(admitted_at=float(i), seq=i) for i, n in enumerate("abc")}
    ctx = PlanningContext(cluster=None, jobs=dict.fromkeys("abc"), unavailable=frozenset({dead}))  # type: ignore[arg-type]
    out = solve.node_loss(ctx, _Placer(), plan, Observation(dead_nodes={dead: "test"}), jobs)  # type: ignore[arg-type]
    (dec,) = out.decisions
    assert set(dec.jobs) == leave and dec.triggers == ["node-lost"]
    assert dead not in out.target.nodes_in_use()
    stayed = {m for gg in out.target.groups if gg.id == "g0" for m in gg.members}
    assert stayed == {"a", "b", "c"} - leave
    for m in ("a", "b", "c"):
        assert m in out.target.jobs(), f"{m} is placed (again or still)"
    if stayed:
        (g0,) = [gg for gg in out.target.groups if gg.id == "g0"]
        assert all(g0.rollout_of(m) == g.rollout_of(m) for m in stayed), "the others keep their own nodes"


def test_a_job_no_live_node_has_room_for_fails_naming_the_node_and_the_others_run_on(tmp_path):
    w = _running(tmp_path)
    a_rollout = w.loop.current()[1].job_groups()["a"].rollout_nodes[0]
    b_nodes = _nodes_of(w, "b")
    spare = [n for n in ("h20-0", "h20-1", "h20-2", "h20-3") if n != a_rollout and n not in b_nodes]
    for n in [a_rollout, *spare]:  # every H20 node but b's: no rollout node is left for a
        _kill_node(w, n)
    assert w.cycle(60.0).apply == "ok"
    r = w.store.get_job("a")
    assert r.state is JobState.FAILED, (r.state, r.reason)
    assert a_rollout in r.reason and "no live node has room" in r.reason and "submit it again" in r.reason, r.reason
    assert w.state("b") is JobState.RUNNING and _nodes_of(w, "b") == b_nodes
    assert "a" not in w.loop.current()[1].jobs()


def test_a_pinned_group_whose_shared_training_node_died_is_placed_again_whole_and_valid(tmp_path):
    """Four jobs the Weave placer pins into one group (a rollout node each, one H800 node shared): the
    shared node dies, all four leave it and are admitted again on live nodes; the new plan passes the
    placer's own check (every SLO, DRAM, pins), and every job then runs to completion."""
    from planner.daemon.adapters.placement import WeavePlacer

    w = World(tmp_path)
    for i in range(4):
        w.submit(f"j{i}", duration_s=900.0 + 300 * i, slo={"ratio_to_solo": 1.3 + 0.1 * i})
    _wire(w, tmp_path, "executor")
    w.loop.placer = WeavePlacer(w.cluster)
    assert w.cycle(0.0).apply == "ok"
    plan = w.loop.current()[1]
    shared = [g for g in plan.groups if len(g.members) > 1]
    if not shared:
        pytest.skip(f"the placer made no shared group of these jobs here: {plan.as_dict()}")
    g = shared[0]
    node = g.train_nodes[0]
    _kill_node(w, node)
    assert w.cycle(60.0).apply == "ok"
    (dec,) = _lost(w)
    assert set(dec["jobs"]) == set(g.members) and dec["outcome"] == "applied", dec
    plan = w.loop.current()[1]
    assert node not in plan.nodes_in_use() and set(g.members) <= set(plan.jobs())
    ctx = w.loop.context({r.name: r for r in w.store.live_jobs()}, 60.0)
    assert w.loop.placer.evaluate(ctx, plan)[1] == []
    t = 60.0
    while not w.loop.idle() and t < 6000.0:
        t += 120.0
        w.cycle(t)
    assert all(w.state(f"j{i}") is JobState.COMPLETED for i in range(4)), [(f"j{i}", w.store.get_job(f"j{i}").reason) for i in range(4)]


def test_a_revived_node_is_cleared_logged_and_placed_on_again(tmp_path):
    """``POST /v1/nodes/{name}/revive`` (stored as a request; here straight into the store, as the API
    does): the next cycle clears the executor's record, logs what it did, and the node is free again."""
    w = _running(tmp_path)
    node = w.loop.current()[1].job_groups()["a"].rollout_nodes[0]
    _kill_node(w, node)
    w.cycle(60.0)
    assert node in w.sim.dead_nodes() and node not in w.loop.current()[1].nodes_in_use()
    w.store.request_revive(node, 61.0)
    w.cycle(120.0)
    said = [d for d in w.store.decisions(0, 1000, "repair") if "node-revived" in d["triggers"]]
    assert len(said) == 1 and f"node {node}" in said[0]["reasons"][0] and "is cleared" in said[0]["reasons"][0], said
    assert node not in w.sim.dead_nodes() and w.store.take_revive_requests() == {}
    for i in range(3):  # the revived node takes work again: more jobs than the other free nodes hold
        w.submit(f"n{i}", duration_s=6000.0)
    w.cycle(180.0)
    assert node in w.loop.current()[1].nodes_in_use(), w.loop.current()[1].as_dict()
    w.store.request_revive("h20-3", 181.0)  # a node never declared dead: said so, nothing else
    w.cycle(240.0)
    said = [d for d in w.store.decisions(0, 1000, "repair") if "node-revived" in d["triggers"]]
    assert len(said) == 2 and "had not declared it dead" in said[1]["reasons"][0], said
