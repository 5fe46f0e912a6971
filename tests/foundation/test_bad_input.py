"""A corpus of malformed and contradictory scenarios: each gets exit status 2, a message naming
the field (path), and no traceback."""

from __future__ import annotations

import copy
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from tests.conftest import SCENARIOS, run_cli

BASE = yaml.safe_load((SCENARIOS / "ci" / "tiny-2jobs.yaml").read_text())


def _set(path: str, value):
    def mutate(d):
        cur = d
        parts = _parts(path)
        for p in parts[:-1]:
            cur = cur[p]
        cur[parts[-1]] = value
    return mutate


def _del(path: str):
    def mutate(d):
        cur = d
        parts = _parts(path)
        for p in parts[:-1]:
            cur = cur[p]
        del cur[parts[-1]]
    return mutate


def _parts(path: str):
    out = []
    for tok in path.replace("]", "").replace("[", ".").split("."):
        out.append(int(tok) if tok.isdigit() else tok)
    return out


def _both(*fs):
    def mutate(d):
        for f in fs:
            f(d)
    return mutate


# (case id, mutation of the valid base, text that must name the field, text the message must contain)
CASES = [
    ("negative-max-response", _set("jobs[0].rollout.max_response_tokens", -5), "jobs[0].rollout.max_response_tokens", "greater than 0"),
    ("string-batch", _set("jobs[1].rollout.batch_prompts", "lots"), "jobs[1].rollout.batch_prompts", "lots"),
    ("typo-key-job", _set("jobs[0].rollout.max_respons_tokens", 10), "jobs[0].rollout.max_respons_tokens", "max_response_tokens"),
    ("typo-top-level", _set("jobz", []), "jobz", "jobs"),
    ("typo-node-group", _set("cluster.node_groups[0].gpus_per_nod", 8), "cluster.node_groups[0].gpus_per_nod", "gpus_per_node"),
    ("missing-max-response", _del("jobs[0].rollout.max_response_tokens"), "jobs[0].rollout.max_response_tokens", "missing"),
    ("missing-cluster", _del("cluster"), "cluster", "missing"),
    ("missing-name", _del("name"), "name", "missing"),
    ("empty-node-groups", _set("cluster.node_groups", []), "cluster.node_groups", "at least 1"),
    ("unknown-gpu-type", _set("cluster.node_groups[0].gpu_type", "H2O"), "cluster.node_groups[0].gpu_type", "H20"),
    ("unknown-gpu-override", _set("gpu_types.A100", {"price_per_gpu_hour": 1.0}), "gpu_types.A100", "unknown GPU type"),
    ("negative-price", _set("gpu_types.H20.price_per_gpu_hour", -1), "gpu_types.H20.price_per_gpu_hour", "greater than or equal to 0.000001"),
    ("missing-price", _del("gpu_types.H800.price_per_gpu_hour"), "gpu_types.H800.price_per_gpu_hour", "no price"),
    ("undefined-fabric", _set("cluster.node_groups[0].cluster", "c"), "cluster.node_groups[0].cluster", "not defined"),
    ("duplicate-job-name", _set("jobs[1].name", "small-a"), "jobs[1].name", "duplicate"),
    ("duplicate-group-name", _set("cluster.node_groups[1].name", "h20"), "cluster.node_groups[1].name", "duplicate"),
    ("bad-job-name", _set("jobs[0].name", "has space"), "jobs[0].name", "pattern"),
    ("unknown-model", _set("jobs[0].model", "qwen2.5-7bb"), "jobs[0].model", "qwen2.5-7b"),
    ("model-dims-missing", _set("jobs[0].model", {"hidden_size": 1024}), "jobs[0].model", "missing"),
    ("model-heads", _set("jobs[0].model", {"hidden_size": 1024, "num_layers": 4, "num_heads": 6, "num_kv_heads": 4,
                                            "intermediate_size": 4096, "vocab_size": 32000}), "jobs[0].model", "multiple of num_kv_heads"),
    ("bad-algorithm", _set("jobs[0].algorithm", "dpo"), "jobs[0].algorithm", "grpo"),
    ("bad-component", _set("jobs[0].components", ["rollout", "trainr"]), "jobs[0].components[1]", "trainer"),
    ("rollout-tp-divides", _set("jobs[0].rollout.tp", 3), "jobs[0].rollout.tp", "does not divide"),
    ("trainer-tp-too-big", _set("jobs[0].trainer.tp", 16), "jobs[0].trainer.tp", "does not divide"),
    ("trainer-dp-mismatch", _set("jobs[0].trainer.dp", 3), "jobs[0].trainer.dp", "tp x pp x dp"),
    ("slo-both", _set("jobs[0].slo", {"iteration_s": 100, "ratio_to_solo": 2}), "jobs[0].slo", "exactly one"),
    ("slo-neither", _set("jobs[0].slo", {}), "jobs[0].slo", "exactly one"),
    ("slo-ratio-below-1", _set("jobs[0].slo", {"ratio_to_solo": 0.5}), "jobs[0].slo.ratio_to_solo", "greater than or equal to 1"),
    ("slo-below-solo", _set("jobs[0].slo", {"iteration_s": 1}), "jobs[0].slo.iteration_s", "below the job's solo iteration time"),
    ("model-does-not-fit", _both(_set("jobs[0].model", "qwen2.5-72b"), _set("jobs[0].rollout.tp", 1)), "jobs[0].model", "does not fit"),
    ("training-does-not-fit", _both(_set("jobs[1].model", "qwen2.5-32b"), _set("jobs[1].rollout.tp", 4), _set("jobs[1].trainer.tp", 1)),
     "jobs[1].model", "training state does not fit"),
    ("too-many-nodes", _set("jobs[0].rollout.nodes", 5), "jobs[0].rollout.nodes", "needs 5 nodes"),
    ("unknown-allowed-type", _set("jobs[0].rollout.gpu_types", ["H100"]), "jobs[0].rollout.gpu_types[0]", "no nodes"),
    # an empty allow-list was read as every type, in silence (an outside audit)
    ("empty-rollout-types", _set("jobs[0].rollout.gpu_types", []), "jobs[0].rollout.gpu_types", "allows no GPU type"),
    ("empty-trainer-types", _set("jobs[1].trainer.gpu_types", []), "jobs[1].trainer.gpu_types", "leave gpu_types out"),
    ("bad-length-source", _set("jobs[0].rollout.response_lengths", {"source": "zipf"}), "jobs[0].rollout.response_lengths", "servegen"),
    ("lognormal-missing-median", _set("jobs[0].rollout.response_lengths", {"source": "lognormal"}),
     "jobs[0].rollout.response_lengths.median_tokens", "missing"),
    ("unknown-servegen-client", _set("jobs[0].rollout.response_lengths", {"source": "servegen", "client": "999"}),
     "jobs[0].rollout.response_lengths.client", "no ServeGen client"),
    ("negative-count", _set("cluster.node_groups[0].count", -1), "cluster.node_groups[0].count", "greater than or equal to 0"),
    ("zero-gpus", _set("cluster.node_groups[0].gpus_per_node", 0), "cluster.node_groups[0].gpus_per_node", "greater than 0"),
    ("bad-version", _set("version", 2), "version", "1"),
    ("jobs-not-list", _set("jobs", {"a": 1}), "jobs", "list"),
    ("mfu-above-1", _set("jobs[0].trainer.mfu", 1.5), "jobs[0].trainer.mfu", "less than or equal to 1"),
    ("solver-backend", _set("solver.backend", "gurobi"), "solver.backend", "highs"),
    ("bad-weight-sync", _set("jobs[0].weight_sync", "ring"), "jobs[0].weight_sync", "scatter_broadcast"),
]

