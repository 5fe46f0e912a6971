"""Gaps left by rounds 5 and 6 (docs/security.md, Round 6 (d)): a flow-style YAML snapshot reported
as bad JSON by ``realloc``; the daemon starting with a read-only executor file beside its state
(every apply then raised and was retried each cycle); ``validate-plan`` taking a plan's
``moved_jobs``, ``critical`` and ``solver.phase_time_estimate`` on trust. Each: exit 2, the file
or field named with the fix, no traceback, nothing written."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import ROOT, _refused
from tests.conftest import unprivileged

MICRO = ROOT / "scenarios" / "weave-micro.yaml"
HETERO = ROOT / "scenarios" / "realloc" / "hetero-h20-h100.json"  # the snapshots tests/realloc/test_cli.py plans on
HETERO_SCENARIO = ROOT / "scenarios" / "realloc" / "hetero.yaml"


# ------------------------------------------------------------------ 1. a flow-style YAML snapshot
def _realloc(snapshots: Path, tmp_path: Path) -> tuple[int, str]:
    rc, output, _cpu, _rss = run_inprocess(["realloc", str(snapshots), "--scenario", str(HETERO_SCENARIO), "--backend", "cpsat",
                                            "--out", str(tmp_path / f"{snapshots.stem}.plan.json")])
    return rc, output


def test_a_flow_style_yaml_snapshot_is_read_as_yaml_and_planned_as_the_block_style_one(tmp_path):
    """``{snapshots: [{job: ...}]}`` (YAML, starting with '{') was refused as "cannot parse as JSON"."""
    data = json.loads(HETERO.read_text())
    (tmp_path / "block.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "flow.yaml").write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=True))
    flow = (tmp_path / "flow.yaml").read_text()
    assert flow.startswith("{") and "\n" in flow.strip()
    with pytest.raises(json.JSONDecodeError):
        json.loads(flow)  # YAML, not JSON
    seen, plans = [], []
    for name in ("block", "flow"):
        rc, output = _realloc(tmp_path / f"{name}.yaml", tmp_path)
        assert rc == 0, output[-2000:]
        output = re.sub(r"status (\w+), [\d.]+ m?s", r"status \1", output)  # (the solve's own time)
        seen.append("".join(output.split()).replace(f"{name}.plan.json", "OUT"))  # (the tables wrap a long path)
        body = json.loads((tmp_path / f"{name}.plan.json").read_text())["body"]
        body.pop("timings_ms")
        plans.append(body)
    assert seen[0] == seen[1]
    assert plans[0] == plans[1] and plans[0]["committed"]


def test_a_broken_flow_style_snapshot_is_a_yaml_problem_and_a_json_file_stays_json(tmp_path):
    (tmp_path / "flow.yaml").write_text("{snapshots: [{job: rl,\n  time_s: 1,\n  components: [}]}\n")
    rc, output = _realloc(tmp_path / "flow.yaml", tmp_path)
    _refused(rc, output, 0, f"{tmp_path}/flow.yaml:3", "not valid YAML")
    assert "JSON" not in output, output[-2000:]
    (tmp_path / "flow.json").write_text("{job: rl, time_s: 1}\n")  # a file named .json is JSON
    rc, output = _realloc(tmp_path / "flow.json", tmp_path)
    _refused(rc, output, 0, "flow.json:1", "cannot parse as JSON")
    assert not list(tmp_path.glob("*.plan.json")), "nothing written"


def test_safeload_auto_is_yaml_as_its_docstring_says():
    """``parse(fmt="auto")`` is YAML whatever the text (its docstring said JSON for text starting with
    '{'); picking JSON by the text is :func:`safeload.parse_json_or_yaml`'s."""
    from planner import safeload
    from planner.errors import UserError

    assert "YAML whatever the text" in (safeload.parse.__doc__ or "")
    doc = safeload.parse('{"a": [1, 2]}\n', "x.json")
    assert doc.data == {"a": [1, 2]} and doc.lines  # read by the YAML reader: line numbers
    assert safeload.parse_json_or_yaml('{"a": [1, 2]}', "x").lines == {}  # JSON syntax: the JSON reader
    assert safeload.parse_json_or_yaml("{a: [1, 2]}", "x.yaml").data == {"a": [1, 2]}
    with pytest.raises(UserError, match="cannot parse as JSON"):
        safeload.parse_json_or_yaml("{a: [1, 2]}", "x.JSON")


# ------------------------------------------------------------------ 3. read-only executor files at the daemon's start

