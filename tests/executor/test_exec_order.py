"""Ordering with co-execution groups: reservations, members time-sharing them, groups that swap nodes.

Judged by a replay of the steps with a capacity rule written here from its statement (not
executor.capacity's slots), and by an exhaustive search over unit orders on small instances:

* every order the diff produces is capacity-safe after every step;
* without staging, the diff refuses exactly when no order of its units is safe;
* with staging, a target that fits is always reached, and staging is used only when no plain
  order exists.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from executor.backends.base import observe
from executor.backends.sim import SimBackend
from executor.controller import Executor
from executor.diff import Unreachable, build_units, diff, reservations, share_at
from executor.journal import Journal
from executor.order import exhaustive, order_units
from executor.state import ClusterState, Component, Layout, Node, Worker

GPUS, DRAM = 4, 100.0  # a reservation holds GPUS; a node has GPUS + 2 (room for a small plain component)


def replay(obs: ClusterState, steps) -> list[str]:
    """Walk the creates and stops; after each, check the rule as DESIGN states it: DRAM adds up per
    node; GPUs of workers outside a reservation (reservations included) add up per node; inside a
    group's reservation on a node, each job's GPUs fit in what the group reserves there."""
    live = {}
    for c in obs.components.values():
        for w in c.live_workers():
            live[w.id] = (w.node, w.gpus, w.dram_gb, w.share, c.job, c.reserves)
    bad = []
    for s in steps:
        if s.kind == "create":
            w = s.args["worker"]
            live[w["id"]] = (w["node"], w["gpus"], w["dram_gb"], w.get("share", ""), s.args["job"], s.args.get("reserves", ""))
        elif s.kind == "stop":
            live.pop(s.args["worker"]["id"], None)
        else:
            continue
        for n, node in obs.nodes.items():
            here = [v for v in live.values() if v[0] == n]
            if sum(v[2] for v in here) > node.dram_gb + 1e-9:
                bad.append(f"after {s.id}: DRAM over on {n}")
            if sum(v[1] for v in here if not v[3]) > node.gpus:
                bad.append(f"after {s.id}: GPUs over on {n}")
            for g in {v[3] for v in here if v[3]}:
                res = sum(v[1] for v in here if v[5] == g)
                for j in {v[4] for v in here if v[3] == g}:
                    if sum(v[1] for v in here if v[3] == g and v[4] == j) > res:
                        bad.append(f"after {s.id}: job {j} over group {g}'s reservation on {n}")
    return bad


def state(nodes: list[Node], comps: list[Component]) -> ClusterState:
    """Running workers for every component's placement (shares as the state's reservations say)."""
    st_ = ClusterState(nodes={n.name: n for n in nodes})
    for c in comps:
        st_.components[c.name] = c
    res = reservations(st_)
    for c in comps:
        ws, i = [], 0
        for node, k in c.placement_counts().items():
            for _ in range(k):
                ws.append(Worker(f"{c.name.replace('/', '.')}.g1.w{i}", c.name, node, c.gpus_per_worker, c.dram_gb_per_worker, i,
                                 generation=1, share=share_at(c, node, res)))
                i += 1
        c.workers, c.generation, c.placement = ws, 1, {}
    return st_


def target(nodes: list[Node], comps: list[Component]) -> ClusterState:
    return ClusterState(nodes={n.name: n for n in nodes}, components={c.name: c for c in comps})


def reservation(group: str, node: str) -> Component:
    return Component(f"{group}/pool-{node}", "", "service", gpus_per_worker=GPUS, placement={node: 1}, migration="reboot",
                     reserves=group)


def member(job: str, group: str, placement: dict, role: str = "rollout") -> Component:
    lay = Layout(1, 1, sum(placement.values())) if role == "trainer" else Layout()
    return Component(f"{job}/{role}", job, role, layout=lay, placement=dict(placement), group=group)


def swap_instance():
    """Group A on node x, group B on node y; the target swaps them (a re-optimisation that moves
    two groups onto each other's nodes)."""
    nodes = [Node("x", "H20", GPUS, DRAM), Node("y", "H20", GPUS, DRAM)]
    before = [reservation("A", "x"), member("a", "A", {"x": 2}), member("a", "A", {"x": 2}, "trainer"),
              reservation("B", "y"), member("b", "B", {"y": 3})]
    after = [reservation("A", "y"), member("a", "A", {"y": 2}), member("a", "A", {"y": 2}, "trainer"),
             reservation("B", "x"), member("b", "B", {"x": 3})]
    return nodes, before, after


def test_groups_that_swap_nodes_have_no_plain_order_and_are_staged():
    nodes, before, after = swap_instance()
    obs = state(nodes, before)
    try:
        diff(obs, target(nodes, after))
        raise AssertionError("a swap has no capacity-safe order without staging")
    except Unreachable as exc:
        assert "no capacity-safe order" in exc.render() and "--stage" in exc.render()
    # exhaustive: indeed no order of the units fits
    units = build_units(obs, target(nodes, after))
    assert all(replay(obs, [s for u in perm for s in u.steps]) for perm in itertools.permutations(units))
    plan = diff(state(nodes, before), target(nodes, after), stage=True)
    assert plan.notes and all("staged" in n for n in plan.notes)
    assert not replay(state(nodes, before), plan.steps)
    kinds = [u.kind for u in plan.units]
    assert "park" in kinds and "restore" in kinds and kinds.index("park") < kinds.index("restore")


def test_a_staged_swap_applies_on_the_sim_backend_and_keeps_the_trainer_state():
    nodes, before, after = swap_instance()
    b = SimBackend(nodes)
    from executor.target import from_state, to_state, ExecutorTarget

    def apply(comps, stage):
        tgt = to_state(ExecutorTarget.model_validate({"nodes": [vars(n) for n in nodes],
                                                      "components": from_state(target(nodes, comps))["components"]}))
        plan = diff(observe(b), tgt, stage=stage)
        res = Executor(b, Journal(":memory:")).apply(plan.steps)
        assert res.status == "done", res.message
        return plan

    for c in before:
        c.model = {"hidden": 8, "ffn": 8, "layers": 2, "vocab": 16} if c.role == "trainer" else {}
    apply(before, False)
    def ranks():
        return sorted((w for w in observe(b).components["a/trainer"].live_workers()), key=lambda w: w.index)
    digest = [b.raw(w.id).digest() for w in ranks()]
    for c in after:
        c.model = {"hidden": 8, "ffn": 8, "layers": 2, "vocab": 16} if c.role == "trainer" else {}
    plan = apply(after, True)
    assert plan.notes
    now = observe(b)
    for c in after:
        assert now.components[c.name].placement_counts() == c.placement_counts(), c.name
    assert now.over_capacity() == [] and now.parked == {}
    assert [b.raw(w.id).digest() for w in ranks()] == digest  # parked and restored bit for bit
    assert b.coordinator.illegal_transitions() == [] and b.leaks() == []


def test_a_rebooted_trainer_keeps_its_state_and_its_checkpoint_is_dropped():
    """Reboot saves the ranks, stops them and restarts them elsewhere from the checkpoint; once the
    restarted ranks are switched in they hold the state, and the checkpoint store lets it go."""
    from executor.target import ExecutorTarget, to_state

    nodes = [Node("x", "H20", GPUS, DRAM), Node("y", "H20", GPUS, DRAM)]
    model = {"hidden": 8, "ffn": 8, "layers": 2, "vocab": 16}
    b = SimBackend(nodes)

    def apply(node):
        tgt = to_state(ExecutorTarget.model_validate({"nodes": [vars(n) for n in nodes], "components": [
            {"name": "t/trainer", "role": "trainer", "gpu_type": "H20", "layout": {"tp": 2, "dp": 1}, "placement": {node: 2},
             "migration": "reboot", "model": model}]}))
        plan = diff(observe(b), tgt)
        assert Executor(b, Journal(":memory:")).apply(plan.steps).status == "done"
        return plan

    apply("x")
    assert all(b.train_step("t/trainer", 0))
    def ranks():
        return sorted(observe(b).components["t/trainer"].live_workers(), key=lambda w: w.index)
    digest = [b.raw(w.id).digest() for w in ranks()]
    plan = apply("y")
    assert [u.kind for u in plan.units] == ["reboot"]
    assert {w.node for w in ranks()} == {"y"} and [b.raw(w.id).digest() for w in ranks()] == digest
    assert b.coordinator.checkpoint_keys() == []
    assert b.coordinator.illegal_transitions() == [] and b.leaks() == []


def test_a_trainer_whose_host_dram_changes_gets_new_ranks_not_an_in_place_resize():
    """Same layout and nodes, less resident state per rank (found by the property test below): kept
    ranks would keep their old host DRAM, so the target is reached only by new ranks, and the
    member that needs the freed DRAM comes after them."""
    nodes = [Node(n, "H20", GPUS + 2, DRAM) for n in ("x", "y")]

    def side(a1_dram: float, with_a2: bool) -> list[Component]:
        a1 = member("a1", "A", {"y": 2}, "trainer")
        a1.dram_gb_per_worker, a1.migration = a1_dram, "p2p"
        comps = [reservation("A", "y"), a1]
        if with_a2:
            a2 = member("a2", "A", {"y": 4}, "rollout")
            a2.dram_gb_per_worker = 20.0
            comps.append(a2)
        return comps

    before, after = side(20.0, False), side(0.0, True)
    plan = diff(state(nodes, before), target(nodes, after))
    assert [u.id for u in plan.units] == ["a1/trainer/p2p", "a2/rollout/add"] and not plan.notes
    kinds = [s.kind for s in plan.units[0].steps]
    assert kinds.count("create") == 2 and kinds.count("stop") == 2
    assert not replay(state(nodes, before), plan.steps)


# ------------------------------------------------------------------------------ properties
@st.composite
def instances(draw):
    """2-3 nodes; one or two groups reserving some of them, with members; a plain component;
    a random target of the same shape (some placements move, some reservations move)."""
    n_nodes = draw(st.integers(2, 3))
    names = ["x", "y", "z"][:n_nodes]
    nodes = [Node(n, "H20", GPUS + 2, DRAM) for n in names]

    def layout(tag):
        comps = []
        order = draw(st.permutations(names))
        cut = draw(st.integers(1, n_nodes - 1))
        groups = draw(st.sampled_from([["A"], ["A", "B"], ["A", "B"]]))
        for gi, g in enumerate(groups):
            pool = list(order[:cut]) if gi == 0 else list(order[cut:])
            comps += [reservation(g, n) for n in pool]
            for j in draw(st.sampled_from([[f"{g.lower()}1"], [f"{g.lower()}1"], [f"{g.lower()}1", f"{g.lower()}2"]])):
                n = draw(st.sampled_from(pool))
                k = draw(st.integers(1, GPUS))
                role = draw(st.sampled_from(["rollout", "trainer"]))
                c = member(j, g, {n: k}, role)
                c.dram_gb_per_worker = float(draw(st.sampled_from([0, 0, 20])))  # host DRAM can be what binds, too
                c.migration = draw(st.sampled_from({"rollout": ["workload", "reboot"], "trainer": ["p2p", "reboot"]}[role]))
                comps.append(c)
        if draw(st.booleans()):
            comps.append(Component("p/rollout", "p", "rollout", placement={draw(st.sampled_from(names)): draw(st.integers(1, 2))},
                                   dram_gb_per_worker=float(draw(st.sampled_from([0, 30])))))
        return comps

    before = layout("before")
    if draw(st.booleans()):
        return nodes, before, layout("after")
    # the same layout on permuted nodes: groups swap nodes (what a re-optimisation may ask for)
    perm = dict(zip(names, draw(st.permutations(names))))
    after = []
    for c in before:
        c2 = Component(c.name, c.job, c.role, layout=c.layout, gpus_per_worker=c.gpus_per_worker,
                       dram_gb_per_worker=c.dram_gb_per_worker, migration=c.migration, group=c.group, reserves=c.reserves,
                       placement={perm[n]: k for n, k in c.placement.items()})
        if c2.name.startswith("A/pool-") or c2.name.startswith("B/pool-"):
            c2.name = f"{c.reserves}/pool-{next(iter(c2.placement))}"
        after.append(c2)
    return nodes, before, after


def _valid(nodes, comps) -> bool:
    from executor.diff import validate_target

    return not validate_target(target(nodes, []), target(nodes, comps))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances())
