"""planner validate names a job whose host DRAM fits no node it may use (an outside check: validate
passed such scenarios, and only planner plan said the job could never be placed).

The rule is the one ``planner plan`` explains unplaced jobs with
(:func:`formulation.placement.dramfit.dram_short`); these tests hold validate to it, to its wording
(job, field, file and line, the limit, the fix; exit 2 without a traceback) and to
``--allow-unplaced`` (warnings, exit 0), as ``planner plan --allow-unplaced`` plans the others.
"""

from __future__ import annotations

import json

from planner.schema import load_scenario
from planner.schema.checks import placeable_problems
from tests.conftest import run_cli

# one 7B job (about 15.2 GB of host DRAM per rollout node, 106.6 GB of training state) and one 1.5B job
# on 4 H100 nodes of DRAM GB each
SCENARIO = """\
name: dram-probe
gpu_types:
  H100: {{price_per_gpu_hour: 2.5}}
cluster:
  node_groups:
    - {{name: h100, gpu_type: H100, count: 4, gpus_per_node: 8, host_dram_gb: {dram}}}
jobs:
  - name: small
    model: qwen2.5-1.5b
    rollout: {{batch_prompts: 32, group_size: 4, max_response_tokens: 2048, tp: 1, nodes: 1}}
    trainer: {{tp: 1, pp: 1, nodes: 1}}
    slo: {{ratio_to_solo: 2.0}}
  - name: big
    model: qwen2.5-7b
    rollout: {{batch_prompts: 32, group_size: 4, max_response_tokens: 2048, tp: 1, nodes: 1}}
    trainer: {{tp: 1, pp: 1, nodes: 1}}
    slo: {{ratio_to_solo: 2.0}}
{extra}"""


def _write(tmp_path, dram: float, extra: str = ""):
    p = tmp_path / f"dram-{dram:g}.yaml"
    p.write_text(SCENARIO.format(dram=dram, extra=extra))
    return p


def _refused(proc, path):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert f"error: {path}: invalid scenario" in proc.stderr, proc.stderr
    assert "ok:" not in proc.stdout
    return " ".join(proc.stderr.split())


def test_a_job_whose_training_state_fits_no_node_is_refused_naming_job_field_limit_and_fix(tmp_path):
    path = _write(tmp_path, 16)  # 106.6 GB over at most 4 nodes: 26.7 GB a node; the 1.5B job fits
    err = _refused(run_cli("validate", str(path)), path)
    assert f"{path}:16: jobs[1].trainer: job 'big' cannot be placed by any plan" in err, err
    assert "26.7 GB of host DRAM per node even on 4 H100 node(s)" in err
    assert "16 GB (host_dram_gb of node group 'h100', cluster.node_groups[0])" in err
    assert "Fix: raise that host_dram_gb to at least 27" in err and "--allow-unplaced" in err
    assert "'small'" not in err  # only the job that cannot be placed


def test_a_job_whose_rollout_fits_no_node_is_refused_on_its_rollout(tmp_path):
    path = _write(tmp_path, 8)  # 15.2 GB of parked 7B weights on each rollout node; the 1.5B job needs less than 8
    err = _refused(run_cli("validate", str(path)), path)
    assert f"{path}:15: jobs[1].rollout: job 'big' cannot be placed by any plan" in err, err
    assert "15.2 GB of host DRAM on each rollout node" in err and "the most is 8 GB (host_dram_gb of node group 'h100'" in err
    assert "Fix: raise that host_dram_gb to at least 16" in err


def test_allow_unplaced_passes_the_file_with_the_same_words_as_a_warning(tmp_path):
    path = _write(tmp_path, 16)
    proc = run_cli("validate", "--allow-unplaced", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"ok: {path}: scenario 'dram-probe', 2 job(s), 4 node(s)")
    assert proc.stderr.startswith(f"warning: {path}:16: jobs[1].trainer: job 'big' cannot be placed by any plan"), proc.stderr
    proc = run_cli("validate", "--allow-unplaced", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    [entry] = json.loads(proc.stdout)
    assert entry["ok"] is True and len(entry["warnings"]) == 1 and "jobs[1].trainer" in entry["warnings"][0]
    proc = run_cli("validate", "--json", str(path))
    assert proc.returncode == 2
    [entry] = json.loads(proc.stdout)
    assert entry["ok"] is False and "jobs[1].trainer: job 'big' cannot be placed" in entry["error"]


def test_enough_dram_passes(tmp_path):
    path = _write(tmp_path, 32)  # 26.7 GB a node on 4 training nodes fits
    proc = run_cli("validate", str(path))
    assert proc.returncode == 0 and proc.stdout.startswith("ok:"), proc.stderr
    assert proc.stderr == ""


def test_a_scenario_that_buys_nodes_is_not_held_to_todays_training_pools(tmp_path):
    """With a budget (or max_nodes) the plan may form larger training pools than the fleet's 4 nodes: the training-state
    check is the plan's; the rollout node's DRAM is the same on a bought node and stays checked."""
    extra = "budget_per_hour: 1000\n"
    assert placeable_problems(load_scenario(_write(tmp_path, 16, extra))) == []
    [p] = placeable_problems(load_scenario(_write(tmp_path, 8, extra)))
    assert p.where == "jobs[1].rollout"


def test_validate_and_plan_apply_the_same_rule_with_the_same_numbers(tmp_path):
    """The unplaced reason planner plan gives (formulation.placement.explain) and validate's problem come
    from one rule: the same figures on both sides."""
    from formulation.placement.evaluate import Index
    from formulation.placement.explain import explain
    from planner.instances.placement import compile_scenario

    for dram, words in ((16, ("106.6 GB", "26.7 GB", "4 H100 node(s)")), (8, ("15.2 GB", "8.0 GB"))):
        sc = load_scenario(_write(tmp_path, dram))
        inst = compile_scenario(sc)
        why = explain(Index(inst), 1)
        [p] = placeable_problems(sc)
        assert why.reason == "dram" and why.job == "big"
        for w in words:
            assert w in why.message, why.message
            assert w.replace(".0 GB", " GB") in p.message, p.message
        assert explain(Index(inst), 0).reason != "dram"  # the 1.5B job fits on either side
