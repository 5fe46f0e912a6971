"""The hindsight references of the DynaRL reproduction (``dynarl-math``): the best schedule found in a
declared family and the work-conservation bound (:mod:`simulator.oracle`), per set-up and iteration,
set beside every policy of the table; the held-out length distributions; idle GPU-seconds.

Registered in :mod:`planner.sim.reproduce` (task ``oracle``; the rows and tables below are added to
``dynarl-math.md``). Each oracle task runs the table's dynamic policy for one seed (the same run as the pair
task's), and for each of its iterations replays the schedule the policy played alone (it must give the policy's
iteration time), searches from it (:func:`simulator.oracle.best_schedule` with ``start_from``) on the requests that
iteration samples in every policy's run (the loop's generator feeds nothing but the requests), and records how
many simulations the search took, its wall time and whether the best found came from the policy's schedule.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from planner.sim.parallel import Task


def completion_policy(sc):
    """The dynamic policy of the table's ``dynamic`` column (the completion-time decision, its keep predictions
    logged every ``KEEP_LOG_S`` seconds); the pair task and the oracle task run the same one."""
    from planner.sim.repro_jobs import _policy

    pol = _policy({"name": "dynamic", "decision": "completion"}, sc)
    pol.decision.log_every_s = KEEP_LOG_S
    return pol


def oracle_task(scenario: str, seed: int, iterations: int, lengths=None, max_moves: int = 3) -> dict:
    """Per iteration of seed ``seed``'s dynamic run (the completion decision, as in the pair task): the schedule the
    policy played (:func:`simulator.oracle.played_schedule`) replayed alone, the best schedule found with the search
    seeded by it (:func:`simulator.oracle.best_schedule`), and the work-conservation bound."""
    from planner.sim.repro_jobs import _job_setup
    from simulator.job import JobSim
    from simulator.oracle import SearchStats, best_schedule, played_schedule, schedule_policy, work_bound

    sc, setup = _job_setup(scenario, None, lengths)
    res = JobSim(setup, completion_policy(sc), seed=seed, iterations=iterations).run()
    out = []
    for k, it in enumerate(res.iterations):
        played = played_schedule(res, k)
        replay = JobSim(setup, schedule_policy(played, setup.workload.n_requests), seed=seed, iterations=1,
                        skip_batches=k).run().iterations[0].duration_s
        sched, t, st = best_schedule(setup, seed, k, max_moves=max_moves, stats=SearchStats(), start_from=played)
        out.append({"iteration": k, "oracle_s": t, "schedule": sched.describe(), "moves": len(sched.moves),
                    "simulations": st.simulations, "search_s": st.wall_s, "dynamic_s": it.duration_s, "replay_s": replay,
                    "played": played.describe(), "played_moves": len(played.moves), "played_s": st.seeded_s,
                    "search_own_s": st.own_s, "best_from": st.best_from, **work_bound(setup, seed, k)})
    return {"iterations": out}


def oracle_tasks(scenario: str, seeds: int, iterations: int, lengths=None) -> list[Task]:
    out = []
    for s in range(seeds):
        kw = {"scenario": scenario, "seed": s, "iterations": iterations}
        out.append(Task("oracle", {**kw, "lengths": lengths} if lengths is not None else kw))
    return out


def oracle_of(R, scenario: str, seeds: int, iterations: int, lengths=None) -> dict | None:
    """Means over seeds and iterations (the policies' iteration times are such means too); None when a search
    was not run (the table says so)."""
    try:
        res = [i for t in oracle_tasks(scenario, seeds, iterations, lengths) for i in R(t.fn, **t.kwargs)["iterations"]]
    except KeyError:
        return None
    return {"oracle_s": float(np.mean([r["oracle_s"] for r in res])), "bound_s": float(np.mean([r["bound_s"] for r in res])),
            "schedules": [r["schedule"] for r in res], "simulations": int(sum(r["simulations"] for r in res)),
            "search_s": float(sum(r["search_s"] for r in res)), "longest_decode_s": float(np.mean([r["longest_decode_s"] for r in res])),
            "work_s": float(np.mean([r["work_s"] for r in res])),
            "replay_err": float(max(abs(r["replay_s"] / r["dynamic_s"] - 1.0) for r in res)),
            "played_best": sum(1 for r in res if r["best_from"].startswith("seed")),
            "played_kept": sum(1 for r in res if r["best_from"] == "seed"),
            "refined": sum(1 for r in res if r["best_from"].endswith("refined")), "n": len(res),
            "played_moves": [r["played_moves"] for r in res], "moves": [r["moves"] for r in res], "own_s": float(np.mean([r["search_own_s"] for r in res]))}


# ------------------------------------------------------------------------- held-out lengths
@lru_cache(maxsize=None)
def mean_matched(scenario: str, kind: str) -> dict:
    """A length distribution the calibration never saw, with the scenario's clipped mean: ``light`` (log-normal,
    sigma 0.7) or ``mixture`` (the ServeGen rate-weighted mixture of all clients, scaled)."""
    from estimators.lengths import LengthDistribution
    from planner.sim.repro_common import SC
    from planner.sim.repro_jobs import _setup

    _, setup = _setup(SC / scenario)
    cap = setup.workload.max_response_tokens
    target = replace(setup.workload.lengths, max_tokens=cap).mean()

    def make(x: float) -> LengthDistribution:
        if kind == "light":
            return LengthDistribution("lognormal", median_tokens=x, sigma=0.7, max_tokens=cap)
        return LengthDistribution("servegen", client=None, scale=x, max_tokens=cap)

    lo, hi = (1.0, float(cap)) if kind == "light" else (1e-3, 100.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        if make(mid).mean() < target:
            lo = mid
        else:
            hi = mid
    if kind == "light":
        return {"kind": "lognormal", "median_tokens": float(round(lo)), "sigma": 0.7}
    return {"kind": "servegen", "scale": float(round(lo, 4))}


# ------------------------------------------------------------------------- completion-time pair
KEEP_LOG_S = 25.0


def med(v) -> float:
    return float(np.median(v)) if v else float("nan")


def mx(v) -> float:
    return float(np.max(v)) if v else float("nan")


def _worst_keep(rows, left_s: float = 30.0) -> str:
    """Where the largest keep error is, from the logged points (iteration, time, predicted, simulated), and the
    largest among the points with at least ``left_s`` seconds still to go."""
    pts = [(abs(p / q - 1.0), r["setup"], it, t, p, q) for r in rows
           for it, t, p, q in r["fidelity"].get("keep_points", []) if q > 0]
    if not pts:
        return ""
    e, setup, it, t, p, q = max(pts)
    out = f" ({setup}, {t:.0f} s into iteration {it}: {p:.1f} s predicted against {q:.1f} s simulated)"
    far = [x for x in pts if x[5] >= left_s]
    if far and q < left_s:
        e2, s2, it2, t2, p2, q2 = max(far)
        out += (f"; with at least {left_s:.0f} s still to go the largest is {e2:.0%} ({s2}, {t2:.0f} s into iteration {it2}: "
                f"{p2:.0f} s predicted against {q2:.0f} s)")
    return out


def pct(v: float) -> str:
    return f"{v:.0%}" if v == v else "-"


def pair_completion(scenario: str, seeds: int, iterations: int, lengths=None) -> dict:
    """Static (the scenario's split), dynamic with the completion-time decision, and static at the planner's
    start split, on the same seeds; the decision's in-loop predictions set against the simulation:

    * keep: every ``KEEP_LOG_S`` seconds of an iteration before its first move, the predicted time to the end
      of training if the allocation is kept, against the static run at the planner's start split from the same
      instant (the same samples and allocation; identical up to then but for the engines' wake-up at a boundary);
    * move: at an iteration's last committed move, the predicted time to the end of training (net of the
      migration), against the dynamic run from that instant (no later move changes it).

    Errors are |predicted / simulated - 1|; medians and maxima over all of them."""
    from planner.sim.repro_jobs import _job_setup, _policy, _run_job, _summary, idle_summary
    from simulator.policies import Policy

    sc, setup = _job_setup(scenario, None, lengths)
    kept: dict = {"static": [], "dynamic": [], "start": []}

    st = _run_job(setup, lambda: _policy({"name": "static"}, sc), seeds, iterations, kept["static"])
    dy = _run_job(setup, lambda: completion_policy(sc), seeds, iterations, kept["dynamic"])
    start = kept["dynamic"][0][0].decision.start
    ss = _run_job(setup, Policy("static", rollout_gpus=start["rollout"], reference_gpus=start["reference"],
                                trainer_gpus=start["trainer"]), seeds, iterations, kept["start"])
    keep_e, move_e, keep_pts, move_pts = [], [], [], []
    for (pol, d), (_, s0) in zip(kept["dynamic"], kept["start"]):
        dec = pol.decision
        for rec in dec.keep_log:
            it = s0.iterations[rec["iteration"]]
            sim_s = it.end_s - it.start_s - rec["time_s"]
            if sim_s > 0:
                keep_e.append(abs(rec["keep_s"] / sim_s - 1.0))
                keep_pts.append((rec["iteration"], rec["time_s"], rec["keep_s"], sim_s))
        for i, it in enumerate(d.iterations):
            mine = [c for c in dec.records if c["committed"] and c["iteration"] == i]
            if mine:
                last = mine[-1]
                sim_s = it.end_s - it.start_s - last["time_s"]
                if sim_s > 0:
                    move_e.append(abs(last["completion_s"] / sim_s - 1.0))
                    move_pts.append((i, last["time_s"], last["completion_s"], sim_s))
    pol0 = kept["dynamic"][0][0].decision
    dsum = {**_summary(dy, iterations, [p.decision for p, _ in kept["dynamic"]]), **idle_summary(dy)}
    return {"static": _summary(st, iterations), "dynamic": dsum,
            "start_static": _summary(ss, iterations), "start": start, "start_table": [[list(a), t] for a, t in pol0.start_table],
            "fidelity": {"n": len(move_e), "keep_n": len(keep_e), "keep_median": med(keep_e), "keep_max": mx(keep_e),
                         "move_median": med(move_e), "move_max": mx(move_e), "keep_points": keep_pts, "move_points": move_pts},
            "decisions": [{k: r[k] for k in ("iteration", "time_s", "current", "target", "completion_keep_s", "completion_s",
                                            "proxy_keep", "proxy")} for r in pol0.records if r["committed"]]}




# ------------------------------------------------------------------------- the dynarl-math reproduction
BASELINES = {  # column -> policy spec (each a `planner simulate --policy` value, see planner.commands.simulate)
    "colocated": {"name": "colocated"},
    "rlhfuse": {"name": "dynamic", "decision": "consolidate"},
    "threshold": {"name": "dynamic", "decision": "threshold"},
    "batch": {"name": "static", "streaming": False},
}  # and "planner": the reallocation planner with its min-over-stages objective, from its own pair task


# set-ups whose oracle search did not run in the committed file (the search is minutes per iteration; listed, not hidden)
NOT_SEARCHED: tuple = ()


def setups() -> list[tuple[str, str, dict | None]]:
    """The six math set-ups, and 7B-64 on three held-out length distributions of the same mean."""
    from planner.sim.repro_dynarl_math import _dynarl_setups

    s7 = "dynarl/math-7b-64gpu.yaml"
    return _dynarl_setups() + [(s7, "7B, 64 GPUs, light tail", mean_matched(s7, "light")),
                               (s7, "7B, 64 GPUs, ServeGen mixture", mean_matched(s7, "mixture"))]


def tasks(args) -> list[Task]:
    from planner.sim.repro_dynarl_math import _with_lengths
    from planner.sim.repro_jobs import _nodes, split_candidates

    out = []
    for scen, label, lengths in setups():
        base = {"scenario": scen, "seeds": args.seeds, "iterations": args.iterations}
        out.append(Task("pair", _with_lengths({**base, "decision": "completion"}, lengths)))
        out.append(Task("pair", _with_lengths({**base, "decision": "planner"}, lengths)))
        for pol in BASELINES.values():
            out.append(Task("job", _with_lengths({**base, "policy": pol}, lengths)))
        r0, t0 = _nodes(scen)
        for r in split_candidates(r0, t0):
            if r != r0:
                out.append(Task("job", _with_lengths({**base, "policy": {"name": "static"}, "split": [r, r0 + t0 - r]}, lengths)))
        if label not in NOT_SEARCHED:
            out += oracle_tasks(scen, args.seeds, args.iterations, lengths)
    return out


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def report(args, cmd, R) -> tuple[list[str], list[dict]]:
    from planner.sim.repro_common import header as _header
    from planner.sim.repro_dynarl_math import HEAVY_SIGMA, _with_lengths
    from planner.sim.repro_jobs import _nodes, split_candidates

    L = _header("DynaRL math RL: dynamic reallocation judged on completion time, against static splits, the paper's "
                "baselines and a hindsight oracle", cmd,
                "DynaRL reports 1.27-1.98x end-to-end throughput over verl 0.5 / RLinf and 1.21-1.42x over RLHFuse for "
                "1.5B/7B/32B math RL on 64 and 128 H100 GPUs.")
    L += ["Decision function: `completion` (`planner.instances.completion`: the planner's start split, searched with the "
          "phase-time model on its own seeds and searched again at a boundary where the last iterations' response lengths "
          "differ from the declared ones (`estimators.length_refit`; every run here declares its true lengths, "
          "`results/realloc/length-refit.md` shows wrong ones); a rollout shrink that feeds a growing trainer drains whole "
          "nodes; moves judged on the predicted time to the end of the iteration's training, "
          "every GPU owned; trigger: more than θ=0.5 of the engines under U_low=0.2 of their peak requests for T=4 s). "
          f"Iteration time = mean over {args.iterations} iterations x {args.seeds} seed(s); every ratio is a throughput ratio "
          "(other time / dynamic time). GRPO group gating everywhere. Baselines (each a `planner simulate --policy`): "
          "static = the scenario's split (RLinf-style disaggregated streaming); best static split = the fastest node split "
          "of the same nodes, each simulated on the run's own seed (RLinf at its best split); colocated = verl time sharing "
          "with the offload / reload switch between phases; RLHFuse-style = static with the rollout tail consolidated at 80% "
          "done onto the engines holding the rest at 32 requests each, the freed GPUs starting log-prob inference and "
          "training (`--decision consolidate`); no streaming = training after the rollout; threshold = the simulator's "
          "trigger-and-greedy baseline; planner = the reallocation planner with its min-over-stages throughput objective "
          "(the previous default). Held-out lengths (never used to tune anything): `heavy tail` = log-normal sigma "
          f"{HEAVY_SIGMA:g}, `light tail` = log-normal sigma 0.7, `ServeGen mixture` = the rate-weighted mixture of all "
          "ServeGen clients, each scaled to the scenario's clipped mean.", "",
          "| set-up | static (s) | best static split (s) | planner's start split (s) | colocated (s) | RLHFuse-style (s) | "
          "threshold (s) | planner, min-over-stages (s) | **dynamic (s)** | **vs best static** | vs static | vs colocated | "
          "vs RLHFuse | oracle (s) | bound (s) | **dynamic / oracle** | dynamic / bound | unowned GPU-s | moves / iter |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for scen, label, lengths in setups():
        base = {"scenario": scen, "seeds": args.seeds, "iterations": args.iterations}
        pair = R("pair", **_with_lengths({**base, "decision": "completion"}, lengths))
        get = lambda pol, base=base, lengths=lengths, **kw: R("job", **_with_lengths({**base, "policy": pol, **kw}, lengths))  # noqa: E731
        r0, t0 = _nodes(scen)
        splits = {f"{r0}+{t0}": pair["static"]["iter_s"]}
        for r in split_candidates(r0, t0):
            if r != r0:
                splits[f"{r}+{r0 + t0 - r}"] = get({"name": "static"}, split=[r, r0 + t0 - r]).get("iter_s")
        best_split, best = min(((k, v) for k, v in splits.items() if v is not None), key=lambda kv: kv[1])
        b = {k: get(spec) for k, spec in BASELINES.items()}
        b["planner"] = R("pair", **_with_lengths({**base, "decision": "planner"}, lengths))["dynamic"]
        d = pair["dynamic"]
        o = None if label in NOT_SEARCHED else oracle_of(R, scen, args.seeds, args.iterations, lengths)
        st = pair["start"]
        row = {"setup": label, "scenario": scen, "lengths": lengths, "scenario_split": f"{r0}+{t0}", "static": pair["static"]["iter_s"],
               "best_static": best, "best_split": best_split, "splits": splits, "dynamic": d["iter_s"],
               "start": f"{st['rollout']}+{st['reference']}+{st['trainer']}", "start_static": pair["start_static"]["iter_s"],
               **{k: v["iter_s"] for k, v in b.items()}, "oracle": o, "realloc": d["realloc"], "reprefill": d["reprefill"],
               "unowned_fraction": d["unowned_fraction"], "idle_fraction": d["idle_fraction"],
               "idle_by_component": d["idle_by_component"], "fidelity": pair["fidelity"],
               "decisions": pair["decisions"]}
        rows.append(row)
        oc = (f"{o['oracle_s']:.0f} | {o['bound_s']:.0f} | **{o['oracle_s'] / row['dynamic']:.2f}** | {o['bound_s'] / row['dynamic']:.2f}"
              if o else "not searched | - | - | -")
        L.append(f"| {label} | {row['static']:.0f} ({r0}+{t0}) | {best:.0f} ({best_split}) | {row['start_static']:.0f} ({row['start']}) | "
                 f"{row['colocated']:.0f} | {row['rlhfuse']:.0f} | {row['threshold']:.0f} | {row['planner']:.0f} | **{row['dynamic']:.0f}** | "
                 f"**{_ratio(best, row['dynamic'])}** | {_ratio(row['static'], row['dynamic'])} | {_ratio(row['colocated'], row['dynamic'])} | "
                 f"{_ratio(row['rlhfuse'], row['dynamic'])} | {oc} | {row['unowned_fraction']:.2%} | {row['realloc']:.1f} |")
    L += oracle_table(rows)
    L += ["", "Static iteration time (s) of every node split (rollout + training; `-`: infeasible):", "",
          "| set-up | " + " | ".join(f"split {i + 1}" for i in range(max(len(r["splits"]) for r in rows))) + " |",
          "|---|" + "---:|" * max(len(r["splits"]) for r in rows)]
    for row in rows:
        cells = [f"{k}: {v:.0f}" if v is not None else f"{k}: -" for k, v in sorted(row["splits"].items(), key=lambda kv: int(kv[0].split("+")[0]))]
        L.append(f"| {row['setup']} | " + " | ".join(cells) + " |")
    L += fidelity_lines(rows)
    L += notes(rows)
    return L, rows


def oracle_table(rows) -> list[str]:
    """policy / oracle and policy / bound for every policy of the table (throughput ratios)."""
    L = ["", "**Against hindsight.** Oracle = per iteration, the best of every schedule simulated by a search seeded with "
         "the dynamic policy's own (`simulator.oracle.best_schedule`, every candidate simulated by the same simulator on "
         "the iteration's own requests). A schedule is a start allocation and moves, each at a fraction of the iteration's "
         "requests done (any fraction, optionally not before a given second of the iteration), sizes on engine / "
         "trainer-replica units. The search: (1) its own coarse-to-fine search from a free start allocation (no migration "
         "at the boundary) with up to 3 moves at 5%-of-requests-done points, greedily one at a time; (2) the dynamic run's "
         "played schedule of that iteration (each decision as a move at the fraction done and the second at which it was "
         "taken; in a later iteration the move at its boundary from the previous allocation, with its migration cost, and "
         "the run's tick phase), replayed alone; (3) from the faster of the two, steepest descent over one change at a "
         "time (the start or a move's allocation one or two engines / one trainer replica off, a move's point 1, 2.5 or 5 "
         "points of requests done earlier or later, a move left out; at most two steps), then more moves added greedily "
         "as in (1), up to max(3, the policy's moves + 1). The oracle keeps the fastest schedule simulated, so it is never "
         "slower than the policy's own schedule replayed, which reproduces the policy's iteration time (largest "
         "difference per set-up in the table): dynamic / oracle <= 1.00 by construction, and the oracle is the best "
         "schedule *found* in this family, not its optimum. Bound = the work-conservation bound (all work on all GPUs at "
         "the engines' best per-token cost, or the longest response decoded alone, plus the fastest optimizer step and "
         "weight sync): no schedule of any family beats it. Both know the iteration's lengths; no policy sees them. Cells "
         "are throughput ratios policy / oracle (1.00 = as fast as the oracle) and policy / bound.", "",
         "| set-up | oracle's schedule, iteration 0 | search: simulations | policy replayed: largest difference | "
         "best found: the policy's schedule (as played / refined) of iterations | dynamic | planner, min-over-stages | "
         "best static | static | colocated | RLHFuse-style | threshold | dynamic / bound | best static / bound |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        o = r["oracle"]
        if o is None:
            L.append(f"| {r['setup']} | not searched (see the note below) | - | - | - | - | - | - | - | - | - | - | - | - |")
            continue
        os_ = o["oracle_s"]
        L.append(f"| {r['setup']} | {o['schedules'][0]} | {o['simulations']} | {o['replay_err']:.1e} | "
                 f"{o['played_best']} ({o['played_kept']} / {o['played_best'] - o['played_kept']}) of {o['n']} | "
                 f"**{os_ / r['dynamic']:.2f}** | "
                 f"{os_ / r['planner']:.2f} | {os_ / r['best_static']:.2f} | {os_ / r['static']:.2f} | {os_ / r['colocated']:.2f} | "
                 f"{os_ / r['rlhfuse']:.2f} | {os_ / r['threshold']:.2f} | {o['bound_s'] / r['dynamic']:.2f} | "
                 f"{o['bound_s'] / r['best_static']:.2f} |")
    return L


def fidelity_lines(rows) -> list[str]:
    L = ["", "**In-loop predictions against the simulation.** Keep: every 25 s of an iteration before its first move, the "
         "decision's predicted time to the end of the iteration's training if it keeps the allocation, against the static "
         "run at its start split from that instant (same samples); after the move: at each iteration's last move, the "
         "predicted time (net of the migration pause) against the dynamic run from that instant. |predicted / simulated - 1|.", "",
         "| set-up | keep: predictions | keep: median error | keep: max error | after the move: predictions | median error | "
         "max error |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        f = r["fidelity"]
        L.append(f"| {r['setup']} | {f['keep_n']} | {pct(f['keep_median'])} | {pct(f['keep_max'])} | {f['n']} | "
                 f"{pct(f['move_median'])} | {pct(f['move_max'])} |")
    return L


def _pooled(rows) -> str:
    """The in-loop prediction errors over every set-up together (keep and after the move), and the set-ups whose own
    after-move median is over 10%, with the moves behind it."""
    keep = [abs(p / q - 1.0) for r in rows for _, _, p, q in r["fidelity"].get("keep_points", []) if q > 0]
    move = [abs(p / q - 1.0) for r in rows for _, _, p, q in r["fidelity"].get("move_points", []) if q > 0]
    if not keep and not move:
        return "* in-loop predictions: none logged."
    out = (f"* All set-ups together: keep median error {med(keep):.1%} over {len(keep)} predictions (max {mx(keep):.0%}); after "
           f"the move {med(move):.1%} over {len(move)} (max {mx(move):.0%}).")
    over = [r for r in rows if r["fidelity"]["n"] and r["fidelity"]["move_median"] > 0.10]
    for r in over:
        ds = r["decisions"]
        # a committed target the next solve of the same iteration no longer finds in place was not carried out as asked
        # (a trainer replica needs its TP x PP GPUs on one node: the simulator gives what it cannot place to log-prob
        # inference)
        nexts = [(x, y) for x, y in zip(ds, ds[1:]) if x["iteration"] == y["iteration"]]
        short = sum(1 for x, y in nexts if list(y["current"]) != list(x["target"]))
        small_t = sum(1 for x, y in nexts if y["current"][2] < x["target"][2])
        out += (f" {r['setup']}: after-move median {r['fidelity']['move_median']:.0%} over {r['fidelity']['n']} predictions; "
                f"{short} of its {len(ds)} committed moves were not in place at the next solve of the iteration, {small_t} "
                "with a smaller trainer than asked"
                + (" (a replica needs its TP x PP GPUs on one node: the simulator gives what the freed GPUs' nodes cannot "
                   "hold to log-prob inference, and later solves ask again; the decision does not model which nodes a drain "
                   "frees)." if small_t else " (the error is the model's after a move placed as asked, or the last move's)."))
    return out


def notes(rows) -> list[str]:
    math6 = [r for r in rows if r["lengths"] is None]
    vb = [r["best_static"] / r["dynamic"] for r in math6]
    vo = [r["oracle"]["oracle_s"] / r["dynamic"] for r in rows if r["oracle"]] or [float("nan")]
    vb_all = [r["best_static"] / r["dynamic"] for r in rows]
    un = [r["unowned_fraction"] for r in rows]
    keep_med = [r["fidelity"]["keep_median"] for r in rows if r["fidelity"]["keep_n"]]
    keep_max = [r["fidelity"]["keep_max"] for r in rows if r["fidelity"]["keep_n"]]
    lines = ["", "Targets of issue 21, measured here:", "",
             f"* dynamic vs the best static split on the six math set-ups: mean {np.mean(vb):.3f}x (target >= 1.10x), range "
             f"{min(vb):.2f}-{max(vb):.2f}x; on all {len(rows)} set-ups (held-out lengths included) {min(vb_all):.2f}-{max(vb_all):.2f}x "
             "(target: never below 1.00x).",
             f"* dynamic / oracle: {min(vo):.2f}-{max(vo):.2f} where searched (target >= 0.95 everywhere); below 0.95 on: "
             + (", ".join(f"{r['setup']} ({r['oracle']['oracle_s'] / r['dynamic']:.2f})" for r in rows
                          if r["oracle"] and r["oracle"]["oracle_s"] / r["dynamic"] < 0.95) or "none")
             + "".join(f"; not searched on {r['setup']} (the search did not finish in this session's time)" for r in rows
                       if not r["oracle"]) + ".",
             f"* GPU-seconds owned by no component under dynamic: {min(un):.2%}-{max(un):.2%} of the cluster's (target <= 2%). "
             "Held but idle (engines waiting on the tail, stages waiting for work), in all: "
             + ", ".join(f"{r['setup']} {r['idle_fraction']:.0%}" for r in rows) + ".",
             (f"* keep predictions: median error {min(keep_med):.0%}-{max(keep_med):.0%} per set-up (target <= 10%), max "
              f"{max(keep_max):.0%}{_worst_keep(rows)}." if keep_med else "* keep predictions: none logged."),
             _pooled(rows),
             f"* Against the paper's baselines on the six math set-ups: dynamic vs colocated (verl) "
             f"{min(r['colocated'] / r['dynamic'] for r in math6):.2f}-{max(r['colocated'] / r['dynamic'] for r in math6):.2f}x, "
             f"vs RLHFuse-style {min(r['rlhfuse'] / r['dynamic'] for r in math6):.2f}-{max(r['rlhfuse'] / r['dynamic'] for r in math6):.2f}x, "
             f"vs the scenario's static split (RLinf) {min(r['static'] / r['dynamic'] for r in math6):.2f}-"
             f"{max(r['static'] / r['dynamic'] for r in math6):.2f}x (published 1.27-1.98x over verl / RLinf, 1.21-1.42x over RLHFuse).",
             ]
    searched = [r for r in rows if r["oracle"]]
    if searched:
        gain = [r["best_static"] / r["oracle"]["oracle_s"] for r in searched]
        each = ", ".join(f"{r['setup']} {g:.2f}x" for r, g in zip(searched, gain))
        mv = [m for r in searched for m in r["oracle"]["moves"]]
        lines.append(f"* Headroom: the oracle is {min(gain):.2f}-{max(gain):.2f}x faster than the best static split where searched "
                     f"({each}); "
                     "no schedule the search found gains more in this model"
                     + (", so DynaRL's 1.27-1.98x over its baselines is out of reach against the best static split here (it is "
                        "reached against the scenario's split, which is far from the best in the 7B and 32B set-ups)"
                        if max(gain) < 1.27 else "")
                     + ". The bound is far below every schedule (it runs the rollout's work at the engines' best per-token cost "
                     f"on every GPU); the oracle's schedules move {min(mv)}-{max(mv)} times per iteration.")
    if searched:
        n = sum(r["oracle"]["n"] for r in searched)
        pb = sum(r["oracle"]["played_best"] for r in searched)
        kept = sum(r["oracle"]["played_kept"] for r in searched)
        lines.append(f"* The best schedule found started from the policy's own in {pb} of {n} searched iterations ({kept} as "
                     f"played, {pb - kept} refined); in the other {n - pb} the search's own best, refined or not, was faster. "
                     "The search's own best alone (before the seed) averages "
                     + ", ".join(f"{r['setup']} {r['oracle']['own_s'] / r['dynamic']:.2f}x the dynamic time" for r in searched)
                     + ": alone it is no hindsight reference (the policy beats it where it is over 1.00).")
    over = [r for r in searched if r["oracle"]["oracle_s"] > r["dynamic"] * 1.001]
    if over:
        lines.append("* The oracle is slower than dynamic on " + ", ".join(r["setup"] for r in over) + ", which the seeded "
                     "search rules out: the policy's replay differs from its run there (see the table's difference column).")
    lines.append("")
    return lines


# ------------------------------------------------------------------------- multi-turn priority (issue 21, item 7)
PRIORITY_LONG = "agentic-7b-long.yaml"


def agentic_priority(scenario: str = PRIORITY_LONG, seed: int = 0) -> dict:
    """Dynamic (completion decision) with FIFO and with request priority, and static at the planner's start split with
    each queue order (the same allocation: what priority alone does), one iteration of ``seed``."""
    import time

    from planner.sim.repro_jobs import _decision, _job_setup
    from simulator.job import JobSim
    from simulator.metrics import job_metrics
    from simulator.policies import Policy

    sc, setup = _job_setup(scenario)
    out: dict = {}
    for q in ("fifo", "priority"):
        d = _decision("completion", sc)
        t = time.perf_counter()
        r = JobSim(setup, Policy("dynamic", queue=q, decision=d), seed=seed, iterations=1).run()
        m = job_metrics(r)
        it = r.iterations[0]
        assert d.start is not None
        out[q] = {"iter_s": it.duration_s, "rollout_s": it.rollout_end_s - it.start_s, "train_end_s": it.train_end_s - it.start_s,
                  "moves": [(round(a), b) for a, b, _ in r.decisions], "start": d.start, "unowned": m["unowned_fraction"],
                  "reprefill": m["reprefill_tokens"], "wall": time.perf_counter() - t}
        s = JobSim(setup, Policy("static", queue=q, rollout_gpus=d.start["rollout"], reference_gpus=d.start["reference"],
                                 trainer_gpus=d.start["trainer"]), seed=seed, iterations=1).run()
        it = s.iterations[0]
        out[q]["static_at_start"] = {"iter_s": it.duration_s, "rollout_s": it.rollout_end_s - it.start_s}
    return out


def agentic_priority_md(out: dict, scenario: str = PRIORITY_LONG) -> str:
    f, p = out["fifo"], out["priority"]
    st = f["start"]
    L = [f"# Multi-turn request priority on `{scenario}` (issue 21)", "",
         "Command: `python -m planner.sim.repro_dynarl agentic-priority` (seed 0, one iteration).  ",
         "Earlier measurement (`agentic.md`, the reallocation planner with its min-over-stages objective, from the scenario's "
         "split): dynamic + priority 1,518 s against dynamic FIFO 1,268 s.", "",
         "| run | queue | iteration (s) | rollout (s) | re-prefilled tokens | moves (time s: target) |", "|---|---|---:|---:|---:|---|"]
    for q, r in (("fifo", f), ("priority", p)):
        mv = "; ".join(f"{t}: {m['rollout']}+{m['reference']}+{m['trainer']}" for t, m in r["moves"])
        L.append(f"| dynamic (completion) | {q} | {r['iter_s']:.0f} | {r['rollout_s']:.0f} | {r['reprefill']:,.0f} | {mv} |")
    for q, r in (("fifo", f), ("priority", p)):
        L.append(f"| static at the planner's start split {st['rollout']}+{st['reference']}+{st['trainer']} | {q} | "
                 f"{r['static_at_start']['iter_s']:.0f} | {r['static_at_start']['rollout_s']:.0f} | - | - |")
    gap = p["iter_s"] / f["iter_s"] - 1
    sgap = p["static_at_start"]["rollout_s"] / f["static_at_start"]["rollout_s"] - 1
    L += ["", f"On the same allocation, priority changes the rollout by {sgap:+.1%} and the iteration by "
          f"{p['static_at_start']['iter_s'] / f['static_at_start']['iter_s'] - 1:+.1%}: this set-up is bound by training once the "
          "rollout's tail starts, so priority is not its mechanism (it is on the rollout-bound `agentic-7b-kv.yaml`, see "
          f"`agentic.md`). With the completion decision dynamic + priority is {gap:+.1%} against dynamic FIFO (moves at nearly "
          "the same instants to nearly the same targets). The earlier 1,518 s against 1,268 s, measured with the min-over-stages "
          "planner, is therefore not priority's effect on the rollout (1-2% on one allocation); the likely cause is that "
          "planner's KV-utilisation trigger, which priority changes (late turns keep their caches), firing at other instants "
          "and moving to other targets (not traced here).", ""]
    return "\n".join(L)


def main(argv=None) -> int:
    import argparse
    import json
    from pathlib import Path

    ap = argparse.ArgumentParser(description="issue 21's extra measurements")
    ap.add_argument("name", choices=["agentic-priority"])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "results" / "reproductions"))
    ap.add_argument("--from-json", default=None, help="render from a saved result instead of simulating")
    a = ap.parse_args(argv)
    out = json.loads(Path(a.from_json).read_text()) if a.from_json else agentic_priority()
    Path(a.out, "agentic-priority.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    Path(a.out, "agentic-priority.md").write_text(agentic_priority_md(out))
    print(f"wrote {Path(a.out, 'agentic-priority.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
