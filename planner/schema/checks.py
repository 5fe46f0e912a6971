"""Cross-field checks: what one field alone cannot say.

* names: GPU types (catalogue or derived with ``base``), fabric names, unique node-group and job
  names, model presets, ServeGen clients; prices for every GPU type the cluster uses;
* parallelism: a rollout TP that does not divide a node's GPUs; a trainer TP x PP that does not
  divide its GPUs; an explicit DP that disagrees with the nodes;
* capacity: a job whose model fits no allowed pool (KV cache for one full-length sequence;
  training state plus activations), or that needs more nodes than any allowed type has (not for
  ``planner whatif``, which decides the nodes to buy: ``buys_nodes``; nor for a scenario that
  states a capacity question, with ``max_nodes`` or ``budget_per_hour``: ``planner plan`` then
  names the shortfall itself);
* SLOs: an ``iteration_s`` below the job's solo iteration time on its best pool pair (by how much).

:func:`placeable_problems` (``planner validate`` only): a job whose host DRAM fits no node it may
use, which ``planner plan --allow-unplaced`` and ``planner simulate`` accept and leave unplaced.
"""

from __future__ import annotations

import math

from estimators import gpus as gpu_catalogue
from estimators import lengths as length_tables
from estimators import hfconfig
from estimators import models as model_presets
from planner.errors import Problem, UserError, did_you_mean
from planner.safeload import Document
from planner.schema.scenario import NodeGroupSpec, Scenario, ServegenLengths


