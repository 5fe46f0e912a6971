"""Groups in closed form: pool configurations, per-configuration job arrays, feasibility, cost.

A *configuration* ``k = (p, n_R, q, n_T)`` is a rollout pool of ``n_R`` nodes of type ``p`` and a
training pool of ``n_T`` nodes of type ``q``; it costs ``c_k = n_R g_p price_p + n_T g_q price_q``
dollars per hour (``g`` GPUs per node). For every configuration and job this module holds
``a[k, j]`` (the job's arc on a shared rollout ring: rollout seconds on the pool plus its warm
switch ``min(sigma_r, b + s)``), ``bs[k, j]`` (on a shared training ring: training plus weight-sync
seconds, the occupancy of the training pool, plus ``min(sigma_t, a)``; see
:mod:`formulation.placement.cycle`), ``tot`` (the job's own cycle, rollout + training + sync,
without switches; ``a`` and ``bs`` never exceed it, so a lone member's cycle is ``tot``) and
``ok[k, j]`` (the job may use ``k`` and fits it alone: its tables have the pool sizes, its solo
cycle is within its SLO, its DRAM fits a node). A set ``S`` of jobs is a feasible group on ``k``
when every ``ok[k, j]`` holds and

* SLO: ``max(sum_S a, sum_S bs, max_S tot) <= min_S slo`` (the exact cycle time of members on the
  whole pools, switches included, :func:`formulation.placement.cycle.closed_form`);
* DRAM: ``sum_S dram_r <= D_p`` on every rollout node and ``sum_S state / n_T <= D_q`` on every
  training node.

Removing a member never breaks these, so a cover that places a job twice can drop the extra copy.

Members on rollout nodes of their own (``Config.members = m >= 1``)
--------------------------------------------------------------------
A *pinned* configuration ``k = (p, r, q, n_T, m)`` gives each of up to ``m`` members ``r`` rollout
nodes of type ``p`` of its own and shares one training pool of ``n_T`` nodes of type ``q`` among
them (the rollout pool is the ``m r`` nodes; ``c_k = m r g_p price_p + n_T g_q price_q``). No rollout
node is shared, so no rollout ring of length >= 2 and no rollout warm switch exists: the event
graph's only cycles through ``R_i`` are the member's own cycle and its self-loop (every arc into
``R_i`` comes from ``T_i`` or ``R_i``), and the period is exactly
``max(sum_S bs, max_S tot)`` (:mod:`formulation.placement.cycle`; the checker recomputes it by
Howard on the pins). The arrays hold ``a[k, j] = 0`` for these configurations, so the same closed
form ``max(sum a, sum bs, max tot)`` and every model written on it stay exact. Host DRAM on a
rollout node holds one member (``ok`` checks it against the node); the rollout-side knapsack row
of a pinned configuration counts members instead: weight 1 per member (:meth:`Index.rollout_w`)
against ``rollout_cap[k] = m``. A whole-pool group of one member and a pinned group of one member are
the same plan; ``m = 1`` configurations exist so that admission can extend a lone member's group
by giving the next member nodes of its own (Weave's pinning).

Members on rollout nodes of their own, each its own count (``Config.own``)
---------------------------------------------------------------------------
An *own-sized* configuration ``k = (p, R, q, n_T)`` has a rollout pool of ``R`` nodes of type ``p``
that its members share out: member ``j`` holds ``r_j(q, n_T)`` nodes of its own, the fewest of its
table's counts with ``rollout_j(p, r) + train_j(q, n_T) + sync_j <= slo_j`` (the arrays ``WO`` and
``RO`` hold that count and its rollout seconds; ``tot[k, j]`` is the job's cycle on them). As on the
pinned configurations no rollout node is shared, so ``a[k, j] = 0`` and the period is
``max(sum_S bs, max_S tot)``; the rollout-side knapsack row counts nodes: weight ``r_j`` against
``rollout_cap[k] = R`` (each count is at least 1, so at most ``R`` members). ``c_k`` is the price of
the ``R + n_T`` nodes; the cheapest ``k`` for a set of members is the one whose ``R`` is the sum of
their counts. A member never takes more than its own count here (a partner with a tighter SLO
does not make it grow): the equal-count configurations above keep that case for counts of 1-2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, Optional, Sequence

import numpy as np

from formulation.placement.instance import PlacementInstance

REL_TOL = 1e-9


#: pinned configurations exist for rollout nodes per member and training pools up to these sizes
#: (member counts 1 to ``pinned_members_max``): at 2,000 distinct jobs on four GPU types every size
#: made 5,184 configurations against 576 whole-pool ones (the index took 16 s instead of 1)
PINNED_MAX_ROLLOUT_NODES = 2
PINNED_MAX_TRAIN_NODES = 2
#: own-sized configurations (``Config.own``): rollout pools of up to this many nodes, training pools up to this size
OWN_MAX_ROLLOUT_NODES = 8
OWN_MAX_TRAIN_NODES = 8
#: ... on instances of at most this many jobs. More configurations slow column generation: measured side by side
#: (results/placement/own-sized.md) plans under a short limit were the same up to 24 jobs and up to 3-13% dearer on
#: some instances of 40-200 jobs (distinct 200 under 10 s: 3,956 against 3,496 $/h; the same under 30 s), and at
#: 2,000 jobs the fast path made 20-30% fewer moves. Beyond it the claim says they are left out
OWN_MAX_JOBS = 30
#: what every optimiser's "optimal" and every bound cover (docs/placement.md, "The model"): the plan space the
#: checker accepts is wider (an outside check, session 49: 168 $/h valid where every backend proved 240 with a
#: member on 3 rollout nodes of its own; 160 where they proved 200 with members on 1, 1 and 2 nodes)
MODELLED = (f"whole pools, pinned members on the same 1-{PINNED_MAX_ROLLOUT_NODES} rollout nodes of their own each "
            f"sharing 1-{PINNED_MAX_TRAIN_NODES} training nodes, and pinned members each on the fewest rollout nodes of "
            f"its own that meet its SLO (pools of up to {OWN_MAX_ROLLOUT_NODES} rollout and {OWN_MAX_TRAIN_NODES} "
            f"training nodes, on instances of up to {OWN_MAX_JOBS} jobs)")


def pinned_member_counts(most: int) -> tuple[int, ...]:
    """Member counts of the pinned configurations for ``pinned_members_max = most``."""
    return tuple(range(1, most + 1))


def within(x: float, limit: float) -> bool:
    return x <= limit * (1 + REL_TOL) + 1e-12


def ring_weights(a, bs, sw_r, sw_t):
    """A member's arcs on shared rings: ``(a + min(sigma_r, bs), bs + min(sigma_t, a))`` (arrays
    or floats; ``bs`` = training + sync). Capped at the other phase, so neither exceeds ``a + bs``
    and the closed form ``max(sum ring_a, sum ring_bs, max (a + bs))`` is exact for one member too."""
    return a + np.minimum(sw_r, bs), bs + np.minimum(sw_t, a)


class Config(NamedTuple):
    rollout_type: str
    rollout_nodes: int  # nodes a member's rollout runs on (the whole rollout pool when members == 0)
    train_type: str
    train_nodes: int
    members: int = 0  # 0: every member on the whole pools; m >= 1: up to m members, each on rollout nodes of its own
    own: bool = False  # pinned, each member on the fewest rollout nodes of its own that meet its SLO (the pool: rollout_nodes)

    @property
    def pinned(self) -> bool:
        return self.members > 0

    @property
    def rollout_pool_nodes(self) -> int:
        """Nodes of the rollout pool: ``rollout_nodes``, or ``members x rollout_nodes`` when pinned
        with equal counts (own-sized: ``rollout_nodes``, shared out by the members' own counts)."""
        return self.rollout_nodes if self.own else self.rollout_nodes * max(1, self.members)

    def label(self) -> str:
        if self.own:
            return f"{self.rollout_nodes}x{self.rollout_type}(own sizes)+{self.train_nodes}x{self.train_type}"
        if self.members:
            return f"{self.members}x({self.rollout_nodes}x{self.rollout_type})+{self.train_nodes}x{self.train_type}"
        return f"{self.rollout_nodes}x{self.rollout_type}+{self.train_nodes}x{self.train_type}"

    def whole(self) -> "Config":
        """The same pools as a whole-pool configuration (phase-time tables are keyed by it)."""
        return self._replace(members=0, own=False) if self.members else self


@dataclass(frozen=True)
class Group:
    """A group in solver-neutral form: a configuration index, member job indices in order."""

    config: int
    members: tuple[int, ...]
    anchor: Optional[str] = None  # id of the current-plan group whose nodes it keeps


class Index:
    """Configurations and per-configuration job arrays of one instance."""

    def __init__(self, inst: PlacementInstance, carry: Sequence[Config] = ()):
        """``carry``: own-sized configurations a plan in force uses, kept in the plan space even on an
        instance past ``OWN_MAX_JOBS`` jobs (which leaves own-sized ones out): a group made while fewer
        jobs ran stays representable when more arrive (the claim still says they are left out)."""
        self.inst = inst
        jobs = inst.jobs
        self.n = len(jobs)
        self.names = [j.name for j in jobs]
        self.slo = np.array([j.slo_s for j in jobs], dtype=float)
        self.dram_r = np.array([j.dram_rollout_node_gb for j in jobs], dtype=float)
        self.state_t = np.array([j.train_state_gb for j in jobs], dtype=float)
        self.types = sorted(inst.pool_types)
        self.capacity = {t: inst.pool_types[t].count for t in self.types}
        r_sizes: dict[str, set[int]] = {t: set() for t in self.types}
        t_sizes: dict[str, set[int]] = {t: set() for t in self.types}
        for j in jobs:
            for t, row in j.rollout_s.items():
                r_sizes[t].update(n for n in row if n <= self.capacity[t])
            for t, row in j.train_s.items():
                t_sizes[t].update(n for n in row if n <= self.capacity[t])
        configs = []
        for p in self.types:
            for nr in sorted(r_sizes[p]):
                for q in self.types:
                    for nt in sorted(t_sizes[q]):
                        if (p == q and nr + nt > self.capacity[p]):
                            continue
                        configs.append(Config(p, nr, q, nt))
        # pinned configurations: up to m members, each on nr rollout nodes of its own (small pools
        # only: PINNED_* above keep the configurations about 2x the whole-pool ones)
        counts = pinned_member_counts(inst.pinned_members_max)
        for p in self.types:
            for nr in sorted(n for n in r_sizes[p] if n <= PINNED_MAX_ROLLOUT_NODES):
                for q in self.types:
                    for nt in sorted(n for n in t_sizes[q] if n <= PINNED_MAX_TRAIN_NODES):
                        for m in counts:
                            if m * nr + (nt if p == q else 0) > self.capacity[p] or (p != q and nt > self.capacity[q]):
                                break
                            configs.append(Config(p, nr, q, nt, m))
        # own-sized configurations: a rollout pool of R nodes shared out among the members by their own
        # counts (each the fewest that meet its SLO; module docstring); the pools of R <= 2 nodes on
        # training pools of the sizes above are the equal-count configurations' already
        self.own_left_out = self.n if inst.pinned_members_max >= 1 and self.n > OWN_MAX_JOBS else 0  # (jobs: the claim says so)
        if inst.pinned_members_max >= 1 and not self.own_left_out:
            top = min(inst.pinned_members_max, OWN_MAX_ROLLOUT_NODES)
            for p in self.types:
                if not any(n <= OWN_MAX_ROLLOUT_NODES for n in r_sizes[p]):
                    continue
                for q in self.types:
                    for nt in sorted(n for n in t_sizes[q] if n <= OWN_MAX_TRAIN_NODES):
                        for big in range(1, top + 1):
                            if big + (nt if p == q else 0) > self.capacity[p] or (p != q and nt > self.capacity[q]):
                                break
                            if big <= PINNED_MAX_ROLLOUT_NODES and nt <= PINNED_MAX_TRAIN_NODES:
                                continue
                            configs.append(Config(p, big, q, nt, big, True))
        have = set(configs)
        for c in carry:
            if c.own and c not in have and c.rollout_type in self.capacity and c.train_type in self.capacity:
                configs.append(c)
                have.add(c)
        self.configs: list[Config] = configs
        self.pinned_m = np.array([c.members for c in configs], dtype=int)
        self.cost = np.array([self.config_cost(c) for c in configs], dtype=float)
        # per (type, size) rows of rollout / training seconds and per (type, type) rows of sync
        # seconds, filled once per job; the per-configuration arrays are gathered from them
        r_keys = sorted({(c.rollout_type, c.rollout_nodes) for c in configs if not c.own}
                        | {(c.rollout_type, n) for c in configs if c.own for n in r_sizes[c.rollout_type] if n <= OWN_MAX_ROLLOUT_NODES})
        t_keys = sorted({(c.train_type, c.train_nodes) for c in configs})
        r_row = {key: i for i, key in enumerate(r_keys)}
        t_row = {key: i for i, key in enumerate(t_keys)}
        pair_row = {(p, q): i for i, (p, q) in enumerate((p, q) for p in self.types for q in self.types)}
        R = np.full((len(r_keys), self.n), np.inf)
        T = np.full((len(t_keys), self.n), np.inf)
        S = np.zeros((len(pair_row), self.n))
        SR = np.zeros((len(r_keys), self.n))  # warm switches, per (type, size) like R and T
        ST = np.zeros((len(t_keys), self.n))
        for i, j in enumerate(jobs):
            for t, row in j.rollout_switch_s.items():
                for nodes, v in row.items():
                    r = r_row.get((t, nodes))
                    if r is not None:
                        SR[r, i] = v
            for t, row in j.train_switch_s.items():
                for nodes, v in row.items():
                    r = t_row.get((t, nodes))
                    if r is not None:
                        ST[r, i] = v
            for t, row in j.rollout_s.items():
                for nodes, v in row.items():
                    r = r_row.get((t, nodes))
                    if r is not None:
                        R[r, i] = v
            for t, row in j.train_s.items():
                for nodes, v in row.items():
                    r = t_row.get((t, nodes))
                    if r is not None:
                        T[r, i] = v
            for p, sync_row in j.sync_s.items():
                for q, sv in sync_row.items():
                    S[pair_row[(p, q)], i] = sv
        # own-sized rows, one per (rollout type, training type, training size): a job's rollout
        # seconds on its own count ``RO`` and that count ``WO`` (inf where no count meets its SLO)
        own_keys = sorted({(c.rollout_type, c.train_type, c.train_nodes) for c in configs if c.own})
        own_row = {key: i for i, key in enumerate(own_keys)}
        RO = np.full((len(own_keys), self.n), np.inf)
        WO = np.full((len(own_keys), self.n), np.inf)
        slo_lim = self.slo * (1 + REL_TOL) + 1e-12
        with np.errstate(invalid="ignore"):
            for (p, q, nt), i in own_row.items():
                rest = T[t_row[(q, nt)]] + S[pair_row[(p, q)]]
                for nr in sorted((n for (t, n) in r_keys if t == p and n <= OWN_MAX_ROLLOUT_NODES), reverse=True):
                    fits = R[r_row[(p, nr)]] + rest <= slo_lim  # the fewest nodes: smaller counts overwrite
                    RO[i] = np.where(fits, R[r_row[(p, nr)]], RO[i])
                    WO[i] = np.where(fits, float(nr), WO[i])
        # the (type, size) row of each own count (for the switch rows; the type's first row where none)
        OR = np.zeros((len(own_keys), self.n), dtype=np.intp)
        for (p, _q, _nt), i in own_row.items():
            for (t, nr), r_i in r_row.items():
                if t == p:
                    OR[i] = np.where(WO[i] == nr, r_i, OR[i])
        self.own_keys, self.RO, self.WO, self.OR = own_keys, RO, WO, OR
        self.own = np.array([c.own for c in configs], dtype=bool)
        self.k_own = np.array([own_row[(c.rollout_type, c.train_type, c.train_nodes)] if c.own else 0 for c in configs], dtype=int)
        # (``k_r`` of an own-sized configuration: the type's smallest row, never read for its times)
        first_r: dict[str, int] = {}
        for (t, n) in r_keys:
            first_r.setdefault(t, r_row[(t, n)])
        ri = np.array([first_r[c.rollout_type] if c.own else r_row[(c.rollout_type, c.rollout_nodes)] for c in configs], dtype=int)
        ti = np.array([t_row[(c.train_type, c.train_nodes)] for c in configs], dtype=int)
        si = np.array([pair_row[(c.rollout_type, c.train_type)] for c in configs], dtype=int)
        # kept for the fast path (:mod:`formulation.placement.fast`): rows and the gathers into them
        self.r_keys, self.t_keys, self.pair_row = r_keys, t_keys, pair_row
        self.R, self.T, self.S, self.SR, self.ST = R, T, S, SR, ST
        self.k_r, self.k_t, self.k_pair = ri, ti, si
        K = len(configs)
        pin = self.pinned_m > 0
        # the rollout-side knapsack row: host DRAM of a shared rollout node (whole pools) or member
        # slots (pinned: each member alone on its nodes, ``ok`` checks its DRAM against one node)
        self.node_dram_r = np.array([inst.pool_types[c.rollout_type].dram_gb for c in configs])
        self.dram_cap_r = np.where(pin, self.pinned_m, self.node_dram_r).astype(float) if K else np.zeros(0)
        self.rollout_cap = self.dram_cap_r
        self.dram_cap_t = np.array([inst.pool_types[c.train_type].dram_gb * c.train_nodes for c in configs])
        # ``ok`` now; ``a``, ``bs`` and ``tot`` on first use (:meth:`__getattr__`): an index that is
        # only restricted to the jobs that fit somewhere (:meth:`restrict`) never builds them
        self.ok = self._phase_arrays(keep=False)[3]
        self.config_id = {c: k for k, c in enumerate(configs)}

    _LAZY = ("a", "bs", "tot")

    def __getattr__(self, name: str):
        """``a``, ``bs`` and ``tot`` (configurations x jobs), built on first use from the
        per-(type, size) rows (:meth:`_phase_arrays`)."""
        if name in Index._LAZY and "R" in self.__dict__:
            self.a, self.bs, self.tot, _ = self._phase_arrays(keep=True)
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _phase_arrays(self, keep: bool = True):
        """``(a, bs, tot, ok)``, configurations x jobs, one configuration's row at a time from the
        per-(type, size) rows (:meth:`phase_rows`): the same numbers as whole-matrix expressions,
        without their configurations-x-jobs temporaries (a dozen of them, 87 MB each at 10,000 jobs:
        fresh pages the kernel zeroes, most of the index's time at fleet scale). ``keep=False``:
        ``ok`` only (the others are None); ``keep=True``: ``ok`` is None (the index has it)."""
        K, n = len(self.k_r), self.n
        if keep:
            a, bs, tot = np.empty((K, n)), np.empty((K, n)), np.empty((K, n))
            for _ in self.phase_rows(out=(a, bs, tot)):
                pass
            return a, bs, tot, None
        ok = np.empty((K, n), dtype=bool)
        slo_lim = self.slo * (1 + REL_TOL) + 1e-12
        dram_r_lim = self.node_dram_r * (1 + REL_TOL)
        state_lim = self.dram_cap_t * (1 + REL_TOL)
        R, T, S, ri, ti, si = self.R, self.T, self.S, self.k_r, self.k_t, self.k_pair
        own, ko = self.own, self.k_own
        tot_k = np.empty(n)
        with np.errstate(invalid="ignore"):
            for k in range(K):  # ``ok`` from tot (the ring weights do not enter it)
                np.add(T[ti[k]], S[si[k]], out=tot_k)
                tot_k += self.RO[ko[k]] if own[k] else R[ri[k]]
                ok_k = ok[k]
                np.less_equal(tot_k, slo_lim, out=ok_k)  # false where inf
                ok_k &= np.isfinite(tot_k)
                ok_k &= self.dram_r <= dram_r_lim[k]
                ok_k &= self.state_t <= state_lim[k]
                if own[k]:  # its own count fits the pool
                    ok_k &= self.WO[ko[k]] <= self.pinned_m[k]
        return None, None, None, ok

    def phase_rows(self, jobs: Optional[np.ndarray] = None, out=None):
        """Yield ``(k, a_k, bs_k, tot_k)`` for every configuration ``k``: the rows of ``a``, ``bs``
        and ``tot`` over ``jobs`` (default all), computed from the per-(type, size) rows.

        ``a`` = rollout, ``bs`` = training + sync, ``tot = a + bs``; with warm switches the ring
        weights (:func:`ring_weights`, the rollout switch only on shared rollout nodes); inf where
        the job has no time; pinned rows have no rollout ring (``a`` = 0). The rows are buffers
        reused from one configuration to the next (copy what you keep), or the rows of the
        matrices ``out = (a, bs, tot)``."""
        R, T, S, SR, ST, RO = self.R, self.T, self.S, self.SR, self.ST, self.RO
        if jobs is not None:
            R, T, S, SR, ST, RO = (x[:, jobs] for x in (R, T, S, SR, ST, RO))
        ri, ti, si, pin = self.k_r, self.k_t, self.k_pair, self.pinned_m > 0
        own, ko = self.own, self.k_own
        K, n = len(ri), R.shape[1]
        if out is None:
            bufs = (np.empty(n), np.empty(n), np.empty(n))
        switches = bool(K and (SR.any() or ST.any()))
        zero = np.zeros(n)
        with np.errstate(invalid="ignore"):
            for k in range(K):
                a_k, bs_k, tot_k = (o[k] for o in out) if out is not None else bufs
                np.copyto(a_k, RO[ko[k]] if own[k] else R[ri[k]])
                np.add(T[ti[k]], S[si[k]], out=bs_k)
                np.add(a_k, bs_k, out=tot_k)
                fin = np.isfinite(tot_k)
                if switches:
                    ring_a, ring_bs = ring_weights(a_k, bs_k, zero if pin[k] else SR[ri[k]], ST[ti[k]])
                    np.copyto(a_k, np.where(fin, ring_a, np.inf))
                    np.copyto(bs_k, np.where(fin, ring_bs, np.inf))
                else:
                    a_k[~fin] = np.inf
                    bs_k[~fin] = np.inf
                if pin[k]:  # no shared rollout node: no rollout ring, no rollout switch (module docstring)
                    np.copyto(a_k, np.where(fin, 0.0, np.inf))
                yield k, a_k, bs_k, tot_k

    def phases_at(self, k, j) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(a[k, j], bs[k, j], tot[k, j])`` for index arrays ``k`` and ``j`` (broadcast like numpy):
        read from the matrices when they are built, else computed for these pairs alone from the
        per-(type, size) rows with the same operations as :meth:`phase_rows` (the same numbers,
        bit for bit), without the configurations x jobs matrices (an admission against a few
        thousand groups needs a few thousand pairs of them)."""
        k, j = np.asarray(k), np.asarray(j)
        if "a" in self.__dict__:
            return self.a[k, j], self.bs[k, j], self.tot[k, j]
        ri, ti = self.k_r[k], self.k_t[k]
        pin = self.pinned_m[k] > 0
        with np.errstate(invalid="ignore"):
            a = self.R[ri, j]
            if len(self.RO):
                a = np.where(self.own[k], self.RO[self.k_own[k], j], a)
            bs = self.T[ti, j] + self.S[self.k_pair[k], j]
            tot = a + bs
            fin = np.isfinite(tot)
            if self.has_switches:
                ring_a, ring_bs = ring_weights(a, bs, np.where(pin, 0.0, self.SR[ri, j]), self.ST[ti, j])
                a, bs = np.where(fin, ring_a, np.inf), np.where(fin, ring_bs, np.inf)
            else:
                a, bs = np.where(fin, a, np.inf), np.where(fin, bs, np.inf)
            a = np.where(pin, np.where(fin, 0.0, np.inf), a)
        return a, bs, tot

    @cached_property
    def has_switches(self) -> bool:
        """Whether some job has a warm switch on some pool (:meth:`phase_rows` adds the ring terms then)."""
        return bool(len(self.k_r) and (self.SR.any() or self.ST.any()))

    def feasible_groups(self, configs: Sequence[int], groups: Sequence[Sequence[int]]) -> np.ndarray:
        """:meth:`feasible` of every group ``groups[i]`` on ``configs[i]`` at once (one vectorised
        pass over the groups' (configuration, member) pairs; empty groups are not feasible)."""
        lens = np.fromiter((len(m) for m in groups), dtype=np.intp, count=len(groups))
        out = np.zeros(len(groups), dtype=bool)
        live = np.flatnonzero(lens)
        if not len(live):
            return out
        ks = np.asarray(configs, dtype=np.intp)[live]
        lens = lens[live]
        J = np.fromiter((j for i in live.tolist() for j in groups[i]), dtype=np.intp, count=int(lens.sum()))
        K = np.repeat(ks, lens)
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
        a, bs, tot = self.phases_at(K, J)
        period = np.maximum(np.maximum(segment_sums(a, starts, lens), segment_sums(bs, starts, lens)), np.maximum.reduceat(tot, starts))
        lim = np.minimum.reduceat(self.slo[J], starts)
        w = segment_sums(self.rollout_w(K, J), starts, lens)
        s = segment_sums(self.state_t[J], starts, lens)
        tol = 1 + REL_TOL
        out[live] = (np.logical_and.reduceat(self.ok[K, J], starts) & (period <= lim * tol + 1e-12)
                     & (w <= self.dram_cap_r[ks] * tol + 1e-12) & (s <= self.dram_cap_t[ks] * tol + 1e-12))
        return out

    def restrict(self, inst: PlacementInstance, jobs: Sequence[int] | np.ndarray) -> "Index":
        """The index of ``inst`` = this instance with only the jobs ``jobs`` (same configurations,
        columns sliced, nothing recomputed)."""
        keep = np.asarray(jobs, dtype=int)
        new = object.__new__(Index)
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("job_configs", "has_switches")})
        new.inst, new.n, new.names = inst, len(keep), [self.names[j] for j in keep]
        for name in ("slo", "dram_r", "state_t"):
            setattr(new, name, getattr(self, name)[keep])
        for name in ("R", "T", "S", "SR", "ST", "RO", "WO", "OR", "ok"):
            setattr(new, name, getattr(self, name)[:, keep])
        for name in Index._LAZY:  # built from the rows above on first use: the same numbers as slices
            new.__dict__.pop(name, None)
        return new

    #: per-configuration arrays (first axis: configurations) that :meth:`restrict_configs` slices
    _PER_CONFIG = ("pinned_m", "own", "k_own", "cost", "k_r", "k_t", "k_pair", "node_dram_r", "dram_cap_r", "rollout_cap", "dram_cap_t", "ok")

    def restrict_configs(self, keep: Sequence[int] | np.ndarray) -> "Index":
        """The same instance with only the configurations ``keep`` (in that order; configuration
        ``i`` of the result is ``keep[i]`` here): rows sliced, nothing recomputed, so a group is
        feasible on ``i`` there exactly when it is on ``keep[i]`` here."""
        keep = np.asarray(keep, dtype=int)
        new = object.__new__(Index)
        new.__dict__.update({k: v for k, v in self.__dict__.items()
                             if k not in ("job_configs", "node_matrix", *Index._LAZY)})
        for name in Index._PER_CONFIG:
            setattr(new, name, getattr(self, name)[keep])
        new.configs = [self.configs[k] for k in keep]
        new.config_id = {c: i for i, c in enumerate(new.configs)}
        for name in Index._LAZY:  # built here: their rows (else built there from the per-(type, size) rows)
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name][keep])
        return new

    def rollout_w(self, k, j):
        """Weight of job(s) ``j`` in configuration(s) ``k``'s rollout-side row (broadcast like numpy):
        its rollout-node DRAM on whole pools, 1 (a member slot) on pinned configurations, its own
        node count on own-sized ones; the row's capacity is ``dram_cap_r[k]`` (node DRAM, the member
        count ``m``, or the pool's nodes)."""
        k, j = np.asarray(k), np.asarray(j)
        w = np.where(self.pinned_m[k] > 0, 1.0, self.dram_r[j])
        if len(self.WO):
            w = np.where(self.own[k], self.WO[self.k_own[k], j], w)
        return w

    def rollout_row(self, k, j):
        """The per-(type, size) row (of ``R``, ``SR``) of job(s) ``j``'s rollout on configuration(s) ``k``
        (broadcast like numpy): the configuration's, or on an own-sized one the job's own count's."""
        k, j = np.asarray(k), np.asarray(j)
        row = self.k_r[k]
        if len(self.OR):
            row = np.where(self.own[k], self.OR[self.k_own[k], j], row)
        return row

    def own_nodes(self, k: int, j: int) -> int:
        """Rollout nodes member ``j`` holds on configuration ``k``: its own count (own-sized), the
        configuration's count (pinned), or the whole pool."""
        c = self.configs[k]
        return int(self.WO[self.k_own[k], j]) if c.own else c.rollout_nodes

    @property
    def penalty(self) -> float:
        """$/h every solver charges per job left unplaced: 10 x the most expensive configuration + 1."""
        return 10.0 * float(self.cost.max() if len(self.cost) else 1.0) + 1.0

    # ------------------------------------------------------------------ configurations
    def config_cost(self, c: Config) -> float:
        pr, pt = self.inst.pool_types[c.rollout_type], self.inst.pool_types[c.train_type]
        return c.rollout_pool_nodes * pr.gpus_per_node * pr.price_per_gpu_hour + c.train_nodes * pt.gpus_per_node * pt.price_per_gpu_hour

    def config_nodes(self, k: int) -> dict[str, int]:
        c = self.configs[k]
        out = {c.rollout_type: c.rollout_pool_nodes}
        out[c.train_type] = out.get(c.train_type, 0) + c.train_nodes
        return out

    @cached_property
    def node_matrix(self) -> np.ndarray:
        """``node_matrix[k, t]``: nodes of type ``types[t]`` configuration ``k`` uses."""
        m = np.zeros((len(self.configs), len(self.types)))
        for k in range(len(self.configs)):
            for t, n in self.config_nodes(k).items():
                m[k, self.types.index(t)] = n
        return m

    @cached_property
    def job_configs(self) -> list[np.ndarray]:
        """Configurations each job may use alone."""
        return [np.flatnonzero(self.ok[:, j]) for j in range(self.n)]

    # ------------------------------------------------------------------ groups
    def period(self, k: int, members: Sequence[int]) -> float:
        m = list(members)
        if not m:
            return 0.0
        return float(max(self.a[k, m].sum(), self.bs[k, m].sum(), self.tot[k, m].max()))

    def feasible(self, k: int, members: Sequence[int]) -> bool:
        m = list(members)
        if not m or not self.ok[k, m].all():
            return False
        lim = self.slo[m].min()
        return (within(self.period(k, m), lim) and within(float(self.rollout_w(k, m).sum()), self.dram_cap_r[k])
                and within(self.state_t[m].sum(), self.dram_cap_t[k]))

    def cheapest_config(self, members: Sequence[int], configs: Optional[Sequence[int]] = None) -> Optional[int]:
        best = None
        for k in (range(len(self.configs)) if configs is None else configs):
            if (best is None or self.cost[k] < self.cost[best]) and self.feasible(k, members):
                best = k
        return best

    def groups_cost(self, groups: Sequence[Group]) -> float:
        return float(sum(self.cost[g.config] for g in groups))

    def nodes_used(self, groups: Sequence[Group]) -> dict[str, int]:
        used = {t: 0 for t in self.types}
        for g in groups:
            for t, n in self.config_nodes(g.config).items():
                used[t] += n
        return used


