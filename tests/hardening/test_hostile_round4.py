"""Hostile shapes found by the session-43 audit of the command line: a plan with a 100,000-node pool
or a 100,000-character group id, an executor target whose component name is 100,000 characters, a
model path no file system holds, standard output on a full device, a folder given as --sim-state,
and a daemon state file edited by hand. Each: exit 2, the field or row named, no traceback, bounded
output."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT, run_cli
from tests.hardening.test_hostile_round3 import _refused
from tests.hardening.test_hostile_inputs import run_inprocess

SCENARIO = ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml"


def _plan(tmp_path: Path) -> dict:
    out = tmp_path / "p.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(SCENARIO), "--out", str(out), "--time-limit", "5"])
    assert rc == 0, output[-2000:]
    return yaml.safe_load(out.read_text())


def test_a_plan_with_a_huge_pool_gets_a_bounded_verdict_and_a_huge_id_is_refused(tmp_path):
    doc = _plan(tmp_path)
    pool = doc["body"]["groups"][0]["rollout_pool"]
    pool["nodes"] = [f"h20-{i}" for i in range(100_000)]
    (tmp_path / "huge.yaml").write_text(yaml.safe_dump(doc))
    rc, output, _cpu, rss = run_inprocess(["validate-plan", str(SCENARIO), str(tmp_path / "huge.yaml")])
    _refused(rc, output, rss, "violated constraint(s)", "more (the first 200 are shown)")
    assert output.count("\n") < 400 and len(output) < 200_000, (output.count("\n"), len(output))
    doc = _plan(tmp_path)
    doc["body"]["groups"][0]["id"] = "g" * 100_000
    (tmp_path / "long-id.yaml").write_text(yaml.safe_dump(doc))
    rc, output, _cpu, rss = run_inprocess(["validate-plan", str(SCENARIO), str(tmp_path / "long-id.yaml")])
    _refused(rc, output, rss, "body.groups.0.id", "at most 200 characters")
    assert len(output) < 20_000


def test_an_executor_target_with_a_huge_component_name_is_refused(tmp_path):
    data = yaml.safe_load((ROOT / "scenarios" / "executor" / "two-jobs-target.yaml").read_text())
    data["body"]["components"][0]["name"] = "math/" + "r" * 100_000
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    rc, output, _cpu, rss = run_inprocess(["apply", str(tmp_path / "t.yaml"), "--dry-run", "--sim-state", str(tmp_path / "s.sqlite")])
    _refused(rc, output, rss, "components")
    assert len(output) < 20_000


def test_a_model_path_no_file_system_holds_is_refused(tmp_path):
    data = yaml.safe_load((ROOT / "examples" / "onramp" / "verl-grpo-qwen2.5-7b.yaml").read_text())
    for path in ("x" * 300, "/" + "x" * 300 + "/y", "x" * 300 + "/config.json"):
        data["actor_rollout_ref"]["model"]["path"] = path
        (tmp_path / "v.yaml").write_text(yaml.safe_dump(data))
        rc, output, _cpu, rss = run_inprocess(["init", "--from", "verl", str(tmp_path / "v.yaml"), "-o", str(tmp_path / "o.yaml")])
        _refused(rc, output, rss, "actor_rollout_ref.model.path")
        assert not (tmp_path / "o.yaml").exists()


def test_standard_output_on_a_full_device_is_exit_2_not_a_bug():
    if not Path("/dev/full").exists():
        import pytest

        pytest.skip("no /dev/full here")
    for args in (["validate", str(SCENARIO)], ["schema"]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "planner", *args], stdout=full, stderr=subprocess.PIPE, text=True,
                                  timeout=300, cwd=ROOT)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "cannot write standard output" in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-2000:]


def test_a_folder_as_sim_state_is_named_a_folder(tmp_path):
    rc, output, _cpu, rss = run_inprocess(["status", "--sim-state", str(tmp_path)])
    _refused(rc, output, rss, "--sim-state", "is a folder")


def test_a_state_file_edited_by_hand_is_refused_naming_what_is_wrong(tmp_path):
    state = tmp_path / "ok.sqlite"
    proc = run_cli("daemon", "--scenario", str(SCENARIO), "--state", str(state), "--clock", "virtual", "--max-cycles", "2",
                   "--listen", "127.0.0.1:0", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    edits = [("UPDATE meta SET value='{not json' WHERE key='cluster'", "its meta value 'cluster' is not valid JSON"),
             ("UPDATE jobs SET spec='{bad' WHERE rowid=(SELECT min(rowid) FROM jobs)", "is not valid JSON"),
             ("UPDATE jobs SET spec=json_set(spec, '$.rollout.batch_prompts', -5), state='running' "
              "WHERE rowid=(SELECT min(rowid) FROM jobs)", "rollout.batch_prompts"),
             ("UPDATE plans SET doc='{\"a\": NaN}' WHERE rowid=(SELECT max(rowid) FROM plans)", "document is not valid JSON")]
    for i, (sql, words) in enumerate(edits):
        copy = tmp_path / f"t{i}.sqlite"
        src, dst = sqlite3.connect(state), sqlite3.connect(copy)
        src.backup(dst)
        src.close()
        dst.execute(sql)
        dst.commit()
        dst.close()
        proc = run_cli("daemon", "--state", str(copy), "--clock", "virtual", "--max-cycles", "2", "--listen", "127.0.0.1:0",
                       timeout=300)
        assert proc.returncode == 2, (sql, proc.stderr[-3000:])
        assert "--state" in proc.stderr and words in proc.stderr and "Traceback" not in proc.stderr, (sql, proc.stderr[-3000:])
