"""Round 6 (b): four of the low-severity gaps the round-5 audits left (docs/security.md). A hand-edited
placement instance whose node-count keys are ``true`` or give one count twice (``1`` and ``"1"``),
a daemon state file whose kv values are of the wrong JSON type (``cycle: "abc"``), a plan whose
``scenario_digest`` is empty or malformed (validate-plan skipped the input check), and ``whatif``
printing the compiler's bound as the limit of a type without ``max_nodes``. Each refusal: exit 2,
the field, key or job named with its fix, no traceback, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import _refused

INSTANCE = ROOT / "scenarios" / "instances" / "placement-small.yaml"
ROW = "rollout_s: {H20: {1: 220.1, 2: 117.5, 4: 71.1}}"  # the first job's (qwen7b-math) rollout table


# ------------------------------------------------------------------ 1. instance node-count keys
def _yaml_instance(tmp_path: Path, row: str) -> Path:
    text = INSTANCE.read_text()
    assert ROW in text
    path = tmp_path / "inst.yaml"
    path.write_text(text.replace(ROW, row, 1))
    return path


def _json_instance(tmp_path: Path, old: str, new: str) -> Path:
    text = json.dumps(yaml.safe_load(INSTANCE.read_text()))
    assert old in text
    path = tmp_path / "inst.json"
    path.write_text(text.replace(old, new, 1))
    return path


KEY_CASES = {
    # YAML's true was read as 1 node (the model's keys are lax)
    "yaml-true": (lambda p: _yaml_instance(p, "rollout_s: {H20: {true: 220.1, 2: 117.5, 4: 71.1}}"), "the key true", "not a node count"),
    # 1 and '1' made one entry: the last one's seconds, in silence
    "yaml-1-and-text-1": (lambda p: _yaml_instance(p, "rollout_s: {H20: {1: 220.1, '1': 300.0, 2: 117.5, 4: 71.1}}"),
                          "keys 1 and '1'", "1 node(s) twice"),
    "yaml-1.0": (lambda p: _yaml_instance(p, "rollout_s: {H20: {1.0: 220.1, 2: 117.5, 4: 71.1}}"), "the key 1.0", "not a node count"),
    "json-true": (lambda p: _json_instance(p, '"1": 220.1', '"true": 220.1'), "the key 'true'", "not a node count"),
    "json-1-and-space-1": (lambda p: _json_instance(p, '"1": 220.1', '"1": 220.1, " 1": 300.0'), "the key ' 1'", "not a node count"),
    "json-1-and-01": (lambda p: _json_instance(p, '"1": 220.1', '"1": 220.1, "01": 300.0'), "the key '01'", "not a node count"),
}


@pytest.mark.parametrize("case", sorted(KEY_CASES))
def test_an_instance_node_count_key_that_is_true_or_given_twice_is_refused(case, tmp_path):
    make, key, words = KEY_CASES[case]
    path = make(tmp_path)
    out = tmp_path / "p.yaml"
    rc, output, _cpu, rss = run_inprocess(["plan", str(path), "--time-limit", "5", "-o", str(out)])
    _refused(rc, output, rss, "jobs[0].rollout_s.H20", "job 'qwen7b-math'", "rollout_s table", key, words, "Fix:")
    assert not out.exists(), "a plan was written for a refused instance"


def test_the_switch_tables_keys_are_checked_too_and_plain_keys_still_plan(tmp_path):
    data = yaml.safe_load(INSTANCE.read_text())
    data["jobs"][1]["train_switch_s"] = {"H800": {1: 1.9, "1": 2.0}}
    (tmp_path / "sw.json").write_text(json.dumps(data).replace('"1": 2.0', '"true": 2.0'))
    rc, output, _cpu, rss = run_inprocess(["plan", str(tmp_path / "sw.json"), "--time-limit", "5", "-o", str(tmp_path / "p.yaml")])
    _refused(rc, output, rss, "jobs[1].train_switch_s.H800", "job 'qwen7b-code'", "'true'")
    # a JSON instance's keys are text ("1"): read as node counts, as before
    (tmp_path / "ok.json").write_text(json.dumps(yaml.safe_load(INSTANCE.read_text())))
    rc, output, _cpu, _rss = run_inprocess(["plan", str(tmp_path / "ok.json"), "--time-limit", "5", "-o", str(tmp_path / "p.yaml")])
    assert rc == 0, output[-2000:]
