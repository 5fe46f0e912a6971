"""The reallocation predictor's remaining time against the simulator.

The reallocation planner's objective is the iteration's remaining time: per component, ``1 /`` its
curve at the GPUs it holds (:func:`planner.instances.realloc.build_context`, curves in fractions of
the remaining work per second). Three errors are measured on the DynaRL scenarios, request by request:

* **keep**: at probe times through a static iteration, the predicted remaining rollout time at
  the GPUs the rollout holds, against ``rollout end - t`` as the simulator then runs it;
* **after-move**: at the same probe times, the predicted remaining rollout time with a quarter of
  the rollout's GPUs moved to the trainer (``1 /`` the curve at the smaller count), against a
  simulation in which exactly that move is carried out at that time (Workload migration: the
  drained engines' requests re-prefilled on the kept ones);
* **trainer**: at the same probe times, the predicted remaining time of the trainer at the GPUs it
  holds (:func:`planner.instances.realloc.gated_trainer_s`), against ``training end - t``, with the
  simulator's GRPO group gating (a prompt's samples reach the trainer when the whole group is
  rewarded; :mod:`estimators.gating`). The row "work over rate" is ``1 /`` the trainer's curve in
  the decision's objective, which takes every sample as it comes (the estimate reported before).

Error = predicted / simulated - 1; reported as median and max of its absolute value. The rollout's
remaining time is each engine's drain from its own telemetry (requests in flight, cached tokens,
queue; :func:`estimators.rollout.pool_drain_s`); the rows "(pool-level share)" re-run the same
probes with the pool-level stratified share it replaced (``PER_ENGINE_DRAIN = False``), and the
call times are those of ``build_context`` on the probe snapshots, both measured in the same run.
"""

from __future__ import annotations

import math

import numpy as np

CASES = (("math-1.5b-64gpu", 0), ("math-7b-64gpu", 0))
FRACTIONS = (0.1, 0.3, 0.5, 0.7, 0.85)
MOVE_SHARE = 0.25


def _setup(name: str, seed: int = 0):
    from planner.instances.simulate import cluster_view, job_setup, pick_job
    from planner.schema import load_scenario
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]  # the repository (not from planner.sim.fidelity: it imports this module)
    sc = load_scenario(root / "scenarios" / "dynarl" / f"{name}.yaml")
    i, job = pick_job(sc, None)
    return sc, job_setup(sc, i, job, cluster_view(sc), seed)


class _Probe:
    """Never moves (or moves once, at ``move_at``); records the predicted remaining rollout time at
    the GPUs held and at ``held - moved``."""

    wants_remaining_tokens = True

    def __init__(self, sc, times, moved: int, move_at=None):
        self.sc, self.times, self.moved, self.move_at, self.done = sc, list(times), moved, move_at, False
        self.rows: list[dict] = []

    def __call__(self, snap, ctx):
        from planner.instances.realloc import build_context, gated_trainer_s
        from simulator.policies import Reallocation

        if ctx.at_boundary or ctx.iteration > 0:
            return None
        if self.move_at is not None:
            if self.done or snap.time_s < self.move_at:
                return None
            self.done = True
            tgt = {n: c.gpus for n, c in ctx.components.items()}
            tgt["rollout"] -= self.moved
            tgt["trainer"] += self.moved
            self.rows.append({"t": snap.time_s})
            return Reallocation(target=tgt, kinds={"rollout": "workload", "trainer": "p2p"}, reason="fidelity probe")
        if not self.times or snap.time_s < self.times[0]:
            return None
        import time

        from planner.instances import realloc

        self.times.pop(0)
        held = sum(w.gpus for w in snap.workers if w.component == "rollout")
        row = {"t": snap.time_s}
        for tag, per_engine in (("", True), ("pool_", False)):
            realloc.PER_ENGINE_DRAIN = per_engine
            try:
                t0 = time.perf_counter()
                c = build_context(snap, self.sc)
                row[tag + "call_s"] = time.perf_counter() - t0
            finally:
                realloc.PER_ENGINE_DRAIN = True
            cv = next(iter(c.components["rollout"].curves.values()))
            y0, y1 = cv(held), cv(held - self.moved)
            row[tag + "keep"] = 1.0 / y0 if y0 > 0 else math.inf
            row[tag + "after"] = 1.0 / y1 if y1 > 0 else math.inf
            if not tag:
                t0 = time.perf_counter()
                gated = gated_trainer_s(snap, self.sc, c, intake=ctx.intake)
                row["gated_call_s"] = time.perf_counter() - t0
                row["trainer"] = gated if gated is not None else _trainer_s(snap, c)
                # the trainer's curve in the decision's objective (its work over its rate: every sample as it comes)
                row["trainer_sample_model"] = _trainer_s(snap, c)
        self.rows.append(row)
        return None