def segment_sums(x: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Sums of the segments ``x[..., starts[i]:starts[i] + lens[i]]`` along the last axis (every
    length >= 1), each bit for bit what ``.sum()`` of that segment alone gives: numpy sums a
    contiguous run pairwise from 8 elements on, ``np.add.reduceat`` and a reduction over a
    non-contiguous axis in other orders (a last-bit difference can flip a comparison at an SLO's
    edge), so the segments are summed as the contiguous rows of one matrix per length."""
    out = np.empty(x.shape[:-1] + (len(lens),))
    for n in np.unique(lens):
        sel = np.flatnonzero(lens == n)
        out[..., sel] = np.ascontiguousarray(x[..., starts[sel][:, None] + np.arange(n)]).sum(axis=-1)
    return out


def cost_unit(values: Sequence[float]) -> Optional[float]:
    """The greatest common divisor of $/h amounts given to a thousandth (e.g. 8 for nodes of 8 and
    16 $/h): every sum of them is a whole multiple of it. None when some amount has finer digits."""
    import math

    scaled = [round(v * 1000) for v in values]
    if not scaled or any(abs(v * 1000 - sv) > 1e-6 for v, sv in zip(values, scaled)):
        return None
    unit = 0
    for v in scaled:
        unit = math.gcd(unit, int(v))
    return unit / 1000 if unit > 0 else None


def plan_cost_unit(idx: Index) -> Optional[float]:
    """The $/h unit every plan's cost (configurations and move prices) is a whole multiple of."""
    move = idx.inst.move_price_per_job
    return cost_unit(list(idx.cost) + ([move] if move > 0 else []))


@dataclass
class Solution:
    """Groups, the jobs left out, and what the solver proved."""

    groups: list[Group]
    unplaced: list[int] = field(default_factory=list)
    lower_bound: Optional[float] = None
    moved: list[int] = field(default_factory=list)
    cut_short: Optional[str] = None  # what a deadline cut short while building it (the record says so)

    def cost(self, idx: Index) -> float:
        return idx.groups_cost(self.groups)
