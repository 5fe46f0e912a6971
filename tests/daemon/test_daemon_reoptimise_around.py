"""Re-optimising around a stuck job (planner/daemon/around.py): one job whose SLO no plan can meet at
its drifted estimates no longer holds back the savings and repairs of the others. Its group is kept
exactly as it is, the other jobs are re-optimised on the nodes it leaves, and the merged plan is
judged by the solver-free checker: valid when its only violations are the ones the current plan
already has in the kept group."""

from __future__ import annotations

import pytest
from daemonproc import job, write_cluster

pytest.importorskip("formulation.placement.solve")

from formulation.placement.check import check  # noqa: E402
from formulation.placement.evaluate import Index  # noqa: E402
from planner.daemon import solve  # noqa: E402
from planner.daemon.adapters.placement import WeavePlacer, merge_kept  # noqa: E402
from planner.daemon.config import DaemonConfig  # noqa: E402
from planner.daemon.estimates import Drift  # noqa: E402
from planner.daemon.lifecycle import JobState  # noqa: E402
from planner.daemon.ports import Group, PhaseFactors, Placement, PlanningContext, Reoptimisation, Violation  # noqa: E402
from planner.daemon.ratelimit import TokenBucket  # noqa: E402
from planner.daemon.store import JobRecord  # noqa: E402
from planner.schema import load_scenario  # noqa: E402
from planner.schema.scenario import JobSpec  # noqa: E402

NAMES = ("d", "a", "b", "c")  # d is the job that gets stuck; its group is g0
STUCK = PhaseFactors(3.0, 3.0)  # three times its estimates against an SLO of twice its solo time: no pool serves it


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cluster = load_scenario(write_cluster(tmp_path_factory.mktemp("around")))
    specs = {n: JobSpec.model_validate(job(n, slo={"ratio_to_solo": 2.0})) for n in NAMES}
    placer = WeavePlacer(cluster)
    # every job alone on one H20 + one H800 node (4 + 4: the whole fleet): co-execution would save
    solo = Placement(tuple(Group(f"g{i}", "H20", (f"h20-{i}",), "H800", (f"h800-{i}",), (n,), 0.0) for i, n in enumerate(NAMES)))
    current, bad = placer.evaluate(PlanningContext(cluster, specs), solo)
    assert bad == []
    return cluster, specs, placer, current


def cfg() -> DaemonConfig:
    return DaemonConfig(period_s=60.0, clock="virtual", reoptimise_time_limit_s=10.0)


def shape(g: Group) -> tuple:
    return g.id, g.rollout_type, g.rollout_nodes, g.train_type, g.train_nodes, g.members, g.member_rollout


def checker(placer: WeavePlacer, ctx: PlanningContext, placement: Placement) -> list:
    """The solver-free checker's violations of a placement at the context's estimates."""
    inst = placer._instance(ctx, placement.jobs())
    return check(inst, placer._body(Index(inst), placement))


def assert_around(placer, ctx, current: Placement, target: Placement) -> None:
    """g0 kept byte for byte, every job placed once, no node shared, and the checker's only
    violations are d's SLO miss in g0, which the current plan has as well."""
    g0 = next(g for g in current.groups if g.id == "g0")
    kept = [g for g in target.groups if g.id == "g0"]
    assert len(kept) == 1 and shape(kept[0]) == shape(g0), [g.as_dict() for g in target.groups]
    assert sorted(target.jobs()) == sorted(NAMES)
    assert len({g.id for g in target.groups}) == len(target.groups), "group ids are unique"
    nodes = [n for g in target.groups for n in (*g.rollout_nodes, *g.train_nodes)]
    assert len(nodes) == len(set(nodes)), "no node is in two groups"
    after = checker(placer, ctx, target)
    assert after and all(v.rule == "slo" and v.where == "job=d,group=g0" for v in after), after
    before = checker(placer, ctx, current)
    assert {(v.rule, v.where) for v in after} <= {(v.rule, v.where) for v in before}


