"""A PlacementPlan's claims are held to the scenario (audit 40): a plan whose numbers are out of
bounds (the document schema) or say what the scenario does not (the solver-free checker: a pool's
GPUs per node, GPUs and nodes used, a member's SLO and slack, the lower bound, the move cost, the
solve record's gap) is refused by ``validate-plan``, by ``apply`` (dry run or not: it used to end
in ``internal error: ValidationError ... ExecutorTarget``) and by ``simulate --plan`` (which
checked nothing: a member of another name or an order naming a ghost ended in ``internal error:
KeyError``, a pool of size -3 or an unknown node was simulated). Each refusal: exit status 2, the
field or job named, no traceback, nothing written. Through ``planner.cli.main`` (the entry point
``python -m planner`` runs) to stay fast, and the audit's own command lines in a subprocess."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

from tests.hardening.test_apply_precheck import TINY, run


def _g0(d: dict) -> dict:
    return d["body"]["groups"][0]


def _m0(d: dict) -> dict:
    return _g0(d)["members"][0]


def _first(d: dict) -> str:
    return _m0(d)["job"]


def _other_node(d: dict) -> None:
    _g0(d)["rollout_pool"]["nodes"][0] = "zz-9"


# (id, mutation, text the refusal must hold: a callable of the good plan where it names a job)
FALSE_CLAIMS = [
    ("gpus-per-node-1000", lambda d: _g0(d)["rollout_pool"].update(gpus_per_node=1000), "gpus_per_node"),
    ("slo-1e9", lambda d: _m0(d).update(slo_s=1e9), "slo_s"),
    ("pool-gpus-1e30", lambda d: _g0(d)["rollout_pool"].update(gpus=10**30), "rollout_pool.gpus"),
    ("gpus-used-1e30", lambda d: d["body"]["gpus_used"].update(H20=10**30), "gpus_used.H20"),
    ("nodes-used-negative", lambda d: d["body"]["nodes_used"].update(H20=-5), "nodes_used.H20"),
    ("lower-bound-1e300", lambda d: d["body"].update(lower_bound_per_hour=1e300), "lower_bound_per_hour"),
    ("rollout-busy-55", lambda d: _g0(d).update(rollout_busy=55.0), "rollout_busy"),
    ("gap-negative", lambda d: d["solver"].update(gap=-5), "solver.gap"),
    # within the bounds, but not what the scenario gives
    ("pool-gpus-off-by-one", lambda d: _g0(d)["rollout_pool"].update(gpus=_g0(d)["rollout_pool"]["gpus"] + 1), "gpus is"),
    ("gpus-used-off", lambda d: d["body"]["gpus_used"].update(H20=d["body"]["gpus_used"]["H20"] + 1), "gpus_used.H20"),
    ("nodes-used-off", lambda d: d["body"]["nodes_used"].update(H20=d["body"]["nodes_used"]["H20"] + 1), "nodes_used.H20"),
    ("lower-bound-above-cost", lambda d: d["body"].update(lower_bound_per_hour=d["body"]["cost_per_hour"] + 8), "lower_bound_per_hour"),
    ("move-cost", lambda d: d["body"].update(move_cost_per_hour=5.0), "move_cost_per_hour"),
    ("slack", lambda d: _m0(d).update(slack_s=_m0(d)["slack_s"] + 3), "slack_s"),
    ("gap-above-one", lambda d: d["solver"].update(gap=2.0), "solver.gap"),
]

BROKEN = [
    ("member-renamed", lambda d: _m0(d).update(job="ghost"), "ghost"),
    ("member-removed", lambda d: _g0(d)["members"].pop(0), _first),
    ("order-ghost", lambda d: _g0(d).update(order=["ghost"]), "ghost"),
    ("pool-size-negative", lambda d: _g0(d)["rollout_pool"].update(size=-3), "rollout_pool.size"),
    ("unknown-node", _other_node, "zz-9"),
    ("member-twice", lambda d: _g0(d)["members"].append(copy.deepcopy(_m0(d))), _first),
]

CASES = FALSE_CLAIMS + BROKEN


def _write(good: dict, tmp_path: Path, mutate) -> tuple[Path, str]:
    d = copy.deepcopy(good)
    mutate(d)
    p = tmp_path / "x.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p, ""


def _needle(expect, good: dict) -> str:
    return expect(good) if callable(expect) else expect


def _refused(rc: int, out: str, needle: str) -> None:
    assert rc == 2, out
    assert needle in out, out
    assert "Traceback" not in out and "internal error" not in out, out


@pytest.mark.parametrize("cid,mutate,expect", CASES, ids=[c[0] for c in CASES])
def test_validate_plan_refuses_it(good_plan, tmp_path, cid, mutate, expect):
    p, _ = _write(good_plan, tmp_path, mutate)
    before = sorted(tmp_path.iterdir())
    rc, out = run(["validate-plan", TINY, str(p)])
    _refused(rc, out, _needle(expect, good_plan))
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("cid,mutate,expect", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "apply"])
def test_apply_refuses_it_before_anything_is_opened(good_plan, tmp_path, cid, mutate, expect, dry):
    p, _ = _write(good_plan, tmp_path, mutate)
    before = sorted(tmp_path.iterdir())
    rc, out = run(["apply", str(p), "--scenario", TINY, "--backend", "sim", "--sim-state", str(tmp_path / "st" / "s.sqlite"),
                   *(["--dry-run"] if dry else [])])
    _refused(rc, out, _needle(expect, good_plan))
    assert sorted(tmp_path.iterdir()) == before, "nothing written (no sim state, no journal)"


@pytest.mark.parametrize("cid,mutate,expect", CASES, ids=[c[0] for c in CASES])
def test_simulate_plan_refuses_it(good_plan, tmp_path, cid, mutate, expect):
    p, _ = _write(good_plan, tmp_path, mutate)
    before = sorted(tmp_path.iterdir())
    rc, out = run(["simulate", TINY, "--plan", str(p), "--iterations", "8", "--out", str(tmp_path / "sim")])
    _refused(rc, out, _needle(expect, good_plan))
    assert sorted(tmp_path.iterdir()) == before, "nothing written"


def test_the_good_plan_passes_all_three(good_plan, tmp_path):
    p, _ = _write(good_plan, tmp_path, lambda d: None)
    rc, out = run(["validate-plan", TINY, str(p)])
    assert rc == 0 and "every constraint holds" in out, out
    rc, out = run(["apply", str(p), "--scenario", TINY, "--dry-run", "--sim-state", str(tmp_path / "s.sqlite")])
    assert rc == 0, out
    rc, out = run(["simulate", TINY, "--plan", str(p), "--iterations", "8", "--out", str(tmp_path / "sim")])
    assert rc == 0 and (tmp_path / "sim" / "summary.json").exists(), out


def test_simulate_holds_a_plan_of_a_changed_scenario_to_its_structure_only(good_plan, tmp_path):
    """A scenario edited since the plan (here: looser SLOs) gives other SLOs and slack than the plan
    records: simulated with the note, as before; a broken structure is still refused."""
    sc = yaml.safe_load(Path(TINY).read_text())
    for j in sc["jobs"]:
        j["slo"] = {"ratio_to_solo": 3.0}
    scp = tmp_path / "changed.yaml"
    scp.write_text(yaml.safe_dump(sc, sort_keys=False))
    p, _ = _write(good_plan, tmp_path, lambda d: None)
    rc, out = run(["simulate", str(scp), "--plan", str(p), "--iterations", "8"])
    assert rc == 0 and "scenario changed" in out, out
    p, _ = _write(good_plan, tmp_path, _other_node)
    rc, out = run(["simulate", str(scp), "--plan", str(p), "--iterations", "8", "--out", str(tmp_path / "sim")])
    _refused(rc, out, "zz-9")
    assert not (tmp_path / "sim").exists()


def test_a_target_the_executor_refuses_is_exit_2_naming_the_field(good_plan, tmp_path):
    """The fallback behind the check: a PlacementPlan that gives an ExecutorTarget its schema
    refuses is a UserError naming the target's field and the fix (was an internal error)."""
    from planner.apply.documents import read_target
    from planner.errors import UserError

    p, _ = _write(good_plan, tmp_path, lambda d: _g0(d)["rollout_pool"].update(gpus_per_node=1000))
    with pytest.raises(UserError) as exc:
        read_target(str(p), lambda: None, TINY)
    text = str(exc.value)
    assert "gpus_per_worker" in text and "validate-plan" in text, text


