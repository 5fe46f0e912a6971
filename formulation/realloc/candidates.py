"""Candidate allocations per component, and the instance they make.

Every component gets candidate 0, *keep* (its current allocation). A component not at an
interruptible point gets nothing else. Otherwise (up to ``max_candidates`` per component):

* a **donor** gets *shrink* candidates: release whole engines in a fixed *release order* — nodes
  whose engines of this component cache the fewest tokens first (cheapest Workload migration,
  and whole nodes free up early), inside a node the emptiest engine first — at evenly spaced
  sizes from one engine to all but one;
* every other component gets *grow* candidates onto GPUs that are free or that another component
  may give up (a donor's, or one that can relocate), in units of its ``unit_gpus`` (an engine's TP, a trainer replica's TP x PP) kept
  inside one node (TP granularity and node locality). Several fill orders are tried, so that two
  receivers need not compete for the same GPUs: *affinity* (nodes it already uses, then nodes
  of its dataflow neighbours, then the rest), *donor-first* (the donors' release order) and
  *free-first*; and several GPU types: per allowed type, plus all types together for components
  whose engines may mix types; and *relocate* candidates that move the whole component onto
  another allowed type (Weave-style pools such as H100 for the trainer and H20 for rollout, with
  the cost of the move between them; e.g. log-prob inference onto H20 so the trainer can grow on
  the H100s it frees). A synchronous component (trainer, critic) stays on one type: it grows on its
  current type or relocates.

Each candidate carries the migration that reaches it (:mod:`formulation.realloc.migrations`):
kind, steps, duration and bytes, and its cost in pipeline units per second,
``m = T_now x duration_s / horizon_s`` — the pipeline's current throughput lost for the
migration's duration, spread over the time left in the iteration (conservative: it counts the
whole duration as lost and adds the components' migrations although they run in parallel).
Joint feasibility (the pools' capacity) is left to the solver.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from formulation.realloc.context import ComponentContext, ReallocContext
from formulation.realloc.graph import SYNCHRONOUS_KINDS, ComponentGraph, ComponentNode
from formulation.realloc.instance import Candidate, ReallocInstance, Stage
from formulation.realloc.migrations import MigrationPlanner

DEFAULT_MAX_CANDIDATES = 8


def _levels(n_max: int, count: int) -> list[int]:
    """Up to ``count`` distinct sizes in [1, n_max], evenly spaced, always including n_max."""
    if n_max <= 0 or count <= 0:
        return []
    return sorted({int(v) for v in np.round(np.linspace(1, n_max, min(count, n_max)))} | {n_max})[-count:]


def _release_order(node: ComponentNode) -> list:
    """The component's workers in the order a shrink drains them."""
    tokens: dict[str, float] = {}
    for w in node.workers:
        tokens[w.node] = tokens.get(w.node, 0.0) + w.kv_used_tokens
    return sorted(node.workers, key=lambda w: (tokens[w.node], w.node, w.kv_used_tokens, w.worker_id))


def _shrinks(node: ComponentNode, count: int) -> list[tuple[str, dict]]:
    order = _release_order(node)
    current = node.gpus_by_node()
    out = []
    for k in _levels(len(order) - 1, count):
        alloc = dict(current)
        for w in order[:k]:
            alloc[w.node] -= w.gpus
        alloc = {p: v for p, v in alloc.items() if v > 0}
        out.append((f"shrink-{sum(w.gpus for w in order[:k])}", alloc))
    return out