def test_the_whole_reoptimisation_is_not_valid_with_a_stuck_job(setup):
    """What the daemon met before: the re-optimised plan leaves d out (or misses its SLO)."""
    cluster, specs, placer, current = setup
    slow = PlanningContext(cluster, specs, {"d": STUCK})
    r = placer.reoptimise(slow, current, time_limit_s=10)
    cand, bad = placer.evaluate(slow, r.placement)
    assert "d" not in cand.jobs() or any(v.where == "d" for v in bad), r.reason
    # and the others' saving is real: without d the solver serves them for less than their solo pools
    assert cand.cost_per_hour < current.cost_per_hour - 24.0 - 1e-6, r.reason


def test_a_periodic_reoptimisation_makes_the_others_savings_around_a_stuck_job(setup):
    cluster, specs, placer, current = setup
    slow = PlanningContext(cluster, specs, {"d": STUCK})
    out = solve.reoptimise(slow, placer, current, cfg(), TokenBucket.full(30.0, 0.0), 0.0, ["periodic"])
    (d,) = out.decisions
    assert d.outcome == "changes-plan", d.reasons
    assert d.reasons[0].startswith("re-optimised around d (its SLO cannot be met by any plan found; its group g0 kept as it is)")
    assert "it leaves out d" in d.reasons[0] or "job=d" in d.reasons[0]
    assert any(x.startswith("the miss stays as it is now: slo [job=d,group=g0]") for x in d.reasons), d.reasons
    assert d.solver.get("kept_groups") == ["g0"]
    assert_around(placer, slow, current, out.target)
    assert out.target.cost_per_hour < current.cost_per_hour - 1e-6
    assert d.cost_after == out.target.cost_per_hour and d.gain_usd > 0
    assert "d" not in {j for j in d.jobs}, "the stuck job does not move"


def test_a_repair_mends_the_other_misses_around_a_stuck_job(setup):
    """a's rollout drifted past its SLO on one H20 node (more nodes serve it), d's past any pool:
    the repair re-optimises around d and a's SLO is met again; d's miss stays where it is."""
    cluster, specs, placer, current = setup
    slow = PlanningContext(cluster, specs, {"d": STUCK, "a": PhaseFactors(2.2, 1.0)})
    assert {v.where for v in placer.evaluate(slow, current)[1]} == {"a", "d"}
    jobs = {n: JobRecord(n, {}, JobState.RUNNING, 0.0, 0.0, 0.0, 0.0, None, None, "", None, i) for i, n in enumerate(NAMES)}
    drifts = [Drift("d", "rollout", 1.0, 3.0, 8), Drift("a", "rollout", 1.0, 2.2, 8)]
    out = solve.repair(slow, placer, current, drifts, jobs, cfg())
    (d,) = out.decisions
    assert d.kind == "repair" and d.outcome == "changes-plan", d.reasons
    assert any(x.startswith("re-optimised around d (its SLO cannot be met by any plan found; its group g0 kept as it is): "
                            "every other SLO met again") for x in d.reasons), d.reasons
    assert_around(placer, slow, current, out.target)


def test_a_repair_whose_only_miss_is_the_stuck_job_s_is_not_made(setup):
    """Around d there is nothing to mend, and d is not evicted (no place was found for it): the
    repair says so and keeps the plan."""
    cluster, specs, placer, current = setup
    slow = PlanningContext(cluster, specs, {"d": STUCK})
    jobs = {n: JobRecord(n, {}, JobState.RUNNING, 0.0, 0.0, 0.0, 0.0, None, None, "", None, i) for i, n in enumerate(NAMES)}
    out = solve.repair(slow, placer, current, [Drift("d", "rollout", 1.0, 3.0, 8)], jobs, cfg())
    (d,) = out.decisions
    assert d.outcome == "infeasible" and out.target is current, d.reasons
    assert any("mends nothing: every miss is in the kept group(s)" in x for x in d.reasons), d.reasons
    assert any(x.startswith("cannot repair: the re-optimisation found no place for d, and no other member") for x in d.reasons), \
        d.reasons


