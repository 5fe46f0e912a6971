"""Migration kind and steps for one component moving from its current allocation to a candidate.

Kinds (DynaRL §5):

* **Workload** — stateless engines (rollout, reference/log-prob inference, reward, tool agent).
  Removed engines are drained: their pending and in-flight requests are handed to kept engines,
  the cached KV moving with them (``kv_used_tokens x kv_bytes_per_token`` bytes) so no request is
  re-prefilled; this takes ``handoff_s`` plus the transfer. Added engines start
  (``restart_s``) and pull the weights from a peer engine of the component (``weight_bytes`` per
  engine over the best link: NVLink on the same node, else the NIC, else the inter-cluster link),
  or, when the component parks engines on the GPUs it lends (``parked_start_s``: sleep mode, weights
  in host DRAM), wake one in ``parked_start_s`` with no network transfer.
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

The cost a candidate carries into the objective is computed by the caller from
:func:`charged_seconds`: the seconds of the component's current throughput the migration costs,
which is less than its duration when it creates before it destroys.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import Optional

import numpy as np

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


def moved_fractions(n_old: int, n_new: np.ndarray) -> np.ndarray:
    """:func:`moved_fraction` for many ``n_new`` at once (the same arithmetic, the overlaps added
    in rank order)."""
    n_new = np.asarray(n_new, dtype=np.int64)
    out = np.ones(len(n_new))
    ok = (n_new > 0) & (n_new != n_old)
    if n_old <= 0 or not ok.any():
        out[n_new == n_old] = 0.0 if n_old > 0 else 1.0
        return out
    m = n_new[ok]
    i = np.arange(int(min(n_old, m.max())))[None, :]
    lo = np.maximum(i / n_old, i / m[:, None])
    hi = np.minimum((i + 1) / n_old, (i + 1) / m[:, None])
    overlap = np.where(i < np.minimum(n_old, m)[:, None], np.maximum(0.0, hi - lo), 0.0)
    kept = np.add.accumulate(overlap, axis=1)[:, -1] if overlap.shape[1] else np.zeros(len(m))
    out[ok] = np.maximum(0.0, 1.0 - kept)
    out[n_new == n_old] = 0.0
    return out


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


class LinkTable:
    """The links of every pool (columns in ``pools`` order), and :meth:`_Sources.best` for many
    source sets at once: the best bandwidth into each pool from the pools marked in each row —
    the pool itself (NVLink), else the fastest NIC of its cluster, else the fastest NIC anywhere
    capped by the inter-cluster link (NaN: no path). Identical to ``_Sources`` when no GPU type's
    NVLink is slower than its NIC (``exact``); :meth:`MigrationPlanner.costs` falls back to
    one plan per target otherwise."""

    def __init__(self, pools: dict, links: Links) -> None:
        plist = list(pools.values())
        self.inter = links.inter_cluster_gb_per_s
        self.nic = np.array([float(links.nic_gb_per_s.get(p.gpu_type, 50.0)) for p in plist])
        self.nvlink = np.array([links.bandwidth(p, p) for p in plist], dtype=float)
        clusters = sorted({p.cluster for p in plist})
        index = {c: i for i, c in enumerate(clusters)}
        self.cluster = np.array([index[p.cluster] for p in plist], dtype=np.int64)
        self.n_clusters = len(clusters)
        self.name_rank = np.empty(len(plist), dtype=np.int64)
        self.name_rank[np.argsort(np.array([p.name for p in plist]), kind="stable")] = np.arange(len(plist))
        self.exact = bool((self.nvlink >= self.nic).all())

    def best(self, src: np.ndarray, cols: Optional[np.ndarray] = None) -> np.ndarray:
        """``src``: rows of sources over the pools ``cols`` (all pools when None); the best
        bandwidth into each of those pools."""
        nic, nvlink, cluster = (self.nic, self.nvlink, self.cluster) if cols is None else \
            (self.nic[cols], self.nvlink[cols], self.cluster[cols])
        kn = np.where(src, nic, -np.inf)
        out = np.where(src, nvlink, -np.inf)
        if self.inter is not None:
            top = kn.max(axis=1)[:, None]
            out = np.maximum(out, np.where(top > -np.inf, np.minimum(np.minimum(top, nic), self.inter), -np.inf))
        for c in range(self.n_clusters):
            here = cluster == c
            if not here.any():
                continue
            top = kn[:, here].max(axis=1)[:, None]
            out[:, here] = np.maximum(out[:, here], np.where(top > -np.inf, np.minimum(top, nic[here]), -np.inf))
        return np.where(out > -np.inf, out, np.nan)


def drain_order(workers: list, pool: str) -> list:
    """The component's workers on ``pool`` in the order they are released: emptiest caches first."""
    return sorted((w for w in workers if w.node == pool), key=lambda w: (w.kv_used_tokens, w.worker_id))