def _fill(base: dict, order: Iterable[str], slots: dict, unit: int, k: int) -> dict:
    alloc = dict(base)
    left = k
    for p in order:
        if left <= 0:
            break
        take = min(left, slots.get(p, 0) // unit)
        if take > 0:
            alloc[p] = alloc.get(p, 0) + take * unit
            left -= take
    return alloc


def _grows_with(node: ComponentNode, ctx: ComponentContext, graph: ComponentGraph, pools: dict, free: dict, slots: dict,
                donor_order: list[str], count: int) -> list[list[tuple[str, dict]]]:
    """Grow (or relocate) candidates onto ``slots`` (free GPUs plus what donors can release, per pool)."""
    unit = max(1, ctx.unit_gpus)
    current = node.gpus_by_node()
    cur_types = sorted({pools[p].gpu_type for p in current})
    neighbours: set[str] = set()
    for e in graph.edges:
        if node.name in (e.src, e.dst):
            neighbours |= set(graph.nodes[e.dst if e.src == node.name else e.src].gpus_by_node())
    donor_rank = {p: i for i, p in enumerate(dict.fromkeys(donor_order))}
    orders = {
        "affinity": lambda p: (p not in current, p not in neighbours, -slots.get(p, 0), p),
        "donor-first": lambda p: (donor_rank.get(p, math.inf), -free.get(p, 0), p),
        "free-first": lambda p: (-free.get(p, 0), donor_rank.get(p, math.inf), p),
    }
    single = node.kind in SYNCHRONOUS_KINDS
    options: list[tuple[str, tuple, bool]] = []  # (label, types, relocate)
    for t in ctx.types():
        if cur_types and t not in cur_types:
            options.append((f"@{t}", (t,), True))  # the whole component onto another type
        if not single or t in cur_types:
            options.append((f"@{t}", (t,), False))
    if not single and len(ctx.types()) > 1:
        options.append(("@any", tuple(ctx.types()), False))
    out: list[list[tuple[str, dict]]] = []
    per_group = min(count, 2 * math.ceil(count / max(1, len(options) * len(orders))) + 1)  # _select keeps about count / groups
    for label, tys, relocate in options:
        cand_pools = [p for p in pools if pools[p].gpu_type in tys]
        room = {p: slots.get(p, 0) for p in cand_pools}
        n_max = sum(v // unit for v in room.values())
        lo = max(1, sum(current.values()) // unit) if relocate else 1
        base = {} if relocate else current
        for oname, key in orders.items():
            order = sorted(cand_pools, key=key)
            group = []
            for k in _levels(n_max, per_group):
                if k < lo:
                    continue
                alloc = _fill(base, order, room, unit, k)
                verb = "relocate" if relocate else "grow"
                group.append((f"{verb}-{k * unit}{label}/{oname}", {p: v for p, v in alloc.items() if v > 0}))
            out.append(group)
    return out


def _select(groups: list[list[tuple[str, dict]]], current: dict, limit: int) -> list[tuple[str, dict]]:
    """Distinct allocations (not the current one), at most ``limit``, spread evenly over the groups
    (GPU type x fill order) and, inside a group, evenly over its sizes."""
    seen = {tuple(sorted(current.items()))}
    uniq: list[list[tuple[str, dict]]] = []
    for g in groups:
        kept = []
        for name, alloc in g:
            key = tuple(sorted(alloc.items()))
            if alloc and key not in seen:
                seen.add(key)
                kept.append((name, alloc))
        if kept:
            uniq.append(kept)
    quota = [0] * len(uniq)
    left = limit
    while left > 0 and any(q < len(g) for q, g in zip(quota, uniq)):
        for i, g in enumerate(uniq):
            if left > 0 and quota[i] < len(g):
                quota[i] += 1
                left -= 1
    out = []
    for q, g in zip(quota, uniq):
        idx = sorted({int(v) for v in np.round(np.linspace(len(g) - 1, 0, q))}) if q else []
        out += [g[i] for i in idx]
    return out


def build_instance(graph: ComponentGraph, context: ReallocContext, donors: Iterable[str], *,
                   max_candidates: int = DEFAULT_MAX_CANDIDATES, margin: float = 0.05) -> ReallocInstance:
    """Candidates for every component of ``graph`` and the numbers-only instance they make."""
    if max_candidates < 1:
        raise ValueError("max_candidates must be at least 1 (the current allocation)")
    donors = set(donors)
    pools = {p.name: p for p in context.pools}
    used: dict[str, int] = {}
    for node in graph.nodes.values():
        for p, v in node.gpus_by_node().items():
            if p not in pools:
                raise ValueError(f"component {node.name} has workers on node {p}, which the context's pools do not list")
            used[p] = used.get(p, 0) + v
    free = {p: max(0, pools[p].gpus - used.get(p, 0)) for p in pools}
    # GPUs other components may give up: donors' (shrink), then relocatable components' (whole
    # moves onto another GPU type), in release order
    donor_order: list[tuple[str, str, int]] = []  # (component, pool, gpus)
    for d in sorted(donors):
        node = graph.nodes.get(d)
        if node is not None and node.interruptible:
            donor_order += [(d, w.node, w.gpus) for w in _release_order(node)]
    for node in graph.nodes.values():
        ctx = context.components.get(node.name)
        if node.name in donors or not node.interruptible or ctx is None:
            continue
        own = {pools[p].gpu_type for p in node.gpus_by_node() if p in pools}
        if any(t not in own for t in ctx.types()):
            donor_order += [(node.name, w.node, w.gpus) for w in _release_order(node)]
    stages: list[Stage] = []
    raw: list[tuple[ComponentNode, ComponentContext, list[tuple[str, dict]]]] = []
    for node in graph.nodes.values():
        ctx = context.components.get(node.name)
        if ctx is None:
            raise ValueError(f"no throughput curve or sizes for component {node.name}: the context must describe every component")
        groups: list[list[tuple[str, dict]]] = []
        if node.interruptible and max_candidates > 1:
            if node.name in donors:
                groups = [_shrinks(node, max_candidates - 1)]
            else:
                others = [(p, g) for c, p, g in donor_order if c != node.name]
                slots = dict(free)
                for p, g in others:
                    slots[p] += g
                groups = _grows_with(node, ctx, graph, pools, free, slots, [p for p, _ in others], max_candidates - 1)
        raw.append((node, ctx, _select(groups, node.gpus_by_node(), max_candidates - 1)))
    # current pipeline throughput, for the migration cost
    cur = []
    for node, ctx, _ in raw:
        by_type: dict[str, int] = {}
        for p, v in node.gpus_by_node().items():
            by_type[pools[p].gpu_type] = by_type.get(pools[p].gpu_type, 0) + v
        missing = [t for t in by_type if t not in ctx.curves]
        if missing:
            raise ValueError(f"component {node.name} runs on {', '.join(missing)} but has no throughput curve for it")
        cur.append(sum(ctx.curves[t](g) for t, g in by_type.items()))
    t_now = min((v for v, (_, ctx, _) in zip(cur, raw) if ctx.pipeline), default=0.0)
    if context.horizon_s is not None:
        horizon = max(1e-6, context.horizon_s)
    else:
        horizon = 1.0 / t_now if t_now > 0 else 60.0
    for node, ctx, named in raw:
        current = node.gpus_by_node()
        why_keep = "current allocation" if node.interruptible else "current allocation (not at an interruptible point: cannot move now)"
        cands = [Candidate("keep", dict(current), cause=why_keep)]
        planner = MigrationPlanner(node.name, node.kind, ctx, current, node.workers, pools, context.links) if named else None
        for name, alloc in named:
            mp = planner.plan(alloc)
            cands.append(Candidate(name, alloc, mp.duration_s, mp.bytes_moved, t_now * mp.duration_s / horizon, mp.kind, mp.moves,
                                   mp.cause))
        stages.append(Stage(node.name, node.kind, node.dynamic, node.interruptible, dict(ctx.curves), cands,
                            unit_gpus=max(1, ctx.unit_gpus), single_type=node.kind in SYNCHRONOUS_KINDS, donor=node.name in donors,
                            pipeline=ctx.pipeline, curve_source=ctx.curve_source))
    return ReallocInstance(list(context.pools), stages, margin=margin, horizon_s=horizon, job=graph.job, time_s=graph.time_s,
                           notes=list(context.notes), unit=context.unit)
