"""docs/walkthrough.md runs as written: scenario -> plan -> dry-run diff -> apply -> status ->
a second plan -> diff -> apply, on shipped files only (the simulated cluster)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytest.importorskip("torch")  # planner apply: the executor extra


def walkthrough_commands() -> list[list[str]]:
    text = (ROOT / "docs" / "walkthrough.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/walkthrough.md: one bash block, the walkthrough"
    return [shlex.split(line)[1:] for line in blocks[0].splitlines() if line.startswith("planner ")]


def run_inprocess(argvs: list[list[str]], cwd) -> list[dict]:
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="120")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"), json.dumps(argvs)],
                       cwd=cwd, capture_output=True, text=True, timeout=600, env=e)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])["results"]


def test_the_walkthrough_runs_as_written(tmp_path):
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    cmds = walkthrough_commands()
    assert [c[0] for c in cmds] == ["plan", "apply", "apply", "status", "plan", "apply", "apply", "status"]
    res = run_inprocess(cmds + [["status", "--json"]], tmp_path)
    for r in res:
        assert r["rc"] == 0, (r["argv"], r["stderr"])
    first_diff, second_diff = res[1]["stdout"], res[5]["stdout"]
    assert re.match(r"\d+ step\(s\)", first_diff) and "is new in the plan" in first_diff
    # the second diff moves only what the re-optimised plan changed: every unit is a component of a
    # job the plan lists as moved, or a group's node reservation; the jobs that stay are not touched
    # (staging parks and restores, so it may take as many single steps as the first apply)
    import yaml

    second = yaml.safe_load((tmp_path / "second.yaml").read_text())["body"]
    moved = set(second["moved_jobs"])
    staying = {m["job"] for g in second["groups"] for m in g["members"]} - moved
    units = re.findall(r"^\[(\w[\w-]*)\] (\S+):", second_diff, re.M)
    assert units and moved and staying, (moved, staying, second_diff[:2000])
    assert all(name.split("/")[0] in moved or re.match(r"g\d+/pool-", name) for _kind, name in units), units
    assert all(re.match(r"g\d+/pool-", name) for kind, name in units if kind == "add"), units  # only reservations are new
    assert "h20-0" in res[3]["stdout"]  # status after the first apply: the scenario's nodes
    # the cluster after the second apply holds the second plan's groups' reservations, no other
    groups = yaml.safe_load((tmp_path / "second.yaml").read_text())["body"]["groups"]
    state = json.loads(res[-1]["stdout"])["state"]
    reserved = {(c["reserves"], w["node"]) for c in state["components"] if c["reserves"] for w in c["workers"]}
    want = {(g["id"], n) for g in groups for n in g["rollout_pool"]["nodes"] + g["train_pool"]["nodes"]}
    assert reserved == want, (sorted(reserved ^ want))
    # the figures the page quotes are what the commands print (they had drifted: 46 steps quoted against
    # 174 printed, and other nodes named free after step 7)
    text = (ROOT / "docs" / "walkthrough.md").read_text()
    quoted = re.search(r"the first diff below: `(totals: [^`]+)`", text)
    assert quoted and first_diff.strip().splitlines()[-1] == quoted.group(1), first_diff.strip().splitlines()[-1]
    named = re.search(r"# 7\. Apply it, and look again: (.+) are free now\.", text)
    assert named, "step 7 names the nodes the second apply frees"
    free = {n["name"] for n in state["nodes"]} - {w["node"] for c in state["components"] for w in c["workers"]}
    assert set(re.split(r", | and ", named.group(1))) == free, sorted(free)


def test_shipped_targets_apply_and_status_says_when_nothing_was_applied(tmp_path):
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    res = run_inprocess([["status"], ["apply", "scenarios/executor/two-jobs-target.yaml"], ["status", "--json"],
                         ["apply", "scenarios/executor/idle-target.yaml", "--dry-run"],
                         ["apply", "scenarios/executor/idle-target.yaml"],
                         ["apply", "scenarios/executor/idle-target.yaml", "--allow-stop-all"], ["status", "--json"]], tmp_path)
    missing, applied, running, dry, refused, idle, after = res
    # nothing applied yet: one line saying so and how to start, not a message about a plan
    assert missing["rc"] == 2 and "nothing was applied" in missing["stderr"] and "plan names" not in missing["stderr"], missing
    assert len(missing["stderr"].strip().splitlines()) == 1
    assert applied["rc"] == 0, applied["stderr"]
    names = {c["name"] for c in json.loads(running["stdout"])["state"]["components"]}
    assert names == {"math/rollout", "math/trainer", "math/reward", "code/rollout"}
    # an empty component list is a target too: everything stops, the nodes stay
    assert dry["rc"] == 0 and dry["stdout"].count("[remove] ") == 4, dry["stdout"][:1000]
    assert refused["rc"] == 2 and "--allow-stop-all" in refused["stderr"], refused  # stopping everything is asked for
    assert idle["rc"] == 0, idle["stderr"]
    state = json.loads(after["stdout"])["state"]
    assert state["components"] == [] and len(state["nodes"]) == 2
