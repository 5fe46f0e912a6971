"""Outside audit D: the in-iteration reallocation side (`planner realloc`, one-job `planner simulate`)
with hostile snapshots and scenarios. Each refusal: exit 2, the field named, no traceback, nothing
written; each decision printed says what it did."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import _refused

ROOT = Path(__file__).resolve().parents[2]
TAIL = ROOT / "scenarios" / "realloc" / "tail-h100-16node.json"  # job math-7b, 512 x 16 = 8,192 requests an iteration
MATH_7B = ROOT / "scenarios" / "dynarl" / "math-7b-128gpu.yaml"
HETERO_SCENARIO = ROOT / "scenarios" / "realloc" / "hetero.yaml"


def _tail_snapshots() -> list:
    return json.loads(TAIL.read_text())["snapshots"]


def test_a_rollout_reporting_more_requests_than_the_iteration_has_is_refused(tmp_path):
    """queue_depth (up to 2^30 a worker by the schema) went into the request-level model, which draws a
    length for each request: 2^30 allocated 8 GiB and the command died of a MemoryError ("internal
    error", exit 1); 10,000 queued requests of an 8,192-request iteration were planned on."""
    snaps = _tail_snapshots()
    snaps[-1]["workers"][0]["queue_depth"] = 10_000
    f = tmp_path / "snaps.json"
    f.write_text(json.dumps({"snapshots": snaps}))
    out = tmp_path / "plan.json"
    rc, output, _cpu, rss = run_inprocess(["realloc", str(f), "--scenario", str(MATH_7B), "--out", str(out)])
    _refused(rc, output, rss, "components[0] (rollout)", "8,192", "workers[0].queue_depth")
    assert not out.exists()


def test_a_donor_not_at_an_interruptible_point_is_not_reported_as_no_donor(tmp_path):
    """Every component at a non-interruptible point: the donor table said 'yes' for the rollout and the
    reason said 'no donor detected: 88 of 88 engines ... below U_low for at least T' (a donor's evidence)."""
    snaps = _tail_snapshots()
    for s in snaps:
        for c in s["components"]:
            c["interruptible"] = False
    f = tmp_path / "snaps.json"
    f.write_text(json.dumps({"snapshots": snaps}))
    rc, output, _cpu, _rss = run_inprocess(["realloc", str(f), "--scenario", str(MATH_7B), "--json"])
    assert rc == 0, output[-2000:]
    body = json.loads(output[output.index("{"):])["body"]
    assert not body["committed"]
    assert [d["component"] for d in body["donors"] if d["donor"]] == ["rollout"]
    assert "no donor detected" not in body["reason"]
    assert "interruptible" in body["reason"] and "rollout" in body["reason"]


def _scenario(tmp_path: Path, rollout_nodes: int, trainer_nodes: int) -> Path:
    doc = {"name": "two-nodes", "gpu_types": {"H100": {"price_per_gpu_hour": 2.5}},
           "cluster": {"node_groups": [{"name": "h100", "gpu_type": "H100", "count": 2, "gpus_per_node": 8}]},
           "jobs": [{"name": "j", "model": "deepseek-r1-distill-qwen-1.5b", "algorithm": "grpo",
                     "rollout": {"batch_prompts": 16, "group_size": 4, "prompt_tokens": 512, "max_response_tokens": 2048,
                                 "tp": 1, "nodes": rollout_nodes},
                     "trainer": {"tp": 1, "pp": 1, "nodes": trainer_nodes}}]}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def test_a_one_job_simulation_needing_more_nodes_than_the_cluster_has_is_refused(tmp_path):
    """rollout.nodes 2 + trainer.nodes 2 on a 2-node cluster validate (each pool alone fits), and
    `simulate --policy static` reported 32 GPUs' worth of cluster GPU-seconds and cost (dynamic: a start
    split 12+7+13 of 16 GPUs)."""
    s = _scenario(tmp_path, 2, 2)
    out = tmp_path / "out"
    for policy in ("static", "dynamic"):
        rc, output, _cpu, rss = run_inprocess(["simulate", str(s), "--policy", policy, "--iterations", "1", "--out", str(out)])
        _refused(rc, output, rss, "jobs[0] (j).rollout.nodes", "2 + 2 = 4 H100 nodes", "has 2 H100 node(s)")
        assert not out.exists() or not any(out.iterdir())


def test_a_one_job_simulation_picks_a_gpu_type_pair_the_cluster_can_hold():
    """hetero.yaml allows its rollout (3 nodes) on H20 or H100 and its trainer (2 nodes) on H100, with
    2 H100 nodes: the fastest pair, H100 for both, was simulated on 5 H100 nodes. The fastest pair
    that fits is H20 + H100."""
    from planner.instances.simulate import check_job_fits_cluster, cluster_view, job_setup
    from planner.schema import load_scenario

    sc = load_scenario(HETERO_SCENARIO)
    view = cluster_view(sc)
    setup = job_setup(sc, 0, sc.jobs[0], view)
    assert (setup.rollout_gpu.name, setup.train_gpu.name) == ("H20", "H100")
    check_job_fits_cluster(setup, 0, sc.jobs[0], view)  # does not raise


def _completion_inputs(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A simulation's snapshots up to the completion decision's first solve, its scenario and its context (JSON)."""
    from planner.instances.completion_io import context_to_data
    from tests.realloc.test_completion_paths import first_solve_in

    fired = first_solve_in(tmp_path)
    snaps = tmp_path / "snaps.jsonl"
    snaps.write_text("".join(json.dumps(s.model_dump(mode="json")) + "\n" for s in fired["snaps"]))
    return snaps, fired["scenario"], context_to_data(fired["ctx"])


def test_a_context_past_the_jobs_limits_is_refused_naming_the_field(tmp_path):
    """--decision completion: a request that had generated 1e9 tokens (the job's max_response_tokens is 8,192) was
    decided on and refused only afterwards as "the decision's completion_keep_s is 60160417325.5, not a finite number
    of seconds", naming no field; a trainer with 1,000 samples to come of a 384-request iteration was decided on."""
    import copy

    snaps, scenario, ctx = _completion_inputs(tmp_path)
    reqs = ctx["components"]["rollout"]["requests"]
    bad_generated = copy.deepcopy(ctx)
    bad_generated["components"]["rollout"]["requests"]["generated"] = [1e9] * len(reqs["generated"])
    bad_pending = copy.deepcopy(ctx)
    bad_pending["components"]["trainer"]["pending"] = 1000
    for data, words in ((bad_generated, ("components.rollout.requests.generated[0]", "max_response_tokens (8192)")),
                        (bad_pending, ("components.trainer.pending", "384 requests"))):
        f = tmp_path / "ctx.json"
        f.write_text(json.dumps(data))
        out = tmp_path / "decision.json"
        rc, output, _cpu, rss = run_inprocess(["realloc", str(snaps), "--decision", "completion", "--scenario", str(scenario),
                                               "--context", str(f), "--hold-s", "4", "--out", str(out)])
        _refused(rc, output, rss, "--context", *words)
        assert not out.exists()
    f = tmp_path / "ctx.json"
    f.write_text(json.dumps(ctx))  # the context as the simulator took it is decided on
    rc, output, _cpu, _rss = run_inprocess(["realloc", str(snaps), "--decision", "completion", "--scenario", str(scenario),
                                            "--context", str(f), "--hold-s", "4", "--json"])
    assert rc == 0, output[-2000:]
