"""planner estimate SCENARIO: what the estimators say about each job."""

from __future__ import annotations

NAME = "estimate"
HELP = "per-job memory, phase times per pool type, throughput points, solo iteration time"
DESCRIPTION = """Print, for every job of a scenario, a table of the estimators' numbers:
model memory and host DRAM per node, rollout and training phase times on each GPU type the job
may use (at the job's own node counts), weight-sync time, rollout throughput curve points, and
the solo iteration time on the best pool pair (the reference for ratio SLOs)."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("scenario", type=_args.path, metavar="SCENARIO")
    p.add_argument("--mode", choices=["conservative", "sampled", "p90", "p99", "max"], default=None,
                   help="rollout time from the maximum response length (default: the scenario's solver.phase_time_estimate) or sampled lengths")
    p.add_argument("--job", action="append", help="only these jobs (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def job_estimates(sc, mode: str, only: list[str] | None = None):
    from planner.errors import Problem, UserError, did_you_mean
    from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types

    view = ClusterView(sc, resolve_gpu_types(sc))
    names = [j.name for j in sc.jobs]
    for n in only or []:
        if n not in names:
            raise UserError(Problem("--job", f"no job '{n}' in the scenario.{did_you_mean(n, names)}",
                                    f"give one of the scenario's jobs: {', '.join(names[:20])}" + (", ..." if len(names) > 20 else "")))
    from planner.statusline import status

    out = []
    with status("estimate: phase times by simulation") as st:
        for k, job in enumerate(sc.jobs):
            if only and job.name not in only:
                continue
            st.update(f"estimate: phase times by simulation ({mode}): job {k + 1}/{len(sc.jobs)}, {job.name}")
            out.append((job, estimate_job(job, view, mode)))
    return view, out


def _as_dict(job, est, view) -> dict:
    from estimators import memory
    from estimators.phases import rollout_throughput_points

    m = est.profile.model
    st = memory.training_state(m)
    curves = {}
    for t in est.rollout_types:
        gpn = view.gpus_per_node(t)
        pts = rollout_throughput_points(est.profile, view.gpu_types[t], [gpn * k for k in (1, 2, 4, 8)])
        curves[t] = [[g, round(v, 1)] for g, v in pts]
    return {
        "job": job.name,
        "model": m.name,
        "params_b": round(m.num_params / 1e9, 3),
        "training_state_gb": round(st.total_bytes / 1e9, 1),
        "kv_kb_per_token": round(memory.kv_bytes_per_token(m) / 1024, 1),
        "host_dram_rollout_node_gb": round(est.dram_rollout_node_gb, 1),
        "host_dram_train_node_gb": round(est.dram_train_node_gb, 1),
        "rollout_nodes": est.rollout_nodes,
        "train_nodes": est.train_nodes,
        "rollout_s": {k: round(v, 1) for k, v in est.rollout_s.items()},
        "train_s": {k: round(v, 1) for k, v in est.train_s.items()},
        "sync_s": {f"{a}->{b}": round(v, 2) for (a, b), v in est.sync_s.items()},
        "rollout_tokens_per_s": curves,
        "best_pools": list(est.best) if est.best else None,
        "solo_iteration_s": round(est.solo_iteration_s, 1),
        "slo_s": round(est.slo_s, 1),
    }


def run(args) -> int:
    import json

    from planner.dockind import SCENARIO, expect
    from planner.schema import load_scenario

    found = expect(args.scenario, [SCENARIO], "SCENARIO", "estimate")
    sc = load_scenario(args.scenario, parsed=found.doc)
    mode = args.mode or sc.solver.phase_time_estimate
    view, ests = job_estimates(sc, mode, args.job)
    rows = [_as_dict(job, est, view) for job, est in ests]
    if args.json:
        print(json.dumps({"scenario": sc.name, "mode": mode, "jobs": rows}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{sc.name}[/bold]: {len(rows)} job(s), rollout time estimate: {mode}")
    for r in rows:
        t = Table(title=f"{r['job']} ({r['model']}, {r['params_b']}B params)", title_justify="left", show_header=True)
        t.add_column("quantity")
        t.add_column("value", overflow="fold")
        t.add_row("training state (weights+grads+Adam)", f"{r['training_state_gb']} GB")
        t.add_row("KV cache per token", f"{r['kv_kb_per_token']} KiB")
        t.add_row("host DRAM per rollout node", f"{r['host_dram_rollout_node_gb']} GB")
        t.add_row(f"host DRAM per training node ({r['train_nodes']} node(s))", f"{r['host_dram_train_node_gb']} GB")
        t.add_row(f"rollout phase, {r['rollout_nodes']} node(s)", ", ".join(f"{k}: {v} s" for k, v in r["rollout_s"].items()) or "fits no pool")
        t.add_row(f"training phase, {r['train_nodes']} node(s)", ", ".join(f"{k}: {v} s" for k, v in r["train_s"].items()) or "fits no pool")
        t.add_row("weight sync", ", ".join(f"{k}: {v} s" for k, v in r["sync_s"].items()))
        for k, pts in r["rollout_tokens_per_s"].items():
            t.add_row(f"rollout tokens/s on {k} (GPUs: tok/s)", ", ".join(f"{g}: {v:,.0f}" for g, v in pts))
        best = f" ({r['best_pools'][0]} rollout + {r['best_pools'][1]} training)" if r["best_pools"] else ""
        t.add_row("solo iteration time", f"{r['solo_iteration_s']} s{best}")
        t.add_row("SLO", f"{r['slo_s']} s per iteration")
        console.print(t)
    return 0
