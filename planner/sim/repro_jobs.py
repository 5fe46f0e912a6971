"""What the DynaRL job reproductions (``dynarl-math``, ``agentic``, ``sweep``) share: one policy on one
job (:func:`job_task`), static and dynamic on the same seeds with the planner's predictions set
against both (:func:`pair_task`, :func:`_fidelity`), and the static split search and threshold
baseline of a job (:func:`baseline_tasks`, :func:`baselines`).

Registered in :mod:`planner.sim.reproduce` (the driver); never imports it back.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from planner.sim.parallel import Task
from planner.sim.repro_common import SC
from simulator.defaults import WINDOW_S


def _decision(kind: str, sc, u_low: float = 0.2, window_s: float = WINDOW_S, theta: float = 0.5):
    from planner.commands.simulate import decision_function

    return decision_function(argparse.Namespace(decision=kind, u_low=u_low, window_s=window_s, theta=theta), sc)


def _setup(path: Path, seed: int = 0):
    """(scenario, JobSetup of its one job)."""
    from planner.instances.simulate import cluster_view, job_setup, pick_job
    from planner.schema import load_scenario

    sc = load_scenario(path)
    idx, job = pick_job(sc, None)
    return sc, job_setup(sc, idx, job, cluster_view(sc), seed)


def _run_job(setup, policy, seeds, iterations, keep: list | None = None):
    """Metrics of one run per seed; ``keep`` (a list) also receives each run's (policy, JobResult)."""
    from simulator.job import JobSim
    from simulator.metrics import job_metrics

    out = []
    for s in range(seeds):
        pol = policy() if callable(policy) else policy
        res = JobSim(setup, pol, seed=s, iterations=iterations).run()
        if keep is not None:
            keep.append((pol, res))
        out.append(job_metrics(res))
    return out


def _mean(ms, key):
    return float(np.mean([m[key] for m in ms]))


# ------------------------------------------------------------------------------------ tasks
def _policy(spec: dict, sc):
    from simulator.policies import Policy

    name = spec.get("name", "static")
    kw = {k: spec[k] for k in ("streaming", "queue", "intake", "consolidate_at") if k in spec}
    if name == "dynamic" and spec.get("resplit"):
        from planner.instances.simulate import planner_decision

        kw["decision"] = planner_decision(sc, spec.get("u_low", 0.2), spec.get("window_s", 4.0), resplit=True)
    elif name == "dynamic" and spec.get("decision") == "consolidate":
        from simulator.decisions import ConsolidateDecision

        kw["decision"] = ConsolidateDecision(spec.get("at", 0.8))
    elif name == "dynamic":
        kw["decision"] = _decision(spec.get("decision", "planner"), sc, spec.get("u_low", 0.2), spec.get("window_s", 4.0))
    return Policy(name, **kw)


def _job_setup(scenario: str, split=None, lengths=None):
    from estimators.lengths import LengthDistribution

    sc, setup = _setup(SC / scenario)
    if split is not None:
        setup = replace(setup, rollout_nodes=int(split[0]), train_nodes=int(split[1]))
    if lengths is not None:
        setup = replace(setup, workload=replace(setup.workload, lengths=LengthDistribution(**lengths)))
    return sc, setup


def _summary(ms, iterations: int, decisions=()) -> dict:
    out = {"iter_s": _mean(ms, "mean_iteration_s"), "realloc": _mean(ms, "reallocations") / iterations,
           "reprefill": _mean(ms, "reprefill_tokens") / iterations, "preempt": _mean(ms, "preemptions") / iterations,
           "rollout_s": float(np.mean([np.mean(m["rollout_s"]) for m in ms]))}
    calls = [d for d in decisions if hasattr(d, "calls")]
    if calls:
        out["planner_calls"] = sum(d.calls for d in calls)
    return out


def job_task(scenario: str, policy: dict, seeds: int, iterations: int, split=None, lengths=None, idle: bool = False) -> dict:
    """One policy on one job (``split``: [rollout nodes, training nodes] instead of the scenario's; ``idle``: also
    the GPU-seconds owned by no component and held but idle, as fractions of the cluster's, :func:`idle_summary`)."""
    sc, setup = _job_setup(scenario, split, lengths)
    keep: list = []
    try:
        ms = _run_job(setup, lambda: _policy(policy, sc), seeds, iterations, keep)
    except ValueError as exc:
        return {"infeasible": str(exc)}
    out = _summary(ms, iterations, [p.decision for p, _ in keep if p.decision is not None])
    return {**out, **idle_summary(ms)} if idle else out


def idle_summary(ms) -> dict:
    """GPU-seconds owned by no component (``unowned_fraction``) and idle in all (unowned, or held by a component
    with nothing to do: ``idle_fraction``, per component ``idle_by_component``), over the cluster's GPU-seconds of
    the runs ``ms`` (:func:`simulator.metrics.job_metrics`)."""
    gpu_s = sum(m["cluster_gpu_s"] for m in ms)
    return {"unowned_fraction": sum(m["unowned_gpu_s"] for m in ms) / gpu_s,
            "idle_fraction": sum(m["idle_gpu_s"] for m in ms) / gpu_s,
            "idle_by_component": {c: sum(m["components"].get(c, {}).get("idle_gpu_s", 0.0) for m in ms) / gpu_s
                                  for c in ("rollout", "reference", "trainer")}}


