"""Sweep specifications, the grid, and what each key does to the forecast (in process)."""

from __future__ import annotations

import pytest

from planner.errors import UserError
from planner.whatif import sweep as sw
from tests.whatif.whatif_helpers import capacity_instance

TYPES = ["H100", "H20", "H800"]


@pytest.mark.parametrize("spec, message", [
    ("price.H800", "has no '='"),
    ("price.H800=1:2", "needs START:STOP:STEPS"),
    ("price.H800=a:2:3", "START 'a' is not a number"),
    ("price.H800=1:inf:3", "must be finite"),
    ("price.H800=1:2:x", "STEPS 'x' is not a whole number"),
    ("price.H800=1:2:0", "STEPS must be at least 1"),
    ("price.H800=-1:2:3", "must be positive"),
    ("slo=0:1:3", "must be positive"),
    ("max_nodes.H800=1:2:3", "max_nodes takes whole numbers"),
    ("max_nodes.H800=-2:2:3", "max_nodes takes whole numbers"),
    ("nodes.H800=1:2:3", "unknown sweep key 'nodes.H800'"),
])
def test_bad_specs_name_the_problem(spec, message):
    with pytest.raises(UserError) as e:
        sw.parse(spec, TYPES)
    assert message in e.value.render()
    assert "--sweep" in e.value.render()


def test_duplicate_keys_and_oversized_grids_are_refused():
    with pytest.raises(UserError, match="swept twice"):
        sw.parse_all(["slo=1:2:2", "slo=1:3:2"], TYPES)
    with pytest.raises(UserError, match="more than"):
        sw.parse_all(["slo=1:2:100", "jobs=1:2:100"], TYPES)


def test_values_and_snake_order():
    s = sw.parse("price.H800=1.5:3.0:7", TYPES)
    assert s.values == pytest.approx((1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0))
    assert sw.parse("max_nodes.H20=4:12:5", TYPES).values == (4.0, 6.0, 8.0, 10.0, 12.0)
    assert sw.parse("budget=300:300:1", TYPES).values == (300.0,)
    grid = sw.points([sw.parse("slo=1:2:2", TYPES), sw.parse("jobs=1:3:3", TYPES)])
    assert [(p["slo"], p["jobs"]) for p in grid] == [(1, 1), (1, 2), (1, 3), (2, 3), (2, 2), (2, 1)]
    for a, b in zip(grid, grid[1:]):  # consecutive points differ in one key
        assert sum(a[k] != b[k] for k in a) == 1


def test_instance_keys_change_what_they_name():
    inst = capacity_instance(2, 4, limits=(6, 6), owned=(1, 0))
    grown = sw.instance_for(inst, {"jobs": 2.5, "slo": 0.5, "price.B": 3.0, "budget": 500.0, "max_nodes.A": 2})
    names = [j.name for j in grown.placement.jobs]
    assert names == ["j0", "j1", "j2", "j3", "j0#2", "j1#2", "j2#2", "j3#2", "j0#3", "j1#3"]
    base = {j.name: j for j in inst.placement.jobs}
    for j in grown.placement.jobs:
        b = base[j.name.split("#")[0]]
        assert j.slo_s == pytest.approx(0.5 * b.slo_s) and j.rollout_s == b.rollout_s
        assert grown.colocated[j.name] == inst.colocated[b.name]
    assert grown.placement.pool_types["B"].price_per_gpu_hour == 3.0
    assert grown.budget_per_hour == 500.0
    assert grown.limit("A") == 1 + 2 and grown.owned_nodes("A") == 1  # max_nodes is on top of the owned nodes
    assert len(grown.placement.node_names("A")) == 3


def test_response_growth_re_estimates_phase_times():
    from planner.instances.capacity import compile_capacity
    from planner.schema import load_scenario
    from tests.conftest import SCENARIOS

    sc = load_scenario(SCENARIOS / "procurement.yaml")
    sc = sc.model_copy(update={"jobs": sc.jobs[:2]})
    base = compile_capacity(sc)
    longer = compile_capacity(sw.scenario_for(sc, {"response": 2.0}))
    for a, b in zip(base.placement.jobs, longer.placement.jobs):
        assert b.rollout_s["H20"][1] > 1.5 * a.rollout_s["H20"][1]
        assert b.train_s["H800"][1] > a.train_s["H800"][1]
        assert b.slo_s > a.slo_s  # a ratio SLO follows the solo time
    assert sw.scenario_for(sc, {"price.H20": 2.0}) is sc


def test_a_type_to_buy_needs_a_node_group_saying_what_its_nodes_are():
    from planner.instances.capacity import fleet_limits
    from planner.schema import load_scenario
    from tests.conftest import SCENARIOS

    sc = load_scenario(SCENARIOS / "procurement.yaml")
    groups = [g for g in sc.cluster.node_groups if g.gpu_type != "H200"]
    sc = sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"node_groups": groups})})
    with pytest.raises(UserError) as e:
        fleet_limits(sc)
    text = e.value.render()
    assert "gpu_types.H200.max_nodes" in text and "add a node group with gpu_type: H200 and count: 0" in text
    limits = fleet_limits(load_scenario(SCENARIOS / "procurement.yaml"))
    assert limits == {"H20": (0, 32), "H800": (0, 32), "H100": (0, 32), "H200": (0, 16)}


def test_unlimited_types_grow_with_the_job_mix_and_stay_within_the_schema():
    """Without max_nodes a type may grow by what the jobs could use: at most MAX_NODES (257 jobs asked
    for 4,112 new nodes and whatif failed with an internal error), and with a ``jobs`` sweep by what
    the grown mix could use (a 2-job mix grown 64x was capped at its own 2 jobs' 32 new nodes)."""
    from planner.instances.capacity import largest_fleet, fleet_limits
    from planner.schema import load_scenario
    from planner.schema.scenario import MAX_NODES
    from tests.conftest import SCENARIOS

    sc = load_scenario(SCENARIOS / "weave-micro.yaml")
    many = sc.model_copy(update={"jobs": [sc.jobs[0].model_copy(update={"name": f"j{i}"}) for i in range(300)]})
    limits = fleet_limits(many)
    assert all(limit - owned == MAX_NODES for owned, limit in limits.values()), limits
    big = largest_fleet(many)  # (built the node groups: was a ValidationError on count)
    assert max(g.count for g in big.cluster.node_groups) <= MAX_NODES
    two = sc.model_copy(update={"jobs": sc.jobs[:2]})
    grown = sw.compile_limits(two, [sw.parse("jobs=64:64:1", sorted(fleet_limits(two)))])
    for owned, limit in fleet_limits(grown).values():
        assert limit - owned == 16 * 128, (owned, limit)
    assert sw.compile_limits(two, [sw.parse("jobs=0.5:1:2", sorted(fleet_limits(two)))]).gpu_types == two.gpu_types
