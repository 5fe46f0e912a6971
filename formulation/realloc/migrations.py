"""Migration kind and steps for one component moving from its current allocation to a candidate.

Kinds (DynaRL §5):

* **Workload** — stateless engines (rollout, reference/log-prob inference, reward, tool agent).
  Removed engines are drained: their pending and in-flight requests are handed to kept engines,
  the cached KV moving with them (``kv_used_tokens x kv_bytes_per_token`` bytes) so no request is
  re-prefilled; this takes ``handoff_s`` plus the transfer. Added engines start
  (``restart_s``) and pull the weights from a peer engine of the component (``weight_bytes`` per
  engine over the best link: NVLink on the same node, else the NIC, else the inter-cluster link).
  Engines start in parallel, so a step's duration is one engine's, its bytes are all engines'.
* **P2P** — stateful ranks (trainer, critic). New ranks are created first, the parameters go to
  new data-parallel replicas (``weight_bytes`` each), the sharded optimizer state is resharded
  from ``N`` to ``M`` replicas peer-to-peer (the fraction that changes owner under contiguous
  1-D sharding, :func:`moved_fraction`), groups are rebuilt, then the old ranks are destroyed.
  Duration ``restart_s`` (if ranks are added) + transfer over the slowest link used + ``group_rebuild_s``.
* **Reboot** — the fallback: when the component's framework cannot reshard live (``p2p`` false)
  or no direct network path joins the old and the new GPUs (different clusters without an
  inter-cluster link). Save the state to storage, stop, restart on the new GPUs, load:
  ``2 x state / storage_gb_per_s + restart_s + group_rebuild_s``.

The cost a candidate carries into the objective is computed by the caller from the duration.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from formulation.realloc.context import ComponentContext, Links
from formulation.realloc.graph import STATEFUL_KINDS
from formulation.realloc.instance import Move, Pool

GB = 1e9


@lru_cache(maxsize=4096)
def moved_fraction(n_old: int, n_new: int) -> float:
    """Share of a 1-D contiguously sharded state that changes owner going from ``n_old`` to ``n_new`` shards.

    Shard ``i`` holds ``[i/n, (i+1)/n)``; rank ``i`` exists in both layouts for ``i < min(n_old, n_new)``
    and keeps the overlap of its two ranges.
    """
    if n_old <= 0 or n_new <= 0:
        return 1.0
    if n_old == n_new:
        return 0.0
    kept = 0.0
    for i in range(min(n_old, n_new)):
        lo = max(i / n_old, i / n_new)
        hi = min((i + 1) / n_old, (i + 1) / n_new)
        kept += max(0.0, hi - lo)
    return max(0.0, 1.0 - kept)


@dataclass(frozen=True)
class MigrationPlan:
    kind: str
    moves: tuple
    duration_s: float
    bytes_moved: float
    cause: str


class _Sources:
    """The best link from any of ``sources`` to a destination pool, in O(1) per query.

    Same node: NVLink; same cluster: the NIC, best from the source type with the fastest NIC;
    another cluster: that NIC capped by the inter-cluster link (None when there is none).
    """

    def __init__(self, sources: list[Pool], links: Links) -> None:
        self.links = links
        self._memo: dict = {}
        self.names = {p.name: p for p in sources}
        self.by_cluster: dict[str, Pool] = {}
        self.fastest: Optional[Pool] = None
        nic = links.nic_gb_per_s
        for p in sources:
            cur = self.by_cluster.get(p.cluster)
            if cur is None or nic.get(p.gpu_type, 50.0) > nic.get(cur.gpu_type, 50.0):
                self.by_cluster[p.cluster] = p
            if self.fastest is None or nic.get(p.gpu_type, 50.0) > nic.get(self.fastest.gpu_type, 50.0):
                self.fastest = p

    def reaches(self, dst: Pool) -> bool:
        return dst.name in self.names or dst.cluster in self.by_cluster or (
            self.fastest is not None and self.links.inter_cluster_gb_per_s is not None)

    def best(self, dst: Pool) -> tuple[Optional[Pool], Optional[float]]:
        hit = self._memo.get(dst.name)
        if hit is None:
            hit = self._memo[dst.name] = self._best(dst)
        return hit

    def _best(self, dst: Pool) -> tuple[Optional[Pool], Optional[float]]:
        options = [self.names.get(dst.name), self.by_cluster.get(dst.cluster), self.fastest]
        best, best_bw = None, None
        for p in options:
            if p is None:
                continue
            bw = self.links.bandwidth(p, dst)
            if bw is not None and (best_bw is None or bw > best_bw):
                best, best_bw = p, bw
        return best, best_bw


def drain_order(workers: list, pool: str) -> list:
    """The component's workers on ``pool`` in the order they are released: emptiest caches first."""
    return sorted((w for w in workers if w.node == pool), key=lambda w: (w.kv_used_tokens, w.worker_id))