def pair_task(scenario: str, decision: str, seeds: int, iterations: int, lengths=None) -> dict:
    """Static (the scenario's split) and dynamic on the same seeds, with the planner's predictions
    set against both (:func:`_fidelity`)."""
    sc, setup = _job_setup(scenario, None, lengths)
    kept: dict = {"static": [], "dynamic": []}
    st = _run_job(setup, lambda: _policy({"name": "static"}, sc), seeds, iterations, kept["static"])
    dy = _run_job(setup, lambda: _policy({"name": "dynamic", "decision": decision}, sc), seeds, iterations, kept["dynamic"])
    return {"static": _summary(st, iterations), "dynamic": _summary(dy, iterations, [p.decision for p, _ in kept["dynamic"]]),
            "fidelity": _fidelity(kept["static"], kept["dynamic"])}


def _fidelity(static_runs, dynamic_runs) -> dict:
    """The reallocation planner's predictions against what the simulator then measured.

    Per iteration with a committed move (predictions in 1/s, so 1 / throughput is the predicted
    remaining time of the iteration's work, up to the end of training): at the *first* move, the
    remaining time it predicted for keeping the allocation against the static run of the same seed
    from the same instant (the two runs are the same until then); at the *last* move, the remaining
    time it predicted after moving, net of the migration cost, against the dynamic run (no later move
    changes it). Returns the means and the mean absolute relative errors."""
    keep_p, keep_s, move_p, move_s = [], [], [], []
    for (_, st), (pol, dy) in zip(static_runs, dynamic_runs):
        commits = [c for c in getattr(pol.decision, "commits", []) if c["unit"] == "1/s"]
        for i, it in enumerate(dy.iterations):
            mine = [c for c in commits if c["iteration"] == i]
            if not mine or i >= len(st.iterations):
                continue
            first, last = mine[0], mine[-1]
            s_it = st.iterations[i]
            if first["current"] > 0 and i not in getattr(pol.decision, "starts", {}):  # a re-split start differs from static
                keep_p.append(1.0 / first["current"])
                keep_s.append(s_it.train_end_s - s_it.start_s - first["time_s"])
            if last["objective"] > 0:
                move_p.append(1.0 / last["objective"])
                move_s.append(it.train_end_s - it.start_s - last["time_s"])

    def err(p, q):
        return float(np.mean([abs(a / b - 1.0) for a, b in zip(p, q) if b > 0])) if p else math.nan

    return {"n": len(keep_p), "keep_pred_s": float(np.mean(keep_p)) if keep_p else math.nan,
            "keep_sim_s": float(np.mean(keep_s)) if keep_s else math.nan, "keep_err": err(keep_p, keep_s),
            "move_pred_s": float(np.mean(move_p)) if move_p else math.nan,
            "move_sim_s": float(np.mean(move_s)) if move_s else math.nan, "move_err": err(move_p, move_s)}


@lru_cache(maxsize=None)
def _nodes(scenario: str) -> tuple[int, int]:
    _, setup = _setup(SC / scenario)
    return setup.rollout_nodes, setup.train_nodes


def split_candidates(r0: int, t0: int) -> list[int]:
    """Rollout node counts the static search simulates: every split of up to 8 nodes; beyond, every
    second count and the scenario's split with its neighbours (the iteration time is smooth in the split)."""
    n = r0 + t0
    if n <= 8:
        return list(range(1, n))
    return sorted(set(range(1, n, 2)) | {r for r in (r0 - 1, r0, r0 + 1) if 1 <= r < n})


def baseline_tasks(scenario: str, seeds: int, iterations: int) -> list[Task]:
    """The static split search and the threshold baseline for a job (sweep, agentic)."""
    base = {"scenario": scenario, "seeds": seeds, "iterations": iterations}
    r0, t0 = _nodes(scenario)
    return [Task("job", {**base, "policy": {"name": "static"}, "split": [r, r0 + t0 - r]})
            for r in split_candidates(r0, t0) if r != r0] + [
        Task("job", {**base, "policy": {"name": "static"}}), Task("job", {**base, "policy": {"name": "dynamic", "decision": "threshold"}})]


def baselines(R, scenario: str, seeds: int, iterations: int) -> dict:
    """{static, best_static, best_split, threshold} (iteration seconds) from :func:`baseline_tasks`'s results."""
    base = {"scenario": scenario, "seeds": seeds, "iterations": iterations}
    r0, t0 = _nodes(scenario)
    splits = {f"{r0}+{t0}": R("job", **base, policy={"name": "static"})["iter_s"]}
    for r in split_candidates(r0, t0):
        if r != r0:
            splits[f"{r}+{r0 + t0 - r}"] = R("job", **base, policy={"name": "static"}, split=[r, r0 + t0 - r]).get("iter_s")
    best_split, best = min(((k, v) for k, v in splits.items() if v is not None), key=lambda kv: kv[1])
    return {"static": splits[f"{r0}+{t0}"], "split": f"{r0}+{t0}", "best_static": best, "best_split": best_split,
            "threshold": R("job", **base, policy={"name": "dynamic", "decision": "threshold"})["iter_s"]}