def _unprivileged() -> list[str]:
    return unprivileged('the daemon')


def test_the_daemon_refuses_a_read_only_executor_file_at_start_naming_it_and_the_chmod(tmp_path):
    """A read-only STATE.journal, STATE.executor-sim or STATE.sim was opened read-only: every apply
    raised and was retried each cycle. Now the start is refused, before the state file is created."""
    from planner.daemon.adapters import executor as ex
    from tests.daemon.daemonproc import DEADLINE_S, env, write_cluster

    prefix = _unprivileged()
    cluster = write_cluster(tmp_path)
    state = tmp_path / "st.sqlite"
    files = [(".sim", "simulated cluster's state")]
    if ex.available() is None:
        files += [(".journal", "executor's journal"), (".executor-sim", "executor's simulated cluster")]
    for suffix, what in files:
        f = state.with_name(state.name + suffix)
        f.write_bytes(b"")  # an empty file is one the daemon would take (and fill)
        f.chmod(0o400)
        try:
            r = subprocess.run([*prefix, sys.executable, "-m", "planner", "daemon", "--state", str(state), "--scenario", str(cluster),
                                "--listen", "127.0.0.1:0", "--period-s", "0.2", "--max-cycles", "1"],
                               cwd=ROOT, env=env(), capture_output=True, text=True, timeout=DEADLINE_S)
        finally:
            f.chmod(0o600)
        assert r.returncode == 2, (suffix, r.stdout + r.stderr)
        assert f"--state: {what} file not writable: {f}; check its permissions" in r.stderr, r.stderr
        assert f"chmod u+rw {f}" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([cluster.name, f.name]), "something was created"
        assert f.read_bytes() == b""
        f.unlink()