def check_scenario(sc: Scenario, doc: Document | None = None, *, buys_nodes: bool = False) -> None:
    """Raise a :class:`UserError` with every cross-field problem. ``buys_nodes``: the command
    (``planner whatif``) chooses how many nodes of each type to buy, so the nodes the cluster has
    today (``count``, possibly 0) do not bound what a job may need."""
    problems: list[Problem] = []

    def add(path: tuple, msg: str, fix: str = "") -> None:
        from planner.safeload import fmt_path as _fmt

        problems.append(Problem(_fmt(path), msg, fix, source=doc.where(path) if doc else ""))

    catalogue = sorted(gpu_catalogue.CATALOGUE)
    # ---- GPU types
    for name, spec in sc.gpu_types.items():
        base = spec.base or name
        if gpu_catalogue.canonical_name(base) is None:
            field = ("gpu_types", name, "base") if spec.base else ("gpu_types", name)
            add(field, f"unknown GPU type '{base}'.{did_you_mean(base, catalogue)}",
                f"use one of {', '.join(catalogue)}, or give a new type a 'base:' from that list")
    known_types = set(sc.gpu_types) | set(catalogue)
    fabrics = [c.name for c in sc.cluster.clusters]
    if len(set(fabrics)) != len(fabrics):
        add(("cluster", "clusters"), "cluster names must be unique")
    seen_groups: set[str] = set()
    used_types: list[str] = []
    for i, g in enumerate(sc.cluster.node_groups):
        p: tuple[str | int, ...] = ("cluster", "node_groups", i)
        if g.name in seen_groups:
            add(p + ("name",), f"duplicate node group name '{g.name}'", "give each node group its own name")
        seen_groups.add(g.name)
        if g.gpu_type not in known_types and gpu_catalogue.canonical_name(g.gpu_type) is None:
            add(p + ("gpu_type",), f"unknown GPU type '{g.gpu_type}'.{did_you_mean(g.gpu_type, sorted(known_types))}",
                f"use one of {', '.join(sorted(known_types))} or define it under gpu_types with a 'base:'")
        else:
            used_types.append(g.gpu_type)
        if g.cluster not in fabrics:
            add(p + ("cluster",), f"cluster '{g.cluster}' is not defined.{did_you_mean(g.cluster, fabrics)}",
                f"add it under cluster.clusters or use one of {', '.join(dict.fromkeys(fabrics))}")
    _same_type_groups_alike(sc, add)
    for t in sorted(set(used_types)):
        priced = sc.gpu_types.get(t)
        if priced is None or priced.price_per_gpu_hour is None:
            add(("gpu_types", t, "price_per_gpu_hour"), f"no price for GPU type '{t}', which the cluster uses",
                f"set gpu_types.{t}.price_per_gpu_hour ($ per GPU-hour; prices are inputs, never built in)")
    if problems:
        raise UserError(problems, title=f"{doc.filename}: invalid scenario" if doc else "invalid scenario")

    # ---- jobs (needs resolved GPU types)
    from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types

    view = ClusterView(sc, resolve_gpu_types(sc))
    seen_jobs: set[str] = set()
    clients = length_tables.servegen_clients()
    cluster_types = view.types()
    for j, job in enumerate(sc.jobs):
        p = ("jobs", j)
        if job.name in seen_jobs:
            add(p + ("name",), f"duplicate job name '{job.name}'", "job names must be unique")
        seen_jobs.add(job.name)
        if isinstance(job.model, str):
            try:
                hfconfig.resolve(job.model)
            except KeyError:
                add(p + ("model",), f"unknown model preset '{job.model}'.{did_you_mean(job.model, model_presets.preset_names())}",
                    f"use one of {', '.join(model_presets.preset_names())}, a local Hugging Face config.json (or its "
                    f"directory), or give the dimensions as a mapping")
                continue
            except ValueError as exc:  # a config.json that cannot give the dimensions
                add(p + ("model",), str(exc), "point model: at a dense decoder's Hugging Face config.json, or give the "
                    "dimensions as a mapping")
                continue
        rl = job.rollout.response_lengths
        if isinstance(rl, ServegenLengths) and rl.client is not None and str(rl.client) not in clients:
            add(p + ("rollout", "response_lengths", "client"), f"no ServeGen client '{rl.client}'.{did_you_mean(rl.client, clients)}",
                f"use one of {', '.join(clients)} or leave it out for the mixture")
        bad_types = False
        for key in ("rollout", "trainer"):
            allowed = getattr(job, key).gpu_types
            for k, t in enumerate(allowed or []):
                if t not in cluster_types:
                    add(p + (key, "gpu_types", k), f"GPU type '{t}' has no nodes in the cluster.{did_you_mean(t, cluster_types)}",
                        f"use one of {', '.join(cluster_types)}")
                    bad_types = True
        if bad_types:
            continue
        r_types = job.rollout.gpu_types or cluster_types
        t_types = job.trainer.gpu_types or cluster_types
        for t in r_types:
            gpn = view.gpus_per_node(t)
            if gpn % job.rollout.tp:
                add(p + ("rollout", "tp"), f"rollout tp={job.rollout.tp} does not divide the {gpn} GPUs of a {t} node",
                    f"use a tp that divides {gpn} (e.g. {', '.join(str(d) for d in _divisors(gpn))})")
        for t in t_types:
            gpus = view.gpus_per_node(t) * job.trainer.nodes
            mp = job.trainer.tp * job.trainer.pp
            if job.trainer.tp > view.gpus_per_node(t) or view.gpus_per_node(t) % job.trainer.tp:
                add(p + ("trainer", "tp"), f"trainer tp={job.trainer.tp} does not divide the {view.gpus_per_node(t)} GPUs of a {t} node",
                    "keep tensor parallelism inside a node: a divisor of its GPUs")
            elif gpus % mp:
                add(p + ("trainer", "pp"), f"trainer tp x pp = {mp} does not divide the {gpus} GPUs of {job.trainer.nodes} {t} node(s)",
                    "choose tp and pp whose product divides the training GPUs")
            elif job.trainer.dp is not None and mp * job.trainer.dp != gpus:
                add(p + ("trainer", "dp"), f"tp x pp x dp = {mp * job.trainer.dp} but {job.trainer.nodes} {t} node(s) have {gpus} GPUs",
                    f"set dp to {gpus // mp} or leave it out")
        if problems:
            continue
        for key, nodes, types in (("rollout", job.rollout.nodes, r_types), ("trainer", job.trainer.nodes, t_types)):
            most = max((view.nodes_of(t) for t in types), default=0)
            if nodes > most and not buys_nodes and sc.budget_per_hour is None and not _capacity_planning(sc):
                add(p + (key, "nodes"), f"needs {nodes} nodes but the most of any allowed type is {most}",
                    "lower the nodes or add nodes to the cluster (or, to choose the nodes to buy, run planner whatif "
                    "on this scenario)")
        est = estimate_job(job, view, sc.solver.phase_time_estimate, phase_times=job.slo.iteration_s is not None)
        if not est.rollout_types:
            add(p + ("model",), f"the model does not fit any allowed rollout GPU at tp={job.rollout.tp} "
                f"with a {job.rollout.prompt_tokens + job.rollout.max_response_tokens}-token sequence"
                + _memory_note(est, view, job.rollout.gpu_types or view.types(), "rollout"),
                "raise rollout.tp, lower rollout.max_response_tokens, or allow a GPU with more memory")
        if not est.train_types:
            add(p + ("model",), f"the training state does not fit any allowed trainer GPU at tp={job.trainer.tp}, pp={job.trainer.pp} "
                f"on {job.trainer.nodes} node(s)" + _memory_note(est, view, job.trainer.gpu_types or view.types(), "trainer"),
                "raise trainer.tp/pp or trainer.nodes, or allow a GPU with more memory")
        if est.best and job.slo.iteration_s is not None and job.slo.iteration_s < est.solo_iteration_s:
            a, b = est.best
            add(p + ("slo", "iteration_s"),
                f"{job.slo.iteration_s:g} s is below the job's solo iteration time {est.solo_iteration_s:.1f} s on its best pools "
                f"({a} rollout + {b} training) by {est.solo_iteration_s - job.slo.iteration_s:.1f} s",
                f"raise slo.iteration_s to at least {math.ceil(est.solo_iteration_s)}, or use slo.ratio_to_solo")
    if problems:
        raise UserError(problems, title=f"{doc.filename}: invalid scenario" if doc else "invalid scenario")


