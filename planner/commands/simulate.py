"""planner simulate SCENARIO --policy P: run the simulator, print a summary, write JSON and PNG plots."""

from __future__ import annotations

from simulator.defaults import WINDOW_S as _WINDOW_S

NAME = "simulate"
HELP = "simulate a policy on a scenario: throughput, GPU-seconds busy vs held, cost, SLO, timeline"
JOB_POLICIES = ("static", "static-batch", "colocated", "dynamic", "consolidate", "rlhfuse")
TRACE_POLICIES = ("groups", "solo-d", "colocated-jobs")
DESCRIPTION = f"""Simulate RL training on the scenario's cluster under a policy and report what it achieves.

One job, request by request (policies {', '.join(JOB_POLICIES)}):
  static        fixed partition (verl / RLinf): rollout on the job's rollout nodes, log-prob
                inference and training on its training nodes, finished responses streamed on
  static-batch  the same without streaming (training starts when the rollout has finished)
  colocated     veRL time sharing: every GPU generates, then computes log-probs, then trains
  dynamic       the static partition, reallocated inside the iteration by a decision function
                fed with telemetry snapshots (--decision completion, the default: moves judged on
                the iteration's predicted completion time; planner: the min-over-stages planner;
                threshold: the simulator's trigger-and-greedy baseline)
  consolidate   static with long-tail consolidation (--consolidate-at, default 0.8); the released
                engines' GPUs wait for the next iteration
  rlhfuse       RLHFuse-style: static, and at --consolidate-at (default 0.8) of the requests done the
                tail is consolidated onto the engines holding the rest at 32 requests each, the freed
                GPUs starting log-prob inference and training (one move per iteration)
  Baselines of the paper: colocated (verl, with the sleep/wake offload and reload between phases),
  static at the scenario's split (RLinf-style disaggregated streaming; the best split: simulate each
  split, as results/reproductions/dynarl-math.md does), rlhfuse.
  --queue priority orders multi-turn requests by (tool calls done, cached prefix) with an age bound.

Many jobs, phase by phase (policies {', '.join(TRACE_POLICIES)}): co-execution groups from the
placement planner, one disaggregated pool pair per job (Solo-D), or one colocated pool per job;
arrivals and durations from the scenario (a trace), warm and cold switches, consolidation.

A plan (--plan PLAN, a PlacementPlan from `planner plan`): its groups exactly as written (pools,
node pins, round-robin order), each member's rollouts simulated request by request on its pinned
nodes with seeds the planner never saw, warm switches between members; reports planned vs
simulated cycle per group and SLO attainment per job.

Beside a one-job policy: the work-conservation bound of each iteration (all work on all GPUs, at the
engines' best per-token cost: no schedule beats it) and, with --oracle, the hindsight oracle (the best
schedule found of a start split and up to 3 moves at 5%-of-requests-done points, each simulated on the
iteration's own requests; minutes of search), with policy / bound and policy / oracle; and the GPU-seconds
no component held (unowned) and each component's held-but-idle GPU-seconds.

Writes (with --out DIR): summary.json (metrics, timeline) and plots: ownership.png (GPUs held per
component over time, as DynaRL's Figure 13) for one job, gantt.png (groups) for many."""