# ------------------------------------------------------------------ 4. validate-plan: moved_jobs, critical, phase_time_estimate
@pytest.fixture(scope="module")
def micro_plan(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("micro")
    rc, output, _cpu, _rss = run_inprocess(["plan", str(MICRO), "-o", str(d / "p.yaml")])
    assert rc == 0, output[-2000:]
    return yaml.safe_load((d / "p.yaml").read_text())


def _validate(doc: dict, tmp_path: Path, *extra: str) -> tuple[int, str]:
    plan = tmp_path / "x.yaml"
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, output, _cpu, rss = run_inprocess(["validate-plan", str(MICRO), str(plan), *extra])
    assert rss < 1 << 20
    return rc, output


def _violations(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.startswith("  ") and "[" in line]


def test_validate_plan_holds_moved_jobs_to_the_members_moved_flags(micro_plan, tmp_path):
    doc = copy.deepcopy(micro_plan)
    body = doc["body"]
    g0, g2 = body["groups"][0], body["groups"][-1]  # (the first group and one of two members or more)
    assert len(body["groups"]) >= 2 and len(g2["members"]) >= 2
    listed_only, flagged_only = g0["members"][0]["job"], g2["members"][0]["job"]
    g2["members"][0]["moved"] = True  # flagged, not listed
    g2["members"][1]["moved"] = True  # flagged and listed twice
    body["moved_jobs"] = [listed_only, g2["members"][1]["job"], g2["members"][1]["job"], "no-such-job"]
    body["move_cost_per_hour"] = 0.0  # (instance price per moved job: 0 on weave-micro)
    rc, output = _validate(doc, tmp_path)
    _refused(rc, output, 0)
    moved = sorted(v for v in _violations(output) if v.startswith("moved["))
    assert moved == sorted([
        f"moved[job={g2['members'][1]['job']}]: moved_jobs lists it 2 times (list each moved job once, or re-plan)",
        f"moved[job={listed_only},group={g0['id']}]: moved_jobs lists it but its member says moved: false (set moved: true or "
        "drop it from moved_jobs, or re-plan)",
        "moved[job=no-such-job]: moved_jobs lists it but no group has it as a member: only a placed job moves (drop it from "
        "moved_jobs, or re-plan)",
        f"moved[job={flagged_only},group={g2['id']}]: its member says moved: true but moved_jobs does not list it (add it to "
        "moved_jobs or set moved: false, or re-plan)",
    ]), output
    # consistent flags and list: no moved violation (weave-micro charges nothing for a move)
    body["moved_jobs"] = sorted([flagged_only, g2["members"][1]["job"]])
    rc, output = _validate(doc, tmp_path)
    assert rc == 0 and "moved[" not in output, output[-2000:]


def test_validate_plan_holds_critical_to_a_critical_cycle_of_the_recomputed_schedule(micro_plan, tmp_path):
    doc = copy.deepcopy(micro_plan)
    a, b = doc["body"]["groups"][0], doc["body"]["groups"][-1]  # (weave-micro plans in 2 or 3 groups)
    assert len(a["critical"]) >= 2 and len(b["critical"]) >= 2
    kept_a, kept_b = list(a["critical"]), list(b["critical"])
    a["critical"] = kept_a[1:] + kept_a[:1]  # the same cycle from another event: still critical
    wrong = [e for e in (f"{s}:{m}" for m in b["order"] for s in "RT") if e not in kept_b]
    b["critical"] = wrong  # a cycle of the group's events, not the one that sets its cycle time
    rc, output = _validate(doc, tmp_path)
    _refused(rc, output, 0)
    found = _violations(output)
    assert [v for v in found if not v.startswith("critical[")] == [], output
    assert not [v for v in found if v.startswith(f"critical[group={a['id']}]")], output
    two = [v for v in found if v.startswith(f"critical[group={b['id']}]")]
    assert len(two) == 1 and ("is no step of the group's schedule" in two[0] or "it is not the critical cycle" in two[0]), output
    assert "set it to [" in two[0], output
    a["critical"], b["critical"] = [f"R:{b['members'][0]['job']}"], kept_b  # an event of another group
    rc, output = _validate(doc, tmp_path)
    one = [v for v in _violations(output) if v.startswith(f"critical[group={a['id']}]")]
    assert rc != 0 and len(one) == 1 and f"names 'R:{b['members'][0]['job']}', not an event of the group" in one[0], output
    a["critical"], b["critical"] = [], kept_b + kept_b[:1]
    rc, output = _validate(doc, tmp_path)
    _refused(rc, output, 0, f"critical[group={a['id']}]: is empty", f"critical[group={b['id']}]: lists {kept_b[0]} twice")
    longer = a if len(kept_a) > 2 else b if len(kept_b) > 2 else None
    if longer is not None:  # the critical cycle backwards is no cycle of the schedule
        kept = kept_a if longer is a else kept_b
        a["critical"], b["critical"] = kept_a, kept_b
        longer["critical"] = kept[::-1]
        rc, output = _validate(doc, tmp_path)
        _refused(rc, output, 0, f"critical[group={longer['id']}]: {kept[-1]} -> {kept[-2]} is no step")


def test_validate_plan_holds_the_recorded_estimate_to_the_estimates_and_the_mode(micro_plan, tmp_path):
    doc = copy.deepcopy(micro_plan)
    doc["solver"]["phase_time_estimate"] = "optimistic"  # was taken for "none recorded": checked on the scenario's default
    rc, output = _validate(doc, tmp_path)
    _refused(rc, output, 0, "solver[solver.phase_time_estimate]: is 'optimistic', not a phase-time estimate "
                            "(conservative, sampled, p90, p99 or max)")
    del doc["solver"]["phase_time_estimate"]
    rc, output = _validate(doc, tmp_path)
    _refused(rc, output, 0, "solver[solver.phase_time_estimate]: is missing, but a plan made from a scenario records")
    doc["solver"]["phase_time_estimate"] = "max"  # the conservative bound under its quantile name
    rc, output = _validate(doc, tmp_path, "--mode", "conservative")
    assert rc == 0, output[-2000:]


def test_the_estimate_rule_against_mode_and_input():
    """(In process: checking on another estimate compiles it, seconds of simulation.)"""
    from planner.commands.validate_plan import estimate_violations

    assert estimate_violations("conservative", None, scenario=True, same=True) == []
    assert estimate_violations("max", "conservative", scenario=True, same=True) == []
    [v] = estimate_violations("conservative", "sampled", scenario=True, same=True)
    assert str(v).startswith("solver[solver.phase_time_estimate]: is 'conservative', but the plan is checked on the 'sampled' "
                             "estimate (--mode)"), v
    assert "drop --mode" in str(v) and "--mode sampled" in str(v)
    assert estimate_violations(None, None, scenario=True, same=False) == []  # another input's plan (--force): noted, not judged
    assert estimate_violations(None, "p90", scenario=False, same=True) == []  # an instance file's own times
    assert estimate_violations("conservative", None, scenario=False, same=True) == []  # plan --save-instance's pair
    [v] = estimate_violations("p95", None, scenario=False, same=True)
    assert "'p95', not a phase-time estimate" in str(v)
