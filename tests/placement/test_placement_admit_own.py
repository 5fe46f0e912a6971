"""Admission into own-sized groups (``Config.own``: members each on the fewest rollout nodes of their own that meet
their SLO, sharing the training pool).

Before, the greedy admission's families held equal counts only, so a job arriving at a plan whose group is own-sized
(or a lone member's group that becomes one) opened a group of its own or took an equal-count slot larger than its
own count. Now ``Packer(own_joins=True)`` (``planner admit``, the daemon's admission, ``place_leftovers``) also lets
it join such a group on its own count, the rollout pool growing by that many free nodes, every member within its SLO.

Each result is judged outside the packer: the plan by the solver-free checker, and its cost against an enumeration
of the admission moves (:func:`cheapest_move`) that decides every candidate group with Howard's cycle times on the
members' node pins, straight from the instance's tables."""

from __future__ import annotations

from pathlib import Path
import pytest
import yaml

from formulation.placement.check import check
from formulation.placement.cycle import Member, cycle_times
from formulation.placement.evaluate import Config, Group, Index, Solution
from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType
from formulation.placement.plan import PlacementPlan, build_plan, own_config
from formulation.placement.solve import place_leftovers, read_current
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
TINY = ROOT / "scenarios" / "ci" / "tiny-own-counts.yaml"


# ---------------------------------------------------------------------------- the outside judge
def _valid_group(inst: PlacementInstance, p: str, q: str, nt: int, members: list[tuple[str, frozenset]]) -> bool:
    """Members ``(job, rollout node pins)`` on rollout type ``p`` and a training pool of ``nt`` ``q`` nodes: every
    member's cycle (Howard on the pins, phase times at the pinned counts) within its SLO, every node's DRAM held."""
    jobs = {j.name: j for j in inst.jobs}
    t_nodes = frozenset(f"t{i}" for i in range(nt))
    mem = []
    for name, rn in members:
        j = jobs[name]
        a, b = j.rollout_s.get(p, {}).get(len(rn)), j.train_s.get(q, {}).get(nt)
        if a is None or b is None:
            return False
        sr, st = j.switches(p, len(rn), q, nt)
        mem.append(Member(name, a, b, j.sync(p, q), frozenset(f"r:{n}" for n in rn), t_nodes, sr, st))
    res = cycle_times(mem)
    if any(res.of(name) > jobs[name].slo_s * (1 + 1e-9) for name, _ in members):
        return False
    load: dict[str, float] = {}
    for (name, _), m in zip(members, mem):
        for n in m.rollout_nodes:
            load[n] = load.get(n, 0.0) + jobs[name].dram_rollout_node_gb
        for n in t_nodes:
            load[n] = load.get(n, 0.0) + jobs[name].train_state_gb / nt
    return all(gb <= inst.pool_types[p if n.startswith("r:") else q].dram_gb * (1 + 1e-9) for n, gb in load.items())


def cheapest_move(inst: PlacementInstance, plan: PlacementPlan, newcomer: str) -> tuple[float, str, list[tuple[float, str, bool]]]:
    """The cheapest admission move of ``newcomer`` against ``plan``'s groups, by enumeration: ``(added $/h, move,
    every candidate as (added $/h, move, valid))``. The moves: a group of its own on any pools its tables name and the
    free nodes hold; joining a group whose members share its whole rollout pool on that pool grown by any number of
    free nodes; joining a lone member's group or one whose members hold rollout nodes of their own on any count of
    its table of nodes of its own (the pool's spare nodes first, then free ones), the training pool shared. The other
    members keep their pins."""
    job = next(j for j in inst.jobs if j.name == newcomer)
    free = {t: pt.count - plan.nodes_used.get(t, 0) for t, pt in inst.pool_types.items()}

    def node_price(t: str) -> float:
        return inst.pool_types[t].gpus_per_node * inst.pool_types[t].price_per_gpu_hour

    cands: list[tuple[float, str, bool]] = []
    for p, row in job.rollout_s.items():
        for nr in row:
            for q, trow in job.train_s.items():
                for nt in trow:
                    if (nr + nt > free[p]) if p == q else (nr > free[p] or nt > free[q]):
                        continue
                    ok = _valid_group(inst, p, q, nt, [(newcomer, frozenset(f"n{i}" for i in range(nr)))])
                    cands.append((nr * node_price(p) + nt * node_price(q), f"new-group {nr}x{p}+{nt}x{q}", ok))
    for g in plan.groups:
        p, q, nt = g.rollout_pool.gpu_type, g.train_pool.gpu_type, g.train_pool.size
        pool = frozenset(g.rollout_pool.nodes)
        held = [(m.job, frozenset(m.rollout_nodes)) for m in g.members]
        if all(pins == pool for _, pins in held):  # share the whole rollout pool, grown by e free nodes
            for e in range(free[p] + 1):
                grown = pool | {f"n{i}" for i in range(e)}
                ok = _valid_group(inst, p, q, nt, [(name, grown) for name, _ in held] + [(newcomer, grown)])
                cands.append((e * node_price(p), f"share {g.id} +{e}", ok))
        if len(held) == 1 or all(pins != pool for _, pins in held):  # on rollout nodes of its own
            spare = sorted(pool - frozenset().union(*(pins for _, pins in held)))
            for x in job.rollout_s.get(p, {}):
                extra = max(0, x - len(spare))
                if extra > free[p]:
                    continue
                mine = frozenset(spare[:x]) | {f"n{i}" for i in range(extra)}
                ok = _valid_group(inst, p, q, nt, held + [(newcomer, mine)])
                cands.append((extra * node_price(p), f"join {g.id} on {x} of its own", ok))
    best = min((c for c in cands if c[2]), default=(float("inf"), "none", True))
    return best[0], best[1], cands


