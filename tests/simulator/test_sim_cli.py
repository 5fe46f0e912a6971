"""planner simulate: outputs, and bad input answered with exit status 2 and nothing written."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SCENARIOS, run_cli


def test_simulate_job_writes_summary_and_plot(tmp_path):
    out = tmp_path / "run"
    r = run_cli("simulate", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"), "--job", _first_job(), "--policy", "static",
                "--iterations", "1", "--out", str(out), "--snapshots")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "summary.json").read_text())
    m = doc["metrics"]
    assert m["policy"] == "static" and m["iterations"] == 1
    assert m["tokens_per_s"] > 0 and m["requests"] > 0
    for c, v in m["components"].items():
        assert v["busy_gpu_s"] <= v["held_gpu_s"] + 1e-6, c
    assert (out / "ownership.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "snapshots.jsonl").read_text().strip()
    assert "tokens/s" in r.stdout


def _first_job():
    import yaml

    return yaml.safe_load((SCENARIOS / "ci" / "tiny-2jobs.yaml").read_text())["jobs"][0]["name"]


@pytest.mark.parametrize("args,needle", [
    (["--policy", "statik"], "--policy"),
    (["--policy", "consolidate", "--consolidate-at", "1.5"], "--consolidate-at"),
    (["--policy", "static", "--job", "nope"], "--job"),
    (["--policy", "static"], "--job"),  # two jobs, none picked
    (["--policy", "dynamic", "--u-low", "0"], "--u-low"),
    (["--policy", "static", "--iterations", "0"], "--iterations"),
    (["--policy", "groups", "--job", "small-a"], "--job"),
    (["--policy", "solo-d", "--horizon-s", "-1"], "--horizon-s"),
])
def test_bad_arguments_exit_2_without_traceback(tmp_path, args, needle):
    out = tmp_path / "o"
    r = run_cli("simulate", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"), *args, "--out", str(out))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_bad_scenario_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncluster: {node_groups: []}\njobs: []\n")
    r = run_cli("simulate", str(bad), "--policy", "static")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr


def test_out_is_a_file_exit_2(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = run_cli("simulate", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"), "--policy", "static", "--job", _first_job(), "--out", str(f))
    assert r.returncode == 2 and "--out" in r.stderr
    assert f.read_text() == "x"


def test_simulate_trace_writes_summary_and_gantt(tmp_path):
    out = tmp_path / "trace"
    r = run_cli("simulate", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"), "--policy", "solo-d", "--consolidate-at", "0.8",
                "--out", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert doc["summary"]["jobs_done"] == 2 and doc["summary"]["cost"] > 0
    assert {j["job"] for j in doc["jobs"]} == {"small-a", "small-b"}
    assert (out / "gantt.png").read_bytes()[:4] == b"\x89PNG"


def test_simulate_plan_reports_planned_and_simulated_cycle_per_group(tmp_path):
    """`planner simulate --plan` runs the plan's own groups (not a fresh admission) and reports
    planned vs simulated cycle per group and SLO attainment per job."""
    import yaml

    plan, out = tmp_path / "plan.yaml", tmp_path / "sim"
    sc = str(SCENARIOS / "ci" / "tiny-2jobs.yaml")
    assert run_cli("plan", sc, "--out", str(plan)).returncode == 0
    groups = yaml.safe_load(plan.read_text())["body"]["groups"]
    r = run_cli("simulate", sc, "--plan", str(plan), "--json", "--iterations", "10", "--out", str(out))
    assert r.returncode == 0, r.stderr
    def strict(const):
        raise AssertionError(f"--json printed {const}: not JSON (an unknown figure must be null)")

    doc = json.loads(r.stdout, parse_constant=strict)
    assert [g["id"] for g in doc["groups"]] == [g["id"] for g in groups]
    for g, planned in zip(doc["groups"], groups):
        assert g["members"] == planned["order"] and g["planned_cycle_s"] == pytest.approx(planned["cycle_time_s"])
        assert g["simulated_cycle_s"] > 0
    assert {j["job"] for j in doc["jobs"]} == {m["job"] for g in groups for m in g["members"]}
    assert all(0.0 <= j["slo_attainment"] <= 1.0 for j in doc["jobs"])
    assert json.loads((out / "summary.json").read_text())["groups"] == doc["groups"]
    assert any("one replication per group" in n for n in doc["notes"])
    # several replications: the mean and its standard error per group, no note
    r = run_cli("simulate", sc, "--plan", str(plan), "--json", "--iterations", "10", "--replications", "3")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout, parse_constant=strict)
    assert all(g["replications"] == 3 and g["simulated_se_s"] is not None and g["simulated_se_s"] >= 0 for g in doc["groups"])
    assert not any("one replication" in n for n in doc["notes"])


def test_simulate_plan_refuses_another_kind_or_scenario(tmp_path):
    import yaml

    other = tmp_path / "realloc.yaml"
    other.write_text(yaml.safe_dump({"kind": "ReallocPlan", "version": 1, "solver": {"backend": "x", "status": "optimal"}, "body": {}}))
    out = tmp_path / "o"
    r = run_cli("simulate", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"), "--plan", str(other), "--out", str(out))
    assert r.returncode == 2 and "--plan" in r.stderr and "PlacementPlan" in r.stderr and "Traceback" not in r.stderr
    plan = tmp_path / "plan.yaml"
    assert run_cli("plan", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"), "--out", str(plan)).returncode == 0
    r = run_cli("simulate", str(SCENARIOS / "ci" / "tiny-mixed.yaml"), "--plan", str(plan), "--out", str(out))
    assert r.returncode == 2 and "tiny-2jobs" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("simulate", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"), "--plan", str(plan), "--policy", "groups", "--out", str(out))
    assert r.returncode == 2 and "--plan" in r.stderr
    assert not out.exists()


ONE_GPU_NODES = """name: onegpu
gpu_types:
  H100: {price_per_gpu_hour: 2.5}
cluster:
  node_groups:
    - {name: h100, gpu_type: H100, count: 2, gpus_per_node: 1, host_dram_gb: 2048}
jobs:
  - name: small
    model: qwen2.5-1.5b
    rollout: {batch_prompts: 8, group_size: 2, max_response_tokens: 512, tp: 1, nodes: 1}
    trainer: {tp: 1, pp: 1, nodes: 1}
"""


@pytest.mark.parametrize("extra", [[], ["--start-search", "static"]])
def test_dynamic_on_a_split_no_start_fits_says_what_static_says(tmp_path, capsys, extra):
    """Two one-GPU nodes hold no rollout + log-prob + trainer split: the dynamic policy's start search finds no start
    and says why as the static policy does (it said 'min() arg is an empty sequence')."""
    from planner.cli import main as cli_main

    scen = tmp_path / "onegpu.yaml"
    scen.write_text(ONE_GPU_NODES)
    capsys.readouterr()
    assert cli_main(["simulate", str(scen), "--policy", "static"]) == 2
    static = capsys.readouterr().err
    assert "infeasible split" in static and "at least 2 training node(s)" in static
    assert static.count("Fix:") == 1, static  # the split's own fix, not a second one appended
    assert cli_main(["simulate", str(scen), "--policy", "dynamic", *extra]) == 2
    err = capsys.readouterr().err
    assert err == static and "min()" not in err
