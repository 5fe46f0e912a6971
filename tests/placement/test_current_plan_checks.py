"""A current plan made for another input (`plan --current`, `admit --current`): refused when its pins name
nodes the input's cluster lacks or it places none of the input's jobs; jobs of it the input no longer
has are said. Before (an outside audit, session 45) the pins were renamed onto the other cluster and
groups dropped in silence."""

from __future__ import annotations

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
