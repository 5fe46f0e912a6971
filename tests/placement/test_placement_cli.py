"""The placement commands end to end: real CLI in a subprocess, plans judged by the checker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from formulation.placement.check import check
from formulation.placement.plan import PlacementPlan
from planner.instances.placement import compile_scenario, dump_instance, load_instance
from planner.schema import load_scenario
from tests.conftest import ROOT, SCENARIOS, run_cli

SMALL = SCENARIOS / "instances" / "placement-small.yaml"
TRACE = "test_shipped_trace_instance_matches_the_scenario"
COMPILE = """import sys
from pathlib import Path
from planner.instances.placement import compile_scenario, dump_instance
from planner.schema import load_scenario
Path(sys.argv[2]).write_text(dump_instance(compile_scenario(load_scenario(sys.argv[1]))))
"""


def read_plan(path):
    doc = yaml.safe_load(path.read_text())
    return doc, PlacementPlan.model_validate(doc["body"])


def no_traceback(proc):
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


@pytest.fixture(scope="module", autouse=True)
def trace_compile(request, tmp_path_factory):
    """The compile of ``scenarios/weave-trace-60.yaml`` (what ``planner plan --save-instance`` writes, without the
    solve), in a process started as the module starts (when its trace test is selected): the 60 jobs' phase times
    take about 9 s of one core, which run beside this module's other tests (they mostly wait on their own
    ``planner`` processes); the trace test collects it. Ended at the end of the module, also on failure."""
    if not any(item.name == TRACE and item.module is request.module for item in request.session.items):
        yield None
        return
    out = tmp_path_factory.mktemp("trace")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # RL_PLANNER_CACHE=0
    with open(out / "stderr.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", COMPILE, str(SCENARIOS / "weave-trace-60.yaml"), str(out / "instance.yaml")],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def micro_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "micro.yaml"
    png = out.with_suffix(".png")
    proc = run_cli("plan", str(SCENARIOS / "weave-micro.yaml"), "--out", str(out), "--plot", str(png), "--time-limit", "20")
    assert proc.returncode == 0, proc.stderr
    return out, png, proc


def test_plan_writes_a_valid_plan_and_a_timeline(micro_plan):
    out, png, proc = micro_plan
    doc, plan = read_plan(out)
    assert doc["kind"] == "PlacementPlan" and doc["solver"]["status"] in ("optimal", "feasible")
    inst = compile_scenario(load_scenario(SCENARIOS / "weave-micro.yaml"))
    assert check(inst, plan) == []
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "greedy" in proc.stderr and "$/h" in proc.stderr
    # node names come from the node groups
    assert all(n.startswith("h20-") for g in plan.groups for n in g.rollout_pool.nodes)
    assert doc["solver"]["best_bound"] <= doc["solver"]["objective"] + 1e-6


def test_validate_plan_accepts_it_and_names_each_broken_rule(micro_plan, tmp_path):
    out, _, _ = micro_plan
    ok = run_cli("validate-plan", str(SCENARIOS / "weave-micro.yaml"), str(out))
    assert ok.returncode == 0, ok.stderr
    doc = yaml.safe_load(out.read_text())
    g0 = doc["body"]["groups"][0]
    g0["members"][0]["rollout_nodes"] = ["h800-7"]
    doc["body"]["groups"][-1]["train_pool"]["nodes"][0] = doc["body"]["groups"][0]["train_pool"]["nodes"][0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    proc = run_cli("validate-plan", str(SCENARIOS / "weave-micro.yaml"), str(bad))
    assert proc.returncode == 2
    no_traceback(proc)
    assert f"pins[job={g0['members'][0]['job']},group={g0['id']}]" in proc.stderr
    assert "node-exclusive[node=" in proc.stderr


def test_instance_file_plans_with_every_backend(tmp_path):
    inst = load_instance(SMALL)
    costs = {}
    for backend in ("colgen", "highs", "cpsat", "greedy"):
        out = tmp_path / f"{backend}.json"
        proc = run_cli("plan", str(SMALL), "--backend", backend, "--out", str(out), "--time-limit", "20")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(out.read_text())
        plan = PlacementPlan.model_validate(doc["body"])
        assert check(inst, plan) == []
        costs[backend] = plan.cost_per_hour
    assert costs["colgen"] == pytest.approx(costs["highs"]) == pytest.approx(costs["cpsat"])
    assert costs["greedy"] >= costs["colgen"] - 1e-9


def test_admit_places_an_arriving_job_without_moving_others(tmp_path):
    inst = load_instance(SMALL)
    first = inst.model_copy(deep=True)
    first.jobs = [j for j in first.jobs if j.name != "qwen14b-chat"]
    base_in = tmp_path / "three.yaml"
    base_in.write_text(dump_instance(first))
    base = tmp_path / "base.yaml"
    assert run_cli("plan", str(base_in), "--out", str(base)).returncode == 0
    after = tmp_path / "after.yaml"
    proc = run_cli("admit", str(SMALL), "--current", str(base), "--job", "qwen14b-chat", "--out", str(after))
    assert proc.returncode == 0, proc.stderr
    assert "admitted qwen14b-chat:" in proc.stderr and " ms" in proc.stderr
    _, before = read_plan(base)
    _, plan = read_plan(after)
    assert check(inst, plan) == []
    old = {m.job: (g.id, tuple(g.rollout_pool.nodes[:1])) for g in before.groups for m in g.members}
    new = {m.job: (g.id, tuple(g.rollout_pool.nodes[:1])) for g in plan.groups for m in g.members}
    assert all(new[j] == old[j] for j in old)
    again = run_cli("admit", str(SMALL), "--current", str(after), "--job", "qwen14b-chat")
    assert again.returncode == 2 and "already placed" in again.stderr
    no_traceback(again)


def test_replan_from_current_plan_charges_moves(tmp_path):
    inst = load_instance(SMALL)
    cur = tmp_path / "cur.yaml"
    assert run_cli("plan", str(SMALL), "--backend", "greedy", "--out", str(cur)).returncode == 0
    out = tmp_path / "re.yaml"
    proc = run_cli("plan", str(SMALL), "--current", str(cur), "--move-price", "1000", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc, plan = read_plan(out)
    assert check(inst, plan) == []
    assert doc["solver"]["warm_start"] == "previous-plan"
    assert plan.moved_jobs == []  # moving anything would cost more than it saves


def test_unplaceable_jobs_are_explained_exit_2_nothing_written(tmp_path):
    inst = load_instance(SMALL)
    bad = inst.model_copy(deep=True)
    bad.jobs[2].slo_s = 200.0  # best solo 176.0 + 123.3 + 0.2 = 299.5 s: 99.5 s short
    bad.pool_types["H20"].dram_gb = 20.0  # the 14B jobs keep 29.5 GB on each rollout node
    path = tmp_path / "bad.yaml"
    path.write_text(dump_instance(bad))
    out = tmp_path / "never.yaml"
    saved = tmp_path / "saved.yaml"
    saved.write_text("the user's own file\n")
    # refused before any solve: a 600 s limit is not spent (the subprocess is stopped at 300 s)
    proc = run_cli("plan", str(path), "--out", str(out), "--save-instance", str(saved), "--time-limit", "600", timeout=300)
    assert proc.returncode == 2
    no_traceback(proc)
    assert "cannot be placed by any plan; nothing solved" in proc.stderr
    assert not out.exists()
    assert saved.read_text() == "the user's own file\n"  # a refused command writes neither file
    assert "job qwen14b-math: cannot be placed (dram)" in proc.stderr or "job qwen14b-math: cannot be placed (slo)" in proc.stderr
    assert "job qwen14b-chat: cannot be placed (dram)" in proc.stderr and "29.5 GB" in proc.stderr
    assert "Fix:" in proc.stderr
    allowed = run_cli("plan", str(path), "--out", str(out), "--allow-unplaced")
    assert allowed.returncode == 0 and out.exists()


def test_fleet_shortage_names_the_type_and_count(tmp_path):
    inst = load_instance(SMALL)
    short = inst.model_copy(deep=True)
    short.pool_types["H800"].count = 1
    path = tmp_path / "short.yaml"
    path.write_text(dump_instance(short))
    proc = run_cli("plan", str(path))
    assert proc.returncode == 2
    no_traceback(proc)
    assert "short by" in proc.stderr and "of H800" in proc.stderr


def test_jobs_left_out_by_a_solve_the_loading_cut_short_are_not_called_a_shortage(tmp_path, monkeypatch, capsys):
    """When loading took the limit (a cold cache estimating phase times), the jobs the short solve left out
    are reported as such, with a longer --time-limit as the fix, not only as a fleet shortage."""
    import planner.commands.plan as plan_cmd
    from planner.cli import main

    inst = load_instance(SMALL)
    short = inst.model_copy(deep=True)
    short.pool_types["H800"].count = 1
    path = tmp_path / "short.yaml"
    path.write_text(dump_instance(short))
    monkeypatch.setattr(plan_cmd, "solver_share", lambda limit, loaded, n, js: (plan_cmd.MIN_SOLVE_S, "loading the input took "
                                                                                "8.38 s of the 5 s limit: the solver had 0.05 s"))
    rc = main(["plan", str(path), "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert rc == 2 and "were not placed in the time left" in err and "--time-limit" in err and "longer --time-limit" in err, err
    assert "not proven unplaceable" in err and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("patch, field", [
    (lambda d: d["jobs"][0].pop("slo_s"), "jobs.0.slo_s"),
    (lambda d: d["jobs"][0]["rollout_s"].update({"H999": {1: 3.0}}), "H999"),
    (lambda d: d["pool_types"]["H20"].update({"count": -1}), "pool_types.H20.count"),
    (lambda d: d["jobs"][0]["train_s"]["H800"].update({1: -5}), "jobs.0.train_s.H800.1"),
    (lambda d: d["jobs"].append(dict(d["jobs"][0])), "duplicate job name"),
])
def test_bad_instance_files_name_the_field(tmp_path, patch, field):
    data = yaml.safe_load(SMALL.read_text())
    patch(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = run_cli("plan", str(path))
    assert proc.returncode == 2
    no_traceback(proc)
    assert field in proc.stderr and "Fix:" in proc.stderr


@pytest.mark.parametrize("command", ["plan", "admit"])
@pytest.mark.parametrize("bad, needle", [
    ('"slo_s": 1e999', "not a finite number"),  # JSON parses it as inf
    ('"slo_s": true', "is a boolean, not a number"),
    ('"slo_s": "Infinity"', "slo_s"),  # a string a lax float field would read as inf
])
def test_json_instance_numbers_are_checked(tmp_path, command, bad, needle):
    """A JSON instance's numbers are checked in the walk that checks its depth: a non-finite
    number or a boolean is still refused with its field named (plan and admit, exit 2)."""
    import re

    data = {"kind": "PlacementInstance", **load_instance(SMALL).model_dump(mode="json")}
    text = re.sub(r'"slo_s": [0-9.e+-]+', bad, json.dumps(data), count=1)
    assert bad in text
    path = tmp_path / "bad.json"
    path.write_text(text)
    args = ["--current", str(tmp_path / "none.json"), "--job", data["jobs"][0]["name"]] if command == "admit" else []
    proc = run_cli(command, str(path), *args)
    assert proc.returncode == 2, proc.stderr
    no_traceback(proc)
    assert needle in proc.stderr and "Fix:" in proc.stderr


@pytest.mark.parametrize("args, needle", [
    (["--time-limit", "-1"], "--time-limit"),
    (["--threads", "0"], "--threads"),
    (["--move-price", "-2"], "--move-price"),
    (["--out", "/no/such/dir/plan.yaml"], "--out"),
    (["--current", "/no/such/plan.yaml"], "plan file not found"),
])
def test_bad_arguments_exit_2_with_a_message(args, needle):
    proc = run_cli("plan", str(SMALL), *args)
    assert proc.returncode == 2
    no_traceback(proc)
    assert needle in proc.stderr


def test_validate_plan_rejects_a_plan_of_another_kind(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"kind": "ReallocPlan", "version": 1, "solver": {"backend": "x", "status": "optimal"}, "body": {}}))
    proc = run_cli("validate-plan", str(SMALL), str(other))
    assert proc.returncode == 2 and "is a reallocation plan" in proc.stderr and "(PlacementPlan)" in proc.stderr


def test_shipped_trace_instance_matches_the_scenario(trace_compile):
    # scenarios/instances/weave-trace-60.yaml is `planner plan scenarios/weave-trace-60.yaml --save-instance`; the
    # scenario compiled again on this code (the module's fixture started it), written the same way
    proc, out = trace_compile
    try:
        rc = proc.wait(timeout=600)  # a deadline on the process ending, reached only on failure
    except subprocess.TimeoutExpired:
        pytest.fail("the compile of scenarios/weave-trace-60.yaml did not finish within 600 s")
    assert rc == 0, (out / "stderr.txt").read_text()[-4000:]
    shipped = load_instance(SCENARIOS / "instances" / "weave-trace-60.yaml")
    fresh = load_instance(out / "instance.yaml")
    assert [j.name for j in shipped.jobs] == [j.name for j in fresh.jobs]
    for a, b in zip(shipped.jobs, fresh.jobs):
        assert a.slo_s == pytest.approx(b.slo_s)
        for t in b.rollout_s:
            assert a.rollout_s[t] == pytest.approx(b.rollout_s[t])
        for t in b.train_s:
            assert a.train_s[t] == pytest.approx(b.train_s[t])
        assert all(
            a.sync_s[p][q] == pytest.approx(b.sync_s[p][q]) for p in b.sync_s for q in b.sync_s[p])
        assert (a.dram_rollout_node_gb, a.train_state_gb) == pytest.approx((b.dram_rollout_node_gb, b.train_state_gb))


def test_compiled_instance_is_consistent_with_the_estimators():
    sc = load_scenario(SCENARIOS / "weave-micro.yaml")
    inst = compile_scenario(sc)
    assert inst.node_names("H20") == [f"h20-{i}" for i in range(8)]
    for j in inst.jobs:
        for row in j.rollout_s.values():
            sizes = sorted(row)
            assert all(row[a] > row[b] for a, b in zip(sizes, sizes[1:]))  # a larger rollout pool is faster
        spec = next(s for s in sc.jobs if s.name == j.name)
        assert min(j.rollout_s["H20"]) == spec.rollout.nodes and min(j.train_s["H800"]) == spec.trainer.nodes


def test_admit_extends_a_rollout_pool_and_keeps_the_nodes(tmp_path):
    # j0 + j1 share 1 A + 1 B node; j2 only fits if the rollout pool grows to 2 A nodes (see
    # test_greedy_takes_weaves_moves_in_order): admission extends it and keeps the first node
    from formulation.placement.instance import PlacementInstance, PlacementJob, PoolType

    pools = {"A": PoolType(gpus_per_node=1, price_per_gpu_hour=1.0, dram_gb=2048, count=4),
             "B": PoolType(gpus_per_node=1, price_per_gpu_hour=2.0, dram_gb=2048, count=4)}

    def job(name, a, b, slo, a2):
        return PlacementJob(name=name, slo_s=slo, rollout_s={"A": {1: a, 2: a2}}, train_s={"B": {1: b}})

    jobs = [job("j0", 50, 100, 200, 30), job("j1", 50, 60, 200, 30), job("j2", 110, 30, 200, 60)]
    full = PlacementInstance(name="ext", pool_types=pools, jobs=jobs)
    first = full.model_copy(update={"jobs": jobs[:2]})
    (tmp_path / "two.yaml").write_text(dump_instance(first))
    (tmp_path / "three.yaml").write_text(dump_instance(full))
    base, after = tmp_path / "base.yaml", tmp_path / "after.yaml"
    assert run_cli("plan", str(tmp_path / "two.yaml"), "--out", str(base)).returncode == 0
    proc = run_cli("admit", str(tmp_path / "three.yaml"), "--current", str(base), "--job", "j2", "--out", str(after))
    assert proc.returncode == 0, proc.stderr
    assert "extend-rollout-pool" in proc.stderr and "+1.00 $/h" in proc.stderr
    _, before = read_plan(base)
    _, plan = read_plan(after)
    assert check(full, plan) == []
    (g_before,), (g_after,) = before.groups, plan.groups
    assert g_after.id == g_before.id and g_after.rollout_pool.size == 2
    assert set(g_before.rollout_pool.nodes) < set(g_after.rollout_pool.nodes)
    assert g_after.train_pool.nodes == g_before.train_pool.nodes
    assert plan.cost_per_hour == pytest.approx(before.cost_per_hour + 1)


def test_a_plan_is_checked_admitted_into_and_applied_on_the_estimate_it_records(tmp_path):
    """validate-plan, admit and apply default to the phase-time estimate and margin the plan records (a plan
    made with --mode sampled or --margin 0.1 was refused against the scenario's default estimate)."""
    tiny = SCENARIOS / "ci" / "tiny-2jobs.yaml"
    for extra, words in ((["--mode", "sampled"], "on the sampled phase-time estimate"), (["--margin", "0.1"], "with a 0.1 margin")):
        out = tmp_path / f"p{len(words)}.yaml"
        assert run_cli("plan", str(tiny), "--out", str(out), *extra).returncode == 0
        proc = run_cli("validate-plan", str(tiny), str(out))
        assert proc.returncode == 0 and words in proc.stdout, (extra, proc.stdout, proc.stderr[-2000:])
        applied = run_cli("apply", str(out), "--scenario", str(tiny), "--backend", "sim", "--dry-run",
                          "--sim-state", str(tmp_path / f"s{len(words)}.sqlite"), "--journal", str(tmp_path / f"j{len(words)}.db"))
        assert applied.returncode == 0, (extra, applied.stderr[-2000:])
    # the check is the estimate's: on the conservative one the sampled plan's claims do not hold
    sampled = tmp_path / f"p{len('on the sampled phase-time estimate')}.yaml"
    assert run_cli("validate-plan", str(tiny), str(sampled), "--mode", "conservative").returncode == 2
    # admit into a plan of the first job made on the sampled estimate: the second job joins, the new plan records it
    data = yaml.safe_load(tiny.read_text())
    second = data["jobs"][1]["name"]
    data["jobs"] = data["jobs"][:1]
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(data))
    base = tmp_path / "base.yaml"
    assert run_cli("plan", str(one), "--out", str(base), "--mode", "sampled").returncode == 0
    after = tmp_path / "after.yaml"
    proc = run_cli("admit", str(tiny), "--current", str(base), "--job", second, "--out", str(after))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert yaml.safe_load(after.read_text())["solver"]["phase_time_estimate"] == "sampled"
    assert run_cli("validate-plan", str(tiny), str(after)).returncode == 0


def test_the_summary_states_how_far_above_the_bound_the_plan_may_be(tmp_path):
    """"at most X% above the cheapest possible (certified lower bound B $/h)" is (cost - B) / B, read back from the
    plan file (it printed the solvers' gap, (cost - B) / cost: 75% for a plan at 4x its bound). B is named a bound:
    "the cheapest possible (13.60 $/h)" read as a cost no plan of five jobs on 19 $/h nodes can have."""
    import re

    out = tmp_path / "f.yaml"
    proc = run_cli("plan", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"), "--backend", "fast", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = yaml.safe_load(out.read_text())
    cost, bound = doc["body"]["cost_per_hour"], doc["body"]["lower_bound_per_hour"]
    m = re.search(r"at most ([0-9.]+)% above the cheapest plan of the modelled group shapes \(certified lower bound ([0-9.]+) \$/h",
                  proc.stderr)
    assert m is not None and bound > 0 and cost > bound, proc.stderr[-2000:]
    assert float(m.group(1)) == pytest.approx(100 * (cost - bound) / bound, abs=0.1)
