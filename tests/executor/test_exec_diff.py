"""diff(observed, target): steps with causes, capacity-safe order, refusals with reasons.

Judged by an independent replay of the steps (tests/executor/helpers.py) and, for refusals, by
an exhaustive search over unit orders on small instances."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from executor.diff import Unreachable, build_units, diff
from executor.state import ALLOWED_MIGRATIONS, Component, Layout, Node
from tests.executor.helpers import create_before_destroy, observed, replay_capacity


def _nodes(g=8, d=1000.0):
    return [Node("a", "H20", g, d), Node("b", "H20", g, d), Node("t", "H100", g, d)]


def test_workload_shrink_keeps_engines_and_hands_off_with_causes():
    obs = observed(_nodes(), [Component("j/rollout", "j", "rollout", "H20", placement={"a": 2, "b": 2})])
    tgt = observed(_nodes(), [])
    tgt.components["j/rollout"] = Component("j/rollout", "j", "rollout", "H20", placement={"a": 3})
    plan = diff(obs, tgt)
    kinds = [s.kind for s in plan.steps]
    assert kinds == ["create", "drain", "handoff", "stop", "stop"]
    assert plan.steps[0].args["worker"]["node"] == "a"
    assert set(plan.steps[2].args["from"]) == {w.id for w in obs.components["j/rollout"].workers if w.node == "b"}
    assert len(plan.steps[2].args["to"]) == 3
    assert all(s.cause for s in plan.steps)
    assert "create-before-destroy" in plan.steps[0].cause


def test_p2p_creates_every_new_rank_before_switch_and_stops_old_after():
    obs = observed(_nodes(), [Component("j/trainer", "j", "trainer", "H100", Layout(2, 1, 1), placement={"t": 2})])
    tgt = observed(_nodes(), [])
    tgt.components["j/trainer"] = Component("j/trainer", "j", "trainer", "H100", Layout(1, 2, 2), placement={"t": 4})
    plan = diff(obs, tgt)
    assert [s.kind for s in plan.steps] == ["create"] * 4 + ["reshard", "switch", "stop", "stop"]
    assert plan.steps[4].args["new_layout"] == {"tp": 1, "pp": 2, "dp": 2}
    assert not replay_capacity(obs, plan.steps)


def test_p2p_that_cannot_hold_both_copies_is_refused_with_node_and_fix():
    obs = observed(_nodes(g=4), [Component("j/trainer", "j", "trainer", "H100", Layout(2, 1, 1), placement={"t": 2})])
    tgt = observed(_nodes(g=4), [])
    tgt.components["j/trainer"] = Component("j/trainer", "j", "trainer", "H100", Layout(1, 1, 4), placement={"t": 4})
    with pytest.raises(Unreachable) as e:
        diff(obs, tgt)
    text = e.value.render()
    assert "node t" in text and "GPU" in text and "reboot" in text
    # the same change as a reboot fits: stop first, then start
    tgt.components["j/trainer"].migration = "reboot"
    plan = diff(obs, tgt)
    assert [s.kind for s in plan.steps][:3] == ["save", "stop", "stop"]
    assert not replay_capacity(obs, plan.steps)


def test_invalid_targets_name_the_field_and_the_fix():
    obs = observed(_nodes(), [])
    tgt = observed(_nodes(), [])
    tgt.components["j/rollout"] = Component("j/rollout", "j", "rollout", "H100", placement={"a": 1, "zz": 1}, migration="p2p")
    tgt.components["j/trainer"] = Component("j/trainer", "j", "trainer", "H100", Layout(2, 1, 1), placement={"t": 3})
    with pytest.raises(Unreachable) as e:
        diff(obs, tgt)
    text = e.value.render()
    assert "components[j/rollout].migration" in text and "cannot move a rollout" in text
    assert "unknown node 'zz'" in text
    assert "has H20 GPUs, the component wants H100" in text
    assert "places 3 trainer ranks but layout tp2/pp1/dp1 has 2" in text
    assert all("Fix:" in line for line in text.splitlines()[1:])


def test_overfull_target_is_refused():
    obs = observed(_nodes(g=4), [])
    tgt = observed(_nodes(g=4), [])
    tgt.components["j/rollout"] = Component("j/rollout", "j", "rollout", "H20", gpus_per_worker=2, placement={"a": 3})
    with pytest.raises(Unreachable, match="places 6 GPUs of workers on a node with 4"):
        diff(obs, tgt)


def test_units_are_ordered_so_freed_capacity_is_used():
    # rollout on a shrinks (frees 3 GPUs), a service grows into them: the rollout must go first
    nodes = [Node("a", "H20", 4, 100.0)]
    obs = observed(nodes, [Component("j/rollout", "j", "rollout", "H20", placement={"a": 4})])
    tgt = observed(nodes, [])
    tgt.components["j/rollout"] = Component("j/rollout", "j", "rollout", "H20", placement={"a": 1})
    tgt.components["j/reward"] = Component("j/reward", "j", "service", "H20", gpus_per_worker=3, placement={"a": 1})
    plan = diff(obs, tgt)
    assert [u.component for u in plan.units] == ["j/rollout", "j/reward"]
    assert not replay_capacity(obs, plan.steps)


def test_identical_state_gives_no_steps():
    obs = observed(_nodes(), [Component("j/rollout", "j", "rollout", "H20", placement={"a": 2})])
    tgt = observed(_nodes(), [])
    tgt.components["j/rollout"] = Component("j/rollout", "j", "rollout", "H20", placement={"a": 2})
    assert diff(obs, tgt).steps == []


# ----------------------------------------------------------------------------- properties
ROLES = ["rollout", "trainer", "service"]


@st.composite
def instances(draw):
    n_nodes = draw(st.integers(1, 3))
    nodes = [Node(f"n{i}", "H100", draw(st.integers(2, 8)), float(draw(st.integers(50, 400)))) for i in range(n_nodes)]

    free_before = {n.name: [n.gpus, n.dram_gb] for n in nodes}
    free_after = {n.name: [n.gpus, n.dram_gb] for n in nodes}

    def placement(gpw, dram, free):
        out = {}
        for n in nodes:
            k = draw(st.integers(0, 3))
            while k and (k * gpw > free[n.name][0] or k * dram > free[n.name][1]):
                k -= 1
            if k:
                out[n.name] = k
                free[n.name][0] -= k * gpw
                free[n.name][1] -= k * dram
        return out

    obs_comps, tgt_comps = [], []
    for i in range(draw(st.integers(1, 4))):
        role = draw(st.sampled_from(ROLES))
        mig = draw(st.sampled_from(ALLOWED_MIGRATIONS[role]))
        gpw, dram = draw(st.integers(1, 2)), float(draw(st.sampled_from([0, 10, 40])))
        before, after = placement(gpw, dram, free_before), placement(gpw, dram, free_after)
        for p, lst in ((before, obs_comps), (after, tgt_comps)):
            if not p:
                continue
            lay = Layout(1, 1, sum(p.values())) if role == "trainer" else Layout()
            lst.append(Component(f"j{i}/{role}", f"j{i}", role, "H100", lay, gpw, dram, mig, placement=dict(p)))
    return nodes, obs_comps, tgt_comps


def _fits_capacity_alone(nodes, comps):
    for n in nodes:
        g = sum(c.placement.get(n.name, 0) * c.gpus_per_worker for c in comps)
        d = sum(c.placement.get(n.name, 0) * c.dram_gb_per_worker for c in comps)
        if g > n.gpus or d > n.dram_gb:
            return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_every_order_is_capacity_safe_and_every_refusal_is_real(inst):
    nodes, oc, tc = inst
    if not _fits_capacity_alone(nodes, oc) or not _fits_capacity_alone(nodes, tc):
        event("skipped: over capacity")
        return
    obs = observed(nodes, oc)
    tgt = observed(nodes, [])
    for c in tc:
        tgt.components[c.name] = c
    try:
        plan = diff(obs, tgt)
    except Unreachable as exc:
        # Oracle: no permutation of the units fits (the units are the diff's, the replay is ours).
        units = build_units(obs, tgt)
        if "no capacity-safe order" not in exc.render():
            event("refused: validation")
            return  # refused for a validation reason, not ordering
        event("refused: no order (checked exhaustively)")
        for perm in itertools.permutations(units):
            steps = [s for u in perm for s in u.steps]
            assert replay_capacity(obs, steps), f"diff refused, but {[u.id for u in perm]} fits"
        return
    event(f"planned: {len(plan.units)} unit(s)")
    assert not replay_capacity(obs, plan.steps)
    assert not create_before_destroy(plan.steps)
    assert [s.seq for s in plan.steps] == list(range(1, len(plan.steps) + 1))
    assert all(s.cause for s in plan.steps)
    # applying the plan's creates and stops gives exactly the target's per-node worker counts
    counts = {c.name: dict(c.placement_counts()) for c in obs.components.values()}
    for s in plan.steps:
        if s.kind in ("create", "stop"):
            node = s.args["worker"]["node"]
            d = counts.setdefault(s.component, {})
            d[node] = d.get(node, 0) + (1 if s.kind == "create" else -1)
    for name in set(counts) | set(tgt.components):
        want = tgt.components[name].placement_counts() if name in tgt.components else {}
        got = {n: k for n, k in counts.get(name, {}).items() if k}
        assert got == want, name


@pytest.mark.parametrize("trained", [True, False])
def test_a_trainer_on_a_dead_node_is_refused_for_reboot_and_p2p_with_a_fix_that_works(trained):
    """A P2P from ranks on a dead node was refused with 'use migration reboot (it restarts from the last
    saved state)'; the reboot it recommended was then planned, its save failed on the dead ranks and it
    rolled back (exit 1): there is no saved state. A trainer that committed optimizer steps is refused
    for both, and the fix given (leave the component out, then add it back) applies, on the sim
    backend, end to end. One that never trained holds its initial state only: its ranks are replaced
    (session 58: what lets the daemon move a job off a node that died)."""
    from executor import faultlib
    from executor.backends.base import observe
    from executor.backends.sim import SimBackend
    from executor.controller import Executor
    from executor.faultlib import NODES, TRAINER, target
    from executor.journal import Journal

    b = SimBackend(NODES, ticks_per_call=1)
    j = Journal(":memory:")
    assert Executor(b, j).apply(diff(observe(b), target(faultlib.base_body())).steps, "base").status == "done"
    if trained:
        assert all(b.train_step(TRAINER, 0))
    for r in b.coord("records"):
        if r["component"] == TRAINER:
            b.kill(r["id"])
    b.coord("mark_node_dead", "t", "no answer")
    if not trained:
        for kind in ("reboot", "p2p"):
            plan = diff(observe(b), target(faultlib.migration_body(kind)))
            assert [u.kind for u in plan.units if u.component == TRAINER] == ["replace"], plan.units
        res = Executor(b, j).apply(diff(observe(b), target(faultlib.migration_body("p2p"))).steps, "replace")
        assert res.status == "done" and all(b.train_step(TRAINER, 0))
        return
    for kind in ("reboot", "p2p"):
        with pytest.raises(Unreachable) as err:
            diff(observe(b), target(faultlib.migration_body(kind)))
        text = str(err.value)
        assert "committed 1 optimizer step(s)" in text and "leave the component out of the plan" in text
        assert "last saved state" not in text
    body = faultlib.base_body()
    body["components"] = [c for c in body["components"] if c["name"] != TRAINER]
    assert Executor(b, j).apply(diff(observe(b), target(body)).steps, "drop").status == "done"
    res = Executor(b, j).apply(diff(observe(b), target(faultlib.migration_body("reboot"))).steps, "add")
    assert res.status == "done" and all(b.train_step(TRAINER, 0))