def test_the_audit_command_lines(good_plan, tmp_path):
    """``python -m planner`` itself: the audit's false gpus_per_node (validate-plan said every
    constraint holds, apply --dry-run ended in an internal error) and its renamed member (simulate
    --plan ended in an internal error)."""
    p, _ = _write(good_plan, tmp_path, lambda d: _g0(d)["rollout_pool"].update(gpus_per_node=1000))
    r = run_cli("validate-plan", TINY, str(p))
    assert r.returncode == 2 and "gpus_per_node" in r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr
    r = run_cli("apply", str(p), "--scenario", TINY, "--dry-run", "--backend", "sim", "--sim-state", str(tmp_path / "st2" / "s.sqlite"))
    assert r.returncode == 2 and "gpus_per_node" in r.stderr and "internal error" not in r.stderr + r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "st2").exists()
    p, _ = _write(good_plan, tmp_path, lambda d: _m0(d).update(job="ghost"))
    r = run_cli("simulate", TINY, "--plan", str(p), "--out", str(tmp_path / "sim"))
    assert r.returncode == 2 and "ghost" in r.stderr and "Traceback" not in r.stderr + r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "sim").exists()


@pytest.mark.parametrize("field,value", [("cost_per_hour", True), ("cycle_time_s", "16.8")])
def test_a_plan_number_given_as_a_boolean_or_text_is_refused(good_plan, tmp_path, field, value):
    """``cost_per_hour: true`` was read as 1 $/h, a quoted cycle time as its number."""
    doc = copy.deepcopy(good_plan)
    doc["body"]["groups"][0][field] = value
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    rc, out = run(["validate-plan", TINY, str(path)])
    assert rc == 2 and f"groups.0.{field}" in out and "Traceback" not in out, out[-1500:]