def add_arguments(p) -> None:
    from planner.commands import _args
    from simulator.defaults import PLAN_ITERATIONS, PLAN_MAX_REPLICATIONS, PLAN_MIN_ITERATIONS, PLAN_SAMPLES, PLAN_SKIP, WINDOW_S

    p.add_argument("scenario", type=_args.path, metavar="SCENARIO")
    p.add_argument("--policy", metavar="P", help=f"one of: {', '.join(JOB_POLICIES + TRACE_POLICIES)}")
    p.add_argument("--plan", type=_args.path, metavar="PLAN", help="simulate this PlacementPlan as written (its groups, pools, pins and orders) "
                                                   "on the scenario's cluster: planned vs simulated cycle per group, SLO "
                                                   "attainment per job (instead of --policy)")
    p.add_argument("--seed", type=_args.number(0, 2**31 - 1, kind=int), default=0, help="random seed (same seed, same result)")
    p.add_argument("--out", type=_args.path, metavar="DIR", help="write summary.json and PNG plots into DIR")
    p.add_argument("--job", help="the job to simulate request by request (scenarios with several jobs)")
    p.add_argument("--iterations", type=_args.count(1, 1000), default=None,
                   help=f"iterations of the job (default 2); with --plan: meta-iterations of each group "
                        f"({PLAN_MIN_ITERATIONS}..1000, default {PLAN_ITERATIONS}: the first {PLAN_SKIP} are warm-up)")
    p.add_argument("--replications", type=_args.count(1, PLAN_MAX_REPLICATIONS), default=None,
                   help=f"with --plan: independent replications of each group (1..{PLAN_MAX_REPLICATIONS}, default 1: each draws "
                        f"{PLAN_SAMPLES} fresh rollouts per member); the tables show the mean simulated cycle and its standard error")
    p.add_argument("--queue", choices=["fifo", "priority"], default=None, help="one job: rollout request order (default fifo)")
    p.add_argument("--max-wait-s", type=_args.number(hi=_args.SECONDS), default=None,
                   help=f"--queue priority: age bound of the queue (s, default {DEFAULTS['max_wait_s']:g})")
    p.add_argument("--consolidate-at", type=_args.number(), default=None, metavar="F",
                   help="pack the long tail when this fraction of requests is done (0 < F < 1; consolidate policy: 0.8)")
    p.add_argument("--decision", choices=["planner", "threshold", "completion"], default=None,
                   help="decision function of the dynamic policy: completion (default: the planner's start split and moves "
                        "judged on the iteration's predicted completion time, request by request, every GPU owned), planner "
                        "(the reallocation planner's min-over-stages throughput, the previous default) or the simulator's "
                        "threshold baseline")
    p.add_argument("--start-search", choices=["auto", "dynamic", "static"], default=None,
                   help="dynamic --decision completion: how the starting split is chosen (auto, the default: searched for the "
                        "dynamic policy itself on single-turn rollouts, every candidate start simulated on the planner's own "
                        "seeds, minutes on a 64-GPU set-up; the best static split on multi-turn ones; static: the best static "
                        "split always, faster)")
    p.add_argument("--u-low", type=_args.number(), default=None,
                   help=f"dynamic: KV utilisation below which an engine is a donor (default {DEFAULTS['u_low']:g})")
    p.add_argument("--window-s", type=_args.number(hi=_args.SECONDS), default=None,
                   help=f"dynamic: seconds an engine must stay under U_low (T, default {WINDOW_S:g})")
    p.add_argument("--theta", type=_args.number(), default=None,
                   help=f"dynamic: fraction of engines that must be donors (default {DEFAULTS['theta']:g})")
    p.add_argument("--horizon-s", type=_args.number(hi=_args.SECONDS), default=None, help="many jobs: stop the trace at this time (s)")
    p.add_argument("--oracle", action="store_true", help="one job: also search the hindsight oracle of each iteration "
                   "(the best schedule found, every candidate simulated; minutes) beside the work-conservation bound")
    p.add_argument("--snapshots", action="store_true", help="one job: also write the telemetry snapshots (snapshots.jsonl)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


# options that do nothing in a mode, refused there (exit 2 naming the option) rather than ignored
DYNAMIC_ONLY = ("--decision", "--start-search", "--u-low", "--window-s", "--theta")  # the dynamic policy's decision function
PLAN_IGNORES = ("--horizon-s", "--consolidate-at", "--queue", "--max-wait-s", "--oracle", "--snapshots") + DYNAMIC_ONLY
TRACE_IGNORES = ("--iterations", "--replications", "--queue", "--max-wait-s", "--oracle", "--snapshots") + DYNAMIC_ONLY
JOB_IGNORES = ("--replications", "--horizon-s")


#: the values the options above take when not given
DEFAULTS = {"decision": "completion", "start_search": "auto", "u_low": 0.2, "window_s": _WINDOW_S, "theta": 0.5, "max_wait_s": 30.0}


def _fill_defaults(args) -> None:
    """What was not given takes its default (after the checks that refuse options a mode ignores)."""
    for name, value in DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def _given(args, option: str) -> bool:
    """Whether ``option`` was given (its value is not the unset default)."""
    v = getattr(args, option.lstrip("-").replace("-", "_"), None)
    return v is not None and v is not False


APPLIES = {"--horizon-s": "a multi-job policy (" + ", ".join(TRACE_POLICIES) + ")", "--consolidate-at": "--policy",
           "--queue": "a one-job policy", "--oracle": "a one-job policy", "--snapshots": "a one-job policy",
           "--iterations": "a one-job policy or --plan", "--replications": "--plan", "--max-wait-s": "--queue priority",
           **{o: "--policy dynamic" for o in DYNAMIC_ONLY}, "--start-search": "--policy dynamic with --decision completion"}


def _refuse_ignored(args, options: tuple, mode: str) -> None:
    from planner.errors import Problem, UserError

    for opt in options:
        if _given(args, opt):
            raise UserError(Problem(opt, f"does nothing {mode}", f"drop {opt} (it is for {APPLIES[opt]})"))


def _check_args(args) -> None:
    from planner.errors import Problem, UserError, did_you_mean

    if args.iterations is not None and (args.iterations < 1 or args.iterations > 1000):
        raise UserError(Problem("--iterations", f"must be between 1 and 1000, got {args.iterations}", "e.g. --iterations 2"))
    if args.plan is not None:
        from simulator.defaults import PLAN_ITERATIONS, PLAN_MIN_ITERATIONS, PLAN_SKIP

        if args.policy is not None or args.job is not None:
            raise UserError(Problem("--plan", "--plan simulates the plan's groups; it takes no --policy or --job",
                                    "drop --policy/--job, or drop --plan"))
        _refuse_ignored(args, PLAN_IGNORES, "with --plan (the plan's groups are simulated as written)")
        if args.iterations is not None and args.iterations < PLAN_MIN_ITERATIONS:
            raise UserError(Problem("--iterations", f"with --plan: meta-iterations of each group, at least {PLAN_MIN_ITERATIONS} "
                                    f"(the first {PLAN_SKIP} are warm-up, left out of the cycle time), got "
                                    f"{args.iterations}", f"give --iterations {PLAN_MIN_ITERATIONS} or more, or leave it out "
                                    f"({PLAN_ITERATIONS})"))
        _fill_defaults(args)
        return
    if args.policy is None:
        raise UserError(Problem("--policy", "say what to simulate", f"give --policy (one of: {', '.join(JOB_POLICIES + TRACE_POLICIES)}) "
                                "or --plan PLAN"))
    if args.policy not in JOB_POLICIES + TRACE_POLICIES:
        raise UserError(Problem("--policy", f"unknown policy '{args.policy}'.{did_you_mean(args.policy, JOB_POLICIES + TRACE_POLICIES)}",
                                f"use one of: {', '.join(JOB_POLICIES + TRACE_POLICIES)}"))
    if args.policy in JOB_POLICIES:
        if args.policy != "dynamic":
            _refuse_ignored(args, DYNAMIC_ONLY, f"with --policy {args.policy} (no decision function: only dynamic reallocates)")
        elif args.decision not in (None, "completion"):
            _refuse_ignored(args, ("--start-search",), f"with --decision {args.decision} (it starts from the scenario's split)")
        if args.queue != "priority":
            _refuse_ignored(args, ("--max-wait-s",), f"with --queue {args.queue or 'fifo'} (no age bound to keep)")
    if args.consolidate_at is not None and not 0.0 < args.consolidate_at < 1.0:
        raise UserError(Problem("--consolidate-at", f"must lie strictly between 0 and 1, got {args.consolidate_at:g}",
                                "give the fraction of requests done, e.g. 0.8"))
    if args.u_low is not None and not 0.0 < args.u_low < 1.0:
        raise UserError(Problem("--u-low", f"must lie strictly between 0 and 1, got {args.u_low:g}", "e.g. --u-low 0.2"))
    if args.window_s is not None and args.window_s < 0:
        raise UserError(Problem("--window-s", f"must be >= 0, got {args.window_s:g}", "e.g. --window-s 4"))
    if args.theta is not None and not 0.0 <= args.theta < 1.0:
        raise UserError(Problem("--theta", f"must lie in [0, 1), got {args.theta:g}", "e.g. --theta 0.5"))
    if args.max_wait_s is not None and args.max_wait_s <= 0:
        raise UserError(Problem("--max-wait-s", f"must be positive, got {args.max_wait_s:g}", "e.g. --max-wait-s 30"))
    if args.job is not None and args.policy in TRACE_POLICIES:
        raise UserError(Problem("--job", f"'{args.policy}' simulates every job of the scenario (phase level)",
                                f"drop --job, or pick a one-job policy ({', '.join(JOB_POLICIES)})"))
    if args.policy in TRACE_POLICIES:
        _refuse_ignored(args, TRACE_IGNORES, f"with --policy {args.policy} (every job of the scenario, phase by phase, for its "
                        "duration_s)")
    else:
        _refuse_ignored(args, JOB_IGNORES, f"with --policy {args.policy} (one job, request by request)")
        if args.snapshots and args.out is None:  # (they are a file in --out: without it the run wrote nothing, exit 0)
            raise UserError(Problem("--snapshots", "writes snapshots.jsonl into the --out folder, and no --out is given",
                                    "add --out DIR, or drop --snapshots"))
    if args.horizon_s is not None and args.horizon_s <= 0:
        raise UserError(Problem("--horizon-s", f"must be positive, got {args.horizon_s:g}", "e.g. --horizon-s 86400"))
    _fill_defaults(args)


def _prepare_out(path):
    from pathlib import Path

    from planner.errors import Problem, UserError

    out = Path(path)
    if out.is_symlink() and not out.exists():  # (mkdir on it failed with FileExistsError, after the whole run)
        raise UserError(Problem("--out", f"{out} is a dangling symbolic link", "give a directory path (remove the link first)"))
    if out.exists() and not out.is_dir():
        raise UserError(Problem("--out", f"{out} exists and is not a directory", "give a directory path"))
    parent = out if out.exists() else out.parent
    import os

    if not (parent.exists() and os.access(parent, os.W_OK)):
        raise UserError(Problem("--out", f"cannot write into {parent}", "give a directory you can write to"))
    from planner.safewrite import probe_folder

    probe_folder(out, "--out")  # (/proc/x passes the checks above; its mkdir failed after the whole run)
    return out


def _write_files(out, files: dict) -> None:
    """Write every file to a temporary name first, then move them in place (nothing half-written;
    :mod:`planner.safewrite`'s rules for devices and links)."""
    import contextlib
    from pathlib import Path

    from planner.safewrite import replacing

    out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        tmps = [(stack.enter_context(replacing(out / name, where="--out", suffix=Path(name).suffix)), writer)
                for name, writer in files.items()]
        for tmp, writer in tmps:
            writer(tmp)


def decision_function(args, sc):
    """A fresh decision function (it keeps the donor history of one run)."""
    if args.decision == "threshold":
        from simulator.decisions import ThresholdDecision

        return ThresholdDecision(u_low=args.u_low, window_s=args.window_s, theta=args.theta)
    if args.decision == "completion":
        from planner.instances.completion import CompletionPlannerDecision

        return CompletionPlannerDecision(sc, u_low=args.u_low, window_s=args.window_s, theta=args.theta,
                                         start_search=getattr(args, "start_search", "auto"))
    from planner.instances.simulate import planner_decision

    return planner_decision(sc, u_low=args.u_low, window_s=args.window_s, theta=args.theta)


MAX_SIMULATED_REQUEST_TURNS = 1 << 21  # about a minute of event simulation
DEFAULT_JOB_ITERATIONS = 2  # --iterations of a one-job policy when not given


def run_job(args, sc):
    from planner.errors import Problem, UserError
    from planner.instances.simulate import check_job_fits_cluster, cluster_view, job_setup, pick_job
    from simulator.job import JobSim
    from simulator.policies import Policy

    if args.policy not in JOB_POLICIES:
        raise UserError(Problem("--policy", f"'{args.policy}' is a multi-job policy; --job selects the one-job model",
                                f"use one of {', '.join(JOB_POLICIES)} with --job, or drop --job"))
    idx, job = pick_job(sc, args.job)
    iterations = args.iterations if args.iterations is not None else DEFAULT_JOB_ITERATIONS
    work = job.rollout.batch_prompts * job.rollout.group_size * job.rollout.turns * iterations
    if work > MAX_SIMULATED_REQUEST_TURNS:  # each request turn is an event: bounded time and memory
        raise UserError(Problem("--iterations", f"{iterations} iteration(s) of {job.name} simulate {work:,} request turns, "
                                                f"more than {MAX_SIMULATED_REQUEST_TURNS:,}", "run fewer --iterations"))
    view = cluster_view(sc)
    setup = job_setup(sc, idx, job, view, args.seed)
    check_job_fits_cluster(setup, idx, job, view)
    name = {"static-batch": "static", "consolidate": "static", "rlhfuse": "dynamic"}.get(args.policy, args.policy)
    cons = args.consolidate_at if args.consolidate_at is not None else (0.8 if args.policy == "consolidate" else None)
    decision = None
    if args.policy == "rlhfuse":
        from simulator.decisions import ConsolidateDecision

        decision, cons = ConsolidateDecision(at=cons if cons is not None else 0.8), None
    elif name == "dynamic":
        decision = decision_function(args, sc)
    if name == "dynamic" and not setup.same_type:
        raise UserError(Problem(f"jobs[{idx}] ({job.name})",
                                f"the dynamic policy needs one GPU type for rollout and training; this job uses "
                                f"{setup.rollout_gpu.name} and {setup.train_gpu.name}",
                                "restrict rollout.gpu_types and trainer.gpu_types to one type"))
    policy = Policy(name=name, streaming=args.policy != "static-batch", queue=args.queue or "fifo", max_wait_s=args.max_wait_s,
                    consolidate_at=cons, decision=decision, record_snapshots=args.snapshots)
    try:
        sim = JobSim(setup, policy, seed=args.seed, iterations=iterations)
    except ValueError as exc:
        # (a message that carries its own fix, e.g. an infeasible split's, keeps that one)
        msg, _, fix = str(exc).partition(". Fix: ")
        raise UserError(Problem(f"jobs[{idx}] ({job.name})", msg, fix or "pick a larger GPU type or more tensor parallelism")) from None
    return sim.run()


def _job_summary_table(m: dict, console) -> None:
    from rich.table import Table

    t = Table(title=f"{m['job']}: {m['policy']}" + (", priority" if m["queue"] == "priority" else "")
              + (f", consolidation at {m['consolidate_at']:g}" if m["consolidate_at"] else "")
              + ("" if m["streaming"] else ", no streaming"), title_justify="left")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("iterations", f"{m['iterations']}")
    t.add_row("iteration time (s)", ", ".join(f"{x:.1f}" for x in m["iteration_s"]))
    t.add_row("rollout time (s)", ", ".join(f"{x:.1f}" for x in m["rollout_s"]))
    t.add_row("tokens/s", f"{m['tokens_per_s']:,.0f}")
    t.add_row("requests/s", f"{m['requests_per_s']:.2f}")
    for c, v in m["components"].items():
        t.add_row(f"{c}: GPU-s busy / held", f"{v['busy_gpu_s']:,.0f} / {v['held_gpu_s']:,.0f} ({100 * v['busy_fraction']:.0f}%)")
    t.add_row("GPU-s owned by no component", f"{m['unowned_gpu_s']:,.0f} ({100 * m['unowned_fraction']:.1f}% of the cluster's)")
    t.add_row("GPU-s idle, in all", f"{m['idle_gpu_s']:,.0f} (unowned, and held but idle: "
              + ", ".join(f"{c} {v['idle_gpu_s']:,.0f}" for c, v in m["components"].items()) + ")")
    h = m.get("hindsight")
    if h:
        t.add_row("work-conservation bound (s)", ", ".join(f"{x:.1f}" for x in h["bound_s"])
                  + f"  (policy / bound {h['policy_vs_bound']:.2f})")
        if h.get("oracle_s"):
            t.add_row("hindsight oracle (s)", ", ".join(f"{x:.1f}" for x in h["oracle_s"])
                      + f"  (policy / oracle {h['policy_vs_oracle']:.2f}; {h['simulations']} simulations, {h['search_s']:.0f} s"
                      + (f"; searched from the policy's own schedule in {h['seeded']} iteration(s)" if h.get("seeded") else "")
                      + ")")
    t.add_row("cost, whole cluster ($)", f"{m['cost_cluster']:,.2f}")
    t.add_row("cost, GPUs held ($)", f"{m['cost_held']:,.2f}")
    if m["slo_s"] is not None:
        t.add_row("SLO attainment", f"{100 * m['slo_attainment']:.0f}% (SLO {m['slo_s']:.1f} s)")
    t.add_row("re-prefilled tokens", f"{m['reprefill_tokens']:,.0f}")
    t.add_row("preemptions", f"{m['preemptions']}")
    t.add_row("reallocations", f"{m['reallocations']}")
    if m.get("start_split"):
        t.add_row("start split (rollout+log-prob+trainer)",
                  ", ".join(f"it {k}: {v['rollout']}+{v['reference']}+{v['trainer']}" for k, v in m["start_split"].items()))
    for r in m.get("length_refits") or []:
        t.add_row(f"response lengths, iteration {r['iteration']}",
                  (f"refitted (KS {r['ks']:.3f} > {r['critical']:.3f}; observed mean {r['observed_mean']:,.0f} against "
                   f"{r['declared_mean']:,.0f} planned)" if r["refit"] else
                   f"as planned (KS {r['ks']:.3f} <= {r['critical']:.3f})"))
    tail = m.get("tail") or {}
    if tail:
        t.add_row("longest decode (iter 0)", f"{tail['longest_decode_s']:.1f} s")
        t.add_row(f"done by {tail['done_by_s']:g} s", f"{100 * tail['fraction_done_by']:.1f}%")
        t.add_row("last 10% of requests' share", f"{100 * tail['last10pct_share']:.0f}%")
    console.print(t)


def run(args) -> int:
    import json
    from pathlib import Path

    from planner.schema import load_scenario

    _check_args(args)
    from planner.dockind import SCENARIO, expect

    found = expect(args.scenario, [SCENARIO], "SCENARIO", "simulate")
    out = _prepare_out(args.out) if args.out else None
    sc = load_scenario(args.scenario, parsed=found.doc)
    from rich.console import Console

    console = Console()
    if args.plan is not None:
        from planner.commands._simulate_plan import run_plan

        return run_plan(args, sc, out, console, _write_files)
    trace_mode = args.policy in TRACE_POLICIES
    from planner.statusline import status

    if trace_mode:
        from planner.commands._simulate_trace import run_trace

        return run_trace(args, sc, out, console, _write_files)
    from simulator.metrics import job_metrics, timeline
    from simulator.plots import ownership_png

    with status(f"simulate: policy {args.policy}, request by request"):
        res = run_job(args, sc)
    m = job_metrics(res)
    dec = res.policy.decision
    if getattr(dec, "starts", None):
        # the completion decision's own start per iteration and its boundary tests of the declared lengths
        m["start_split"] = {int(k): dict(v) for k, v in sorted(dec.starts.items())}
        m["length_refits"] = [dict(r) for r in getattr(dec, "refits", [])]
    if res.setup.same_type:
        with status("simulate: hindsight bound" + (" and oracle" if args.oracle else "")):
            m["hindsight"] = hindsight(res, args.seed, args.oracle)
    doc = {"scenario": sc.name, "command": "planner simulate " + " ".join(_argv(args)), "metrics": m, "timeline": timeline(res)}
    if args.json:
        print(json.dumps(doc, indent=2, default=float))
    else:
        _job_summary_table(m, console)
    if out is not None:
        files = {"summary.json": lambda p: Path(p).write_text(json.dumps(doc, indent=2, default=float) + "\n"),
                 "ownership.png": lambda p: ownership_png(res, p)}
        if args.snapshots:
            files["snapshots.jsonl"] = lambda p: Path(p).write_text(
                "".join(s.model_dump_json() + "\n" for s in res.snapshots))
        _write_files(out, files)
        if not args.json:
            console.print(f"wrote {', '.join(str(out / f) for f in files)}")
    return 0


def hindsight(res, seed: int, with_oracle: bool) -> dict:
    """The work-conservation bound (and with ``with_oracle`` the oracle's best schedule found) of every iteration of the
    run, on the iteration's own requests (:mod:`simulator.oracle`); never fed to the policy.

    A dynamic policy's own schedule of each iteration (:func:`simulator.oracle.played_schedule`) seeds that
    iteration's search, so the oracle is never slower than the policy (``policy_vs_oracle`` <= 1: a hindsight
    reference); unseeded, the search's own family missed schedules the policy played (it was up to 1.10x slower than
    the dynamic policy on the DynaRL set-ups). ``seeded`` counts the iterations searched from the policy's schedule."""
    import numpy as np

    from simulator.oracle import SearchStats, best_schedule, work_bound

    its = [it.duration_s for it in res.iterations]
    out: dict = {"bound_s": [work_bound(res.setup, seed, k)["bound_s"] for k in range(len(its))]}
    out["policy_vs_bound"] = float(np.mean(out["bound_s"]) / np.mean(its))
    if with_oracle and res.setup.same_type:
        st = SearchStats()
        seeds = [_played(res, k) for k in range(len(its))]
        found = [best_schedule(res.setup, seed, k, stats=st, start_from=seeds[k]) for k in range(len(its))]
        out.update({"oracle_s": [t for _, t, _ in found], "schedules": [sc.describe() for sc, _, _ in found],
                    "policy_vs_oracle": float(np.mean([t for _, t, _ in found]) / np.mean(its)),
                    "seeded": sum(s is not None for s in seeds), "simulations": st.simulations, "search_s": st.wall_s})
    return out


def _played(res, k: int):
    """The schedule a dynamic run played in iteration ``k``, or None (a static run; moves with and without fill in
    one iteration, which no schedule replays)."""
    from simulator.oracle import played_schedule

    if res.policy.name != "dynamic":
        return None
    try:
        return played_schedule(res, k)
    except ValueError:
        return None


def _argv(args) -> list[str]:
    from planner.commands._args import command_argv

    return command_argv(args, NAME)
