"""Greedy admission after Weave's inter-group scheduler: the warm start and the baseline.

Each arriving job takes the cheapest of three moves, judged by the marginal $/h it adds while
every member of the group it joins keeps its SLO and every node its DRAM:

1. **fill a bubble**: join an existing group on its current pools (marginal cost 0);
2. **extend only the rollout pool**: join an existing group whose rollout pool grows to a larger
   size of the same type (every member's rollout gets faster; marginal cost: the added nodes);
3. **open a new group**: the cheapest configuration on which the job meets its SLO alone.

Ties go to the existing group the job fills best (the highest cycle-time utilisation after it
joins), then to the smaller configuration. A job no move can place stays unplaced.

State is kept per *family* (rollout type, training type, training nodes) in numpy arrays over the
family's groups and rollout sizes, so one admission is a few vector operations per family
(milliseconds for thousands of groups) rather than a loop over groups.

Pinned groups (members on rollout nodes of their own, the training pool shared;
:mod:`formulation.placement.evaluate`) have families of their own, (rollout type, training type,
training nodes, rollout nodes per member), whose columns are the whole-pool configuration of one
member's pools followed by the pinned configurations of 1, 2, 3, ... members. A one-member group of the
whole-pool configuration ``(p, r, q, n_T)`` (the same plan as the pinned one of one member) sits in
both its families: the second move then also *extends the rollout pool by nodes of the new
member's own* (Weave pins each member to its own rollout nodes), the group becoming pinned; a move
in one family closes the group's row in a family that does not hold its new configuration. A
member that leaves a pinned group takes its rollout nodes with it (the group shrinks to the
pinned configuration of the members left).

**Own-sized groups** (``Packer(own_joins=True)``: ``planner admit``, the daemon's admission,
:func:`formulation.placement.solve.place_leftovers`): the families hold equal counts only, so a group
whose members each hold their own rollout count (``Config.own``; or a pinned group, or a lone member
on a whole pool, whose every member's count is its own, :meth:`Packer.own_shape`) is also offered to
the job on ``r_j`` rollout nodes of its own (``Index.WO``: the fewest that meet its SLO with the
group's training pool), the pool growing to the smallest own-sized configuration that holds every
member's count (``extend-rollout-pool``; ``fill-bubble`` into spare nodes of an own-sized pool). The
tests are the families' (every member within its SLO by ``max(sum bs, max tot)``, training DRAM,
the added nodes free, ``join_delay``, ``accept``) and so is the cost; the move competes with the others
on it, ties to the fuller group. A member leaving an own-sized group leaves its nodes in the pool
(spare nodes a later join fills). Off by default: the trace simulators run equal-count pins only.

**Joins that keep every iteration within the SLO** (``Packer(join_delay=True)``, what the trace's
online admission uses): a job joining a *running* group is fitted into the rings at their current
turn (:meth:`simulator.groups.GroupRun.add_member`), which the steady-state check above does not
see. The running member whose turn it was waits once for the newcomer's phase, and the newcomer's
first iteration waits once for the phase under way on each shared ring. With ``P`` the group's
period before the join (its members on the new pools), ``d_j = max(a_j, bs_j)`` (the newcomer's
arcs, ``a_j = 0`` on pinned configurations) and ``W = max_S a + max_S bs`` (the longest phase
under way on each ring, no rollout term when pinned), the join also needs

* ``P + d_j <= min_S slo`` (the running members' one longer iteration), and
* ``tot_j + sigma_r + sigma_t + W <= slo_j`` (the newcomer's first iteration: switches included,
  ``sigma_r`` only on shared rollout nodes).

Without it, 10 of the 16 jobs of the Weave-like trace that missed an iteration's SLO missed only
in a join's iteration (``results/reproductions/trace-baselines.md``).

**What a move costs** (``Packer(objective=...)``). ``rate`` (the default, ``planner plan``/``admit``):
the $/h the move adds, blind to the fact that a join may slow the group's ring and so keep every
member's nodes longer. ``round``: the $ one round of the group costs more (every member one
iteration: ``cost x period``, the period ``max(sum_S a, sum_S bs, max_S tot)``); a new group costs
``cost x tot_j``. ``life`` (the trace's online admission, which knows each job's iterations left,
``Packer.rounds_left``): the $ the group costs until its members are done, with ``n_i`` the
iterations member ``i`` has left, ``u`` the $/h of one member's own rollout nodes (pinned; 0 on
whole pools) and ``S`` the rest of the configuration's $/h, held until the last member is done::

    future(group) = period x (u x sum_i n_i + S x max_i n_i)

a join costs ``future`` after it minus before (the newcomer's ``n_j`` included), a new group
``cost x tot_j x n_j``. On the traces of ``results/reproductions/trace-baselines.md`` it cuts the
timed admission's cost by 0-4.5% at the same 100% of jobs meeting every iteration's SLO; on two
freshly drawn Weave-like traces by -0.2% and 0.06% (``docs/placement.md``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from formulation.placement.evaluate import OWN_MAX_ROLLOUT_NODES, REL_TOL, Config, Group, Index, Solution, segment_sums

MOVES = ("fill-bubble", "extend-rollout-pool", "new-group")
OBJECTIVES = ("rate", "round", "life")
#: groups whose own re-pack added least that :meth:`Packer.best_repack` also tries two at a time (28 pairs)
REPACK_PAIR_SEEDS = 8
REPACK = "re-pack"  # the fourth move (:meth:`Packer.admit_repack`): re-partition the joined group's members with the job


@dataclass
class Admission:
    job: int
    move: Optional[str]  # one of MOVES, None when no move places it
    group: Optional[int]  # position in Packer.groups
    config: Optional[int]
    marginal_cost: float


def ring_bs(bs: np.ndarray, axis: int = 0) -> np.ndarray:
    """A member's training-ring load in a family: the largest finite ``bs`` over the family's rollout pools (``axis``).
    The ring does not depend on the rollout pool beyond the warm-switch cap ``min(sigma_t, a)``, largest at the smallest
    pool the member has a time at; reading it at the family's smallest pool gave inf for a member whose table has no
    time there, which closed its group to every join. inf where the member has no time at any of them."""
    with np.errstate(invalid="ignore"):
        m = np.where(np.isfinite(bs), bs, -np.inf).max(axis=axis)
    return np.where(np.isneginf(m), np.inf, m)


class _Family:
    def __init__(self, configs: list[int], cap: int, idx: Index, quickest: bool = True):
        self.configs = configs  # configuration ids, rollout pool sizes ascending
        R = len(configs)
        self.sizes = np.array([idx.configs[k].rollout_pool_nodes for k in configs])
        self.cap_w = idx.dram_cap_r[configs]  # the rollout-side row's capacity per column (node DRAM, or members)
        self.pinned = bool(idx.pinned_m[configs].any())  # a family of pinned configurations (after one whole-pool one)
        self.cost = idx.cost[configs]
        self.rollout_type = idx.configs[configs[0]].rollout_type
        self.cols = np.arange(R)[None, :]
        self.gid = np.zeros(cap, dtype=int)
        self.rpos = np.zeros(cap, dtype=int)
        self.sum_a = np.zeros((cap, R))
        self.max_tot = np.zeros((cap, R))
        self.sum_bs = np.zeros(cap)
        self.max_a = np.zeros((cap, R))  # the longest rollout arc of a member, per rollout pool size (join delays)
        self.max_bs = np.zeros(cap)  # the longest training arc of a member
        self.min_slo = np.zeros(cap)
        self.sum_w = np.zeros((cap, R))
        self.sum_s = np.zeros(cap)
        self.open = np.zeros(cap, dtype=bool)  # can some job still join at some rollout pool size?
        self.size = 0
        self._split: Optional[tuple[np.ndarray, np.ndarray]] = None  # (own, shared) $/h per column (Packer._split_cost)
        # the quickest job's phases per rollout pool size (over the jobs allowed at that size):
        # a group no such job fits at any size is closed for good. Without ``quickest`` they are
        # 0 (every group that is not full stays open: the same moves, only more rows tested)
        if not quickest:
            self.min_a, self.min_bs = np.zeros(R), 0.0
            return
        ok = idx.ok[configs]
        self.min_a = np.array([float(idx.a[k, ok[r]].min()) if ok[r].any() else np.inf for r, k in enumerate(configs)])
        ok_any = ok.any(axis=0)
        self.min_bs = float(ring_bs(np.where(ok, idx.bs[configs], np.inf))[ok_any].min()) if ok_any.any() else np.inf


class Packer:
    """Groups being built by admission moves, with free nodes per type."""

    def __init__(self, idx: Index, capacity: Optional[dict[str, int]] = None, join_delay: bool = False,
                 accept: Optional[Callable[[int, int, int], bool]] = None, per_pair: bool = False,
                 objective: str = "rate", own_joins: bool = False):
        """``objective``: what a move costs, ``rate``, ``round`` or ``life`` (module docstring).
        ``join_delay``: a join must also keep the one longer iteration it causes (the running
        members' and the newcomer's first) within the SLOs (module docstring). ``accept(group,
        configuration, job)``: a further test of a join (fill a bubble or extend the rollout pool),
        asked cheapest candidate first until one passes (e.g. the members' sampled iteration times,
        :mod:`formulation.placement.sampled`); a new group is never asked. ``per_pair``: phases
        computed for the (configuration, job) pairs the packer reads (:meth:`Index.phases_at`)
        unless the index has its matrices already, and no closing test from the quickest job (it
        reads every job's phases): for a few moves against many groups (``planner admit``), the
        same moves as without it. ``own_joins``: a job may also join a group whose members each
        hold their own rollout count (own-sized, module docstring) on nodes of its own count
        (``planner admit``, the daemon's admission, :func:`formulation.placement.solve.place_leftovers`;
        off for the trace simulators, which run equal-count pins only)."""
        self.idx = idx
        self.per_pair = per_pair
        self.own_joins = own_joins
        # the own-count rows (``Index.WO``) by (rollout type, training type, training nodes)
        self._own_row = {key: i for i, key in enumerate(idx.own_keys)} if bool(idx.own.any()) else {}
        self.join_delay = join_delay
        self.accept = accept
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}: one of {', '.join(OBJECTIVES)}")
        self.objective = objective
        # ``life``: each job's iterations still to run (set by the caller before a move; 1 where unset)
        self.rounds_left: dict[int, float] = {}
        # a further test of a new group (configuration, job), asked cheapest configuration first; when
        # none passes, the cheapest one that fits is taken (e.g. the job's sampled solo iteration)
        self.accept_alone: Optional[Callable[[int, int], bool]] = None
        self.free = dict(capacity if capacity is not None else idx.capacity)
        self.groups: list[list[int]] = []  # members per group
        self.group_config: list[int] = []
        self.group_anchor: list[Optional[str]] = []
        self.slots: list[list[tuple[int, int]]] = []  # (family, row) of each group, in each family holding its configuration
        fam_key: dict[tuple, list[int]] = {}
        for k, c in enumerate(idx.configs):
            if c.own:  # own-sized pools come from the exact models and the local search, not from joins
                continue
            key = (c.rollout_type, c.train_type, c.train_nodes, c.rollout_nodes if c.pinned else 0)
            fam_key.setdefault(key, []).append(k)
        cap = max(1, min(idx.n, 16))  # rows per family; doubled when full (add_group): most families hold few groups
        self.families: list[_Family] = []
        self.fam_of: dict[int, list[tuple[int, int]]] = {}
        for ks in fam_key.values():
            ks.sort(key=lambda k: idx.configs[k].rollout_pool_nodes)
            f = len(self.families)
            self.families.append(_Family(ks, cap, idx, quickest=not per_pair))
            for r, k in enumerate(ks):
                self.fam_of.setdefault(k, []).append((f, r))
        for k, c in enumerate(idx.configs):  # a whole-pool group of one member is the pinned one of one member
            if c.members == 1 and not c.own:
                kw = idx.config_id.get(c.whole())
                if kw is not None:
                    self.fam_of[kw] = self.fam_of.get(kw, []) + self.fam_of[k]
        self.job_group: dict[int, int] = {}
        self.closed: set[int] = set()  # groups no move joins (being drained: :mod:`formulation.placement.drain`)

    # ------------------------------------------------------------------ bookkeeping
    def _refresh(self, g: int) -> None:
        for f, row in self.slots[g]:
            self._refresh_row(g, f, row)

    def _close_row(self, f: int, row: int) -> None:
        fam = self.families[f]
        fam.sum_a[row] = np.inf
        fam.max_tot[row] = np.inf
        fam.min_slo[row] = -np.inf
        fam.open[row] = False

    def _reslot(self, g: int) -> None:
        """After group ``g`` changed configuration: keep its rows in the families that hold the new
        one (at the new column), close the others."""
        k = self.group_config[g]
        where = dict(self.fam_of.get(k, []))
        keep = []
        for f, row in self.slots[g]:
            if f in where:
                self.families[f].rpos[row] = where[f]
                keep.append((f, row))
            else:
                self._close_row(f, row)
        self.slots[g] = keep

    def _refresh_row(self, g: int, f: int, row: int) -> None:
        fam = self.families[f]
        m = self.groups[g]
        idx = self.idx
        ks = fam.configs
        if m:
            if self.per_pair:
                a, bs_all, tot = idx.phases_at(np.asarray(ks)[:, None], np.asarray(m)[None, :])
                bs = ring_bs(bs_all)
            else:
                sub = np.ix_(ks, m)
                a, tot = idx.a[sub], idx.tot[sub]
                # training ring at the smallest rollout pool each member has a time at: its cap min(sigma_t, a)
                # is the largest there, so the sum is at least the one of any larger rollout pool (equal unless a
                # cap binds)
                bs = ring_bs(idx.bs[sub])
            fam.sum_a[row] = a.sum(axis=1)
            fam.max_tot[row] = tot.max(axis=1)
            fam.sum_bs[row] = bs.sum()
            fam.max_a[row] = a.max(axis=1)
            fam.max_bs[row] = bs.max()
            fam.min_slo[row] = idx.slo[m].min()
            fam.sum_w[row] = idx.rollout_w(np.asarray(ks)[:, None], np.asarray(m)[None, :]).sum(axis=1)
            fam.sum_s[row] = idx.state_t[m].sum()
        else:  # an empty group admits nothing (it is dropped from the result)
            fam.sum_a[row] = np.inf
            fam.max_tot[row] = np.inf
            fam.min_slo[row] = -np.inf
        # closed for good (until a member leaves): not even the quickest job fits at any pool size
        # from the group's own upwards (a member without a time at some size makes it infinite)
        lim = fam.min_slo[row] * (1 + REL_TOL)
        rollout_room = fam.sum_a[row, fam.rpos[row]:] + fam.min_a[fam.rpos[row]:]
        fam.open[row] = bool(fam.sum_bs[row] + fam.min_bs <= lim and rollout_room.size and rollout_room.min() <= lim)
        if g in self.closed:
            fam.open[row] = False
        if fam.pinned and fam.rpos[row] == 0 and len(m) >= 2:
            # members sharing a whole rollout pool are not split onto nodes of their own (a running
            # member keeps its nodes): only a lone member's group becomes pinned
            fam.open[row] = False

    def _refresh_many(self, todo: list[tuple[int, int, int]]) -> None:
        """:meth:`_refresh_row` of every ``(family, row, group)`` in ``todo`` (groups with members)
        in one vectorised pass over all their (configuration, member) pairs: the same numbers
        (sums as :func:`segment_sums`, maxima and minima exact in any order)."""
        idx = self.idx
        todo = sorted(todo)  # by family: each family's rows are one run of the arrays below
        fams = [self.families[f] for f, _, _ in todo]
        n_cols = np.array([len(fam.configs) for fam in fams])
        n_mem = np.array([len(self.groups[g]) for _, _, g in todo])
        J = np.fromiter((j for _, _, g in todo for j in self.groups[g]), dtype=np.intp, count=int(n_mem.sum()))
        mem_start = np.concatenate(([0], np.cumsum(n_mem)[:-1]))
        # one entry per (row, column): its configuration, and its members' pairs in a run
        sc_slot = np.repeat(np.arange(len(todo)), n_cols)
        col_start = np.concatenate(([0], np.cumsum(n_cols)[:-1]))
        sc_col = np.arange(len(sc_slot)) - col_start[sc_slot]
        sc_k = np.fromiter((k for fam in fams for k in fam.configs), dtype=np.intp, count=len(sc_slot))
        sc_len = n_mem[sc_slot]
        sc_start = np.concatenate(([0], np.cumsum(sc_len)[:-1]))
        e_sc = np.repeat(np.arange(len(sc_slot)), sc_len)
        e_j = J[mem_start[sc_slot[e_sc]] + np.arange(len(e_sc)) - sc_start[e_sc]]
        a, bs_all, tot = idx.phases_at(sc_k[e_sc], e_j)
        sum_a = segment_sums(a, sc_start, sc_len)
        max_a = np.maximum.reduceat(a, sc_start)
        max_tot = np.maximum.reduceat(tot, sc_start)
        sum_w = segment_sums(np.where(idx.pinned_m[sc_k[e_sc]] > 0, 1.0, idx.dram_r[e_j]), sc_start, sc_len)
        # per row: the training ring (each member's largest finite load over the family's columns: ring_bs), SLO, state
        e_mem = mem_start[sc_slot[e_sc]] + np.arange(len(e_sc)) - sc_start[e_sc]  # the member's position in J
        bs = np.full(len(J), -np.inf)
        np.maximum.at(bs, e_mem, np.where(np.isfinite(bs_all), bs_all, -np.inf))
        bs = np.where(np.isneginf(bs), np.inf, bs)
        sum_bs = segment_sums(bs, mem_start, n_mem)
        max_bs = np.maximum.reduceat(bs, mem_start)
        min_slo = np.minimum.reduceat(idx.slo[J], mem_start)
        sum_s = segment_sums(idx.state_t[J], mem_start, n_mem)
        # open: the quickest job fits at some pool size from the group's own upwards (_refresh_row)
        rows = np.array([row for _, row, _ in todo])
        rpos = np.array([fam.rpos[row] for fam, (_, row, _) in zip(fams, todo)])
        min_a = np.concatenate([fam.min_a for fam in fams])
        min_bs = np.array([fam.min_bs for fam in fams])
        lim = min_slo * (1 + REL_TOL)
        room = np.minimum.reduceat(np.where(sc_col >= rpos[sc_slot], sum_a + min_a, np.inf), col_start)
        is_open = (sum_bs + min_bs <= lim) & (room <= lim)
        pinned = np.array([fam.pinned for fam in fams])
        is_open &= ~(pinned & (rpos == 0) & (n_mem >= 2))  # as _refresh_row: a shared whole pool is not pinned later
        i = 0
        while i < len(todo):
            f = todo[i][0]
            e = i + 1
            while e < len(todo) and todo[e][0] == f:
                e += 1
            fam, r, width = self.families[f], rows[i:e], len(self.families[f].configs)
            sc = slice(col_start[i], col_start[i] + (e - i) * width)
            fam.sum_a[r] = sum_a[sc].reshape(e - i, width)
            fam.max_a[r] = max_a[sc].reshape(e - i, width)
            fam.max_tot[r] = max_tot[sc].reshape(e - i, width)
            fam.sum_w[r] = sum_w[sc].reshape(e - i, width)
            fam.sum_bs[r], fam.max_bs[r], fam.min_slo[r] = sum_bs[i:e], max_bs[i:e], min_slo[i:e]
            fam.sum_s[r], fam.open[r] = sum_s[i:e], is_open[i:e]
            i = e

    def _new_slots(self, g: int, k: int, only: Optional[Iterable[int]] = None) -> list[tuple[int, int]]:
        """Rows for group ``g`` (configuration ``k``) in the families that hold ``k`` (of ``only``, if given)."""
        slots = []
        keep = None if only is None else set(only)
        for f, r in self.fam_of.get(k, []):
            if keep is not None and f not in keep:
                continue
            fam = self.families[f]
            if fam.size == len(fam.gid):  # grow
                for name in ("gid", "rpos", "sum_bs", "min_slo", "sum_w", "sum_s", "open", "sum_a", "max_tot", "max_a", "max_bs"):
                    arr = getattr(fam, name)
                    setattr(fam, name, np.concatenate([arr, np.zeros_like(arr)]))
            row = fam.size
            fam.size += 1
            fam.gid[row], fam.rpos[row] = g, r
            slots.append((f, row))
        return slots

    def add_group(self, k: int, members: Sequence[int], anchor: Optional[str] = None, charge: bool = True) -> int:
        g = len(self.groups)
        slots = self._new_slots(g, k)
        self.groups.append(list(members))
        self.group_config.append(k)
        self.group_anchor.append(anchor)
        self.slots.append(slots)
        for j in members:
            self.job_group[j] = g
        self._refresh(g)
        if charge:
            for t, n in self.idx.config_nodes(k).items():
                self.free[t] -= n
        return g

    def families_of(self, g: int) -> frozenset[int]:
        """The families group ``g`` has rows in (what :meth:`restore_group` puts back)."""
        return frozenset(f for f, _ in self.slots[g])

    def restore_group(self, g: int, k: int, members: Sequence[int], families: Optional[Iterable[int]] = None) -> None:
        """Put group ``g`` back as it was: configuration ``k``, ``members`` in this order (its
        current members, if any, are replaced; none of ``members`` may be in another group), with
        rows in ``families`` (:meth:`families_of` before it changed; default: every family holding
        ``k``). The group keeps its position, so a caller's ids for it stay valid."""
        for j in self.groups[g]:
            self.job_group.pop(j, None)
        if self.groups[g]:
            for t, n in self.idx.config_nodes(self.group_config[g]).items():
                self.free[t] += n
        for f, row in self.slots[g]:
            self._close_row(f, row)
        self.groups[g] = list(members)
        self.group_config[g] = k
        self.slots[g] = self._new_slots(g, k, families)
        for j in members:
            self.job_group[j] = g
        if members:
            for t, n in self.idx.config_nodes(k).items():
                self.free[t] -= n
        self._refresh(g)

    def set_closed(self, g: int, closed: bool) -> None:
        """Close group ``g`` to every move (no job joins it), or open it again."""
        (self.closed.add if closed else self.closed.discard)(g)
        self._refresh(g)

    def add_groups(self, groups: Iterable[Group]) -> list[int]:
        """:meth:`add_group` of each group (configuration, members, anchor), in order, with the
        families' rows filled in one vectorised pass per family: the same state, for the
        thousands of groups of a current plan."""
        out = []
        todo: list[tuple[int, int, int]] = []  # (family, row, group) to fill
        used = {t: 0 for t in self.idx.types}
        node_matrix = self.idx.node_matrix
        for grp in groups:
            g = len(self.groups)
            slots = self._new_slots(g, grp.config)
            self.groups.append(list(grp.members))
            self.group_config.append(grp.config)
            self.group_anchor.append(grp.anchor)
            self.slots.append(slots)
            for j in grp.members:
                self.job_group[j] = g
            if grp.members:
                todo.extend((f, row, g) for f, row in slots)
            else:
                self._refresh(g)
            out.append(g)
        if todo:
            self._refresh_many(todo)
        if out:
            n = node_matrix[[self.group_config[g] for g in out]].sum(axis=0)
            for i, t in enumerate(self.idx.types):
                used[t] = int(round(n[i]))
        for t, n_used in used.items():
            if n_used:
                self.free[t] -= n_used
        return out

    def remove_job(self, j: int) -> None:
        g = self.job_group.pop(j)
        self.groups[g].remove(j)
        if not self.groups[g]:  # the group's nodes go back to the free pool
            for t, n in self.idx.config_nodes(self.group_config[g]).items():
                self.free[t] += n
        else:
            c = self.idx.configs[self.group_config[g]]
            k = self.idx.config_id.get(c._replace(members=len(self.groups[g]))) if c.pinned else None
            if k is not None:  # a pinned member's own rollout nodes go back with it
                for t, n in self.idx.config_nodes(self.group_config[g]).items():
                    self.free[t] += n
                for t, n in self.idx.config_nodes(k).items():
                    self.free[t] -= n
                self.group_config[g] = k
                self._reslot(g)
        self._refresh(g)

    # ------------------------------------------------------------------ the three moves
    def best_move(self, j: int) -> Admission:
        idx = self.idx
        best = Admission(j, None, None, None, np.inf)
        best_fill = -1.0
        lim_j = idx.slo[j]
        tol = 1 + REL_TOL
        # the job's phases on every configuration (a column of the matrices, or computed for it alone)
        if self.per_pair and "a" not in idx.__dict__:
            a_j, bs_j, tot_j = idx.phases_at(np.arange(len(idx.configs)), j)
        else:
            a_j, bs_j, tot_j = idx.a[:, j], idx.bs[:, j], idx.tot[:, j]
        for _f, fam in enumerate(self.families):
            if fam.size == 0:
                continue
            ks = fam.configs
            okj = idx.ok[ks, j]
            if not okj.any():
                continue
            rows = np.flatnonzero(fam.open[:fam.size])
            if len(rows) == 0:
                continue
            lim = np.minimum(fam.min_slo[rows], lim_j)[:, None] * tol
            A = fam.sum_a[rows] + a_j[ks][None, :]
            TOT = np.maximum(fam.max_tot[rows], tot_j[ks][None, :])
            bs = float(ring_bs(bs_j[ks]))
            BS = (fam.sum_bs[rows] + bs)[:, None]
            k0 = ks[0]
            dram_ok = ((fam.sum_w[rows] + idx.rollout_w(ks, j)[None, :] <= fam.cap_w[None, :] * tol)
                       & (fam.sum_s[rows] + idx.state_t[j] <= idx.dram_cap_t[k0] * tol)[:, None])
            rpos = fam.rpos[rows]
            sizes = fam.sizes
            extra_nodes = sizes[None, :] - sizes[rpos][:, None]
            feas = ((A <= lim) & (BS <= lim) & (TOT <= lim) & dram_ok & okj[None, :]
                    & (fam.cols >= rpos[:, None]) & (extra_nodes <= self.free.get(fam.rollout_type, 0)))
            if self.join_delay and feas.any():
                feas &= self._join_ok(fam, rows, j, a_j[ks], bs_j[ks], tot_j[ks])
            if not feas.any():
                continue
            if self.objective != "rate":  # $ per round of the group (every member one iteration): cost x period
                p_old = np.maximum(np.maximum(fam.sum_a[rows, rpos], fam.sum_bs[rows]), fam.max_tot[rows, rpos])
                p_new = np.maximum(np.maximum(A, BS), TOT)
                if self.objective == "round":
                    new = fam.cost[None, :] * p_new
                    old = fam.cost[rpos] * p_old
                else:  # life: the group's cost until its members are done, own rollout nodes leaving with their member
                    own, shared = self._split_cost(fam)
                    n = [[self.rounds_left.get(m, 1.0) for m in self.groups[int(fam.gid[r])]] for r in rows]
                    sum_n = np.array([sum(x) for x in n])
                    last = np.array([max(x) for x in n])
                    n_j = self.rounds_left.get(j, 1.0)
                    new = p_new * (own[None, :] * (sum_n + n_j)[:, None] + shared[None, :] * np.maximum(last, n_j)[:, None])
                    old = p_old * (own[rpos] * sum_n + shared[rpos] * last)
                marg = np.where(feas, new - old[:, None], np.inf)
            else:
                marg = np.where(feas, fam.cost[None, :] - fam.cost[rpos][:, None], np.inf)
            with np.errstate(invalid="ignore", divide="ignore"):
                fill = np.maximum(A, BS) / lim
            while True:
                m = marg.min()
                if not np.isfinite(m) or m > best.marginal_cost + 1e-9:
                    break
                cand = np.argwhere(marg <= m + 1e-9)
                fills = fill[cand[:, 0], cand[:, 1]]
                pick = cand[int(np.argmax(fills))]
                fbest = float(fills.max())
                if not (m < best.marginal_cost - 1e-9 or fbest > best_fill):
                    break
                row, r = int(pick[0]), int(pick[1])
                if self.accept is not None and not self.accept(int(fam.gid[rows[row]]), ks[r], j):
                    marg[row, r] = np.inf  # refused: the next candidate
                    continue
                best = Admission(j, "fill-bubble" if r == rpos[row] else "extend-rollout-pool", int(fam.gid[rows[row]]), ks[r], float(m))
                best_fill = fbest
                break
        if self.own_joins and self._own_row:
            best, best_fill = self._best_own_join(j, best, best_fill)
        # open a new group: the cheapest configuration the fleet still has the nodes for
        alone = idx.job_configs[j] if "job_configs" in idx.__dict__ or not self.per_pair else np.flatnonzero(idx.ok[:, j])
        if len(alone):
            free = np.array([self.free.get(t, 0) for t in idx.types])
            fits = (idx.node_matrix[alone] <= free[None, :]).all(axis=1)
            costs = idx.cost[alone]
            if self.objective != "rate":  # a group of its own: cost x its iteration (x its iterations left, life)
                costs = costs * tot_j[alone] * (self.rounds_left.get(j, 1.0) if self.objective == "life" else 1.0)
            costs = np.where(fits, costs, np.inf)
            i = int(np.argmin(costs))
            if self.accept_alone is not None and np.isfinite(costs[i]):
                passing = None
                for c in np.argsort(costs, kind="stable"):
                    if not np.isfinite(costs[c]) or costs[c] >= best.marginal_cost - 1e-9:
                        break  # dearer than the join found: the join stands
                    if self.accept_alone(int(alone[c]), j):
                        passing = int(c)
                        break
                if passing is not None:
                    i = passing
                elif best.move is not None:
                    return best  # no new group passes below the join's cost: the join
                # else no join and no configuration passes: the cheapest that fits (best effort)
            if costs[i] < best.marginal_cost - 1e-9:
                best = Admission(j, "new-group", None, int(alone[i]), float(costs[i]))
        return best

    def own_shape(self, g: int) -> Optional[tuple[int, int, float]]:
        """``(own row, rollout pool nodes, nodes its members hold)`` of group ``g`` when each of its
        members holds exactly its own rollout count (``Index.WO``) on nodes of its own: an own-sized
        group, a pinned group whose every member's own count is the configuration's, or a lone
        member on a whole rollout pool of its own count (the same plan as the own-sized one). None
        for other groups (members sharing a rollout pool, a member on more nodes than its own count:
        joining as own-sized would move it; a member no own count serves), empty or closed ones."""
        members = self.groups[g]
        if not members or g in self.closed:
            return None
        idx = self.idx
        c = idx.configs[self.group_config[g]]
        o = self._own_row.get((c.rollout_type, c.train_type, c.train_nodes))
        if o is None:
            return None
        w = idx.WO[o, members]
        if not np.isfinite(w).all():  # a member no own count serves at these estimates (a stuck job kept where it is)
            return None
        if not c.own and ((c.pinned and not (w == c.rollout_nodes).all())
                          or (not c.pinned and (len(members) != 1 or w[0] != c.rollout_nodes))):
            return None
        return o, c.rollout_pool_nodes, float(w.sum())

    def _best_own_join(self, j: int, best: Admission, best_fill: float) -> tuple[Admission, float]:
        """The families' joins for own-sized groups (``own_joins``; the move and its tests mirror the
        pinned families'): ``j`` joins a group of :meth:`own_shape` on ``r_j`` rollout nodes of its
        own (``Index.WO``: the fewest that meet its SLO with the group's training pool), the rollout
        pool growing to the smallest own-sized configuration that holds every member's count
        (``extend-rollout-pool``; ``fill-bubble`` when an own-sized pool has the nodes spare), the
        training pool shared. Every member within its SLO by the closed form (``max(sum bs, max
        tot)``: no rollout node is shared), training DRAM within the pool, the added rollout nodes
        free; ``join_delay``, ``accept`` and the objective as for the other joins. Returns the
        better of ``best`` and the cheapest such join (ties to the fuller group), and its fill."""
        idx = self.idx
        tol = 1 + REL_TOL
        for g in range(len(self.groups)):
            shape = self.own_shape(g)
            if shape is None:
                continue
            o, pool, held = shape
            w_j = float(idx.WO[o, j])
            if not np.isfinite(w_j):
                continue
            k_old = self.group_config[g]
            c = idx.configs[k_old]
            k_new = None
            for size in range(max(pool, int(round(held + w_j))), OWN_MAX_ROLLOUT_NODES + 1):
                k_new = idx.config_id.get(Config(c.rollout_type, size, c.train_type, c.train_nodes, size, True))
                if k_new is not None:
                    break
            if k_new is None or idx.configs[k_new].rollout_nodes - pool > self.free.get(c.rollout_type, 0):
                continue
            members = np.asarray(self.groups[g])
            if not idx.ok[k_new, j] or not idx.ok[k_new, members].all():
                continue
            a, bs, tot = idx.phases_at(k_new, members)
            a_j, bs_j, tot_j = (float(x) for x in idx.phases_at(k_new, j))
            lim = min(float(idx.slo[members].min()), float(idx.slo[j])) * tol
            A, BS, TOT = float(a.sum()) + a_j, float(bs.sum()) + bs_j, max(float(tot.max()), tot_j)
            if not (A <= lim and BS <= lim and TOT <= lim):
                continue
            if not (held + w_j <= idx.dram_cap_r[k_new] * tol and float(idx.state_t[members].sum()) + idx.state_t[j] <= idx.dram_cap_t[k_new] * tol):
                continue
            if self.join_delay:  # as _join_ok: the running members' one longer iteration, the newcomer's first
                period = max(float(a.sum()), float(bs.sum()), float(tot.max()))
                sw = float(idx.ST[idx.k_t[k_new], j])  # (no rollout switch: no rollout node is shared)
                if not (period + max(a_j, bs_j) <= float(idx.slo[members].min()) * tol
                        and tot_j + sw + float(a.max()) + float(bs.max()) <= idx.slo[j] * tol):
                    continue
            if self.objective == "rate":
                m = float(idx.cost[k_new] - idx.cost[k_old])
            else:
                a0, bs0, tot0 = idx.phases_at(k_old, members)
                p_old = max(float(a0.sum()), float(bs0.sum()), float(tot0.max()))
                p_new = max(A, BS, TOT)
                if self.objective == "round":
                    m = float(idx.cost[k_new]) * p_new - float(idx.cost[k_old]) * p_old
                else:
                    m = self._life(k_new, [*self.groups[g], j], p_new) - self._life(k_old, list(self.groups[g]), p_old)
            fill = max(A, BS) / lim
            if not (m < best.marginal_cost - 1e-9 or (m <= best.marginal_cost + 1e-9 and fill > best_fill)):
                continue
            if self.accept is not None and not self.accept(g, k_new, j):
                continue
            best = Admission(j, "fill-bubble" if k_new == k_old else "extend-rollout-pool", g, k_new, m)
            best_fill = fill
        return best, best_fill

    def _life(self, k: int, members: list[int], period: float) -> float:
        """``life``'s cost of a group on ``k`` with ``members`` at ``period`` (module docstring): each
        member's own rollout nodes (pinned: the configuration's count; own-sized: its own count) held
        for its iterations left, the rest of the configuration's $/h until the last is done (as
        :meth:`_split_cost`)."""
        idx = self.idx
        c = idx.configs[k]
        pr = idx.inst.pool_types[c.rollout_type]
        unit = pr.gpus_per_node * pr.price_per_gpu_hour
        n = np.array([self.rounds_left.get(i, 1.0) for i in members])
        if c.own:
            u = idx.WO[idx.k_own[k], members] * unit
            shared = float(idx.cost[k]) - c.rollout_nodes * unit
        elif c.pinned:
            u = np.full(len(members), c.rollout_nodes * unit)
            shared = float(idx.cost[k]) - c.members * c.rollout_nodes * unit
        else:
            u = np.zeros(len(members))
            shared = float(idx.cost[k])
        return period * (float((u * n).sum()) + shared * float(n.max()))

    def _split_cost(self, fam: _Family) -> tuple[np.ndarray, np.ndarray]:
        """Per column of ``fam``: the $/h of one member's own rollout nodes (pinned configurations; 0 on
        whole pools) and of the rest, which the group holds until its last member is done."""
        got = fam._split
        if got is None:
            idx = self.idx
            own = np.zeros(len(fam.configs))
            for r, k in enumerate(fam.configs):
                c = idx.configs[k]
                if c.pinned:
                    pr = idx.inst.pool_types[c.rollout_type]
                    own[r] = c.rollout_nodes * pr.gpus_per_node * pr.price_per_gpu_hour
            got = fam._split = (own, fam.cost - own * idx.pinned_m[fam.configs])  # (members: 0 on whole pools)
        return got

    def _join_ok(self, fam: _Family, rows: np.ndarray, j: int, a_j: np.ndarray, bs_j: np.ndarray, tot_j: np.ndarray) -> np.ndarray:
        """Rows x columns of ``fam`` where ``j``'s join keeps the iteration it delays within the
        SLOs (module docstring): the running members' ``P + d_j`` and the newcomer's first
        (``a_j``, ``bs_j``, ``tot_j``: the job's phases on the family's configurations)."""
        idx = self.idx
        ks = fam.configs
        tol = 1 + REL_TOL
        period = np.maximum(np.maximum(fam.sum_a[rows], fam.sum_bs[rows][:, None]), fam.max_tot[rows])
        running = period + np.maximum(a_j, bs_j)[None, :] <= fam.min_slo[rows][:, None] * tol
        pinned = idx.pinned_m[ks] > 0
        sw = idx.ST[idx.k_t[ks], j] + np.where(pinned, 0.0, idx.SR[idx.k_r[ks], j])
        wait = fam.max_a[rows] + fam.max_bs[rows][:, None]
        first = tot_j[None, :] + sw[None, :] + wait <= idx.slo[j] * tol
        return running & first

    def apply(self, adm: Admission) -> None:
        if adm.move is None:
            return
        assert adm.config is not None  # every move names its configuration
        if adm.move == "new-group":
            self.add_group(adm.config, [adm.job])
            return
        g = adm.group
        assert g is not None  # fill-bubble and extend-rollout-pool name the group they join
        old = self.group_config[g]
        if adm.config != old:  # extend the rollout pool: charge the added nodes
            for t, n in self.idx.config_nodes(adm.config).items():
                self.free[t] -= n
            for t, n in self.idx.config_nodes(old).items():
                self.free[t] += n
            self.group_config[g] = adm.config
            self._reslot(g)
        self.groups[g].append(adm.job)
        self.job_group[adm.job] = g
        self._refresh(g)

    def admit(self, j: int) -> Admission:
        adm = self.best_move(j)
        self.apply(adm)
        return adm

    def best_repack(self, j: int, bar: float, max_jobs: int = 7, anchored: bool = False
                    ) -> Optional[tuple[tuple[int, ...], float, list]]:
        """Re-pack (the fourth move, off by default): the group ``g`` -- or the two groups ``g, h`` -- whose
        members together with ``j`` re-partition exactly (:func:`formulation.placement.fast.repartition`:
        every subset on its cheapest configuration, then the cheapest partition, within the free nodes and
        theirs) for the least added $/h, when that is below ``bar`` (the best of the three moves' marginal
        cost): ``((g, ...), added $/h, [(configuration, members)])``, or None. Every group that shares a pool
        type with ``j`` is tried alone; pairs among the :data:`REPACK_PAIR_SEEDS` of them whose own re-pack
        added least (then the fewest members) are tried together. At most ``max_jobs`` jobs in all (the
        subsets grow as ``2^n``); groups anchored to a current plan's group only when ``anchored`` (their
        members then move: ``planner admit --repack``).

        Why pairs: re-packing only the group a job joins is myopic. On the 13-job windows of the Weave-like
        trace (``python -m planner.sim.reproduce trace-baselines``) it ended 1.00-1.22x of the proven offline
        optimum (window 3: an early re-pack saved 24 $/h and left later arrivals no bubble, 224 against 208 $/h
        with the three moves alone, optimum 184); with pairs every one of the eight windows of both traces
        ends at the optimum, 0.02 s a window (2026-12-07)."""
        from formulation.placement.fast import repartition

        idx = self.idx
        if not len(idx.job_configs[j]):
            return None
        types = {idx.configs[k].rollout_type for k in idx.job_configs[j]} | {idx.configs[k].train_type for k in idx.job_configs[j]}
        free = np.array([self.free.get(t, 0) for t in idx.types], dtype=float)
        best: Optional[tuple[tuple[int, ...], float, list]] = None

        def attempt(gs: tuple[int, ...]) -> float:
            nonlocal best
            members = [m for g in gs for m in self.groups[g]] + [j]
            if len(members) > max_jobs:
                return float("inf")
            res = repartition(idx, members, free, sum(idx.node_matrix[self.group_config[g]] for g in gs))
            if res is None:
                return float("inf")
            added = res[0] - sum(float(idx.cost[self.group_config[g]]) for g in gs)
            if added < bar - 1e-9 and (best is None or added < best[1] - 1e-9):
                best = (gs, added, res[1])
            return added

        alone: dict[int, float] = {}
        for g, members in enumerate(self.groups):
            if not members or len(members) >= max_jobs or (self.group_anchor[g] is not None and not anchored):
                continue
            c = idx.configs[self.group_config[g]]
            if not {c.rollout_type, c.train_type} & types:
                continue
            alone[g] = attempt((g,))
        seeds = sorted(alone, key=lambda g: (alone[g], len(self.groups[g]), g))[:REPACK_PAIR_SEEDS]
        for a, g in enumerate(seeds):
            for h in seeds[a + 1:]:
                attempt((g, h))
        return best

    def admit_repack(self, j: int, max_jobs: int = 7, anchored: bool = False) -> Admission:
        """The three moves, or re-pack the group(s) the job joins (:meth:`best_repack`) when that adds
        less $/h: their members and ``j`` go to the groups of the exact re-partition (new group
        positions; the old groups are left empty). The admission's ``move`` is ``re-pack``."""
        adm = self.best_move(j)
        rp = self.best_repack(j, adm.marginal_cost, max_jobs, anchored)
        if rp is None:
            self.apply(adm)
            return adm
        gs, added, parts = rp
        for g in gs:
            for m in list(self.groups[g]):
                self.remove_job(m)
        first: Optional[int] = None
        for k, members in parts:
            h = self.add_group(k, members)
            if j in members:
                first = h
        return Admission(j, REPACK, first, None, added)

    def open_alone(self, j: int) -> Admission:
        """Only the third move: a new group on the cheapest configuration the fleet still has the
        nodes for (what a greedy cut short by its deadline does with the jobs it has not reached)."""
        adm = Admission(j, None, None, None, float("inf"))
        ks = self.idx.job_configs[j]
        if len(ks):
            free = np.array([self.free.get(t, 0) for t in self.idx.types])
            costs = np.where((self.idx.node_matrix[ks] <= free[None, :]).all(axis=1), self.idx.cost[ks], np.inf)
            i = int(np.argmin(costs))
            if np.isfinite(costs[i]):
                adm = Admission(j, "new-group", None, int(ks[i]), float(costs[i]))
        self.apply(adm)
        return adm

    # ------------------------------------------------------------------ results
    def solution(self) -> Solution:
        groups = [Group(self.group_config[g], tuple(m), self.group_anchor[g]) for g, m in enumerate(self.groups) if m]
        placed = set(self.job_group)
        return Solution(groups, [j for j in range(self.idx.n) if j not in placed])

    @classmethod
    def from_groups(cls, idx: Index, groups: Iterable[Group], **options) -> "Packer":
        """A packer holding ``groups`` (``options``: the constructor's keyword arguments)."""
        pk = cls(idx, **options)
        for g in groups:
            pk.add_group(g.config, list(g.members), g.anchor)
        return pk


def arrival_order(idx: Index) -> list[int]:
    """Online order: by arrival time, then by position in the instance."""
    return sorted(range(idx.n), key=lambda j: (idx.inst.jobs[j].arrival_s, j))


def decreasing_order(idx: Index) -> list[int]:
    """Offline order: the jobs with the largest solo cycle (on their cheapest pools) first."""
    def key(j: int):
        ks = idx.job_configs[j]
        if len(ks) == 0:
            return (0.0, j)
        k = ks[int(np.argmin(idx.cost[ks]))]
        return (-float(idx.tot[k, j] / idx.slo[j]), j)
    return sorted(range(idx.n), key=key)


def greedy(idx: Index, order: str | Sequence[int] = "arrival", packer: Optional[Packer] = None, deadline: float = float("inf"),
           clock: Callable[[], float] = time.perf_counter) -> Solution:
    """Admit every job (not yet in ``packer``) in ``order`` with the three moves. Past
    ``deadline`` (checked every 16 jobs) the jobs not reached yet each open a group of their own
    (:meth:`Packer.open_alone`, microseconds a job) and the solution's ``cut_short`` says how many."""
    pk = packer or Packer(idx)
    seq: list[int] = (arrival_order(idx) if order == "arrival" else decreasing_order(idx) if order == "decreasing"
                      else [int(j) for j in order])
    late = 0
    for i, j in enumerate(seq):
        if j in pk.job_group:
            continue
        if late or (i % 16 == 0 and clock() > deadline):
            late += 1
            pk.open_alone(j)
        else:
            pk.admit(j)
    sol = pk.solution()
    if late:
        sol.cut_short = f"greedy ({order if isinstance(order, str) else 'given'} order): {late} job(s) opened groups of their own"
    return sol


def best_greedy(idx: Index, deadline: float = float("inf"), clock: Callable[[], float] = time.perf_counter) -> tuple[Solution, str]:
    """The cheaper of the online (arrival) and offline (decreasing) orders, with fewer unplaced
    first. With a ``deadline``: the arrival order gets the first half of the time, the decreasing
    order runs only when the arrival order was not cut short."""
    out: list[tuple[tuple[int, float], str, Solution]] = []
    t0 = clock()
    for name in ("arrival", "decreasing"):
        if name == "decreasing" and out and out[0][2].cut_short:
            break
        s = greedy(idx, name, deadline=t0 + 0.5 * (deadline - t0) if name == "arrival" else deadline, clock=clock)
        out.append(((len(s.unplaced), s.cost(idx)), name, s))
    out.sort(key=lambda t: t[0])
    return out[0][2], out[0][1]
