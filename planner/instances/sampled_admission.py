"""Admission that keeps every member's sampled iteration times within its SLO (the trace's ``sampled`` rule).

A join (fill a bubble, extend the rollout pool) is accepted when, for the group it makes, the
slowest of the members' iteration times that :func:`formulation.placement.sampled.slowest_iterations`
predicts (the event graph of the group's pins, phase durations drawn from each member's measured
phase samples on the group's pools, the warm switches of shared nodes) is within every member's SLO,
and the join's own iteration (the running members' one delayed iteration and the newcomer's first)
is within it too on the slowest samples (:func:`join_ok`). A new group is opened on the cheapest
configuration on which the job's own slowest sampled iteration is within its SLO
(:meth:`SampledAcceptance.alone`; the cheapest that fits when none is). The samples are each job's
:class:`simulator.profiles.PhaseProfile` (the phase model's rollouts and training phases measured on
seeds of its own: what past iterations of the job show), never the draws of the trace being run.

With ``timed`` (the trace's ``timed`` rule) a join into a running group whose members roll out on
nodes of their own is judged on the group's state now instead (:meth:`SampledAcceptance.timed_join`,
:func:`formulation.placement.sampled.join_forward`): the ring run forward from the members' phase
starts, the newcomer's first rollout started at the earliest moment that keeps every iteration within
its SLO on every run; the placer starts it then. ``upper_end`` adds to each phase's samples the
estimated upper end of their range (:func:`with_upper_end`).

Nothing here is fitted to a trace: the quantile (default 1.0, the slowest simulated iteration), the
number of simulated meta-iterations and runs (:data:`RUNS`, :data:`ITERATIONS`), the ten start times
tried over one period and the upper-end estimate are stated rules.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from formulation.placement.evaluate import REL_TOL, Config, Index
from formulation.placement.sampled import RingState, SampledMember, join_forward, slowest_iterations


RUNS, ITERATIONS = 64, 64  # simulated runs of the event graph and meta-iterations each (the slowest over them counts)


def with_upper_end(samples: tuple) -> tuple:
    """The samples and the estimated upper end of their range, ``max + (max - min) / (n - 1)`` (the
    unbiased estimate of a uniform distribution's upper bound from ``n`` samples): phase times a job
    has not shown yet but whose spread its samples suggest."""
    x = np.asarray(samples, dtype=float)
    if x.size < 2:
        return tuple(samples)
    return tuple(samples) + (float(x.max() + (x.max() - x.min()) / (x.size - 1)),)


class SampledAcceptance:
    """``accept(group, configuration, job)`` for :class:`formulation.placement.greedy.Packer`."""

    def __init__(self, idx: Index, jobs: dict, groups_of: Callable[[int], list], quantile: float = 1.0,
                 iterations: int = ITERATIONS, reps: int = RUNS, seed: int = 0, join: bool = True, timed: bool = False,
                 live: Optional[Callable[[int], Optional[tuple]]] = None, starts: int = 10, upper_end: bool = False) -> None:
        """``jobs``: name -> :class:`simulator.trace.TraceJob`; ``groups_of(g)``: the members (job
        indices) of group ``g`` in order. ``join``: also check the join's own iteration."""
        self.idx, self.jobs, self.groups_of = idx, jobs, groups_of
        self.quantile, self.iterations, self.reps, self.seed, self.join = quantile, iterations, reps, seed, join
        self.timed, self.live, self.starts = timed, live, starts  # live(g): (now, the group's run) or None
        self.upper_end = upper_end  # each phase's samples gain the estimated upper end of its range (with_upper_end)
        self.start_at: dict = {}  # (group, configuration, job) -> the start of its first rollout a timed join chose
        # a running member moving to another group (draining its own): the seconds before it can start
        # there, per (configuration, job); set, a join is accepted only when timed (never untimed)
        self.moving: Optional[Callable[[int, int], float]] = None
        self.j_of = {n: i for i, n in enumerate(idx.names)}
        self.calls = 0
        self.refused = 0
        self._memo: dict = {}

    def members(self, k: int, js: list) -> list[SampledMember]:
        """The group's members on configuration ``k`` with their pins: pinned configurations give
        each member rollout nodes of its own, whole pools share every node."""
        c: Config = self.idx.configs[k]
        out = []
        tn = frozenset(f"t{i}" for i in range(c.train_nodes))
        for pos, j in enumerate(js):
            job = self.jobs[self.idx.names[j]]
            r = self.idx.own_nodes(k, j) if c.own else c.rollout_nodes  # own-sized: the member's own count
            w = Config(c.rollout_type, r, c.train_type, c.train_nodes) if c.own else c.whole()
            prof = job.profile(w)
            sw_r, sw_t = job.switch_s(w)
            rn = (frozenset(f"r{pos}.{i}" for i in range(r)) if c.pinned
                  else frozenset(f"r{i}" for i in range(r)))
            ra, tb = tuple(prof.rollout_s), tuple(prof.train_s)
            if self.upper_end:
                ra, tb = with_upper_end(ra), with_upper_end(tb)
            out.append(SampledMember(self.idx.names[j], ra, tb, float(prof.sync_s), rn, tn, float(sw_r), float(sw_t)))
        return out

    def slowest(self, k: int, js: list) -> np.ndarray:
        key = (k, tuple(js))
        if key not in self._memo:
            self._memo[key] = slowest_iterations(self.members(k, js), self.quantile, self.iterations, self.reps, self.seed)
        return self._memo[key]

    def join_ok(self, old: list, k: int, j: int) -> bool:
        """The join's iteration on the slowest samples: the running members wait at most once for the
        newcomer's phase on a shared ring (their slowest iteration before the join, on the new pools,
        plus the newcomer's longest phase there), and the newcomer's first iteration waits at most
        once for the longest phase under way on each ring it shares (module docstring of
        :mod:`formulation.placement.greedy`: ``P + d_j`` and ``tot_j + W``, on samples)."""
        ms = self.members(k, old + [j])
        new = ms[-1]
        c = self.idx.configs[k]
        tol = 1 + REL_TOL
        occ_r = [max(m.rollout_s) + (m.rollout_switch_s if not c.pinned else 0.0) for m in ms]
        occ_t = [max(m.train_s) + m.sync_s + m.train_switch_s for m in ms]
        before = self.slowest(k, old)
        d_j = max(occ_t[-1], 0.0 if c.pinned else occ_r[-1])
        slo = self.idx.slo
        if np.any(before + d_j > slo[old] * tol):
            return False
        wait = max(occ_t[:-1]) + (0.0 if c.pinned else max(occ_r[:-1]))
        first = max(new.rollout_s) + max(new.train_s) + new.sync_s + new.train_switch_s + (0.0 if c.pinned else new.rollout_switch_s)
        return bool(first + wait <= slo[j] * tol)

    def ring_states(self, run, now: float, k: int) -> Optional[list[RingState]]:
        """The running group's training ring from the member whose turn it is, as the scheduler sees
        it (phase starts, last iteration ends, each member's own phase samples on configuration
        ``k``'s pools: never the run's), or None where the timed join does not apply (no run, a member
        still joining, a whole-pool rollout ring)."""
        if run is None or not run.active() or not run.train_nodes:
            return None
        node = next(iter(run.train_nodes.values()))
        if any(m.joining for m in run.members.values()) or set(node.ring) != set(run.members):
            return None
        if any(len(n.ring) > 1 for n in run.nodes.values()):  # members share rollout nodes
            return None
        order = node.ring[node.ptr:] + node.ring[:node.ptr]
        if node.owner is not None and order[0] != node.owner:
            return None
        out = []
        for name in order:
            mem = run.members[name]
            j = self.j_of[name]
            sm = self.members(k, [j])[0]
            last = mem.last_end if mem.last_end is not None else (mem.rollout_starts[0] if mem.rollout_starts else now)
            state: dict[str, Optional[float]] = {"rollout_start": None, "training_start": None}
            if mem.state == "train":
                state["training_start"] = mem.train_start
            elif mem.state in ("rollout", "tail"):
                state["rollout_start"] = mem.phase_start
            elif mem.state == "ready_r":
                state["rollout_start"] = now
            out.append(RingState(name, sm.rollout_s, sm.train_s, sm.sync_s, sm.train_switch_s, float(self.idx.slo[j]), float(last),
                                 **state))
        return out

    def timed_join(self, g: int, old: list, k: int, j: int) -> Optional[bool]:
        """The join on the running group's state (:func:`formulation.placement.sampled.join_forward`):
        the earliest start of the newcomer's first rollout, from now over one period of the group in
        ``starts`` steps, at which every member's iterations and the newcomer's first stay within the
        SLOs on every simulated run; recorded in :attr:`start_at`. None where it does not apply."""
        if self.live is None or not self.idx.configs[k].pinned:
            return None
        got = self.live(g)
        if got is None:
            return None
        now, run = got
        ring = self.ring_states(run, now, k)
        if ring is None or {r.name for r in ring} != {self.idx.names[i] for i in old}:
            return None  # a member admitted but not started yet (its first rollout timed later): not on the ring
        new = self.members(k, [j])[0]
        # its first iteration counts from now (a moving member's last iteration ended now), its start
        # no earlier than its state can be on the new pools
        mine = RingState(new.name, new.rollout_s, new.train_s, new.sync_s, new.train_switch_s, float(self.idx.slo[j]), now)
        earliest = now + (self.moving(k, j) if self.moving is not None else 0.0)
        period = float(self.slowest(k, old).max())
        rounds = 3 * (len(ring) + 1) + 4
        tol = 1 + REL_TOL
        slo = np.array([r.slo_s for r in ring])
        # (each run stops at its first iteration above its SLO: the same answer, most starts of a refused join cut short)
        limits = (slo * tol, mine.slo_s * tol)
        for step in range(self.starts + 1):
            start = earliest + period * step / self.starts
            worst, worst_new = join_forward(ring, mine, now, start, rounds, self.reps, self.seed,
                                            counted_from=now if self.moving is not None else None, stop_above=limits)
            if np.all(worst <= slo * tol) and worst_new <= mine.slo_s * tol:
                self.start_at[(g, k, j)] = start
                return True
        return False

    def alone(self, k: int, j: int) -> bool:
        """A new group of ``j`` alone on configuration ``k``: its slowest sampled iteration there is
        within its SLO (a job whose SLO is about its solo iteration on the spec's pools gets a
        faster configuration where one passes, e.g. rollout nodes of its own on two nodes)."""
        self.calls += 1
        ok = bool(self.slowest(k, [j])[0] <= self.idx.slo[j] * (1 + REL_TOL))
        if not ok:
            self.refused += 1
        return ok

    def __call__(self, g: int, k: int, j: int) -> bool:
        self.calls += 1
        old = list(self.groups_of(g))
        js = old + [j]
        ok = bool(np.all(self.slowest(k, js) <= self.idx.slo[js] * (1 + REL_TOL)))
        if ok and self.join and old:
            timed = self.timed_join(g, old, k, j) if self.timed else None
            if timed is None and self.moving is not None:
                ok = False  # a move is only ever timed
            else:
                ok = self.join_ok(old, k, j) if timed is None else timed
        if not ok:
            self.refused += 1
        return ok


def sampled_acceptance(packer, jobs: dict, quantile: float = 1.0, join: bool = True, seed: Optional[int] = 0,
                       timed: bool = False, live: Optional[Callable[[int], Optional[tuple]]] = None,
                       upper_end: bool = False) -> SampledAcceptance:
    """A :class:`SampledAcceptance` bound to ``packer``'s groups, set as its ``accept``."""
    acc = SampledAcceptance(packer.idx, jobs, lambda g: packer.groups[g], quantile=quantile, seed=seed or 0, join=join,
                            timed=timed, live=live, upper_end=upper_end)
    packer.accept = acc
    packer.accept_alone = acc.alone
    return acc
