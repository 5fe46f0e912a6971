"""Hostile shapes found by the session-40 audit: a device named as a model's config.json, and
numbers-only placement instances with a billion nodes, an empty phase table or 1e308 seconds.
Each: exit 2, the field named, no traceback, nothing written, bounded CPU and memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.hardening.test_hostile_inputs import LIMIT_RSS_KB, run_inprocess

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml"
INSTANCE = ROOT / "scenarios" / "instances" / "placement-small.yaml"


def _refused(rc: int, output: str, rss: int, *words: str) -> None:
    assert rc == 2, f"exit {rc}, not 2:\n{output[-2000:]}"
    assert "Traceback" not in output and "internal error" not in output, output[-2000:]
    for w in words:
        assert w in output, f"{w!r} not in the message:\n{output[-2000:]}"
    assert rss < LIMIT_RSS_KB, f"peak RSS grew by {rss // 1024} MB"


@pytest.mark.parametrize("device", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_named_as_the_model_is_refused_not_read(device, tmp_path):
    import os

    if device == "fifo":
        device = str(tmp_path / "config.json")
        os.mkfifo(device)
    text = SCENARIO.read_text().replace("model: qwen2.5-1.5b", f"model: {device}", 1)
    assert device in text
    (tmp_path / "s.yaml").write_text(text)
    rc, output, _cpu, rss = run_inprocess(["validate", str(tmp_path / "s.yaml")])
    _refused(rc, output, rss, "jobs[0].model", "not a regular file")


def test_a_config_json_with_an_absurd_dimension_is_refused(tmp_path):
    cfg = {"hidden_size": 10 ** 30, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
           "intermediate_size": 8960, "vocab_size": 151936}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    text = SCENARIO.read_text().replace("model: qwen2.5-1.5b", f"model: {tmp_path / 'config.json'}", 1)
    (tmp_path / "s.yaml").write_text(text)
    rc, output, _cpu, rss = run_inprocess(["validate", str(tmp_path / "s.yaml")])
    _refused(rc, output, rss, "hidden_size")


def _instance(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load(INSTANCE.read_text())
    edit(data)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _first_type(d: dict) -> str:
    return next(iter(d["pool_types"]))


CASES = {
    # names for a billion nodes were made before the node cap was checked: 4.5 GB in 15 s
    "a-billion-nodes": (lambda d: d["pool_types"][_first_type(d)].update(count=10 ** 9), "count"),
    "empty-rollout-table": (lambda d: d["jobs"][0]["rollout_s"].update({next(iter(d["jobs"][0]["rollout_s"])): {}}),
                            "rollout_s"),
    "slo-1e308": (lambda d: d["jobs"][0].update(slo_s=1e308), "slo_s"),
    "rollout-seconds-1e308": (lambda d: d["jobs"][0]["rollout_s"][next(iter(d["jobs"][0]["rollout_s"]))].update({1: 1e308}),
                              "rollout_s"),
    "dram-1e308": (lambda d: d["jobs"][0].update(dram_rollout_node_gb=1e308), "dram_rollout_node_gb"),
    "a-name-of-100000-characters": (lambda d: d["jobs"][0].update(name="x" * 100_000), "name"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_placement_instances_are_refused_with_the_field(case, tmp_path):
    edit, field = CASES[case]
    path = _instance(tmp_path, edit)
    out = tmp_path / "p.yaml"
    rc, output, _cpu, rss = run_inprocess(["plan", str(path), "--time-limit", "5", "-o", str(out)])
    _refused(rc, output, rss, field)
    assert not out.exists(), "a plan was written for a refused instance"
    assert len(output) < 20_000, f"printed {len(output):,} characters"


@pytest.mark.parametrize("argv", [
    ["plan", str(SCENARIO), "-o", ""],
    ["plan", str(SCENARIO), "--save-instance", " "],
    ["simulate", str(SCENARIO), "--out", ""],
    ["init", "--from", "verl", "missing.yaml", "-o", ""],
], ids=["plan-o", "plan-save-instance", "simulate-out", "init-o"])
def test_an_empty_output_path_is_refused_not_taken_for_the_default(argv, tmp_path, monkeypatch):
    """``-o ""`` wrote (and replaced) the default file, or wrote nothing without a word."""
    monkeypatch.chdir(tmp_path)
    rc, output, _cpu, rss = run_inprocess(argv)
    _refused(rc, output, rss, "is empty")
    assert not list(tmp_path.iterdir()), "something was written"


def test_admit_names_a_job_given_twice(tmp_path):
    """``--job b --job b`` was admitted once and then reported as not fitting the fleet."""
    data = yaml.safe_load(SCENARIO.read_text())
    second = data["jobs"][1]["name"]
    data["jobs"] = data["jobs"][:1]
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(data))
    rc, output, _cpu, _rss = run_inprocess(["plan", str(tmp_path / "one.yaml"), "-o", str(tmp_path / "one.plan.yaml")])
    assert rc == 0, output[-2000:]
    out = tmp_path / "admitted.yaml"
    rc, output, _cpu, rss = run_inprocess(["admit", str(SCENARIO), "--current", str(tmp_path / "one.plan.yaml"),
                                           "--job", second, "--job", second, "-o", str(out)])
    _refused(rc, output, rss, "named twice", second)
    assert not out.exists()


def test_a_json_scenario_cut_short_is_called_json_not_yaml(tmp_path):
    text = json.dumps(yaml.safe_load(SCENARIO.read_text()))
    (tmp_path / "s.json").write_text(text[: len(text) // 2])
    rc, output, _cpu, rss = run_inprocess(["validate", str(tmp_path / "s.json")])
    _refused(rc, output, rss, "not valid JSON", "s.json")


@pytest.mark.parametrize("field,value", [("slo_s", "926"), ("dram_rollout_node_gb", "15"), ("arrival_s", "0")])
def test_an_instance_number_given_as_text_is_refused(field, value, tmp_path):
    """``slo_s: '926'`` was read as 926 (a quoted number is text: the user's file says something else)."""
    path = _instance(tmp_path, lambda d: d["jobs"][0].update({field: value}))
    rc, output, _cpu, rss = run_inprocess(["plan", str(path), "--time-limit", "5", "-o", str(tmp_path / "p.yaml")])
    _refused(rc, output, rss, field)