def placeable_problems(sc: Scenario, doc: Document | None = None) -> list[Problem]:
    """What no plan can get round, knowable without solving: a job whose host DRAM fits no node it
    may use, per rollout node (its parked weights) or per training node (its training state over the
    largest training pool the fleet can form; not checked when the scenario buys nodes, with
    ``max_nodes`` or ``budget_per_hour``). ``planner plan`` refuses such a job unless
    ``--allow-unplaced`` (the same rule, :func:`formulation.placement.dramfit.dram_short`, names it
    there); ``planner validate`` reports it first. Assumes :func:`check_scenario` passed."""
    from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types
    from planner.instances.placement import dram_short_of
    from planner.safeload import fmt_path as _fmt

    view = ClusterView(sc, resolve_gpu_types(sc))
    fleet_fixed = sc.budget_per_hour is None and not _capacity_planning(sc)
    problems: list[Problem] = []
    for j, job in enumerate(sc.jobs):
        short = dram_short_of(job, view, estimate_job(job, view, phase_times=False))
        if short is None or (short.side == "training" and not fleet_fixed):
            continue
        k, group = min(((k, g) for k, g in enumerate(sc.cluster.node_groups) if g.gpu_type == short.gpu_type),
                       key=lambda kg: kg[1].host_dram_gb)
        limit = f"{short.have_gb:g} GB (host_dram_gb of node group '{group.name}', cluster.node_groups[{k}])"
        if short.side == "rollout":
            path: tuple = ("jobs", j, "rollout")
            msg = (f"job '{job.name}' cannot be placed by any plan: its rollout keeps {short.need_gb:.1f} GB of host DRAM on each "
                   f"rollout node, more than any rollout node it may use has: the most is {limit}")
            fix = (f"raise that host_dram_gb to at least {math.ceil(short.need_gb)}, allow rollout nodes with more host DRAM "
                   "(rollout.gpu_types), or use a smaller model")
        else:
            path = ("jobs", j, "trainer")
            msg = (f"job '{job.name}' cannot be placed by any plan: its training state ({short.state_gb:.1f} GB) needs "
                   f"{short.need_gb:.1f} GB of host DRAM per node even on {short.nodes} {short.gpu_type} node(s), its closest fit "
                   f"of the training pools it may use; each has {limit}")
            fix = (f"raise that host_dram_gb to at least {math.ceil(short.need_gb)}, add {short.gpu_type} nodes, allow training "
                   "nodes with more host DRAM (trainer.gpu_types), or use a smaller model")
        fix += "; or, to plan the other jobs without it, --allow-unplaced (here and with planner plan)"
        problems.append(Problem(_fmt(path), msg, fix, source=doc.where(path) if doc else ""))
    return problems


