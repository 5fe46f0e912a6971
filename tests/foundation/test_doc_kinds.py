"""A document given to the wrong command gets one line naming what it is and which command takes
it (planner/dockind.py); validate-plan against another input stops unless --force (issue 14)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner.dockind import INSTANCE, SCENARIO, SNAPSHOT, detect
from tests.conftest import ROOT, SCENARIOS

TINY = str(SCENARIOS / "ci" / "tiny-2jobs.yaml")
SNAP = str(SCENARIOS / "realloc" / "hetero-h20-h100.json")
INST = str(SCENARIOS / "instances" / "placement-small.yaml")
TARGET = str(SCENARIOS / "executor" / "idle-target.yaml")


def test_kinds_are_detected_from_the_top_level(tmp_path):
    assert detect(TINY) == SCENARIO and detect(SCENARIOS / "dynarl" / "math-7b-64gpu.yaml") == SCENARIO  # include: overlay
    assert detect(SNAP) == SNAPSHOT and detect(INST) == INSTANCE and detect(TARGET) == "ExecutorTarget"
    one = json.loads((SCENARIOS / "realloc" / "hetero-h20-h100.json").read_text())["snapshots"][0]
    (tmp_path / "s.jsonl").write_text(json.dumps(one) + "\n" + json.dumps(one) + "\n")
    (tmp_path / "one.json").write_text(json.dumps(one))
    assert detect(tmp_path / "s.jsonl") == SNAPSHOT and detect(tmp_path / "one.json") == SNAPSHOT
    (tmp_path / "broken.yaml").write_text("jobs: [\n")
    (tmp_path / "other.yaml").write_text("hello: 1\n")
    assert detect(tmp_path / "broken.yaml") is None and detect(tmp_path / "other.yaml") is None  # left to the command's reader
    assert detect(tmp_path / "missing.yaml") is None


def _run(argvs, cwd):
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="120")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"), json.dumps(argvs)],
                       cwd=cwd, capture_output=True, text=True, timeout=600, env=e)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])["results"]


@pytest.fixture(scope="module")
def wrong(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kinds")
    cases = [  # (argv, what the file is, the command that takes it)
        (["validate", "plan.yaml"], "placement plan", "validate-plan"),
        (["estimate", "plan.yaml"], "placement plan", "validate-plan"),
        (["plan", "plan.yaml"], "placement plan", "apply"),
        (["simulate", "plan.yaml", "--policy", "static"], "placement plan", "apply"),
        (["whatif", "plan.yaml"], "placement plan", "apply"),
        (["realloc", "plan.yaml"], "placement plan", "apply"),
        (["realloc", TINY], "is a scenario", "estimate"),
        (["validate-plan", "plan.yaml", "plan.yaml"], "placement plan", "apply"),
        (["validate-plan", TINY, TINY], "is a scenario", "plan"),
        (["validate", SNAP], "telemetry snapshot", "realloc"),
        (["plan", SNAP], "telemetry snapshot", "realloc"),
        (["estimate", INST], "placement instance", "plan"),
        (["simulate", TARGET, "--policy", "groups"], "executor target", "apply"),
        (["apply", TINY, "--dry-run"], "is a scenario", "estimate"),
    ]
    res = _run([["plan", TINY, "--out", "plan.yaml"]] + [c for c, _, _ in cases], tmp)
    assert res[0]["rc"] == 0, res[0]["stderr"]
    return list(zip(cases, res[1:]))


def test_a_document_of_another_kind_gets_one_line_naming_it_and_its_command(wrong):
    for (argv, what, takes), r in wrong:
        err = r["stderr"].strip()
        assert r["rc"] == 2 and len(err.splitlines()) == 1, (argv, err[:3000])
        assert what in err and f"planner {takes}" in err.replace(" / ", " planner ").replace("(and --current", ""), (argv, err)
        assert "Traceback" not in err and len(err) < 600, (argv, len(err))


def test_validate_plan_against_another_input_stops_unless_forced(tmp_path):
    res = _run([["plan", TINY, "--out", "plan.yaml"], ["validate-plan", TINY, "plan.yaml"],
                ["validate-plan", str(SCENARIOS / "ci" / "tiny-mixed.yaml"), "plan.yaml"],
                ["validate-plan", str(SCENARIOS / "ci" / "tiny-mixed.yaml"), "plan.yaml", "--force"]], tmp_path)
    made, same, other, forced = res
    assert made["rc"] == 0 and same["rc"] == 0, (made["stderr"], same["stderr"])
    err = other["stderr"].strip()
    assert other["rc"] == 2 and len(err.splitlines()) == 1 and "was made for tiny-2jobs" in err and "--force" in err, err
    # --force checks it anyway: the note, then the checker's own verdict on this input
    assert "note: the plan was made for" in forced["stderr"] and forced["stderr"] != other["stderr"]
