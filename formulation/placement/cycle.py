"""Cycle time of a co-execution group: the period of its fixed-order round-robin schedule.

This module is the one definition of a group's cycle time. The plan, the checker, the optimisers
(through the closed form below) and the simulator all use it.

The schedule
------------
A group runs a *meta-iteration*: in a fixed order ``1..m`` each member runs one rollout (on its
rollout nodes) and one training step (on its training nodes), then pushes its new weights to its
rollout engines (weight sync). A node runs one phase at a time, in the group's order; phase
``k`` of a member cannot start before its phase ``k-1`` is done.

Event graph (max-plus)
----------------------
One event per phase start: ``R_i`` (rollout of member ``i``) and ``T_i`` (its training). An arc
``u -> v`` with weight ``w`` and delay ``d`` says ``x_v(k) >= x_u(k - d) + w`` for the start
times ``x(k)`` of meta-iteration ``k``:

* ``R_i -> T_i``: weight ``a_i`` (rollout seconds), delay 0 -- training waits for the rollout;
* ``T_i -> R_i``: weight ``b_i + s_i`` (training plus weight-sync seconds), delay 1 -- the next
  rollout of ``i`` waits for its new weights;
* per node, a ring through the phases of the members pinned to that node in the group's order:
  ``R_i -> R_j`` (next member on a rollout node) with weight ``a_i`` and ``T_i -> T_j`` with
  weight ``b_i + s_i``; the wrap-around arc from the last member back to the first carries
  delay 1 (a lone member has a self-loop). The training nodes stay busy through the weight
  sync: the trainer is the sender of the weights, and the next member's training starts on
  them only after the push (this is the *occupancy* of a training node, ``b_i + s_i``).
* **warm switches**: on a node shared by two or more members (a ring of length >= 2) the node
  changes member after every phase: as soon as member ``i``'s phase there is done it loads the
  next member ``j``'s state from host DRAM (a *prefetch*: ``j``'s state on that node does not
  change while ``j`` runs its other phase elsewhere), so the ring arc ``R_i -> R_j`` weighs
  ``a_i + sr_j`` and ``T_i -> T_j`` weighs ``b_i + s_i + st_j``, where ``sr_j = min(sigma_r,j,
  b_j + s_j)`` and ``st_j = min(sigma_t,j, a_j)`` are ``j``'s warm switch seconds
  (:func:`simulator.phasetimes.switch_s`) capped at its other phase. The arcs ``R_i -> T_i`` and
  ``T_i -> R_i`` do not carry them: the switch overlaps the member's wait for its own other
  phase, so a member's own cycle stays ``a_i + b_i + s_i`` (exact for a lone member too: a
  self-loop ring, no switch). The simulator's group runner
  (:mod:`simulator.groups`) runs exactly this schedule. The cap binds only when a switch outlasts
  the member's other phase (no shipped scenario: switches are 1.5-2 s, phases tens to hundreds of
  seconds); it makes a ring's sum never exceed its members' own cycles, so that the closed form
  below holds for every group size and the solvers need no group-size-dependent rows (where it
  binds, the runner, which does not cap, is slower than planned).

The start times of the earliest schedule grow linearly, ``x_v(k) ~ k * lambda_v``, where the
cycle time ``lambda_v`` of event ``v`` is the **maximum cycle ratio** (total weight over total
delay) over the cycles of the graph from which ``v`` can be reached (max-plus spectral theory;
Baccelli, Cohen, Olsder, Quadrat, *Synchronization and Linearity*, 1992, ch. 3). There is no
cycle of delay 0 (every ring arc that goes backwards in the order and every ``T -> R`` arc
carries one), so the ratio is finite. A member's cycle time is ``lambda`` of its events (``R_i``
and ``T_i`` lie on one cycle, so they agree); the group's cycle time is the maximum over its
members. :func:`cycle_times` computes it with Howard's policy iteration (Cochet-Terrasson,
Cohen, Gaubert, McGettrick, Quadrat 1998; Dasdan 2004 for the ratio form) without any solver;
:func:`cycle_times_by_enumeration` enumerates every simple cycle (an oracle for small groups);
:func:`schedule` runs the max-plus recurrence itself (what a discrete-event simulator does) so
its long-run period can be compared with both.

Closed form for members on the whole pools
------------------------------------------
When every member is pinned to every node of both pools (the groups the optimisers build), the
period is exactly::

    lambda = max( sum_i (a_i + sr_i),  sum_i (b_i + s_i + st_i),  max_i (a_i + b_i + s_i) )

with ``sr = st = 0`` for a lone member (and the capped switches above in groups of two or more;
for a lone member the capped terms could be kept too: ``a + sr <= a + b + s``).

Proof. An arc leaving ``R_i`` weighs ``a_i`` plus, on a ring, the switch of the member it enters,
and likewise on the training side; a simple cycle enters each event at most once, so it weighs
at most ``A + B`` (the two ring sums, switches included). A cycle that stays in
one pool is a ring: ``A`` or ``B`` over delay 1. A cycle that visits both pools and has delay 1
must go ``R_i -> ... -> R_k`` and ``T_k -> ... -> T_l`` forward in the order and return
``T_l -> R_l`` to ``R_i`` with no wrap-around, so ``l <= i <= k <= l``: it is a member's own
cycle ``a_i + b_i + s_i``. Every other cycle has delay >= 2 and ratio <= (A + B) / 2 <=
max(A, B). These bounds are attained, so ``lambda`` is the maximum of the three terms.
:func:`closed_form` returns it.

Had the weight sync not occupied the training nodes (ring arcs out of ``T_i`` weighing ``b_i``
only), the maximum of the three terms would only be a lower bound: with ``a = (1, 0, 0)``,
``b = (0, 1, 0)``, ``s = (0, 0, 1)`` the cycle ``R1 T1 T2 T3 R3 R1`` weighs 3 over delay 2, a
period of 1.5 against max(1, 1, 1) = 1. Counting the sync on the training side removes that gap
and costs ``sum s_i`` (well under a second for the estimators' weight syncs) in the second term.

Members pinned to fewer nodes share fewer rings: every cycle of their graph maps to a closed walk
of the whole-pool graph with at least its weight and the same delay, so their cycle time is at
most the closed form over the same phase times, and it is shorter when members sit on disjoint
nodes (two members on disjoint nodes do not wait for each other at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np


@dataclass(frozen=True)
class Member:
    """One member of a group: phase seconds and the pool nodes it is pinned to."""

    name: str
    rollout_s: float
    train_s: float
    sync_s: float
    rollout_nodes: frozenset = field(default_factory=frozenset)
    train_nodes: frozenset = field(default_factory=frozenset)
    rollout_switch_s: float = 0.0  # warm switch a rollout node pays to load this member (shared nodes only)
    train_switch_s: float = 0.0  # the same on a training node

    @property
    def solo_s(self) -> float:
        return self.rollout_s + self.train_s + self.sync_s

    @property
    def rollout_ring_s(self) -> float:
        """Weight of this member's arc on a shared rollout ring: ``a + min(sigma_r, b + s)``."""
        return self.rollout_s + min(self.rollout_switch_s, self.train_s + self.sync_s)

    @property
    def train_ring_s(self) -> float:
        """Weight of this member's arc on a shared training ring: ``b + s + min(sigma_t, a)``."""
        return self.train_s + self.sync_s + min(self.train_switch_s, self.rollout_s)