def test_a_repair_moves_the_members_a_stuck_job_slows_down_and_leaves_it_where_it_is(setup):
    """d (stuck) shares g0 with a, whose SLO d's slowness breaks: re-optimising around g0 mends
    nothing (both misses are in it), so the repair evicts a alone and admits it elsewhere; d stays
    on its nodes, its miss with it (it used to evict d as well, fail to place it again, and repair
    nothing)."""
    cluster, specs, placer, current = setup
    ctx = PlanningContext(cluster, specs)
    shared = Placement((Group("g0", "H20", ("h20-0",), "H800", ("h800-0",), ("d", "a"), 0.0),) + current.groups[2:])
    shared, bad = placer.evaluate(ctx, shared)
    assert bad == []
    slow = PlanningContext(cluster, specs, {"d": STUCK})
    assert {v.where for v in placer.evaluate(slow, shared)[1]} == {"a", "d"}
    jobs = {n: JobRecord(n, {}, JobState.RUNNING, 0.0, 0.0, float(i), 0.0, None, None, "", None, i) for i, n in enumerate(NAMES)}
    out = solve.repair(slow, placer, shared, [Drift("d", "rollout", 1.0, 3.0, 8)], jobs, cfg())
    (d,) = out.decisions
    assert d.outcome == "changes-plan", d.reasons
    assert "moved a out of the broken group(s) and admitted them again" in d.reasons
    assert "d stays where it is with the miss: the re-optimisation found no place for them" in d.reasons
    g0 = next(g for g in out.target.groups if g.id == "g0")
    assert g0.members == ("d",) and (g0.rollout_nodes, g0.train_nodes) == (("h20-0",), ("h800-0",))
    assert sorted(out.target.jobs()) == sorted(NAMES)
    after = checker(placer, slow, out.target)
    assert after and all(v.rule == "slo" and v.where == "job=d,group=g0" for v in after), after


def test_a_solved_group_that_took_a_kept_group_s_id_is_renamed():
    kept = (Group("g0", "H20", ("h20-0",), "H800", ("h800-0",), ("d",), 24.0),)
    solved = Placement((Group("g0", "H20", ("h20-1", "h20-2"), "H800", ("h800-1",), ("a", "b"), 32.0),
                        Group("g1", "H20", ("h20-3",), "H800", ("h800-2",), ("c",), 24.0)))
    merged = merge_kept(kept, solved)
    assert [g.id for g in merged.groups] == ["g0", "g1", "g2"]
    assert merged.groups[0] is kept[0]
    assert next(g for g in merged.groups if g.id == "g2").members == ("a", "b")


class Fake:
    """A placer whose whole re-optimisation leaves d out, and whose re-optimisation around g0 gives
    ``around`` (missing the SLOs of the jobs in ``bad``); d misses its SLO wherever it is."""

    def __init__(self, current: Placement, around: Placement, bad: dict[str, str] | None = None) -> None:
        self.current, self.around, self.bad = current, around, bad or {}
        self.calls: list[frozenset] = []

    def reoptimise(self, ctx, current, time_limit_s, keep_groups=frozenset()):
        self.calls.append(keep_groups)
        if not keep_groups:
            return Reoptimisation(current.without({"d"}), {}, "re-optimised; left out: d (slo)")
        return Reoptimisation(self.around, {"kept_groups": sorted(keep_groups)}, "re-optimised around the kept groups")

    def evaluate(self, ctx, placement):
        out = [Violation("slo", "d", "slo [job=d,group=g0]: misses")] if "d" in placement.jobs() else []
        if placement is self.around:  # what the plan around breaks
            out += [Violation("slo", j, f"slo [job={j}]: {why}") for j, why in self.bad.items()]
        return placement, out


def fake_world(setup):
    cluster, specs, _, _ = setup
    current = Placement((Group("g0", "H20", ("h20-0",), "H800", ("h800-0",), ("d",), 24.0),
                         Group("g1", "H20", ("h20-1",), "H800", ("h800-1",), ("a",), 24.0),
                         Group("g2", "H20", ("h20-2",), "H800", ("h800-2",), ("b",), 24.0)))
    merged = Placement((current.groups[0], Group("g1", "H20", ("h20-1",), "H800", ("h800-1",), ("a", "b"), 24.0)))
    return PlanningContext(cluster, specs), current, merged