def test_orders_are_safe_refusals_are_real_and_staging_only_when_needed(inst):
    """(Nodes have GPUS + 2 GPUs here; the swap tests above use full nodes.)"""
    nodes, before, after = inst
    if not _valid(nodes, before) or not _valid(nodes, after):
        event("skipped: a side over-fills a node")
        return
    obs = state(nodes, before)
    units = build_units(obs, target(nodes, after))
    if len(units) > 6:
        event("skipped: too many units for the oracle")
        return
    exists = any(not replay(obs, [s for u in perm for s in u.steps]) for perm in itertools.permutations(units))
    ordered, _, _ = order_units(units, obs.slots(dead_free_zero=True))
    assert (ordered is not None) == exists, "the search and the exhaustive oracle disagree"
    if ordered is not None:
        assert not replay(obs, [s for u in ordered for s in u.steps])
    # the depth-first search on its own (takers last, give-backs without branching), not only behind the greedy pass
    found, out_of_budget = exhaustive(units, obs.slots(dead_free_zero=True), budget=10**6)
    assert not out_of_budget and (found is not None) == exists, "the reduced search and the oracle disagree"
    if found is not None:
        assert sorted(u.id for u in found) == sorted(u.id for u in units)
        assert not replay(obs, [s for u in found for s in u.steps])
    plan = diff(state(nodes, before), target(nodes, after), stage=True)
    assert not replay(state(nodes, before), plan.steps)
    assert bool(plan.notes) == (not exists), "staged although a plain order exists" if plan.notes else "not staged"
    event("staged" if plan.notes else ("plain order" if units else "nothing to do"))
    # the plan's creates and stops give exactly the target's placements
    counts = {c.name: dict(c.placement_counts()) for c in obs.components.values()}
    for s in plan.steps:
        if s.kind in ("create", "stop"):
            d = counts.setdefault(s.component, {})
            d[s.args["worker"]["node"]] = d.get(s.args["worker"]["node"], 0) + (1 if s.kind == "create" else -1)
    for c in after:
        assert {n: k for n, k in counts.get(c.name, {}).items() if k} == c.placement_counts(), c.name