RAW_CASES = [
    ("yaml-syntax", "name: x\ncluster: [unclosed\n", "not valid YAML"),
    ("top-level-list", "- a\n- b\n", "must be a mapping"),
    ("empty-file", "", "is empty"),
    ("duplicate-key", "name: a\nname: b\ncluster: {node_groups: []}\n", "duplicate key 'name'"),
]


def _run_inprocess(path: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(["validate", str(path)])
    return rc, out.getvalue() + err.getvalue()


def test_corpus_is_large_enough():
    assert len(CASES) + len(RAW_CASES) >= 30


@pytest.mark.parametrize("case_id,mutate,field,text", CASES, ids=[c[0] for c in CASES])
def test_bad_scenario(tmp_path, case_id, mutate, field, text):
    data = copy.deepcopy(BASE)
    mutate(data)
    path = tmp_path / f"{case_id}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    rc, output = _run_inprocess(path)
    assert rc == 2, output
    assert field in output, output
    assert text in output, output
    assert "Traceback" not in output
    assert f"{path}:" in output  # file (and line) named


@pytest.mark.parametrize("case_id,text,expect", RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_bad_raw_file(tmp_path, case_id, text, expect):
    path = tmp_path / f"{case_id}.yaml"
    path.write_text(text)
    rc, output = _run_inprocess(path)
    assert rc == 2 and expect in output and "Traceback" not in output, output


def test_line_number_points_at_the_field(tmp_path):
    text = (SCENARIOS / "ci" / "tiny-2jobs.yaml").read_text().replace("max_response_tokens: 2048", "max_response_tokens: -1", 1)
    path = tmp_path / "x.yaml"
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "max_response_tokens: -1" in ln)
    rc, output = _run_inprocess(path)
    assert rc == 2 and f"{path}:{line}:" in output, output


def test_subprocess_exit_status_and_no_traceback(tmp_path):
    data = copy.deepcopy(BASE)
    data["jobs"][0]["rollout"]["tp"] = 3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = run_cli("validate", str(path))
    assert proc.returncode == 2
    assert "jobs[0].rollout.tp" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    proc = run_cli("estimate", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2 and "file not found" in proc.stderr


def test_include_cycle(tmp_path):
    (tmp_path / "a.yaml").write_text("include: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("include: a.yaml\n")
    rc, output = _run_inprocess(tmp_path / "a.yaml")
    assert rc == 2 and "include cycle" in output