def test_a_plan_around_that_breaks_another_job_or_the_kept_group_is_not_taken(setup):
    ctx, current, merged = fake_world(setup)
    for placer, what in ((Fake(current, merged, {"a": "misses now"}), "slo [job=a]: misses now"),
                         (Fake(current, merged.without({"d"})), "it leaves out d"),
                         (Fake(current, Placement((Group("g0", "H20", ("h20-3",), "H800", ("h800-0",), ("d",), 24.0),
                                                   merged.groups[1]))), "it changes the kept group(s) g0")):
        out = solve.reoptimise(ctx, placer, current, cfg(), TokenBucket.full(30.0, 0.0), 0.0, ["periodic"])
        (d,) = out.decisions
        assert d.outcome == "infeasible" and out.target is current and d.cost_after == current.cost_per_hour, d.reasons
        assert placer.calls == [frozenset(), frozenset({"g0"})]
        assert any("re-optimising around d" in x and "did not give a valid plan either" in x for x in d.reasons), d.reasons
        assert what in d.reasons, d.reasons


def test_the_plan_around_passes_the_gate_like_any_other(setup):
    ctx, current, merged = fake_world(setup)
    out = solve.reoptimise(ctx, Fake(current, merged), current, cfg(), TokenBucket.full(30.0, 0.0), 0.0, ["periodic"])
    (d,) = out.decisions
    assert d.outcome == "changes-plan" and out.target is merged, d.reasons
    assert d.reasons[0].startswith("re-optimised around d (its SLO cannot be met by any plan found; its group g0 kept as it is)")
    assert out.moved_jobs == 1 and d.jobs == ["b"]
    none = TokenBucket.full(0.0, 0.0)  # no move allowed: rate-limited, the plan kept
    out = solve.reoptimise(ctx, Fake(current, merged), current, cfg(), none, 0.0, ["periodic"])
    assert out.decisions[0].outcome == "rate-limited" and out.target is current
    assert out.decisions[0].reasons[0].startswith("re-optimised around d")


def test_nothing_stuck_nothing_tried_again(setup):
    """A valid re-optimisation is judged as before: one solve, no plan around anyone."""
    ctx, current, merged = fake_world(setup)

    class Valid(Fake):
        def reoptimise(self, ctx, current, time_limit_s, keep_groups=frozenset()):
            self.calls.append(keep_groups)
            return Reoptimisation(current, {}, "re-optimised: nothing better")

        def evaluate(self, ctx, placement):
            return placement, []

    placer = Valid(current, merged)
    out = solve.reoptimise(ctx, placer, current, cfg(), TokenBucket.full(30.0, 0.0), 0.0, ["periodic"])
    assert placer.calls == [frozenset()] and out.decisions[0].outcome == "kept-current"
    assert not any("around" in x for x in out.decisions[0].reasons)


