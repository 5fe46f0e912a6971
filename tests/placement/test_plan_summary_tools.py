"""The plan summary never calls a multi-turn conservative plan an upper bound it is not.

The conservative estimate takes every response at its limit and every tool call at its 99th
percentile; a 3-turn phase of 192 requests meets slower calls, so the simulated expectation of
its cycle runs past the planned one. The summary then names the jobs it puts over their SLO
(found by an outside audit: the summary said "upper bounds" beside "cycles 107% of the planned")."""

from __future__ import annotations

import yaml

from tests.conftest import run_cli

MULTI_TURN = {
    "name": "mt",
    "gpu_types": {"H20": {"price_per_gpu_hour": 1.0}, "H800": {"price_per_gpu_hour": 2.0}},
    "cluster": {"node_groups": [
        {"name": "h20", "gpu_type": "H20", "count": 2, "gpus_per_node": 8, "host_dram_gb": 2048},
        {"name": "h800", "gpu_type": "H800", "count": 2, "gpus_per_node": 8, "host_dram_gb": 2048}]},
    "jobs": [{"name": "agent", "model": "qwen2.5-1.5b",
              "rollout": {"batch_prompts": 48, "group_size": 4, "max_response_tokens": 1024, "prompt_tokens": 1024,
                          "turns": 3, "gpu_types": ["H20"]},
              "trainer": {"tp": 2, "gpu_types": ["H800"]}, "slo": {"ratio_to_solo": 1.02}}],  # (the expectation: ~103%)
    "solver": {"time_limit_s": 5},
}


def _expected_pct(stderr: str) -> float:
    line = next(ln for ln in stderr.splitlines() if "simulated expectation: cycles" in ln)
    return float(line.split("cycles ")[1].split("%")[0].split("-")[-1])  # "LO-HI%", or "V%" for one group


def test_a_tool_heavy_conservative_plan_warns_when_the_expectation_runs_over(tmp_path):
    sc = tmp_path / "mt.yaml"
    sc.write_text(yaml.safe_dump(MULTI_TURN))
    proc = run_cli("plan", str(sc), "-o", str(tmp_path / "mt.plan.yaml"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "upper bounds" not in proc.stderr
    assert "tool calls meet slower ones" in proc.stderr
    pct = _expected_pct(proc.stderr)
    # the warning appears exactly when the simulated expectation puts the job over its SLO
    margin = float(next(ln for ln in proc.stderr.splitlines() if "SLO margin" in ln).split("at least ")[1].split(" s")[0])
    plan = yaml.safe_load((tmp_path / "mt.plan.yaml").read_text())["body"]
    (g,) = plan["groups"]
    (m,) = g["members"]
    assert pct > 100, "the 3-turn phase's tool calls no longer exceed their 99th percentile: pick a heavier job"
    assert 0 <= margin < m["cycle_time_s"] * (pct - 100) / 100, "the SLO no longer binds on the expectation: tighten it"
    assert "warning: on the simulated expectation 1 job(s) run over their SLO (worst: agent" in proc.stderr


def test_a_single_turn_plan_gets_no_warning(tmp_path):
    doc = yaml.safe_load(yaml.safe_dump(MULTI_TURN))
    doc["jobs"][0]["rollout"]["turns"] = 1
    doc["jobs"][0]["slo"] = {"ratio_to_solo": 1.5}
    sc = tmp_path / "one.yaml"
    sc.write_text(yaml.safe_dump(doc))
    proc = run_cli("plan", str(sc), "-o", str(tmp_path / "one.plan.yaml"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert _expected_pct(proc.stderr) <= 100
    assert "warning: on the simulated expectation" not in proc.stderr


def test_an_expectation_far_below_the_planned_cycle_is_not_printed_as_zero(tmp_path):
    """A 400,000-token limit over responses of a few hundred tokens: the expectation is about 0.1% of the
    conservative cycle, and the summary said "cycles 0-0% of the planned ones"."""
    doc = {"name": "tinyratio", "gpu_types": {"H100": {"price_per_gpu_hour": 2.5}},
           "cluster": {"node_groups": [{"name": "h100", "gpu_type": "H100", "count": 2, "gpus_per_node": 8}]},
           "jobs": [{"name": "long-limit", "model": "qwen2.5-1.5b",
                     "rollout": {"batch_prompts": 8, "group_size": 4, "max_response_tokens": 400000,
                                 "response_lengths": {"source": "lognormal", "median_tokens": 300, "sigma": 0.5}},
                     "slo": {"ratio_to_solo": 2.0}}],
           "solver": {"time_limit_s": 20}}
    sc = tmp_path / "tiny.yaml"
    sc.write_text(yaml.safe_dump(doc))
    proc = run_cli("plan", str(sc), "-o", str(tmp_path / "tiny.plan.yaml"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    pct = _expected_pct(proc.stderr)
    assert 0 < pct < 1, proc.stderr
    assert "cycles 0-0%" not in proc.stderr
