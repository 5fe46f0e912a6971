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
  *free-first*; with two or more receivers, *balanced* grows (:func:`_balanced`: per donor shrink level, the GPUs
  it frees shared out between the receivers by max-min water filling, so that their grows fit together and the
  freed GPUs reach the bottleneck); and several GPU types: per allowed type, plus all types together for components
  whose engines may mix types; and *relocate* candidates that move the whole component onto
  another allowed type (Weave-style pools such as H100 for the trainer and H20 for rollout, with
  the cost of the move between them; e.g. log-prob inference onto H20 so the trainer can grow on
  the H100s it frees). A synchronous component (trainer, critic) stays on one type: it grows on its
  current type or relocates.

Each candidate carries the migration that reaches it (:mod:`formulation.realloc.migrations`):
kind, steps, duration and bytes, and its cost in pipeline units per second,
``m = T_now x lost_s / horizon_s`` — the pipeline's current throughput lost for the seconds the
migration costs the component (:func:`~formulation.realloc.migrations.charged_seconds`: its whole
duration, except that a migration which creates before it destroys loses only the share of the new
capacity still starting, plus the switch-over pause), spread over the time left in the iteration
(conservative: it adds the components' migrations although they run in parallel).
Joint feasibility (the pools' capacity) is left to the solver.

Two generators make the same candidates (``tests/realloc/test_candidates.py`` checks it to the
last bit): ``numpy`` (default) works on rows of GPUs per pool, costs a component's migrations in
one vectorised pass and plans a candidate's steps only when they are read; ``python`` is the
reference, with dicts and one migration plan per candidate.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial
from typing import Any, Iterable, Mapping

import numpy as np

from formulation.realloc.context import ComponentContext, ReallocContext
from formulation.realloc.graph import SYNCHRONOUS_KINDS, ComponentGraph, ComponentNode
from formulation.realloc.instance import Arrays, Candidate, LazyAlloc, LazyMoves, ReallocInstance, Stage
from formulation.realloc.migrations import LinkTable, MigrationPlanner, charged_seconds

DEFAULT_MAX_CANDIDATES = 8


@lru_cache(maxsize=4096)
def _levels(n_max: int, count: int) -> tuple[int, ...]:
    """Up to ``count`` distinct sizes in [1, n_max], evenly spaced, always including n_max."""
    if n_max <= 0 or count <= 0:
        return ()
    return tuple(sorted({int(v) for v in np.round(np.linspace(1, n_max, min(count, n_max)))} | {n_max})[-count:])


@lru_cache(maxsize=4096)
def _spread(n: int, q: int) -> tuple[int, ...]:
    """``q`` indices spread evenly over ``range(n)``, the last one included."""
    return tuple(sorted({int(v) for v in np.round(np.linspace(n - 1, 0, q))})) if q else ()


def _release_order(node: ComponentNode) -> list:
    """The component's workers in the order a shrink drains them."""
    tokens: dict[str, float] = {}
    for w in node.workers:
        tokens[w.node] = tokens.get(w.node, 0.0) + w.kv_used_tokens
    return sorted(node.workers, key=lambda w: (tokens[w.node], w.node, w.kv_used_tokens, w.worker_id))


def _shrinks(node: ComponentNode, count: int, order: list | None = None) -> list[tuple[str, dict]]:
    order = _release_order(node) if order is None else order
    current = node.gpus_by_node()
    out = []
    for k in _levels(len(order) - 1, count):
        alloc = dict(current)
        for w in order[:k]:
            alloc[w.node] -= w.gpus
        alloc = {p: v for p, v in alloc.items() if v > 0}
        out.append((f"shrink-{sum(w.gpus for w in order[:k])}", alloc))
    return out


def _neighbour_pools(node: ComponentNode, graph: ComponentGraph) -> set[str]:
    out: set[str] = set()
    for e in graph.edges:
        if node.name in (e.src, e.dst):
            out |= set(graph.nodes[e.dst if e.src == node.name else e.src].gpus_by_node())
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


ORDERS = ("affinity", "donor-first", "free-first")  # fill orders of the grow candidates


def _grow_options(node: ComponentNode, ctx: ComponentContext, cur_types: list, count: int) -> tuple[list, int]:
    """(label, GPU types, relocate) of every grow group, and how many sizes each group offers."""
    single = node.kind in SYNCHRONOUS_KINDS
    options: list[tuple[str, tuple, bool]] = []
    for t in ctx.types():
        if cur_types and t not in cur_types:
            options.append((f"@{t}", (t,), True))  # the whole component onto another type
        if not single or t in cur_types:
            options.append((f"@{t}", (t,), False))
    if not single and len(ctx.types()) > 1:
        options.append(("@any", tuple(ctx.types()), False))
    per_group = min(count, 2 * math.ceil(count / max(1, len(options) * len(ORDERS))) + 1)  # _select keeps about count / groups
    return options, per_group


def _grows_with(node: ComponentNode, ctx: ComponentContext, graph: ComponentGraph, pools: dict, free: dict, slots: dict,
                donor_order: list[str], count: int) -> list[list[tuple[str, dict]]]:
    """Grow (or relocate) candidates onto ``slots`` (free GPUs plus what donors can release, per pool)."""
    unit = max(1, ctx.unit_gpus)
    current = node.gpus_by_node()
    cur_types = sorted({pools[p].gpu_type for p in current})
    neighbours = _neighbour_pools(node, graph)
    donor_rank = {p: i for i, p in enumerate(dict.fromkeys(donor_order))}
    orders = dict(zip(ORDERS, (
        lambda p: (p not in current, p not in neighbours, -slots.get(p, 0), p),
        lambda p: (donor_rank.get(p, math.inf), -free.get(p, 0), p),
        lambda p: (-free.get(p, 0), donor_rank.get(p, math.inf), p),
    )))
    options, per_group = _grow_options(node, ctx, cur_types, count)
    out: list[list[tuple[str, dict]]] = []
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


#: donor shrink levels the balanced grows are built for, at most (1,024 GPUs, 64 candidates a component: 63 levels
#: cost ~4 ms of a ~20 ms decision; see :func:`_balanced`)
BALANCED_LEVELS = 16

def _balanced(graph: ComponentGraph, context: ReallocContext, pools: dict, free: dict, release: dict, receivers: list[str],
              count: int) -> dict[str, list[tuple[str, dict]]]:
    """Grows of several receivers that fit together, per receiver one candidate per shrink level of each donor.

    The other fill orders give every receiver its grows in the same node order, so two receivers' grows start on
    the same first nodes and the solver can combine only small ones (GPUs a donor frees stay unowned). Here, for
    each shrink the donor is offered (its first ``k`` engines in release order, the same levels as its shrink
    candidates; no donor: the free GPUs alone), the GPUs it frees and the free ones are shared out between the
    receivers (the pipeline components that may grow) one unit at a time, always to the slowest receiver a unit
    still speeds up (max-min water filling on their curves), on the node it was last given a unit on while that
    has room, else the first freed node with room (free GPUs first, then the donor's in release order). The
    receivers' candidates of one level use disjoint GPUs, all of them free or freed by that shrink.
    Levels are nested (one pass over the release order), so the cost is the units shared times the receivers."""
    levels: list[tuple[str, int, list]] = []  # (donor, released GPUs, [(pool, gpus) released by this level's step])
    for d in sorted(release):
        order = release[d]
        done, released = 0, 0
        for k in _levels(len(order) - 1, count):
            step = [(w.node, w.gpus) for w in order[done:k]]
            released += sum(g for _, g in step)
            levels.append((d, released, step))
            done = k
    if not levels and not any(free.values()):
        return {}
    specs = {}
    for r in receivers:
        node, ctx = graph.nodes[r], context.components[r]
        current = node.gpus_by_node()
        cur_types = sorted({pools[p].gpu_type for p in current})
        allowed = [t for t in ctx.types() if node.kind not in SYNCHRONOUS_KINDS or t in cur_types]
        by_type = {t: sum(v for p, v in current.items() if pools[p].gpu_type == t) for t in allowed}
        cap = {t: sum(pools[p].gpus for p in pools if pools[p].gpu_type == t) for t in allowed}
        vals = {t: ctx.curves[t].values(np.arange(cap[t] + 1, dtype=float)).tolist() for t in allowed}
        specs[r] = (max(1, ctx.unit_gpus), set(allowed), current, by_type, vals)
    out: dict[str, list[tuple[str, dict]]] = {r: [] for r in receivers}

    def rate(r: str, gpus: dict) -> float:
        return sum(v[gpus.get(t, 0)] for t, v in specs[r][4].items())

    runs: dict = {}  # donor -> its pass: supply per pool, pools in the order freed, GPUs added and held per receiver
    for d, released, step in levels or [("", 0, [])]:
        if d not in runs:
            sup = {p: v for p, v in free.items() if v > 0}
            held = {r: dict(specs[r][3]) for r in receivers}
            first = sorted(sup, key=lambda p: (-sup[p], p))
            runs[d] = (sup, first, {r: {} for r in receivers}, held, {r: rate(r, held[r]) for r in receivers},
                       dict.fromkeys(receivers), dict.fromkeys(receivers, 0), {p: i for i, p in enumerate(first)})
        sup, order, added, gpus, thr, last, cursor, pos = runs[d]
        # cursor[r]: before it, no pool has room for the receiver's unit. Supply only falls within a level
        # and a level's step adds to the pools it frees, so a cursor moves back only to such a pool (the
        # whole pass costs the units shared plus the pools, not levels x pools)
        for p, g in step:
            if p not in sup:
                pos[p] = len(order)
                order.append(p)
            sup[p] = sup.get(p, 0) + g
            for r in receivers:
                if cursor[r] > pos[p]:
                    cursor[r] = pos[p]
        live = list(receivers)  # (sorted by name: the first of equally slow ones)
        while live:
            r = min(live, key=thr.__getitem__)  # the slowest
            unit, types, _, _, vals = specs[r]
            p = last[r]
            if p is None or sup[p] < unit:  # the node it filled last first, else the first freed node with room
                i = cursor[r]
                while i < len(order) and not (sup[order[i]] >= unit and pools[order[i]].gpu_type in types):
                    i += 1
                cursor[r] = i
                p = order[i] if i < len(order) else None
            t = pools[p].gpu_type if p is not None else ""
            g = gpus[r].get(t, 0)
            if p is None or g + unit >= len(vals[t]) or vals[t][g + unit] <= vals[t][g]:
                live.remove(r)  # no room, or a unit more does not speed it up
                continue
            sup[p] -= unit
            added[r][p] = added[r].get(p, 0) + unit
            gpus[r][t] = g + unit
            thr[r] += vals[t][g + unit] - vals[t][g]
            last[r] = p
        for r in receivers:
            if added[r]:
                current = specs[r][2]
                alloc = dict(current)
                for p, v in added[r].items():
                    alloc[p] = alloc.get(p, 0) + v
                tag = f"{d}-{released}" if d else "free"
                out[r].append((f"grow-{sum(added[r].values())}/balanced@{tag}", alloc))
    return out


def _dict_key(alloc: dict):
    return tuple(sorted(alloc.items())) if alloc else None


def _distinct(groups: list[list], keys: list[list], current_key) -> list[list]:
    """Per group, the positions of the allocations to keep: not empty (key None), not the
    current one, not seen before in this or an earlier group. Groups left empty are dropped."""
    seen = {current_key}
    out = []
    for g, ks in zip(groups, keys):
        kept = []
        for i, k in enumerate(ks):
            if k is not None and k not in seen:
                seen.add(k)
                kept.append(g[i])
        if kept:
            out.append(kept)
    return out


def _take(uniq: list[list], limit: int) -> list:
    """At most ``limit`` items, spread evenly over the groups (a round-robin quota) and, inside a
    group, evenly over its items."""
    # round robin: every group one more per round, in group order, until ``limit`` are handed out;
    # whole rounds first (``full``: the last round every group still with items gets in full)
    sizes = [len(g) for g in uniq]
    full, most = 0, max(sizes, default=0)
    while full < most and sum(min(n, full + 1) for n in sizes) <= limit:
        full += 1
    quota = [min(n, full) for n in sizes]
    left = limit - sum(quota)
    for i, n in enumerate(sizes):
        if left > 0 and n > full:
            quota[i] += 1
            left -= 1
    out = []
    for q, g in zip(quota, uniq):
        out += [g[i] for i in _spread(len(g), q)]
    return out


def _select(groups: list[list[tuple[str, dict]]], current: dict, limit: int) -> list[tuple[str, dict]]:
    """Distinct allocations (not the current one, not empty), at most ``limit``, spread evenly over
    the groups (GPU type x fill order) and, inside a group, evenly over its sizes."""
    return _take(_distinct(groups, [[_dict_key(a) for _, a in g] for g in groups], _dict_key(current)), limit)


def _select_rows(groups: list[tuple[np.ndarray, list]], current: np.ndarray, limit: int) -> tuple[list, np.ndarray]:
    """:func:`_select` over blocks of rows: ``groups`` holds (rows, names); the names may be
    callables, formatted for the kept rows only. Returns the kept names and rows."""
    if not groups:
        return [], np.zeros((0, len(current)), dtype=np.int64)
    rows = np.ascontiguousarray(np.vstack([r for r, _ in groups]))
    keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel().tolist()
    keys = [k if e else None for k, e in zip(keys, np.asarray(rows.any(axis=1)).tolist())]
    at, pos, per_key = 0, [], []
    for r, _ in groups:
        pos.append(list(range(at, at + len(r))))
        per_key.append(keys[at:at + len(r)])
        at += len(r)
    kept = _take(_distinct(pos, per_key, current.tobytes()), limit)
    names = [n for _, ns in groups for n in ns]
    return [names[i]() if callable(names[i]) else names[i] for i in kept], rows[kept]


class _Columns:
    """Pools as columns (the context's order), for the numpy generator."""

    def __init__(self, pools: dict) -> None:
        self.names = list(pools)
        self.col = {p: i for i, p in enumerate(self.names)}
        self.types = np.array([pools[p].gpu_type for p in self.names])
        self.name_rank = np.empty(len(self.names), dtype=np.int64)
        self.name_rank[np.argsort(np.array(self.names), kind="stable")] = np.arange(len(self.names))

    def type_mask(self, types: tuple) -> np.ndarray:
        masks = self.__dict__.setdefault("_masks", {})
        if types not in masks:
            masks[types] = np.isin(self.types, types)
        return masks[types]

    def vector(self, alloc: dict) -> np.ndarray:
        v = np.zeros(len(self.names), dtype=np.int64)
        if alloc:
            v[[self.col[p] for p in alloc]] = list(alloc.values())
        return v

    def current(self, node: ComponentNode) -> np.ndarray:
        """The node's current allocation as a row (computed once; read-only)."""
        cache = self.__dict__.setdefault("_current", {})
        if node.name not in cache:
            cache[node.name] = self.vector(node.gpus_by_node())
        return cache[node.name]



class _Givers:
    """The GPUs other components may give up (``donor_order``) as vectors: for a receiver, free
    GPUs plus everyone else's (``slots``), and each pool's first place in everyone else's release
    order (``rank``, inf where none)."""

    def __init__(self, donor_order: list, cols: _Columns, free: np.ndarray) -> None:
        self.comp = np.array([c for c, _, _ in donor_order], dtype=object)
        self.pool = np.array([cols.col[p] for _, p, _ in donor_order], dtype=np.int64)
        self.gpus = np.array([g for _, _, g in donor_order], dtype=np.int64)
        self.free = free

    def slots_and_rank(self, receiver: str) -> tuple[np.ndarray, np.ndarray]:
        mask = self.comp != receiver
        pool, gpus = self.pool[mask], self.gpus[mask]
        n = len(self.free)
        slots = self.free + np.bincount(pool, weights=gpus, minlength=n).astype(np.int64)
        rank = np.full(n, np.inf)
        seen, first = np.unique(pool, return_index=True)
        rank[seen] = first
        return slots, rank


def _shrink_rows(node: ComponentNode, count: int, cols: _Columns, order: list) -> list[tuple[np.ndarray, list]]:
    """:func:`_shrinks` as one block of rows (``order``: the node's release order)."""
    levels = _levels(len(order) - 1, count)
    if not levels:
        return []
    cur = cols.current(node)
    n = levels[-1]
    where = np.array([cols.col[w.node] for w in order[:n]], dtype=np.int64)
    gpus = np.array([w.gpus for w in order[:n]], dtype=np.int64)
    rows = np.empty((len(levels), len(cur)), dtype=np.int64)
    row, done = cur.copy(), 0
    for i, k in enumerate(levels):  # each level releases the engines after the previous one's
        row -= np.bincount(where[done:k], weights=gpus[done:k], minlength=len(cur)).astype(np.int64)
        rows[i], done = row, k
    released = np.cumsum(gpus)
    return [(rows, [f"shrink-{int(released[k - 1])}" for k in levels])]


def _grow_rows(node: ComponentNode, ctx: ComponentContext, graph: ComponentGraph, pools: dict, cols: _Columns, free: np.ndarray,
               slots: np.ndarray, donor_rank: np.ndarray, count: int) -> list[tuple[np.ndarray, list]]:
    """:func:`_grows_with` as blocks of rows, in the same group order. A fill order is one
    lexicographic sort over all pools (restricting it to one type's pools keeps it sorted: the
    other pools get no room), and every size of every type fills that order at once."""
    unit = max(1, ctx.unit_gpus)
    current = node.gpus_by_node()
    cur = cols.current(node)
    cur_types = sorted({pools[p].gpu_type for p in current})
    nb = cols.vector({p: 1 for p in _neighbour_pools(node, graph)}) > 0
    rank = cols.name_rank
    sorts = dict(zip(ORDERS, (np.lexsort((rank, -slots, ~nb, ~(cur > 0))),  # lexsort: the last key sorts first
                              np.lexsort((rank, -free, donor_rank)),
                              np.lexsort((rank, donor_rank, -free)))))
    options, per_group = _grow_options(node, ctx, cur_types, count)
    if not options:
        return []
    units = slots // unit
    room = units[None, :] * np.stack([cols.type_mask(tys) for _, tys, _ in options])  # options x pools
    whole = max(1, int(cur.sum()) // unit)
    sizes = [[k for k in _levels(int(r.sum()), per_group) if k >= (whole if relocate else 1)]
             for r, (_, _, relocate) in zip(room, options)]
    ks = np.zeros((len(options), max(1, max(len(k) for k in sizes))), dtype=np.int64)
    for o, k in enumerate(sizes):
        ks[o, : len(k)] = k
    base = np.stack([np.zeros_like(cur) if relocate else cur for _, _, relocate in options])[:, None, :]
    blocks = {}
    for oname, perm in sorts.items():
        u = room[:, perm]
        before = np.cumsum(u, axis=1) - u
        fill = np.clip(ks[:, :, None] - before[:, None, :], 0, u[:, None, :])  # units taken, pools in fill order
        blocks[oname] = base + fill[:, :, np.argsort(perm)] * unit
    out = []
    for o, (label, _, relocate) in enumerate(options):
        verb = "relocate" if relocate else "grow"
        for oname in ORDERS:
            out.append((blocks[oname][o, : len(sizes[o])], [partial(str.format, "{}-{}{}/{}", verb, k * unit, label, oname)
                                                              for k in sizes[o]]))
    return out


def _capacity(ctx: ComponentContext, pools: dict, allocs: list) -> np.ndarray:
    """The component's throughput (its curves) on each allocation (pool -> GPUs), GPU types in name order."""
    out = np.zeros(len(allocs))
    for i, alloc in enumerate(allocs):
        by_type: dict[str, int] = {}
        for p, v in alloc.items():
            by_type[pools[p].gpu_type] = by_type.get(pools[p].gpu_type, 0) + v
        out[i] = sum(ctx.curves[t](g) for t, g in sorted(by_type.items()) if t in ctx.curves)
    return out


def _capacity_rows(ctx: ComponentContext, cols: "_Columns", rows: np.ndarray) -> np.ndarray:
    """:func:`_capacity` of every row (pools as columns), vectorised: GPUs per type, then each curve."""
    out = np.zeros(rows.shape[0])
    for t in sorted(set(cols.types.tolist())):
        if t in ctx.curves:
            out += ctx.curves[t].values(rows[:, cols.types == t].sum(axis=1))
    return out


def _plan_moves(planner: MigrationPlanner, alloc: Mapping) -> tuple:
    return planner.plan(dict(alloc)).moves


GENERATORS = ("numpy", "python")


def build_instance(graph: ComponentGraph, context: ReallocContext, donors: Iterable[str], *,
                   max_candidates: int = DEFAULT_MAX_CANDIDATES, margin: float = 0.05, generator: str = "numpy",
                   finished: bool = False) -> ReallocInstance:
    """Candidates for every component of ``graph`` and the numbers-only instance they make.

    ``finished``: no component has work left this iteration; the instance holds the current allocations only
    (:attr:`ReallocInstance.finished`: nothing to decide).

    ``generator``: ``numpy`` (default) builds the allocations as rows of GPUs per pool and costs
    all of a component's migrations at once (:meth:`MigrationPlanner.costs`), planning the steps
    of a candidate only when they are read; ``python`` is the reference it is tested against
    (dicts, one :meth:`MigrationPlanner.plan` per candidate). Both give the same candidates.
    """
    if max_candidates < 1:
        raise ValueError("max_candidates must be at least 1 (the current allocation)")
    if finished:
        max_candidates = 1
    if generator not in GENERATORS:
        raise ValueError(f"unknown candidate generator {generator!r}: use one of {', '.join(GENERATORS)}")
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
    release: dict[str, list] = {}  # release orders, computed once
    for d in sorted(donors):
        donor = graph.nodes.get(d)
        if donor is not None and donor.interruptible:
            release[d] = _release_order(donor)
            donor_order += [(d, w.node, w.gpus) for w in release[d]]
    for node in graph.nodes.values():
        ctx = context.components.get(node.name)
        if node.name in donors or not node.interruptible or ctx is None:
            continue
        own = {pools[p].gpu_type for p in node.gpus_by_node() if p in pools}
        if any(t not in own for t in ctx.types()):
            donor_order += [(node.name, w.node, w.gpus) for w in _release_order(node)]
    cols = _Columns(pools) if generator == "numpy" else None
    links = LinkTable(pools, context.links) if cols is not None else None
    if cols is not None:
        free_v = cols.vector(free)
        givers = _Givers(donor_order, cols, free_v)
    # the components that get grow candidates and count in the bottleneck: with two or more, grows that fit together
    receivers = sorted(n.name for n in graph.nodes.values() if n.interruptible and n.name not in donors
                       and n.name in context.components and context.components[n.name].pipeline)
    balanced = (_balanced(graph, context, pools, free, release, receivers, min(max_candidates - 1, BALANCED_LEVELS))
                if len(receivers) > 1 and max_candidates > 1 else {})
    raw: list[tuple[ComponentNode, ComponentContext, Any]] = []  # (node, context, named candidates: list or (names, rows))
    for node in graph.nodes.values():
        ctx = context.components.get(node.name)
        if ctx is None:
            raise ValueError(f"no throughput curve or sizes for component {node.name}: the context must describe every component")
        groups: list = []  # lists of (name, alloc), or (rows, names) blocks with the numpy generator
        if node.interruptible and max_candidates > 1:
            if node.name in donors:
                order = release.get(node.name) or _release_order(node)
                groups = [_shrinks(node, max_candidates - 1, order)] if cols is None else _shrink_rows(node, max_candidates - 1, cols, order)
            else:
                if cols is None:
                    others = [(p, g) for c, p, g in donor_order if c != node.name]
                    slots = dict(free)
                    for p, g in others:
                        slots[p] += g
                    groups = _grows_with(node, ctx, graph, pools, free, slots, [p for p, _ in others], max_candidates - 1)
                else:
                    groups = _grow_rows(node, ctx, graph, pools, cols, free_v, *givers.slots_and_rank(node.name), max_candidates - 1)
                both = balanced.get(node.name)
                if both:  # first: the round robin over the groups hands its leftover to the first ones
                    groups = [both, *groups] if cols is None else [(np.stack([cols.vector(a) for _, a in both]),
                                                                     [n for n, _ in both]), *groups]
        if cols is None:
            raw.append((node, ctx, _select(groups, node.gpus_by_node(), max_candidates - 1)))
        else:
            raw.append((node, ctx, _select_rows(groups, cols.current(node), max_candidates - 1)))
    # current pipeline throughput, for the migration cost
    cur = []
    for node, ctx, _ in raw:
        by_type: dict[str, int] = {}
        for p, v in node.gpus_by_node().items():
            by_type[pools[p].gpu_type] = by_type.get(pools[p].gpu_type, 0) + v
        missing = [t for t in by_type if t not in ctx.curves]
        if missing:
            raise ValueError(f"component {node.name} runs on {', '.join(missing)} but has no throughput curve for it")
        cur.append(sum(ctx.curves[t](g) for t, g in sorted(by_type.items())))
    t_now = min((v for v, (_, ctx, _) in zip(cur, raw) if ctx.pipeline), default=0.0)
    if finished:
        horizon = 0.0  # no work left: no time over which to spread a migration (none is made)
    elif context.horizon_s is not None:
        horizon = max(1e-6, context.horizon_s)
    else:
        horizon = 1.0 / t_now if t_now > 0 else 60.0
    stages: list[Stage] = []
    matrices: list[np.ndarray] = []
    for node, ctx, named in raw:
        current = node.gpus_by_node()
        why_keep = "current allocation" if node.interruptible else "current allocation (not at an interruptible point: cannot move now)"
        cands = [Candidate("keep", dict(current), cause=why_keep)]
        planner = (MigrationPlanner(node.name, node.kind, ctx, current, node.workers, pools, context.links, links)
                   if (named if cols is None else named[0]) else None)
        before = _capacity(ctx, pools, [current])[0]
        if cols is None:
            for name, alloc in named:
                assert planner is not None  # built whenever there are candidates
                mp = planner.plan(alloc)
                lost = charged_seconds([mp.kind], [mp.duration_s], [before], _capacity(ctx, pools, [alloc]),
                                       [any(v > current.get(p, 0) for p, v in alloc.items())],
                                       [any(v > alloc.get(p, 0) for p, v in current.items())], context.links)
                cands.append(Candidate(name, alloc, mp.duration_s, mp.bytes_moved, float(t_now * lost[0] / horizon), mp.kind,
                                       mp.moves, mp.cause))
        else:
            names, chosen = named
            rows = np.vstack([cols.current(node)[None, :], chosen])
            matrices.append(rows)
            if names:
                assert planner is not None  # built whenever there are candidates
                kinds, seconds, nbytes, causes = planner.costs(rows[1:])
                new = rows[1:]
                after = _capacity_rows(ctx, cols, new)
                cur_row = rows[0][None, :]
                lost = charged_seconds(kinds, seconds, np.full(len(new), before), after, (new > cur_row).any(axis=1),
                                       (new < cur_row).any(axis=1), context.links)
                cost = t_now * lost / horizon
                for i, name in enumerate(names):
                    lazy = LazyAlloc(rows[i + 1], cols.names)
                    cands.append(Candidate(name, lazy, float(seconds[i]), float(nbytes[i]), float(cost[i]), kinds[i],
                                           LazyMoves(partial(_plan_moves, planner, lazy)), causes[i]))
        stages.append(Stage(node.name, node.kind, node.dynamic, node.interruptible, dict(ctx.curves), cands,
                            unit_gpus=max(1, ctx.unit_gpus), single_type=node.kind in SYNCHRONOUS_KINDS, donor=node.name in donors,
                            pipeline=ctx.pipeline, curve_source=ctx.curve_source))
    inst = ReallocInstance(list(context.pools), stages, margin=margin, horizon_s=horizon, job=graph.job, time_s=graph.time_s,
                           notes=list(context.notes), unit=context.unit, finished=finished, validated=False)
    if cols is not None:
        inst._arrays = Arrays.of(inst, matrices)  # the rows the candidates were made from
    inst.validated = True
    inst.validate()
    return inst