def test_a_replay_with_a_stuck_job_makes_the_savings_departures_leave(tmp_path):
    """The loop on the simulated cluster and a manual clock: d runs three times slower than estimated
    (no pool meets its SLO), e and f leave two half-empty groups behind. The drift repair moves a out
    of d's group; every re-optimisation after it is made around d's group, none is infeasible, and the
    one after the departures merges the others: the plan gets cheaper while d's group stays exactly
    as it was."""
    from dataclasses import dataclass

    from planner.daemon.adapters.simcluster import SimCluster, Truth
    from planner.daemon.clock import ManualClock
    from planner.daemon.cycle import Loop
    from planner.daemon.lease import Lease
    from planner.daemon.metrics import DaemonMetrics
    from planner.daemon.service import check_job
    from planner.daemon.store import Store

    @dataclass(frozen=True)
    class OnlyDSlow(Truth):
        def factor(self, job: str) -> float:
            return 3.0 if job == "d" else 1.0

    cluster = load_scenario(write_cluster(tmp_path))
    store = Store(tmp_path / "s.sqlite")
    clock = ManualClock(0.0)
    lease = Lease(store, 60.0)
    assert lease.try_acquire()[0]
    sim = SimCluster(tmp_path / "s.sim", cluster, lambda n: JobSpec.model_validate(store.get_job(n).spec), OnlyDSlow())
    placer = WeavePlacer(cluster)
    cfg_ = DaemonConfig(period_s=60.0, clock="virtual", drift_min_samples=2, reoptimise_every_s=600.0, reoptimise_time_limit_s=10.0)
    loop = Loop(store, cluster, placer, sim, clock, cfg_, lease, DaemonMetrics())
    for n in ("d", "a", "b", "e", "c", "f"):  # admitted in this order: d with a, b with e, c with f
        spec = JobSpec.model_validate(job(n, **({"duration_s": 900.0} if n in "ef" else {})))
        store.submit_job(n, spec.model_dump(mode="json"), 0.0, 0.0, check_job(cluster, spec))
    plans = {}
    for t in range(40):
        clock.set(60.0 * t)
        rep = loop.run_cycle()
        plans[rep.cycle] = Placement.from_dict(store.current_plan().placement)
    first = plans[min(plans)]
    # the drift repair moved a, whose SLO d's slowness broke, out of d's group; d stayed on its nodes
    (repair,) = store.decisions(0, 1000, "repair")
    assert repair["outcome"] == "applied" and "d stays where it is with the miss: the re-optimisation found no place for them" \
        in repair["reasons"], repair["reasons"]
    home = plans[repair["cycle"]].job_groups()["d"]
    assert home.members == ("d",) and home.pins("d") == first.job_groups()["d"].pins("d")
    reopts = [d for d in store.decisions(0, 1000, "reoptimise") if d["cycle"] > 1]
    assert reopts and not [d for d in reopts if d["outcome"] == "infeasible"], [(d["outcome"], d["reasons"][:2]) for d in reopts]
    assert all(d["reasons"][0].startswith(f"re-optimised around d (its SLO cannot be met by any plan found; its group {home.id} ")
               for d in reopts), [d["reasons"][0] for d in reopts]
    applied = [d for d in reopts if d["outcome"] == "applied"]
    assert applied and applied[0]["cost_after"] < applied[0]["cost_before"] - 1e-6, [(d["outcome"], d["reasons"]) for d in reopts]
    final = Placement.from_dict(store.current_plan().placement)
    assert sorted(final.jobs()) == ["a", "b", "c", "d"] and final.cost_per_hour < first.cost_per_hour - 1e-6
    kept = [g for g in final.groups if g.id == home.id]
    assert len(kept) == 1 and shape(kept[0]) == shape(home)
    ctx = loop.context({r.name: r for r in store.live_jobs()}, clock.now())
    bad = checker(placer, ctx, final)
    assert bad and all(v.rule == "slo" and v.where == f"job=d,group={home.id}" for v in bad), bad
    assert store.get_job("d").slo_misses > 0