def _same_type_groups_alike(sc: Scenario, add) -> None:
    """Node groups of one GPU type hold alike nodes: the planner plans a type's nodes as one pool
    kind, with the first group's GPUs per node and fabric (and the smallest host DRAM). A second
    H20 group of 1-GPU nodes was planned as 8-GPU nodes: a tp=8 rollout pinned to a 1-GPU node,
    16 GPUs priced where 9 exist, with `validate` and `validate-plan` passing (an outside audit)."""
    first: dict[str, tuple[int, NodeGroupSpec]] = {}
    for i, g in enumerate(sc.cluster.node_groups):
        k, ref = first.setdefault(g.gpu_type, (i, g))
        if k == i:
            continue
        for field in ("gpus_per_node", "host_dram_gb", "cluster"):
            mine, theirs = getattr(g, field), getattr(ref, field)
            if mine != theirs:
                shown = (lambda v: f"'{v}'") if field == "cluster" else (lambda v: f"{v:g}")
                add(("cluster", "node_groups", i, field),
                    f"node group '{g.name}' has {field} {shown(mine)} but '{ref.name}' "
                    f"(cluster.node_groups[{k}]), of the same GPU type {g.gpu_type}, has {shown(theirs)}: the planner treats "
                    "every node of a GPU type alike",
                    f"give both the same {field}, or make one a GPU type of its own (gpu_types: {{{g.gpu_type}-{g.name}: "
                    f"{{base: {g.gpu_type}, price_per_gpu_hour: ...}}}} and gpu_type: {g.gpu_type}-{g.name} in this group)")


def _memory_note(est, view, types: list[str], side: str) -> str:
    """How far the job is from fitting the largest allowed GPU: a refusal said "does not fit" and no
    more, so the fix (how much tp, or which GPU) was guesswork (an outside audit)."""
    from estimators import memory

    have = [t for t in types if t in view.gpu_types and t in view.groups_by_type]
    if not have:
        return ""
    t = max(have, key=lambda t: view.gpu_types[t].hbm_gb)
    hbm = view.gpu_types[t].hbm_gb
    prof = est.profile
    m = prof.model
    if side == "rollout":
        weights = memory.inference_weight_bytes_per_gpu(m, prof.rollout_tp) / memory.GB
        tokens = memory.kv_capacity_tokens(m, hbm, prof.rollout_tp)
        return (f" (on a {t}, {hbm:g} GB: the weights take {weights:.1f} GB a GPU, leaving KV-cache room for "
                f"{tokens:,.0f} tokens)")
    from estimators.phases import trainer_dp

    need = memory.training_bytes_per_gpu(m, prof.trainer_tp, prof.trainer_pp, trainer_dp(prof, view.pool(t, est.train_nodes)))
    kept = (memory.fits_training.__kwdefaults__ or {}).get("activation_fraction", 0.25)
    return (f" (on a {t}: {need / memory.GB:.1f} GB of model state a GPU, plus {memory.RUNTIME_OVERHEAD_GB_PER_GPU:g} GB of "
            f"runtime, against {(1 - kept) * hbm:.1f} GB: its {hbm:g} GB less {kept:.0%} kept for activations)")


def _capacity_planning(sc: Scenario) -> bool:
    return any(spec.max_nodes is not None for spec in sc.gpu_types.values())


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