def _trainer_s(snap, c) -> float:
    """Predicted remaining time of the trainer at the GPUs it holds (1 / its curve there)."""
    tr = next((x for x in snap.components if x.kind == "trainer"), None)
    if tr is None or tr.name not in c.components:
        return math.nan
    held = sum(w.gpus for w in snap.workers if w.component == tr.name)
    cv = next(iter(c.components[tr.name].curves.values()))
    y = cv(held)
    return 1.0 / y if y > 0 else math.inf


def measure(cases=CASES, fractions=FRACTIONS) -> dict:
    from simulator.job import JobSim
    from simulator.policies import Policy

    keep, after, pool_keep, pool_after, calls, pool_calls = [], [], [], [], [], []
    trainer, trainer_sample, gated_calls = [], [], []
    rows = []
    for name, seed in cases:
        sc, setup = _setup(name, seed)
        rollout_gpus = setup.rollout_nodes * setup.gpus_per_node
        moved = max(setup.rollout_tp, int(round(MOVE_SHARE * rollout_gpus / setup.rollout_tp)) * setup.rollout_tp)
        static = JobSim(setup, Policy("static"), seed=seed, iterations=1).run()
        end0 = static.iterations[0].rollout_end_s
        times = [f * end0 for f in fractions]
        probe = _Probe(sc, times, moved)
        res = JobSim(setup, Policy("dynamic", decision=probe, telemetry_interval_s=1.0), seed=seed, iterations=1).run()
        end = res.iterations[0].rollout_end_s
        train_end = res.iterations[0].train_end_s
        for r in probe.rows:
            actual = end - r["t"]
            if actual <= 1.0:
                continue
            mv = _Probe(sc, [], moved, move_at=r["t"])
            res2 = JobSim(setup, Policy("dynamic", decision=mv, telemetry_interval_s=1.0), seed=seed, iterations=1).run()
            actual_after = res2.iterations[0].rollout_end_s - mv.rows[0]["t"] if mv.rows else math.nan
            ek = r["keep"] / actual - 1.0
            ea = r["after"] / actual_after - 1.0 if actual_after > 0 else math.nan
            keep.append(ek)
            after.append(ea)
            pool_keep.append(r["pool_keep"] / actual - 1.0)
            pool_after.append(r["pool_after"] / actual_after - 1.0 if actual_after > 0 else math.nan)
            et = r["trainer"] / (train_end - r["t"]) - 1.0
            es = r["trainer_sample_model"] / (train_end - r["t"]) - 1.0
            trainer.append(et)
            trainer_sample.append(es)
            calls.append(1e3 * r["call_s"])
            gated_calls.append(1e3 * r["gated_call_s"])
            pool_calls.append(1e3 * r["pool_call_s"])
            rows.append({"case": name, "seed": seed, "t_s": r["t"], "gpus_moved": moved, "keep_predicted_s": r["keep"],
                         "keep_simulated_s": actual, "keep_error": ek, "after_predicted_s": r["after"],
                         "after_simulated_s": actual_after, "after_error": ea, "pool_keep_predicted_s": r["pool_keep"],
                         "pool_after_predicted_s": r["pool_after"], "call_ms": 1e3 * r["call_s"], "pool_call_ms": 1e3 * r["pool_call_s"],
                         "trainer_predicted_s": r["trainer"], "trainer_simulated_s": train_end - r["t"], "trainer_error": et,
                         "trainer_sample_model_s": r["trainer_sample_model"], "trainer_sample_model_error": es})

    def stat(v):
        a = np.abs(np.asarray([x for x in v if np.isfinite(x)]))
        return {"n": int(a.size), "median": float(np.median(a)) if a.size else math.nan, "max": float(a.max()) if a.size else math.nan}

    return {"command": "python -m planner.sim.fidelity (planner.sim.predictor_fidelity.measure)",
            "description": __doc__.split("\n\n", 1)[1].strip(),
            "cases": {"keep": stat(keep), "after-move": stat(after), "keep (pool-level share)": stat(pool_keep),
                      "after-move (pool-level share)": stat(pool_after), "trainer, group-gated estimate": stat(trainer),
                      "trainer, work over rate (the decision's curve; before)": stat(trainer_sample)},
            "call_ms": {"n": len(calls), "median": float(np.median(calls)) if calls else math.nan,
                        "max": float(max(calls)) if calls else math.nan,
                        "note": ((f"the pool-level share, same snapshots: median {float(np.median(pool_calls)):.1f} ms, "
                                  f"max {float(max(pool_calls)):.1f} ms") if pool_calls else "")
                                + (f"; the group-gated trainer estimate (`gated_trainer_s`, on top): median "
                                   f"{float(np.median(gated_calls)):.1f} ms, max {float(max(gated_calls)):.1f} ms" if gated_calls else "")},
            "rows": rows}


if __name__ == "__main__":
    import json

    print(json.dumps(measure(), indent=2, default=float))