def test_the_plan_around_stays_in_the_whole_instance_s_plan_space(tmp_path, monkeypatch):
    """Fewer jobs bring configurations more jobs leave out (own-sized pools, up to OWN_MAX_JOBS jobs):
    the jobs around a stuck one were solved with them, and the merged plan could not be evaluated
    ("group g1: 4xH20(own sizes)+1xH800 is not a pool configuration of the placement instance": a
    ValueError in every cycle of the weave-trace-60 replay with --sim-slowdown 1.3:1.6 until the
    daemon exited). Here the whole plan's 4 jobs are over the limit and the 3 around d are not; a
    needs 2 rollout nodes of its own at its drifted estimates, b and c one each."""
    import formulation.placement.evaluate as ev
    from daemonproc import CLUSTER_YAML

    six = CLUSTER_YAML.replace("gpu_type: H20, count: 4", "gpu_type: H20, count: 6")
    assert six != CLUSTER_YAML
    cluster = load_scenario(write_cluster(tmp_path, six))
    specs = {n: JobSpec.model_validate(job(n, slo={"ratio_to_solo": 2.0})) for n in NAMES}
    placer = WeavePlacer(cluster)
    solo = Placement(tuple(Group(f"g{i}", "H20", (f"h20-{i}",), "H800", (f"h800-{i}",), (n,), 0.0) for i, n in enumerate(NAMES)))
    current, _ = placer.evaluate(PlanningContext(cluster, specs), solo)
    monkeypatch.setattr(ev, "OWN_MAX_JOBS", 3)
    slow = PlanningContext(cluster, specs, {"d": STUCK, "a": PhaseFactors(2.2, 1.0)})
    assert not any(c.own for c in Index(placer._instance(slow, list(NAMES))).configs)
    assert any(c.own for c in Index(placer._instance(slow, ["a", "b", "c"])).configs)
    r = placer.reoptimise(slow, current, time_limit_s=10, keep_groups=frozenset({"g0"}))
    merged, _ = placer.evaluate(slow, r.placement)  # raised the ValueError above
    assert_around(placer, slow, current, merged)
    out = solve.reoptimise(slow, placer, current, cfg(), TokenBucket.full(30.0, 0.0), 0.0, ["periodic"])
    assert out.decisions[0].outcome == "changes-plan", out.decisions[0].reasons
    assert_around(placer, slow, current, out.target)


def test_a_group_of_members_on_rollout_nodes_of_their_own_is_judged_as_it_stands(tmp_path):
    """A pinned group whose members hold different counts (own-sized: a on 2 rollout nodes, b on 1)
    was evaluated with each member re-sized to its own count at the current estimates: a shown on 1
    node of a 3-node pool, and, once b's SLO was out of reach at any count (a stuck job kept where it
    is), 'OverflowError: cannot convert float infinity to integer' in every cycle (the weave-trace-60
    replay with --sim-slowdown 1.3:1.6 exited after 5)."""
    from daemonproc import CLUSTER_YAML

    cluster = load_scenario(write_cluster(tmp_path, CLUSTER_YAML.replace("gpu_type: H20, count: 4", "gpu_type: H20, count: 6")))
    specs = {n: JobSpec.model_validate(job(n, slo={"ratio_to_solo": 2.0})) for n in "ab"}
    placer = WeavePlacer(cluster)
    g = Group("g1", "H20", ("h20-1", "h20-2", "h20-3"), "H800", ("h800-1",), ("a", "b"), 0.0, 0.0, (("h20-1", "h20-2"), ("h20-3",)))
    for factors in ({}, {"b": STUCK}):
        ctx = PlanningContext(cluster, specs, factors)
        got, bad = placer.evaluate(ctx, Placement((g,)))
        assert [shape(x) for x in got.groups] == [shape(g)]
        assert {v.where for v in bad} == ({"a", "b"} if factors else set()), bad
        assert [v.rule for v in checker(placer, ctx, got)] == ["slo"] * len(bad)