def drain_orders(workers: list) -> dict:
    """:func:`drain_order` for every pool the workers sit on."""
    out: dict = {}
    for w in workers:
        out.setdefault(w.node, []).append(w)
    return {p: sorted(ws, key=lambda w: (w.kv_used_tokens, w.worker_id)) for p, ws in out.items()}


def _drained_workers(on_pool: list, gpus: int) -> tuple[list[str], float]:
    """The first engines of ``on_pool`` (in drain order) that release ``gpus`` GPUs."""
    out, freed, tokens = [], 0, 0.0
    for w in on_pool:
        if freed >= gpus:
            break
        out.append(w.worker_id)
        freed += w.gpus
        tokens += w.kv_used_tokens
    return out, tokens


def _kind(kind: str, ctx: ComponentContext, reachable: bool) -> tuple[str, str]:
    if kind in STATEFUL_KINDS:
        if not ctx.p2p:
            return "reboot", "the trainer framework cannot reshard live (p2p disabled)"
        if not reachable:
            return "reboot", "no direct network path between the old and the new GPUs (different clusters, no inter-cluster link)"
        return "p2p", "stateful ranks: reshard parameters and optimizer state peer-to-peer"
    if not reachable:
        return "reboot", "no direct network path to a peer engine: engines restart and load weights from storage"
    return "workload", "stateless engines: drain and hand requests over with their caches"


class MigrationPlanner:
    """Plans the migrations of one component from its current allocation to many targets,
    sharing the link lookups and drain orders between them."""

    def __init__(self, component: str, kind: str, ctx: ComponentContext, current: dict, workers: list, pools: dict,
                 links: Links) -> None:
        self.args = (component, kind, ctx, current, workers, pools, links)
        self.old = _Sources([pools[p] for p, v in current.items() if v > 0], links)
        self.drain = drain_orders(workers)

    def plan(self, target: dict) -> MigrationPlan:
        component, kind, ctx, current, workers, pools, links = self.args
        return plan_migration(component, kind, ctx, current, target, workers, pools, links, self.drain, self.old)


def plan_migration(component: str, kind: str, ctx: ComponentContext, current: dict, target: dict, workers: list,
                   pools: dict, links: Links, drain: Optional[dict] = None, old: Optional[_Sources] = None) -> MigrationPlan:
    """Steps that take ``component`` from ``current`` to ``target`` (pool name -> GPUs).

    ``drain`` and ``old``: the drain orders of ``workers`` and the link index of the current
    pools, when the caller has them already (:class:`MigrationPlanner`).
    """
    changed = sorted(p for p in set(current) | set(target) if current.get(p, 0) != target.get(p, 0))
    if not changed:
        return MigrationPlan("none", (), 0.0, 0.0, "keeps its allocation")
    old = old if old is not None else _Sources([pools[p] for p, v in current.items() if v > 0], links)
    added = [p for p in changed if target.get(p, 0) > current.get(p, 0)]
    reachable = all(old.reaches(pools[p]) for p in added)
    mkind, why = _kind(kind, ctx, reachable)
    if mkind == "p2p":
        return _p2p(component, ctx, current, target, changed, old, pools, links, why)
    if mkind == "reboot":
        return _reboot(component, ctx, current, target, changed, links, why)
    kept = [pools[p] for p in current if min(current.get(p, 0), target.get(p, 0)) > 0]
    return _workload(ctx, current, target, changed, drain if drain is not None else drain_orders(workers), old, kept, pools,
                     links, why)


def _workload(ctx, current, target, changed, drain, old, kept_pools, pools, links, why) -> MigrationPlan:
    unit = max(1, ctx.unit_gpus)
    kept_src = _Sources(kept_pools, links) if kept_pools else old
    moves = []
    for p in changed:
        a, b = current.get(p, 0), target.get(p, 0)
        pool = pools[p]
        if b < a:
            drained, tokens = _drained_workers(drain.get(p, []), a - b)
            nbytes = tokens * ctx.kv_bytes_per_token
            # the requests go to a kept engine: on this node if one stays here, else the best other
            if b > 0:
                bw = links.bandwidth(pool, pool)
            else:
                _, bw = kept_src.best(pool)
            t = links.handoff_s + (nbytes / (bw * GB) if bw and nbytes else 0.0)
            moves.append(Move("workload", p, a, b, t, nbytes,
                              f"drain {len(drained)} engine(s) ({', '.join(drained)}): hand {tokens:,.0f} cached tokens to kept engines"))
        else:
            engines = (b - a) // unit
            src, bw = old.best(pool)
            per_engine = ctx.weight_bytes
            t = links.restart_s + (per_engine / (bw * GB * unit) if bw else 0.0)
            moves.append(Move("workload", p, a, b, t, per_engine * engines,
                              f"start {engines} engine(s) of {unit} GPU(s) on {p}; weights from {src.name if src else 'storage'}"))
    # drains first (they free the GPUs), then starts: the executor's create-before-destroy is per component
    moves.sort(key=lambda m: (m.gpus_to > m.gpus_from, m.pool))
    return MigrationPlan("workload", tuple(moves), max(m.duration_s for m in moves), sum(m.bytes_moved for m in moves), why)


