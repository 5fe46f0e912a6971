"""Joins into a group whose members have no time at the family's smallest rollout pool (outside audit E).

The greedy packer keeps, per family of configurations (one rollout type, one training pool, rollout pools by size),
each group's training-ring load ``sum bs``. It was read at the family's *smallest* rollout pool, where a member whose
rollout table has no entry for that size has no time at all (inf): the group was then closed to every join, and a
newcomer without that size could not join either. ``planner admit`` refused a job (exit 2, "fleet short") that
fills the bubble of a lone member's group at +0 $/h (found on a random distinct-job instance of four jobs; here the
smallest form). The training ring does not depend on the rollout pool beyond the warm-switch cap, so it is now read
at the largest finite value over the family's pools (the cap is largest at the smallest pool a member has a time at).
"""

from __future__ import annotations

import json

from formulation.placement.check import check
from formulation.placement.evaluate import Group, Index, Solution
from formulation.placement.greedy import Packer, greedy
from formulation.placement.instance import PlacementInstance
from formulation.placement.plan import build_plan
from tests.conftest import run_cli

INSTANCE = {
    "name": "table-sizes",
    "pool_types": {"R": {"gpus_per_node": 8, "price_per_gpu_hour": 1.0, "dram_gb": 2048, "count": 3},
                   "T": {"gpus_per_node": 8, "price_per_gpu_hour": 2.0, "dram_gb": 2048, "count": 2}},
    "jobs": [  # a and b have no rollout time on 1 R node; c makes the family's smallest pool 1 R node
        {"name": "a", "slo_s": 200.0, "rollout_s": {"R": {"2": 100.0, "3": 80.0}}, "train_s": {"T": {"2": 20.0}}},
        {"name": "b", "slo_s": 300.0, "rollout_s": {"R": {"2": 30.0, "3": 25.0}}, "train_s": {"T": {"2": 50.0}}},
        {"name": "c", "slo_s": 1000.0, "rollout_s": {"R": {"1": 10.0}}, "train_s": {"T": {"2": 10.0}}},
    ],
}


def _idx() -> Index:
    return Index(PlacementInstance.model_validate(INSTANCE))


def _alone(idx: Index, j: int, rollout_nodes: int) -> int:
    return next(k for k, c in enumerate(idx.configs)
                if not c.pinned and not c.own and c.rollout_nodes == rollout_nodes and idx.ok[k, j])


def test_a_newcomer_fills_the_bubble_of_a_member_without_the_smallest_pool() -> None:
    idx = _idx()
    a, b = idx.names.index("a"), idx.names.index("b")
    for per_pair in (True, False):
        pk = Packer(idx, per_pair=per_pair, own_joins=True)
        pk.add_groups([Group(_alone(idx, a, 2), (a,), "g0")])
        adm = pk.best_move(b)
        assert adm.move == "fill-bubble" and adm.marginal_cost == 0.0, (per_pair, adm)
        pk.apply(adm)
        plan = build_plan(idx, pk.solution(), [])
        bad = [v for v in check(idx.inst, plan) if v.where != "job=c"]  # (c is not in the plan)
        assert not bad, bad
        assert plan.cost_per_hour == 2 * 8 * 1.0 + 2 * 8 * 2.0


def test_one_group_at_a_time_gives_the_same_join() -> None:
    idx = _idx()
    a, b = idx.names.index("a"), idx.names.index("b")
    pk = Packer(idx, per_pair=True, own_joins=True)
    pk.add_group(_alone(idx, a, 2), (a,))  # the row filled one group at a time (not the vectorised pass)
    adm = pk.best_move(b)
    assert adm.move == "fill-bubble" and adm.marginal_cost == 0.0, adm


def test_the_greedy_places_both_jobs() -> None:
    idx = _idx()
    a, b = idx.names.index("a"), idx.names.index("b")
    sol: Solution = greedy(idx, [a, b])
    assert sol.unplaced == [idx.names.index("c")] and [g.members for g in sol.groups] == [(a, b)]  # c: no T node left


def test_planner_admit_fills_the_bubble(tmp_path) -> None:
    inst = tmp_path / "inst.json"
    inst.write_text(json.dumps(INSTANCE))
    cur = {**INSTANCE, "jobs": [j for j in INSTANCE["jobs"] if j["name"] == "a"]}
    part = tmp_path / "cur.json"
    part.write_text(json.dumps(cur))
    assert run_cli("plan", str(part), "--backend", "greedy", "--time-limit", "5", "--out", str(tmp_path / "p.json")).returncode == 0
    r = run_cli("admit", str(inst), "--current", str(tmp_path / "p.json"), "--job", "b", "--out", str(tmp_path / "q.json"))
    assert r.returncode == 0, r.stderr
    assert "fill-bubble" in r.stderr and "+0.00 $/h" in r.stderr
    v = run_cli("validate-plan", str(inst), str(tmp_path / "q.json"))
    assert v.returncode == 0, v.stdout