def drain_orders(workers: list) -> dict:
    """:func:`drain_order` for every pool the workers sit on."""
    out: dict = {}
    for w in sorted(workers, key=attrgetter("node", "kv_used_tokens", "worker_id")):
        out.setdefault(w.node, []).append(w)
    return out


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
    sharing the link lookups and drain orders between them.

    :meth:`plan` gives one target's full plan (steps included); :meth:`costs` gives many targets'
    kind, duration, bytes and cause at once (numpy, the same arithmetic as :meth:`plan`, checked
    against it in the tests), which is all the objective needs: the candidate generator plans the
    steps of a candidate only when they are read.
    """

    def __init__(self, component: str, kind: str, ctx: ComponentContext, current: dict, workers: list, pools: dict,
                 links: Links, links_table: Optional["LinkTable"] = None) -> None:
        self.args = (component, kind, ctx, current, workers, pools, links)
        self.old = _Sources([pools[p] for p, v in current.items() if v > 0], links)
        self.drain = drain_orders(workers)
        self.links_table = links_table  # shared by the planners of one decision (built on first use otherwise)
        self._vec: Optional[dict] = None

    def plan(self, target: dict) -> MigrationPlan:
        component, kind, ctx, current, workers, pools, links = self.args
        return plan_migration(component, kind, ctx, current, target, workers, pools, links, self.drain, self.old)

    # ----------------------------------------------------------------------- vectorised costs
    def _links_table(self) -> "LinkTable":
        """The links table (shared, or built here on first use)."""
        if self.links_table is None:
            _, _, _, _, _, pools, links = self.args
            self.links_table = LinkTable(pools, links)
        return self.links_table

    def _tables(self) -> dict:
        """Per pool (columns in ``pools`` order) numbers :meth:`costs` looks up."""
        if self._vec is None:
            _, _, ctx, current, _, pools, links = self.args
            table = self._links_table()
            names = list(pools)
            col = {p: i for i, p in enumerate(names)}
            cur = np.zeros(len(names), dtype=np.int64)
            for p, g in current.items():
                cur[col[p]] = g
            old_bw = table.best(cur[None, :] > 0)[0]
            # KV tokens handed over when d GPUs leave pool p: the first engines in drain order that
            # free d (per pool, engines in drain order in the columns, zero-padded: running sums stay flat)
            depth = int(cur.max(initial=0))
            width = max((len(on) for on in self.drain.values()), default=0)
            gpus = np.zeros((len(names), width + 1), dtype=np.int64)
            kv = np.zeros((len(names), width + 1))
            for p, on in self.drain.items():
                i = col[p]
                gpus[i, 1: len(on) + 1] = [w.gpus for w in on]
                kv[i, 1: len(on) + 1] = [w.kv_used_tokens for w in on]
            freed = np.cumsum(gpus, axis=1)
            tok = np.add.accumulate(kv, axis=1)  # in drain order, as the plan adds them up
            first = (freed[:, :, None] >= np.arange(depth + 1)[None, None, :]).argmax(axis=1)  # pools x d
            tokens = np.take_along_axis(tok, first, axis=1)
            self._vec = dict(cur=cur, old_bw=old_bw, reach=~np.isnan(old_bw), tokens=tokens)
        return self._vec

    def costs(self, targets: np.ndarray) -> tuple[list, np.ndarray, np.ndarray, list]:
        """Kind, duration (s), bytes and cause of the migration to every row of ``targets``
        (GPUs per pool, columns in ``pools`` order), as :meth:`plan` would give them."""
        _, kind, ctx, _, _, pools, links = self.args
        v = self._tables()
        T = np.asarray(targets, dtype=np.int64)
        if not self._links_table().exact:
            names = list(pools)
            plans = [self.plan({names[i]: int(row[i]) for i in np.flatnonzero(row)}) for row in T]
            return ([m.kind for m in plans], np.array([m.duration_s for m in plans]), np.array([m.bytes_moved for m in plans]),
                    [m.cause for m in plans])
        # only the pools the component holds or any target uses matter: the others change nothing
        act = np.nonzero((v["cur"] > 0) | T.any(axis=0))[0]
        T = T[:, act]
        va = {k: v[k][act] for k in ("cur", "old_bw", "reach", "tokens")}
        va["act"] = act
        n = T.shape[0]
        delta = T - va["cur"]
        changed = delta != 0
        added = delta > 0
        reachable = ~(added & ~va["reach"]).any(axis=1)
        kinds = np.empty(n, dtype=object)
        causes = np.empty(n, dtype=object)
        for ok in (True, False):
            k, why = _kind(kind, ctx, ok)
            kinds[reachable == ok] = k
            causes[reachable == ok] = why
        none = ~changed.any(axis=1)
        kinds[none] = "none"
        causes[none] = "keeps its allocation"
        duration = np.zeros(n)
        nbytes = np.zeros(n)
        for k, fn in (("workload", self._workload_costs), ("p2p", self._p2p_costs), ("reboot", self._reboot_costs)):
            rows = np.nonzero(kinds == k)[0]
            if len(rows):
                duration[rows], nbytes[rows] = fn(T[rows], ctx, links, va, self._links_table())
        return kinds.tolist(), duration, nbytes, causes.tolist()

    @staticmethod
    def _workload_costs(T, ctx, links, v, lt: LinkTable) -> tuple[np.ndarray, np.ndarray]:
        unit = max(1, ctx.unit_gpus)
        cur, act = v["cur"], v["act"]
        grow, shrink = T > cur, T < cur
        # starts: restart plus one engine's weights over the best link from the current pools
        old_bw = v["old_bw"]
        has = ~np.isnan(old_bw) & (old_bw != 0)
        if ctx.parked_start_s is not None:  # wake a parked engine: weights from host DRAM
            t_start = np.full(len(cur), float(ctx.parked_start_s))
        else:
            t_start = links.restart_s + np.where(has, ctx.weight_bytes / (np.where(has, old_bw, 1.0) * GB * unit), 0.0)
        t = np.where(grow, t_start, -np.inf)
        b_start = np.where(grow, (0.0 if ctx.parked_start_s is not None else ctx.weight_bytes) * ((T - cur) // unit), 0.0)
        order = np.argsort(lt.name_rank[act])  # steps by pool name
        b_drain = np.zeros(T.shape)
        drains = np.nonzero(shrink.any(axis=1))[0]
        if len(drains):
            # drains: hand the drained engines' KV over, on the node if some engine stays, else to
            # the best kept node (to the best current one when none is kept)
            Td, sd = T[drains], shrink[drains]
            b = v["tokens"][np.arange(len(cur))[None, :], np.where(sd, cur - Td, 0)] * ctx.kv_bytes_per_token
            kept = (Td > 0) & (cur > 0)
            gone = sd & (Td == 0)
            bw = np.where(Td > 0, lt.nvlink[act], old_bw)
            far = np.nonzero(gone.any(axis=1) & kept.any(axis=1))[0]
            if len(far):
                bw[far] = np.where(Td[far] > 0, bw[far], lt.best(kept[far], act))
            ok = ~np.isnan(bw) & (bw != 0) & (b != 0)
            t_drain = links.handoff_s + np.where(ok, b / (np.where(ok, bw, 1.0) * GB), 0.0)
            t[drains] = np.where(sd, t_drain, t[drains])
            b_drain[drains] = np.where(sd, b, 0.0)
        # bytes added in step order: drains, then starts, each by pool name
        steps = np.concatenate([b_drain[:, order], b_start[:, order]], axis=1)
        total = np.add.accumulate(steps, axis=1)[:, -1] if steps.shape[1] else np.zeros(T.shape[0])
        return t.max(axis=1), total

    @staticmethod
    def _p2p_costs(T, ctx, links, v, lt: LinkTable) -> tuple[np.ndarray, np.ndarray]:
        unit = max(1, ctx.unit_gpus)
        cur = v["cur"]
        n_old = int(cur.sum()) // unit
        size = T.sum(axis=1)
        n_new = size // unit
        frac = moved_fractions(n_old, n_new)
        total = ctx.sharded_state_bytes * frac + ctx.weight_bytes * np.maximum(0, n_new - n_old)
        changed = T != cur
        old_bw = v["old_bw"]
        bw = np.where(changed & ~np.isnan(old_bw), old_bw, np.inf).min(axis=1)  # the slowest link used (inf: none)
        streams = np.maximum(1, np.minimum(int(cur.sum()), size))
        ok = np.isfinite(bw) & (bw != 0) & (total != 0)
        transfer = np.where(ok, total / (np.where(ok, bw, 1.0) * GB * streams), 0.0)
        starts = (n_new > n_old) | (T > cur).any(axis=1)
        return np.where(starts, links.restart_s, 0.0) + transfer + links.group_rebuild_s, total

    @staticmethod
    def _reboot_costs(T, ctx, links, v, lt: LinkTable) -> tuple[np.ndarray, np.ndarray]:
        state = ctx.weight_bytes + ctx.sharded_state_bytes
        nodes = np.maximum(1, (T > 0).sum(axis=1))
        io = 2.0 * state / (links.storage_gb_per_s * GB * nodes)
        return io + links.restart_s + links.group_rebuild_s, np.full(T.shape[0], 2.0 * state)


def charged_seconds(kinds, seconds, before, after, grows, shrinks, links: Links) -> np.ndarray:
    """Seconds of a component's current throughput each migration costs (element-wise).

    Create before destroy: while new engines or ranks start, the old ones keep working (the
    simulator's model, and DynaRL's P2P and Workload migrations), so a migration that adds capacity
    (``after`` > ``before``, the component's throughput before and after) loses only the share of
    the new capacity not there yet, ``1 - before / after``, for its start-up, plus the pause that
    switches over: P2P's group rebuild, or Workload's hand-off when it also drains engines.
    Everything else loses its whole duration: a drain (the drained requests wait for the hand-off),
    a P2P shrink (the trainer reshards onto the kept ranks before it goes on), a Reboot (it stops).
    """
    k = np.asarray(kinds, dtype=object)
    d = np.asarray(seconds, dtype=float)
    b = np.asarray(before, dtype=float)
    a = np.asarray(after, dtype=float)
    g, sh = np.asarray(grows, dtype=bool), np.asarray(shrinks, dtype=bool)
    pause = np.where(k == "p2p", links.group_rebuild_s, np.where(sh, links.handoff_s, 0.0))
    pause = np.minimum(pause, d)
    gain = (k != "reboot") & (k != "none") & g & (a > b) & (a > 0)
    share = np.where(gain, 1.0 - b / np.where(gain, a, 1.0), 1.0)
    return np.where(gain, pause + (d - pause) * share, d)


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
        elif ctx.parked_start_s is not None:
            engines = (b - a) // unit
            moves.append(Move("workload", p, a, b, float(ctx.parked_start_s), 0.0,
                              f"wake {engines} parked engine(s) of {unit} GPU(s) on {p}; weights from host DRAM"))
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