def _p2p(component, ctx, current, target, changed, old, pools, links, why) -> MigrationPlan:
    unit = max(1, ctx.unit_gpus)
    n_old = sum(current.values()) // unit
    n_new = sum(target.values()) // unit
    frac = moved_fraction(n_old, n_new)
    state = ctx.sharded_state_bytes * frac
    weights = ctx.weight_bytes * max(0, n_new - n_old)
    total = state + weights
    bws = []
    for p in changed:
        _, bw = old.best(pools[p])
        if bw is not None:
            bws.append(bw)
    bw = min(bws) if bws else None
    streams = max(1, min(sum(current.values()), sum(target.values())))
    transfer = total / (bw * GB * streams) if bw and total else 0.0
    t = (links.restart_s if n_new > n_old or any(target.get(p, 0) > current.get(p, 0) for p in changed) else 0.0) \
        + transfer + links.group_rebuild_s
    cause = f"reshard from {n_old} to {n_new} replica(s) of {unit} GPU(s): {frac:.0%} of the sharded state changes owner"
    moves = []
    gpus_changed = sum(abs(target.get(p, 0) - current.get(p, 0)) for p in changed) or 1
    for p in changed:
        share = abs(target.get(p, 0) - current.get(p, 0)) / gpus_changed
        moves.append(Move("p2p", p, current.get(p, 0), target.get(p, 0), t, total * share, cause))
    moves.sort(key=lambda m: (m.gpus_to < m.gpus_from, m.pool))  # create new ranks before destroying old ones
    return MigrationPlan("p2p", tuple(moves), t, total, why)


def _reboot(component, ctx, current, target, changed, links, why) -> MigrationPlan:
    state = ctx.weight_bytes + ctx.sharded_state_bytes
    nodes = max(1, len([p for p, v in target.items() if v > 0]))
    io = 2.0 * state / (links.storage_gb_per_s * GB * nodes)
    t = io + links.restart_s + links.group_rebuild_s
    moves = tuple(Move("reboot", p, current.get(p, 0), target.get(p, 0), t, 2.0 * state if i == 0 else 0.0,
                       f"save {state / GB:.1f} GB to storage, restart on the new GPUs, load it back") for i, p in enumerate(changed))
    return MigrationPlan("reboot", moves, t, 2.0 * state, why)


def order_moves(moves: list, capacity: dict, used: dict) -> list:
    """Order ``(component, Move)`` pairs so that no node is ever over capacity.

    Create before destroy where capacity allows: at each point run every step that adds GPUs and
    fits what is free now; when none fits, release GPUs — first from components with nothing left
    to add (donors), then the others. ``capacity`` and ``used`` are GPUs per pool before any step.
    Raises ValueError when the steps cannot be ordered (the allocation does not fit).
    """
    free = {p: capacity[p] - used.get(p, 0) for p in capacity}
    pending = list(moves)
    out = []
    while pending:
        grow = next((cm for cm in pending if cm[1].gpus_to > cm[1].gpus_from
                     and cm[1].gpus_to - cm[1].gpus_from <= free.get(cm[1].pool, 0)), None)
        if grow is None:
            still_growing = {c for c, m in pending if m.gpus_to > m.gpus_from}
            shrinks = [cm for cm in pending if cm[1].gpus_to <= cm[1].gpus_from]
            if not shrinks:
                raise ValueError("migration steps cannot be ordered within node capacity: "
                                 + ", ".join(f"{c} on {m.pool} +{m.gpus_to - m.gpus_from}" for c, m in pending))
            grow = min(shrinks, key=lambda cm: (cm[0] in still_growing, pending.index(cm)))
        pending.remove(grow)
        free[grow[1].pool] = free.get(grow[1].pool, 0) - (grow[1].gpus_to - grow[1].gpus_from)
        out.append(grow)
    return out