def test_an_own_sized_group_stays_representable_past_own_max_jobs(tmp_path, monkeypatch):
    """An instance of more than OWN_MAX_JOBS jobs leaves own-sized configurations out of its plan space,
    but a group made own-sized while fewer jobs ran is still in force when more arrive: every cycle's
    admission raised 'group g2: 3xH20(own sizes)+3xH800 is not a pool configuration of the placement
    instance' (the weave-trace-60 replay with --sim-slowdown 1.3:1.6, once the simulated jobs ran at
    their estimates times their factors, at its 31st job; the daemon exited after 5). Its configuration
    is carried into the instance: the admission is the one made under the limit, and the evaluation
    and the plan document work."""
    import formulation.placement.evaluate as ev
    from daemonproc import CLUSTER_YAML

    cluster = load_scenario(write_cluster(tmp_path, CLUSTER_YAML.replace("gpu_type: H20, count: 4", "gpu_type: H20, count: 6")))
    specs = {n: JobSpec.model_validate(job(n, slo={"ratio_to_solo": 2.0})) for n in "abc"}
    placer = WeavePlacer(cluster)
    g = Group("g1", "H20", ("h20-1", "h20-2", "h20-3"), "H800", ("h800-1",), ("a", "b"), 0.0, 0.0, (("h20-1", "h20-2"), ("h20-3",)))
    ctx = PlanningContext(cluster, specs)
    under = placer.admit(ctx, Placement((g,)), "c")
    assert under.placement is not None, under.reason
    monkeypatch.setattr(ev, "OWN_MAX_JOBS", 2)
    assert Index(placer._instance(ctx, ["a", "b", "c"])).own_left_out == 3
    adm = placer.admit(ctx, Placement((g,)), "c")  # raised the ValueError above
    assert adm.placement is not None, adm.reason
    assert (adm.move, adm.placement.as_dict()) == (under.move, under.placement.as_dict())
    got, bad = placer.evaluate(ctx, adm.placement)
    assert bad == [] and sorted(got.jobs()) == ["a", "b", "c"]
    assert placer.plan_document(ctx, adm.placement, {})["kind"] == "PlacementPlan"


def test_a_job_is_admitted_beside_a_group_that_holds_a_stuck_job(tmp_path):
    """The repair leaves a stuck job where it is and admits the members it evicted elsewhere; the
    greedy's own-sized joins read the stuck member's own count, which no count gives ('OverflowError:
    cannot convert float infinity to integer' in every cycle of the replay)."""
    from daemonproc import CLUSTER_YAML

    cluster = load_scenario(write_cluster(tmp_path, CLUSTER_YAML.replace("gpu_type: H20, count: 4", "gpu_type: H20, count: 6")))
    specs = {n: JobSpec.model_validate(job(n, slo={"ratio_to_solo": 2.0})) for n in "abc"}
    placer = WeavePlacer(cluster)
    g = Group("g1", "H20", ("h20-1", "h20-2", "h20-3"), "H800", ("h800-1",), ("a", "b"), 0.0, 0.0, (("h20-1", "h20-2"), ("h20-3",)))
    ctx = PlanningContext(cluster, specs, {"b": STUCK})
    adm = placer.admit(ctx, Placement((g,)), "c")
    assert adm.placement is not None and "c" in adm.placement.jobs(), adm.reason
    assert shape(next(x for x in adm.placement.groups if x.id == "g1")) == shape(g)


def test_an_own_sized_group_whose_members_leave_pool_nodes_free_is_judged_as_it_stands(tmp_path):
    """An own-sized group whose members' nodes do not fill its rollout pool (a on 2 nodes, b on 1, in a
    pool of 4) was judged with every member re-sized to its own count at the current estimates; with b's
    SLO out of reach at any count (a stuck job), 'OverflowError: cannot convert float infinity to integer'
    in build_plan (the weave-trace-60 replay with --sim-slowdown 1.3:1.6 exited at its 24th cycle, after an
    admission grew such a group's pool). Each member now keeps the nodes it holds; the group is judged as it
    stands, b's miss named."""
    from daemonproc import CLUSTER_YAML

    cluster = load_scenario(write_cluster(tmp_path, CLUSTER_YAML.replace("gpu_type: H20, count: 4", "gpu_type: H20, count: 6")))
    specs = {n: JobSpec.model_validate(job(n, slo={"ratio_to_solo": 2.0})) for n in "ab"}
    placer = WeavePlacer(cluster)
    g = Group("g1", "H20", ("h20-1", "h20-2", "h20-3", "h20-4"), "H800", ("h800-1",), ("a", "b"), 0.0, 0.0,
              (("h20-1", "h20-2"), ("h20-4",)))
    for factors in ({}, {"b": STUCK}):
        ctx = PlanningContext(cluster, specs, factors)
        got, bad = placer.evaluate(ctx, Placement((g,)))
        assert [shape(x) for x in got.groups] == [shape(g)]
        assert ("b" in {v.where for v in bad}) == bool(factors), bad
