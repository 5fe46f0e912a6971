"""Admission that keeps every member's sampled iteration times within its SLO (the trace's ``sampled`` rule).

A join (fill a bubble, extend the rollout pool) is accepted when, for the group it makes, the
slowest of the members' iteration times that :func:`formulation.placement.sampled.slowest_iterations`
predicts (the event graph of the group's pins, phase durations drawn from each member's measured
phase samples on the group's pools, the warm switches of shared nodes) is within every member's SLO,
and the join's own iteration (the running members' one delayed iteration and the newcomer's first)
is within it too on the slowest samples (:func:`join_ok`). The samples are each job's
:class:`simulator.profiles.PhaseProfile` (the phase model's rollouts and training phases measured on
seeds of its own: what past iterations of the job show), never the draws of the trace being run.

Nothing here is fitted to a trace: the quantile (default 1.0, the slowest simulated iteration), the
number of simulated meta-iterations and runs are stated parameters.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from formulation.placement.evaluate import REL_TOL, Config, Index
from formulation.placement.sampled import SampledMember, slowest_iterations


class SampledAcceptance:
    """``accept(group, configuration, job)`` for :class:`formulation.placement.greedy.Packer`."""

    def __init__(self, idx: Index, jobs: dict, groups_of: Callable[[int], list], quantile: float = 1.0,
                 iterations: int = 64, reps: int = 16, seed: int = 0, join: bool = True) -> None:
        """``jobs``: name -> :class:`simulator.trace.TraceJob`; ``groups_of(g)``: the members (job
        indices) of group ``g`` in order. ``join``: also check the join's own iteration."""
        self.idx, self.jobs, self.groups_of = idx, jobs, groups_of
        self.quantile, self.iterations, self.reps, self.seed, self.join = quantile, iterations, reps, seed, join
        self.calls = 0
        self.refused = 0
        self._memo: dict = {}

    def members(self, k: int, js: list) -> list[SampledMember]:
        """The group's members on configuration ``k`` with their pins: pinned configurations give
        each member rollout nodes of its own, whole pools share every node."""
        c: Config = self.idx.configs[k]
        w = c.whole()
        out = []
        tn = frozenset(f"t{i}" for i in range(c.train_nodes))
        for pos, j in enumerate(js):
            job = self.jobs[self.idx.names[j]]
            prof = job.profile(w)
            sw_r, sw_t = job.switch_s(w)
            rn = (frozenset(f"r{pos}.{i}" for i in range(c.rollout_nodes)) if c.pinned
                  else frozenset(f"r{i}" for i in range(c.rollout_nodes)))
            out.append(SampledMember(self.idx.names[j], tuple(prof.rollout_s), tuple(prof.train_s), float(prof.sync_s), rn, tn,
                                     float(sw_r), float(sw_t)))
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

    def __call__(self, g: int, k: int, j: int) -> bool:
        self.calls += 1
        old = list(self.groups_of(g))
        js = old + [j]
        ok = bool(np.all(self.slowest(k, js) <= self.idx.slo[js] * (1 + REL_TOL)))
        if ok and self.join and old:
            ok = self.join_ok(old, k, j)
        if not ok:
            self.refused += 1
        return ok


def sampled_acceptance(packer, jobs: dict, quantile: float = 1.0, join: bool = True, seed: Optional[int] = 0) -> SampledAcceptance:
    """A :class:`SampledAcceptance` bound to ``packer``'s groups, set as its ``accept``."""
    acc = SampledAcceptance(packer.idx, jobs, lambda g: packer.groups[g], quantile=quantile, seed=seed or 0, join=join)
    packer.accept = acc
    return acc