def test_many_independent_moves_order_without_a_search():
    """Forty components on forty node pairs all moving: clusters keep each search small."""
    nodes, before, after = [], [], []
    for i in range(40):
        nodes += [Node(f"n{i}a", "H20", GPUS, DRAM), Node(f"n{i}b", "H20", GPUS, DRAM)]
        before.append(Component(f"j{i}/rollout", f"j{i}", "rollout", placement={f"n{i}a": 3}))
        after.append(Component(f"j{i}/rollout", f"j{i}", "rollout", placement={f"n{i}b": 3}))
    obs = state(nodes, before)
    plan = diff(obs, target(nodes, after), budget=10)  # a budget the whole-set search would exceed at once
    assert len(plan.units) == 40 and not replay(state(nodes, before), plan.steps)


def test_a_swap_with_many_members_is_proven_to_need_staging_within_a_small_search():
    """Two groups of six members swap nodes, each member with its resident state in host DRAM (a
    daemon's re-optimisation). No plain order exists; the search proves it in a few states (the
    resident-state moves bind nothing, the members' moves wait on the reservations) where a
    search over every done-set runs out of any small budget."""
    nodes = [Node("x", "H20", GPUS, 1000.0), Node("y", "H20", GPUS, 1000.0)]

    def side(a_node, b_node):
        comps = [reservation("A", a_node), reservation("B", b_node)]
        for g, n in (("A", a_node), ("B", b_node)):
            for i in range(6):
                job = f"{g.lower()}{i}"
                comps.append(member(job, g, {n: 2}, "rollout" if i % 2 else "trainer"))
                comps.append(Component(f"{job}/resident", job, "service", gpus_per_worker=0, dram_gb_per_worker=20.0,
                                       placement={n: 1}, migration="reboot"))
        return comps

    obs = state(nodes, side("x", "y"))
    units = build_units(obs, target(nodes, side("y", "x")))
    assert len(units) == 28
    found, out_of_budget = exhaustive(units, obs.slots(dead_free_zero=True), budget=200)
    assert found is None and not out_of_budget
    plan = diff(state(nodes, side("x", "y")), target(nodes, side("y", "x")), stage=True, budget=200)
    assert plan.notes and not replay(state(nodes, side("x", "y")), plan.steps)
