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