# ---------------------------------------------------------------------------- instances
def _load(path: Path) -> PlacementInstance:
    d = yaml.safe_load(path.read_text())
    d.pop("kind", None)
    return PlacementInstance.model_validate(d)


def _current_without(name: str, leaver: str) -> tuple[PlacementInstance, Index, PlacementPlan, int]:
    """The instance ``name`` of tests/placement/data and its witness plan with ``leaver`` gone: its own-sized group
    on the own-sized pool of the nodes its other members hold (the leaver's released), the leaver outside the plan."""
    inst = _load(DATA / f"{name}.yaml")
    idx = Index(inst)
    witness = PlacementPlan.model_validate(yaml.safe_load((DATA / f"{name}.witness.yaml").read_text())["body"])
    j = idx.names.index(leaver)
    groups = []
    for g, gp in zip(read_current(idx, witness).groups, sorted(witness.groups, key=lambda x: x.id)):
        assert g.anchor == gp.id
        if j not in g.members:
            groups.append(g)
            continue
        c = idx.configs[g.config]
        mine = next(len(m.rollout_nodes) for m in gp.members if m.job == leaver)
        k = idx.config_id[own_config(c.rollout_type, c.rollout_pool_nodes - mine, c.train_type, c.train_nodes)]
        groups.append(Group(k, tuple(m for m in g.members if m != j), g.anchor))
    plan = build_plan(idx, Solution(groups), [])
    assert [v.rule for v in check(inst, plan)] == ["placed-once"]  # (the leaver, outside the plan)
    assert any(idx.configs[g.config].own for g in groups)
    return inst, idx, plan, j


def _admitted_by_leftovers(inst, idx, plan, j):
    """``place_leftovers`` of job ``j`` against ``plan`` (the path a solve's left-out jobs take): the new plan."""
    cur = read_current(idx, plan)
    sol = place_leftovers(idx, Solution(list(cur.groups), [j]))
    return build_plan(idx, sol, [], cur.nodes)


# (instance, the job that left and arrives again, $/h before, after): the plan with it gone is own-sized where it
# was; the old admission opened a group (208, 240) or found no move (mixed-tightdram-0: j2 fits alone nowhere)
CASES = [("mixed-twins-0", "j0", 192.0, 200.0), ("min-dram", "j0", 132.0, 168.0), ("mixed-tightdram-0", "j2", 172.0, 204.0)]