@dataclass(frozen=True)
class Arc:
    src: int
    dst: int
    weight: float
    delay: int


@dataclass
class CycleResult:
    """Cycle time of each member (seconds per meta-iteration) and of the group."""

    per_member: dict[str, float]
    period: float
    critical: list[str]  # events on a critical cycle, e.g. ["R:job-a", "T:job-a"]

    def of(self, name: str) -> float:
        return self.per_member[name]


def _event_name(members: Sequence[Member], v: int) -> str:
    return ("R:" if v % 2 == 0 else "T:") + members[v // 2].name


def event_graph(members: Sequence[Member]) -> list[Arc]:
    """Arcs of the event graph of ``members`` in this order (event ``2i`` = R_i, ``2i+1`` = T_i)."""
    best: dict[tuple[int, int, int], float] = {}

    def add(u: int, v: int, w: float, d: int) -> None:
        key = (u, v, d)
        if best.get(key, -np.inf) < w:
            best[key] = w

    for i, m in enumerate(members):
        add(2 * i, 2 * i + 1, m.rollout_s, 0)
        add(2 * i + 1, 2 * i, m.train_s + m.sync_s, 1)
    for side, attr in ((0, "rollout_nodes"), (1, "train_nodes")):
        nodes: dict[object, list[int]] = {}
        for i, m in enumerate(members):
            for n in getattr(m, attr):
                nodes.setdefault(n, []).append(i)
        for ring in nodes.values():
            for pos, i in enumerate(ring):
                j = ring[(pos + 1) % len(ring)]
                mi, mj = members[i], members[j]
                w = mi.rollout_s if side == 0 else mi.train_s + mi.sync_s
                if len(ring) > 1:  # the node loads the next member's state once this phase is done
                    w += mj.rollout_ring_s - mj.rollout_s if side == 0 else mj.train_ring_s - mj.train_s - mj.sync_s
                add(2 * i + side, 2 * j + side, w, 1 if pos + 1 == len(ring) else 0)
    return [Arc(u, v, w, d) for (u, v, d), w in sorted(best.items())]


def _in_arcs(n: int, arcs: Iterable[Arc]) -> list[list[Arc]]:
    ins: list[list[Arc]] = [[] for _ in range(n)]
    for a in arcs:
        ins[a.dst].append(a)
    return ins


def howard(n: int, arcs: Sequence[Arc], max_iter: int = 1000) -> tuple[np.ndarray, list[int]]:
    """Cycle time of every event: the max cycle ratio over cycles upstream of it (Howard).

    Policy iteration over "which in-arc sets the start of each event" (multichain Howard for
    max-plus recurrences with delays). Returns ``(chi, critical)``, where ``critical`` lists the
    events of one cycle attaining the largest ratio. Every event needs at least one in-arc and no
    cycle may have delay 0.
    """
    ins = _in_arcs(n, arcs)
    if any(not lst for lst in ins):
        raise ValueError("every event needs an in-arc")
    scale = max(1.0, max(abs(a.weight) for a in arcs))
    eps = 1e-10 * scale
    pol = [max(lst, key=lambda a: a.weight) for lst in ins]  # chosen in-arc per event
    chi = np.zeros(n)
    eta = np.zeros(n)
    for _ in range(max_iter):
        # value determination: follow the policy upstream to its cycles
        chi[:] = np.nan
        state = [0] * n  # 0 new, 1 on stack, 2 done
        for s in range(n):
            if state[s]:
                continue
            path = []
            v = s
            while state[v] == 0:
                state[v] = 1
                path.append(v)
                v = pol[v].src
            if state[v] == 1:  # found a new cycle starting at v
                cyc = path[path.index(v):]
                w = sum(pol[u].weight for u in cyc)
                d = sum(pol[u].delay for u in cyc)
                if d <= 0:
                    raise ValueError("a cycle of delay 0 (deadlock) in the event graph")
                r = w / d
                # pol[cyc[t]].src == cyc[t+1] (and cyc[-1] -> cyc[0]): fix eta = 0 at the last
                # one and fill the others backwards, each after its predecessor
                root = cyc[-1]
                chi[root], eta[root] = r, 0.0
                for u in reversed(cyc[:-1]):
                    a = pol[u]
                    chi[u] = r
                    eta[u] = a.weight - r * a.delay + eta[a.src]
                for u in cyc:
                    state[u] = 2
                path = path[: path.index(v)]
            # the rest of the path hangs off finished nodes: fill from the end backwards
            for u in reversed(path):
                a = pol[u]
                chi[u] = chi[a.src]
                eta[u] = a.weight - chi[u] * a.delay + eta[a.src]
                state[u] = 2
        # policy improvement, first on chi, then on eta
        changed = False
        for v in range(n):
            best_a, best_c = pol[v], chi[pol[v].src]
            for a in ins[v]:
                if chi[a.src] > best_c + eps:
                    best_a, best_c = a, chi[a.src]
            if best_a is not pol[v]:
                pol[v] = best_a
                changed = True
        if not changed:
            for v in range(n):
                cur = pol[v]
                best_a, best_val = cur, cur.weight - chi[v] * cur.delay + eta[cur.src]
                for a in ins[v]:
                    if abs(chi[a.src] - chi[v]) <= eps:
                        val = a.weight - chi[v] * a.delay + eta[a.src]
                        if val > best_val + eps:
                            best_a, best_val = a, val
                if best_a is not cur:
                    pol[v] = best_a
                    changed = True
        if not changed:
            break
    else:  # pragma: no cover - Howard converges in a handful of iterations in practice
        raise RuntimeError("Howard's policy iteration did not converge")
    top = int(np.argmax(chi))
    seen, v = [], top
    while v not in seen:
        seen.append(v)
        v = pol[v].src
    critical = seen[seen.index(v):][::-1]
    return chi, critical


def _result(members: Sequence[Member], chi: np.ndarray, critical: list[int]) -> CycleResult:
    per = {m.name: float(max(chi[2 * i], chi[2 * i + 1])) for i, m in enumerate(members)}
    return CycleResult(per, max(per.values()) if per else 0.0, [_event_name(members, v) for v in critical])


def cycle_times(members: Sequence[Member]) -> CycleResult:
    """Cycle time of each member and of the group, members in round-robin order (Howard)."""
    if not members:
        return CycleResult({}, 0.0, [])
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        raise ValueError("member names must be unique")
    arcs = event_graph(members)
    chi, crit = howard(2 * len(members), arcs)
    return _result(members, chi, crit)


def cycle_time(members: Sequence[Member]) -> float:
    """The group's cycle time (seconds per meta-iteration): the slowest member's."""
    return cycle_times(members).period


def whole_pool_cycle_times(members: Sequence[Member]) -> CycleResult:
    """Cycle times of members that are all pinned to every node of both pools, by the closed form
    (the plans the optimisers build; :func:`cycle_times` on the same members agrees, and the
    checker recomputes it that way). The rings tie every member's events into one strongly
    connected graph, so every member's cycle time is the group's period. The critical cycle is
    the rollout ring, the training ring, or one member's own rollout-training cycle, whichever
    attains the maximum (rings first on ties)."""
    if not members:
        return CycleResult({}, 0.0, [])
    if len({m.name for m in members}) != len(members):
        raise ValueError("member names must be unique")
    a = [m.rollout_s for m in members]
    bs = [m.train_s + m.sync_s for m in members]
    period = closed_form(a, bs, [m.rollout_switch_s for m in members], [m.train_switch_s for m in members])
    tot = [x + y for x, y in zip(a, bs)]
    if len(members) > 1:
        a = [m.rollout_ring_s for m in members]
        bs = [m.train_ring_s for m in members]
    if sum(a) >= period:
        crit = [f"R:{m.name}" for m in members]
    elif sum(bs) >= period:
        crit = [f"T:{m.name}" for m in members]
    else:
        i = max(range(len(members)), key=lambda i: tot[i])
        crit = [f"R:{members[i].name}", f"T:{members[i].name}"]
    return CycleResult({m.name: period for m in members}, period, crit)


def simple_cycles(n: int, arcs: Sequence[Arc]):
    """Every simple cycle as a list of arcs (Johnson-free DFS from each cycle's smallest event)."""
    out_arcs: list[list[Arc]] = [[] for _ in range(n)]
    for a in arcs:
        out_arcs[a.src].append(a)
    for s in range(n):
        stack = [(s, iter(out_arcs[s]))]
        path: list[Arc] = []
        on_path = {s}
        while stack:
            v, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                if path:
                    on_path.discard(path.pop().dst)
                continue
            if nxt.dst == s:
                yield path + [nxt]
            elif nxt.dst > s and nxt.dst not in on_path:
                path.append(nxt)
                on_path.add(nxt.dst)
                stack.append((nxt.dst, iter(out_arcs[nxt.dst])))


def cycle_times_by_enumeration(members: Sequence[Member]) -> CycleResult:
    """The same cycle times by enumerating every simple cycle: an oracle for small groups."""
    n = 2 * len(members)
    arcs = event_graph(members)
    succ: list[set[int]] = [set() for _ in range(n)]
    for a in arcs:
        succ[a.src].add(a.dst)
    reach = []
    for s in range(n):
        seen, todo = {s}, [s]
        while todo:
            u = todo.pop()
            for v in succ[u]:
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        reach.append(seen)
    chi = np.full(n, -np.inf)
    best_cycle: list[int] = []
    best_ratio = -np.inf
    for cyc in simple_cycles(n, arcs):
        r = sum(a.weight for a in cyc) / sum(a.delay for a in cyc)
        if r > best_ratio:
            best_ratio, best_cycle = r, [a.src for a in cyc]
        downstream = reach[cyc[0].src]
        for v in downstream:
            chi[v] = max(chi[v], r)
    return _result(members, chi, best_cycle)


def closed_form(rollout_s: Sequence[float], occupancy_train_s: Sequence[float],
                rollout_switch_s: Optional[Sequence[float]] = None, train_switch_s: Optional[Sequence[float]] = None) -> float:
    """Cycle time of members on the whole pools:
    max(sum (a + sr), sum (b + s + st), max (a + b + s)), the capped switches ``sr``, ``st`` counted
    only in groups of two or more members (see the module docstring).

    ``occupancy_train_s`` is training plus weight sync per member; the switches default to 0.
    """
    a = np.asarray(rollout_s, dtype=float)
    bs = np.asarray(occupancy_train_s, dtype=float)
    if a.size == 0:
        return 0.0
    tot = a + bs
    ring_a, ring_bs = a, bs
    if a.size > 1:
        if rollout_switch_s is not None:
            ring_a = a + np.minimum(np.asarray(rollout_switch_s, dtype=float), bs)
        if train_switch_s is not None:
            ring_bs = bs + np.minimum(np.asarray(train_switch_s, dtype=float), a)
    return float(max(ring_a.sum(), ring_bs.sum(), tot.max()))


def schedule(members: Sequence[Member], iterations: int) -> np.ndarray:
    """Earliest start times of the fixed-order schedule: ``x[k, e]`` for meta-iteration ``k``.

    Runs the max-plus recurrence that the event graph defines (each event starts as soon as all
    of its in-arcs allow), starting from time 0. ``x[k, 2i]`` is the rollout start of member
    ``i`` in meta-iteration ``k``, ``x[k, 2i+1]`` its training start. The long-run slope of
    ``x`` is :func:`cycle_times`; this is what a discrete-event simulation of the group observes.
    """
    n = 2 * len(members)
    arcs = event_graph(members)
    zero = [a for a in arcs if a.delay == 0]
    one = [a for a in arcs if a.delay == 1]
    # zero-delay arcs go forward in the order (R_i before T_i, ring forward): topological order
    indeg = [0] * n
    for a in zero:
        indeg[a.dst] += 1
    order = [v for v in range(n) if indeg[v] == 0]
    k = 0
    succ: list[list[Arc]] = [[] for _ in range(n)]
    for a in zero:
        succ[a.src].append(a)
    while k < len(order):
        for a in succ[order[k]]:
            indeg[a.dst] -= 1
            if indeg[a.dst] == 0:
                order.append(a.dst)
        k += 1
    if len(order) != n:
        raise ValueError("a cycle of delay 0 (deadlock) in the event graph")
    ins0 = _in_arcs(n, zero)
    x = np.zeros((iterations, n))
    for it in range(iterations):
        base = np.zeros(n)
        if it > 0:
            for a in one:
                base[a.dst] = max(base[a.dst], x[it - 1, a.src] + a.weight)
        for v in order:
            t = base[v]
            for a in ins0[v]:
                t = max(t, x[it, a.src] + a.weight)
            x[it, v] = t
    return x
