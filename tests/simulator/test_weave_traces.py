"""The Weave-like trace generator, the quantile phase-time estimates, and the trace baselines."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("generate_weave_traces", ROOT / "scenarios" / "generate_weave_traces.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_the_generator_keeps_weaves_bounds_on_a_model_of_the_phases():
    g = _generator()

    def probe(job):  # rollout grows with the response limit and turns, training with the batch
        r = job["rollout"]
        a = 0.004 * r["max_response_tokens"] * (1 + 0.1 * r.get("turns", 1)) + 0.2 * r["batch_prompts"]
        return a, 0.35 * r["batch_prompts"]

    jobs = g.build(40, 14.0, seed=3, probe=probe)
    assert len(jobs) == 40
    times = [j["arrival_s"] for j in jobs]
    assert times == sorted(times) and 0 <= times[0] and times[-1] <= 14 * 86400
    for j in jobs:
        a, b = j["_solo"]
        assert g.ROLLOUT_OVER_TRAIN[0] <= a / b <= g.ROLLOUT_OVER_TRAIN[1]
        assert g.PHASE_S[0] <= b and a <= g.PHASE_S[1]
        assert j["model"] in g.MODELS and j["rollout"]["max_response_tokens"] in g.RESPONSE_LIMITS
        assert 1.0 <= j["slo"]["ratio_to_solo"] <= 2.0 and 0 < j["duration_s"] <= 4 * 86400


def test_the_shipped_weave_like_traces_follow_the_published_mix():
    from planner.schema import load_scenario

    full = load_scenario(ROOT / "scenarios" / "weave-like-200-2w.yaml")
    first = load_scenario(ROOT / "scenarios" / "weave-like-60.yaml")
    assert len(full.jobs) == 200 and [j.name for j in first.jobs] == [j.name for j in full.jobs[:60]]
    models = {j.model for j in full.jobs}
    assert models == {"qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b"}
    assert all(4096 <= j.rollout.max_response_tokens <= 32768 for j in full.jobs)
    assert 0.4 <= sum(j.rollout.turns > 1 for j in full.jobs) / 200 <= 0.8
    assert all(1.0 <= j.slo.ratio_to_solo <= 2.0 for j in full.jobs)
    span = max(j.arrival_s for j in full.jobs)
    assert 10 * 86400 <= span <= 14 * 86400


def test_quantile_estimates_plan_on_the_same_draws_and_keep_the_slo_on_the_mean():
    from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types
    from planner.schema import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
    view = ClusterView(sc, resolve_gpu_types(sc))
    job = sc.jobs[0]
    mean, p90, p99 = (estimate_job(job, view, m) for m in ("sampled", "p90", "p99"))
    assert p90.rollout_s["H20"] <= p99.rollout_s["H20"] and p90.train_s["H800"] <= p99.train_s["H800"]
    assert p90.slo_s == pytest.approx(mean.slo_s) == pytest.approx(p99.slo_s)  # the SLO: ratio x the mean solo iteration
    assert p99.solo_iteration_s >= mean.solo_iteration_s * 0.95


def test_policies_of_the_trace_baselines_run_and_groups_cost_no_more_than_solo_d(monkeypatch):
    from planner.sim import trace_baselines as tb

    monkeypatch.setattr(tb, "SC", ROOT / "scenarios" / "ci")
    got = {p: tb.policy_task("tiny-2jobs.yaml", p, t) for p, t in (("solo-d", "-"), ("verl", "-"), ("gavel", "-"),
                                                                     ("groups", "estimators"))}
    for r in got.values():
        assert r["cost"] > 0 and r["jobs_done"] == 2
    assert got["groups"]["cost"] <= got["solo-d"]["cost"] * (1 + 1e-9)
    assert got["gavel"]["cost"] <= got["solo-d"]["cost"] * (1 + 1e-9)  # the cheapest SLO-feasible pools alone
    assert got["groups"]["moves"] != "-"


def test_verl_sizes_each_colocated_pool_between_the_training_nodes_and_both():
    from planner.instances import simulate as inst
    from planner.schema import load_scenario
    from planner.sim.trace_baselines import verl_jobs

    sc = load_scenario(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
    jobs = inst.trace_jobs(sc)
    for j, v in zip(jobs, verl_jobs(jobs, sc)):
        assert v.colocated.train_type == j.colocated.train_type
        assert j.solo.train_nodes <= v.colocated.train_nodes <= j.colocated.train_nodes


def test_random_is_seeded():
    g = _generator()
    assert g.arrivals(5, 1.0, random.Random(1)) == g.arrivals(5, 1.0, random.Random(1))


def test_plan_records_its_estimate_and_the_slo_curve(tmp_path):
    import yaml

    from tests.conftest import run_cli

    sc = str(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
    bad = run_cli("plan", sc, "--slo-curve-plot", str(tmp_path / "c.png"))
    assert bad.returncode == 2 and "--slo-curve" in bad.stderr and "Traceback" not in bad.stderr
    # an instance file has no estimates: --slo-curve was ignored there (slo_curve: null, exit 0)
    inst = ROOT / "scenarios" / "instances" / "placement-small.yaml"
    bad = run_cli("plan", str(inst), "--slo-curve", "--out", str(tmp_path / "i.yaml"))
    assert bad.returncode == 2 and "--slo-curve" in bad.stderr and "numbers-only" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "i.yaml").exists()
    out = tmp_path / "plan.yaml"
    # (a limit that holds the four points on a busy machine; the curve is within the command's limit)
    r = run_cli("plan", sc, "--mode", "p90", "--slo-curve", "--slo-curve-plot", str(tmp_path / "c.png"), "--out", str(out),
                "--time-limit", "300")
    assert r.returncode == 0, r.stderr
    solver = yaml.safe_load(out.read_text())["solver"]
    assert solver["phase_time_estimate"] == "p90"
    assert [p["estimate"] for p in solver["slo_curve"]] == ["sampled", "p90", "p99", "max"]
    for p in solver["slo_curve"]:
        assert p["cost_per_hour"] > 0 and 0.0 <= p["jobs_meeting_slo"] <= 1.0 and p["simulated_cycle_s"] > 0
    assert (tmp_path / "c.png").stat().st_size > 0 and "cost-SLO curve" in r.stderr


def test_the_slo_curve_stops_at_the_command_deadline_and_says_which_points_it_lacks():
    """`plan --slo-curve` took 56 s under `--time-limit 5` on weave-micro (each estimate simulated, planned for
    10 s and simulated, after the limit): the curve now ends at the command's deadline. With none left, the
    plan's own point is kept unsimulated and the other estimates are not run; the record holds no NaN."""
    import json
    import time

    from formulation.common import SolveOptions
    from formulation.placement.solve import solve
    from planner.commands._slo_curve import curve_record
    from planner.instances.placement import compile_scenario
    from planner.schema import load_scenario
    from planner.sim import slo_curve

    sc = load_scenario(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
    inst = compile_scenario(sc)  # (the scenario's own estimate: the bound, no simulation)
    plan = solve(inst, SolveOptions(time_limit_s=5)).plan
    t0 = time.perf_counter()
    rows = curve_record(sc, deadline=t0, given=(inst, plan))
    assert time.perf_counter() - t0 < 60, "a curve past its deadline estimated or simulated anyway"
    by = {r["estimate"]: r for r in rows}
    assert list(by) == list(slo_curve.ESTIMATES)
    own = next(e for e in by if slo_curve.same_estimate(e, sc.solver.phase_time_estimate))
    assert by[own]["cost_per_hour"] == plan.cost_per_hour and by[own]["note"] == "not simulated in the time limit"
    for e, r in by.items():
        if e != own:
            assert r["cost_per_hour"] is None and r["note"].startswith("not estimated in the time limit"), r
    json.dumps(rows, allow_nan=False)  # finite numbers or None
    lines = slo_curve.table(slo_curve.curve(sc, deadline=time.perf_counter(), given=(inst, plan)))
    assert all("nan" not in line for line in lines) and "note" in lines[0] and f"| {plan.cost_per_hour:,.1f} |" in "".join(lines)


def test_the_instant_optimum_is_at_most_what_the_online_groups_and_solo_d_hold(monkeypatch):
    """At every sampled moment the offline optimum of the jobs running is a packing at most as dear as
    the online groups' (a feasible packing of the same jobs on the same tables) and as their Solo-D pools."""
    from planner.sim import trace_baselines as tb

    monkeypatch.setattr(tb, "SC", ROOT / "scenarios" / "ci")
    from planner.sim.trace_optimum import instant_task

    got = instant_task("tiny-2jobs.yaml", samples=6)["samples"]
    assert got
    for s in got:
        assert s["offline_unplaced"] == 0 and s["jobs"] >= 1
        assert s["offline"] <= s["online"] + 1e-6
        assert s["offline"] <= s["solo_d"] + 1e-6
        assert s["verl"] > 0
        # the optimum's GPUs, read from its plan's pools, priced: its $/h (the solver's own sum, computed apart)
        assert sum(n * {"H20": 1.0, "H800": 2.0}[t] for t, n in s["offline_gpus"].items()) == pytest.approx(s["offline"])
        assert set(s["online_gpus"]) <= {"H20", "H800"} and all(v >= 0 for v in s["online_gpus"].values())


def test_a_trace_repriced_bills_the_same_gpu_hours_at_the_new_prices(monkeypatch):
    from planner.sim import trace_baselines as tb

    monkeypatch.setattr(tb, "SC", ROOT / "scenarios" / "ci")
    base = tb.policy_task("tiny-2jobs.yaml", "solo-d", "-")
    dear = tb.policy_task("tiny-2jobs.yaml", "solo-d", "-", prices={"H800": 5.0})
    assert dear["gpu_hours"] == pytest.approx(base["gpu_hours"])  # Solo-D's pools do not depend on prices
    assert dear["cost"] == pytest.approx(base["gpu_hours"]["H20"] * 1.0 + base["gpu_hours"]["H800"] * 5.0, rel=1e-6)
    with pytest.raises(ValueError, match="H900"):
        tb.policy_task("tiny-2jobs.yaml", "solo-d", "-", prices={"H900": 1.0})
    pr = tb.published_prices()  # equal pools, equal time: Solo-D / veRL = (p20 + p800) / p800, the published 0.94 / 0.71
    assert (pr["H20"] + pr["H800"]) / pr["H800"] == pytest.approx(tb.PUBLISHED_SOLO_D_KH / tb.PUBLISHED_VERL_KH, rel=1e-3)


def test_policy_task_runs_the_join_aware_and_re_pack_admissions(monkeypatch):
    from planner.sim import trace_baselines as tb

    monkeypatch.setattr(tb, "SC", ROOT / "scenarios" / "ci")
    for adm in ("join-aware", "re-pack"):
        r = tb.policy_task("tiny-2jobs.yaml", "groups", "simulator", adm)
        assert r["jobs_done"] == 2 and r["cost"] > 0 and "migrations" in r
    with pytest.raises(ValueError):
        tb.policy_task("tiny-2jobs.yaml", "groups", "simulator", "nonsense")


def test_simulated_tables_on_the_slowest_sample_hold_every_sample_and_keep_the_p90_slos():
    import numpy as np

    from planner.instances import simulate as inst
    from planner.schema import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
    jobs = inst.trace_jobs(sc)
    p90, mx = inst.simulated_instance(sc, jobs), inst.simulated_instance(sc, jobs, quantile=1.0)
    for tj, a, b in zip(jobs, p90.jobs, mx.jobs):
        assert a.slo_s == pytest.approx(b.slo_s)
        c = tj.solo
        prof = tj.profile(c)
        assert b.rollout_s[c.rollout_type][c.rollout_nodes] == pytest.approx(max(prof.rollout_s))
        assert b.train_s[c.train_type][c.train_nodes] == pytest.approx(max(prof.train_s))
        assert b.rollout_s[c.rollout_type][c.rollout_nodes] >= a.rollout_s[c.rollout_type][c.rollout_nodes]
        assert float(np.quantile(prof.train_s, 0.9)) == pytest.approx(a.train_s[c.train_type][c.train_nodes])


def test_policy_task_runs_the_sampled_admissions_and_meets_every_iteration_where_solo_d_does(monkeypatch):
    from planner.sim import trace_baselines as tb

    monkeypatch.setattr(tb, "SC", ROOT / "scenarios" / "ci")
    solo = tb.policy_task("tiny-2jobs.yaml", "solo-d", "simulator", "weave")
    for adm in ("sampled-steady", "sampled", "timed", "lifetime", "draining"):
        r = tb.policy_task("tiny-2jobs.yaml", "groups", "simulator", adm)
        assert r["jobs_done"] == 2 and r["cost"] > 0 and "joins_refused" in r
        assert r["cost"] <= solo["cost"] * (1 + 1e-9)
    for adm in ("sampled", "timed", "lifetime", "draining"):
        r = tb.policy_task("tiny-2jobs.yaml", "groups", "simulator", adm)
        assert r["jobs_meeting_slo"] >= solo["jobs_meeting_slo"] - 1e-9
    held = tb.policy_task("tiny-2jobs.yaml", "groups", "simulator", "timed", seed=1, unseen=True)
    assert held["jobs_done"] == 2 and held["cost"] > 0


def test_unseen_samples_are_other_rollouts_of_the_same_job():
    from planner.instances import simulate as inst
    from planner.schema import load_scenario

    sc = load_scenario(ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")
    seen, unseen = inst.trace_jobs(sc), inst.trace_jobs(sc, profile_first_seed=3)
    for a, b in zip(seen, unseen):
        pa, pb = a.profile(a.solo), b.profile(b.solo)
        assert len(pa.rollout_s) == len(pb.rollout_s) == 3
        assert not set(pa.rollout_s) & set(pb.rollout_s)  # other draws
        assert pb.mean_iteration_s == pytest.approx(pa.mean_iteration_s, rel=0.25)  # of the same job


def test_a_member_whose_first_rollout_the_placer_times_starts_then_and_waits_meanwhile():
    from simulator.trace import PoolConfig, SoloPlacer, TraceJob, TraceSim
    from simulator.profiles import PhaseProfile

    prof = PhaseProfile((30.0,), (10.0,), 0.5, None, 1.0, 1)
    c = PoolConfig("A", 1, "B", 1, 2)

    def job(name, arrival):
        return TraceJob(name=name, arrival_s=arrival, iterations=4, slo_s=1e9, profile=lambda _c: prof,
                        switch_s=lambda _c: (0.0, 0.0), solo=PoolConfig("A", 1, "B", 1))

    class Timed(SoloPlacer):
        def __init__(self):
            super().__init__({}, {"A": 8, "B": 8})
            self._g = {}

        def admit(self, name):
            self._g.setdefault("g0", (c, []))[1].append(name)
            return True

        def remove(self, name):
            self._g["g0"][1].remove(name)

        def groups(self):
            return {k: (cfg, list(m)) for k, (cfg, m) in self._g.items()}

        def start_s(self, name):
            return 55.0 if name == "y" else None

    res = TraceSim([job("x", 0.0), job("y", 5.0)], Timed(), {"A": 1.0, "B": 2.0}).run()
    y = res.jobs["y"]
    assert y.admitted_s == pytest.approx(55.0)  # its wait for the timed start counts as waiting
    assert len(y.iteration_s) == 4 and y.iteration_s[0] >= 30.0 + 10.0 + 0.5 - 1e-9
    run = res.groups["g0"]
    assert run.finished["y"].rollout_starts[0] == pytest.approx(55.0)


def test_the_miss_breakdown_counts_every_missed_iteration_once(monkeypatch):
    from planner.sim import trace_analysis as ta
    from planner.sim import trace_baselines as tb

    monkeypatch.setattr(tb, "SC", ROOT / "scenarios" / "ci")
    res = tb.run_policy("tiny-2jobs.yaml", "groups", "simulator")
    missed = sum(1 for j in res.jobs.values() for d in j.iteration_s if d > j.slo_s * (1 + 1e-9))
    m = ta.misses_task("tiny-2jobs.yaml", "weave")
    assert sum(m["count"].values()) == m["missed_iterations"] == missed
    assert set(m["count"]) == set(ta.CATEGORIES)


def test_the_cost_bounds_are_ordered_and_below_solo_d(monkeypatch):
    from planner.sim import trace_analysis as ta
    from planner.sim import trace_baselines as tb

    monkeypatch.setattr(tb, "SC", ROOT / "scenarios" / "ci")
    c = ta.ceiling_task("tiny-2jobs.yaml")
    assert 0 < c["busy"] <= c["own_rollout"] <= c["solo_d"]
    assert 0 <= c["can_share_rollout"] <= c["jobs"] == 2
