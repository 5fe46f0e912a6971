"""A current plan made for another input (`plan --current`, `admit --current`): refused when its pins name
nodes the input's cluster lacks or it places none of the input's jobs; jobs of it the input no longer
has are said. Before (an outside audit, session 45) the pins were renamed onto the other cluster and
groups dropped in silence."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import SCENARIOS, run_cli

TINY = SCENARIOS / "ci" / "tiny-2jobs.yaml"


def _plan(tmp_path):
    out = tmp_path / "plan.yaml"
    r = run_cli("plan", str(TINY), "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_a_plan_for_another_cluster_is_refused_by_admit(tmp_path):
    plan = _plan(tmp_path)
    sc = yaml.safe_load(TINY.read_text())
    sc["cluster"]["node_groups"][0]["name"] = "x20"  # the same GPU type, its nodes named otherwise
    sc["jobs"].append(dict(sc["jobs"][0], name="small-c"))
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(sc))
    out = tmp_path / "adm.yaml"
    r = run_cli("admit", str(other), "--current", str(plan), "--job", "small-c", "--out", str(out))
    assert r.returncode == 2 and "h20-0" in r.stderr and "does not have" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists()


def test_a_plan_placing_none_of_the_inputs_jobs_is_refused_by_plan(tmp_path):
    plan = _plan(tmp_path)
    out = tmp_path / "p.yaml"
    r = run_cli("plan", str(SCENARIOS / "weave-micro.yaml"), "--current", str(plan), "--out", str(out))
    assert r.returncode == 2 and "places none" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not out.exists()


def test_a_job_the_input_no_longer_has_is_said(tmp_path):
    plan = _plan(tmp_path)
    doc = yaml.safe_load(plan.read_text())
    for g in doc["body"]["groups"]:
        for m in g["members"]:
            if m["job"] == "small-a":
                m["job"] = "ghost"
    ghost = tmp_path / "ghost.yaml"
    ghost.write_text(yaml.safe_dump(doc))
    sc = yaml.safe_load(TINY.read_text())
    small = tmp_path / "small.yaml"
    sc["jobs"] = [j for j in sc["jobs"] if j["name"] != "small-a"] + [dict(sc["jobs"][0], name="small-c")]
    small.write_text(yaml.safe_dump(sc))
    r = run_cli("admit", str(small), "--current", str(ghost), "--job", "small-c", "--out", str(tmp_path / "a.yaml"))
    assert r.returncode == 0, r.stderr
    assert "note: the current plan's job(s) ghost are not in" in r.stdout + r.stderr, (r.stdout, r.stderr)


MIXED = SCENARIOS / "ci" / "tiny-mixed.yaml"


def _dup_ids(tmp_path, drop: str | None = None):
    """tiny-mixed's plan (three groups) with its second group renamed to the first's id; ``drop``: a
    job taken out of it (its group too), so that `admit` has one to place."""
    out = tmp_path / "plan.yaml"
    r = run_cli("plan", str(MIXED), "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(out.read_text())
    groups = doc["body"]["groups"]
    if drop is not None:
        groups[:] = [g for g in groups if [m["job"] for m in g["members"]] != [drop]]
    assert len(groups) >= 2, groups
    groups[1]["id"] = groups[0]["id"]
    bad = tmp_path / "dup-ids.yaml"
    bad.write_text(yaml.safe_dump(doc, sort_keys=False))
    return bad, groups[0]["id"]


def test_a_current_plan_with_a_group_id_twice_is_refused_by_plan(tmp_path):
    """Before, `plan --current` kept both ids and wrote (exit 0) a plan that validate-plan and apply
    refuse (rule group-id)."""
    bad, gid = _dup_ids(tmp_path)
    out = tmp_path / "new.yaml"
    r = run_cli("plan", str(MIXED), "--current", str(bad), "--out", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"group id(s) {gid} more than once" in r.stderr and "body.groups" in r.stderr, r.stderr
    assert not out.exists()


def test_a_current_plan_with_a_group_id_twice_is_refused_by_admit(tmp_path):
    bad, gid = _dup_ids(tmp_path, drop="j3")
    out = tmp_path / "adm.yaml"
    r = run_cli("admit", str(MIXED), "--current", str(bad), "--job", "j3", "--out", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"group id(s) {gid} more than once" in r.stderr, r.stderr
    assert not out.exists()


OWN = SCENARIOS / "ci" / "tiny-own-counts.yaml"


def _own(tmp_path, edit, extra: dict | None = None):
    """tiny-own-counts' plan (one own-sized group: wide on 2 H20 nodes, narrow on 1, sharing 2 H800)
    edited by ``edit``; the scenario with a third job ``extra`` (default: a second narrow) for admit."""
    out = tmp_path / "plan.yaml"
    r = run_cli("plan", str(OWN), "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(out.read_text())
    edit(doc["body"]["groups"][0])
    bad = tmp_path / "edited.yaml"
    bad.write_text(yaml.safe_dump(doc, sort_keys=False))
    sc = yaml.safe_load(OWN.read_text())
    sc["jobs"].append(extra or dict(sc["jobs"][1], name="narrow2"))
    sc["cluster"]["node_groups"][1]["count"] = 6
    three = tmp_path / "three.yaml"
    three.write_text(yaml.safe_dump(sc, sort_keys=False))
    return bad, three


def _size_5(g):
    g["rollout_pool"]["size"] = 5  # 3 nodes listed


@pytest.mark.parametrize("command", ["admit", "plan"])
def test_a_current_pool_whose_size_is_not_its_nodes_is_refused(tmp_path, command):
    """A rollout pool edited to size 5 over its 3 listed nodes: admit took the group as 5 nodes and wrote
    (exit 0) a plan paying for two idle H20 nodes, printing "fill-bubble ... +0.00 $/h" beside
    "cost 56.00 -> 72.00 $/h"."""
    bad, three = _own(tmp_path, _size_5)
    out = tmp_path / "new.yaml"
    extra = ["--job", "narrow2"] if command == "admit" else []
    r = run_cli(command, str(three), "--current", str(bad), *extra, "--out", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "body.groups.0.rollout_pool" in r.stderr and "size 5 but lists 3 distinct node(s)" in r.stderr, r.stderr
    assert not out.exists()


def test_a_current_plan_listing_a_job_twice_is_refused_by_admit_naming_it(tmp_path):
    """Before: "group(s) g0 of the current plan no longer fit this input (pools or SLOs changed)"."""
    def twice(g):
        g["members"].append(dict(g["members"][1]))

    bad, three = _own(tmp_path, twice)
    out = tmp_path / "new.yaml"
    r = run_cli("admit", str(three), "--current", str(bad), "--job", "narrow2", "--out", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "job(s) narrow as a member more than once" in r.stderr and "placed-once" in r.stderr, r.stderr
    assert not out.exists()


def test_admit_prints_the_current_cost_of_its_pools(tmp_path):
    """A pool with a fourth H20 node whose recorded cost was left at 56 $/h: admit printed "cost 56.00 ->
    96.00 $/h" after "+32.00 $/h"; the cost is now the pools' (64), the recorded one said beside it."""
    def wider(g):
        g["rollout_pool"].update(nodes=[*g["rollout_pool"]["nodes"], "h20-5"], size=4, gpus=32)

    other = {"name": "other", "model": "qwen2.5-1.5b", "slo": {"ratio_to_solo": 1.3},
             "rollout": {"batch_prompts": 64, "group_size": 8, "max_response_tokens": 4096, "gpu_types": ["H800"]},
             "trainer": {"nodes": 1, "gpu_types": ["H800"]}}
    bad, three = _own(tmp_path, wider, other)
    out = tmp_path / "new.yaml"
    r = run_cli("admit", str(three), "--current", str(bad), "--job", "other", "--out", str(out))
    assert r.returncode == 0, r.stderr
    new = yaml.safe_load(out.read_text())["body"]["cost_per_hour"]
    import re

    added = float(re.search(r"admitted other: new-group \(.*\), \+([0-9.]+) \$/h", r.stderr).group(1))
    assert f"cost 64.00 -> {new:.2f} $/h (the current plan records 56.00 $/h; its pools cost 64.00)" in r.stderr, r.stderr
    assert abs(64.0 + added - new) < 1e-6


def test_admit_names_why_a_current_group_no_longer_fits(tmp_path):
    """The own-sized group's first member pinned to one of the two shared training nodes: the group is not one the
    planner builds, and admit said only "(pools or SLOs changed)"; it now gives the
    checker's rule and where (an outside audit, session 54)."""
    def swap(g):
        g["members"][0]["train_nodes"] = g["members"][0]["train_nodes"][:1]

    bad, three = _own(tmp_path, swap)
    out = tmp_path / "new.yaml"
    r = run_cli("admit", str(three), "--current", str(bad), "--job", "narrow2", "--out", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "of the current plan no longer fit this input (" in r.stderr and "[job=" in r.stderr, r.stderr
    assert "(pools or SLOs changed)" not in r.stderr and not out.exists()
