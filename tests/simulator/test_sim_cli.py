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