@pytest.mark.parametrize("name,leaver,before,after", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_left_out_job_joins_an_own_sized_group_on_its_own_count(name, leaver, before, after):
    """The job joins the own-sized group on its own count (the pool grows by it, the training pool is shared): the
    checker accepts the plan, its cost is the enumeration's cheapest move, and no staying member moves."""
    inst, idx, plan, j = _current_without(name, leaver)
    assert plan.cost_per_hour == pytest.approx(before)
    added, move, _ = cheapest_move(inst, plan, leaver)
    assert move.startswith("join") and before + added == pytest.approx(after), (added, move)
    new = _admitted_by_leftovers(inst, idx, plan, j)
    assert check(inst, new) == []
    assert new.cost_per_hour == pytest.approx(after)
    (g,) = [g for g in new.groups if leaver in g.order]
    counts = {m.job: len(m.rollout_nodes) for m in g.members}
    assert len(g.members) > 1 and sum(counts.values()) == g.rollout_pool.size
    k = idx.config_id[own_config(g.rollout_pool.gpu_type, g.rollout_pool.size, g.train_pool.gpu_type, g.train_pool.size)]
    assert counts == {m: idx.own_nodes(k, idx.names.index(m)) for m in counts}  # each member on its own count
    pins = {m.job: (gp.id, m.rollout_nodes, m.train_nodes) for gp in plan.groups for m in gp.members}
    assert all(pins[m.job] == (gp.id, m.rollout_nodes, m.train_nodes) for gp in new.groups for m in gp.members if m.job in pins)


# a: tight SLO, alone on 1 R + 1 T; c: alone on 1 S + 1 T; b arrives: its own count is 3 R nodes beside a's training
# node or 2 S nodes beside c's. With a, the shared training ring (50 + 65 s) exceeds a's SLO (110 s) though it is
# the cheaper join (+24 $/h against +32); a group of its own costs 48.
RSB = PlacementInstance(
    name="slo-co-member",
    pool_types={"R": PoolType(gpus_per_node=8, price_per_gpu_hour=1.0, dram_gb=512, count=8),
                "S": PoolType(gpus_per_node=8, price_per_gpu_hour=2.0, dram_gb=512, count=4),
                "T": PoolType(gpus_per_node=8, price_per_gpu_hour=3.0, dram_gb=512, count=4)},
    jobs=[PlacementJob(name="a", slo_s=110.0, rollout_s={"R": {1: 50.0}}, train_s={"T": {1: 50.0}}),
          PlacementJob(name="b", slo_s=140.0, rollout_s={"R": {2: 80.0, 3: 50.0}, "S": {2: 60.0}}, train_s={"T": {1: 65.0}}),
          PlacementJob(name="c", slo_s=200.0, rollout_s={"S": {1: 40.0}}, train_s={"T": {1: 40.0}})])


def test_a_join_that_would_break_a_co_members_slo_is_not_made():
    """The cheaper own-sized join (beside a) would take a's cycle to 115 s > 110: admission joins c's group instead,
    on b's own 2 S nodes, cheaper than a group of its own."""
    inst = RSB
    idx = Index(inst)
    a, b, c = (idx.names.index(n) for n in "abc")
    k_a = idx.config_id[Config("R", 1, "T", 1)]
    k_c = idx.config_id[Config("S", 1, "T", 1)]
    plan = build_plan(idx, Solution([Group(k_a, (a,)), Group(k_c, (c,))]), [])
    assert plan.cost_per_hour == pytest.approx(72.0)
    home = {m.job: g.id for g in plan.groups for m in g.members}
    added, move, cands = cheapest_move(inst, plan, "b")
    assert [x for x in cands if x[1] == f"join {home['a']} on 3 of its own"] == [(24.0, f"join {home['a']} on 3 of its own", False)]
    assert (added, move) == (32.0, f"join {home['c']} on 2 of its own")  # (the cheaper join above is not valid)
    # the same join as a plan: the checker names a's SLO
    k_bad = idx.config_id[own_config("R", 4, "T", 1)]
    bad = build_plan(idx, Solution([Group(k_bad, (a, b)), Group(k_c, (c,))]), [])
    (with_a,) = [g.id for g in bad.groups if "a" in g.order]
    assert {(v.rule, v.where) for v in check(inst, bad)} == {("slo", f"job=a,group={with_a}")}
    new = _admitted_by_leftovers(inst, idx, plan, b)
    assert check(inst, new) == [] and new.cost_per_hour == pytest.approx(72.0 + 32.0)
    by = {m.job: g for g in new.groups for m in g.members}
    assert by["a"].order == ["a"] and by["b"] is by["c"] and by["b"].rollout_pool.size == 3


# ---------------------------------------------------------------------------- planner admit, the daemon
def _tiny_without(tmp_path: Path, leaver: str) -> Path:
    d = yaml.safe_load(TINY.read_text())
    d["jobs"] = [j for j in d["jobs"] if j["name"] != leaver]
    out = tmp_path / f"without-{leaver}.yaml"
    out.write_text(yaml.safe_dump(d, sort_keys=False))
    return out


@pytest.mark.parametrize("first,arriving,before,old", [("narrow", "wide", 40.0, 88.0), ("wide", "narrow", 48.0, 64.0)])
def test_planner_admit_joins_the_own_sized_group(tmp_path, first, arriving, before, old):
    """tiny-own-counts: planned with one job, then ``planner admit`` the other: it joins the group on its own count of
    H20 nodes (1 or 2), sharing the H800 pool, 56 $/h; the old admission opened a group (88) or gave narrow an
    equal-count slot of 2 nodes (64)."""
    from planner.instances.placement import compile_scenario
    from planner.schema import load_scenario

    base, after = tmp_path / "base.yaml", tmp_path / "after.yaml"
    r = run_cli("plan", str(_tiny_without(tmp_path, arriving)), "--out", str(base))
    assert r.returncode == 0, r.stderr[-2000:]
    proc = run_cli("admit", str(TINY), "--current", str(base), "--job", arriving, "--out", str(after))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"admitted {arriving}: extend-rollout-pool (3xH20(own sizes)+2xH800), +{56.0 - before:.2f} $/h" in proc.stderr, proc.stderr
    inst = compile_scenario(load_scenario(TINY))  # (the conservative estimate both plans record)
    cur = PlacementPlan.model_validate(yaml.safe_load(base.read_text())["body"])
    new = PlacementPlan.model_validate(yaml.safe_load(after.read_text())["body"])
    assert cur.cost_per_hour == pytest.approx(before)
    assert check(inst, new) == []
    added, move, _ = cheapest_move(inst, cur, arriving)
    assert new.cost_per_hour == pytest.approx(before + added), (move, added, new.cost_per_hour)
    assert new.cost_per_hour == pytest.approx(56.0) and 56.0 < old
    (g,) = new.groups
    (g0,) = cur.groups
    pins = {m.job: m.rollout_nodes for m in g.members}
    assert pins[first] == g0.members[0].rollout_nodes and len(pins[arriving]) == {"wide": 2, "narrow": 1}[arriving]
    assert g.id == g0.id and g.train_pool.nodes == g0.train_pool.nodes
    v = run_cli("validate-plan", str(TINY), str(after))
    assert v.returncode == 0 and "56.00 $/h" in v.stdout, (v.stdout, v.stderr)


def test_the_daemons_admission_joins_the_own_sized_group():
    """The daemon's placement port admits narrow, then wide into its group on wide's own 2 H20 nodes (+16 $/h; the old
    admission opened a group: +48)."""
    from planner.daemon.adapters.placement import WeavePlacer
    from planner.daemon.ports import Placement, PlanningContext
    from planner.schema import load_scenario

    sc = load_scenario(TINY)
    placer = WeavePlacer(sc)
    ctx = PlanningContext(sc, {j.name: j for j in sc.jobs})
    first = placer.admit(ctx, Placement(), "narrow")
    assert first.placement is not None and first.move == "new-group"
    adm = placer.admit(ctx, first.placement, "wide")
    assert adm.placement is not None and adm.move == "extend-rollout-pool", adm.reason
    assert adm.marginal_cost_per_hour == pytest.approx(16.0) and adm.placement.cost_per_hour == pytest.approx(56.0)
    (g,) = adm.placement.groups
    assert [len(x) for x in g.member_rollout] == [1, 2] and g.member_rollout[0] == first.placement.groups[0].rollout_nodes
    inst = placer._instance(ctx, adm.placement.jobs())
    assert check(inst, placer._body(Index(inst), adm.placement)) == []


def test_an_own_sized_group_judged_as_it_stands_keeps_what_its_members_hold():
    """``build_plan(as_is=True)``'s node counts (:func:`formulation.placement.plan._as_is_sizes`): unchanged when
    the members' nodes fill the pool; the solver's own counts when they are finite and fill it (a group re-sized
    for a member that joins); else each member keeps what it holds and a newcomer takes its own count within the
    nodes left. The daemon's replay (weave-trace-60, --sim-slowdown 1.3:1.6, cycle 24) had four members on one
    node each, one of them stuck (no count meets its SLO: an infinite own count), and a fifth joining on two
    nodes of a 6-node pool: every member was re-sized and the stuck one raised OverflowError."""
    import math

    import pytest

    from formulation.placement.plan import _as_is_sizes

    inf = math.inf
    assert _as_is_sizes([2, 1], [1.0, 1.0], 3) == [2, 1]  # as it stands
    assert _as_is_sizes([2, 1, 0], [1.0, 1.0, 2.0], 4) == [1, 1, 2]  # re-sized by the solver for the newcomer
    assert _as_is_sizes([1, 1, 1, 1, 0], [1.0, inf, 1.0, 1.0, 2.0], 6) == [1, 1, 1, 1, 2]  # the replay's group
    assert _as_is_sizes([2, 1], [1.0, inf], 4) == [2, 1]  # nodes left free: judged as held
    assert _as_is_sizes([1, 0], [1.0, inf], 3) == [1, 2]  # a newcomer no count serves: the nodes left
    with pytest.raises(ValueError, match="re-plan the group"):
        _as_is_sizes([2, 2, 0], [1.0, inf, 1.0], 4)  # no node left for the newcomer
