"""Per-iteration times of a group's members under sampled phase times (the event graph, drawn).

The checker's cycle time (:mod:`formulation.placement.cycle`) is the period of the fixed-order
schedule with one number per phase. A member's SLO counts *every* iteration, and with phase times
that vary from one iteration to the next the gap between two of a member's iteration ends varies
too: a co-member whose rollout runs long holds the training ring's turn, and everyone behind it
waits. The period on the p90 tables says nothing about those gaps, nor about the rings' transient
after a join (on the Pollux-derived trace, of the 21 iterations Weave's three moves miss, 4 come in a
fixed membership and 15 at or after a join: ``results/reproductions/trace-baselines.md``).

:func:`iteration_gaps` runs the same event graph (one event per phase start, the member's own arcs,
one ring per node in the group's order; :func:`formulation.placement.cycle.event_graph`) as a
max-plus recurrence whose durations are drawn each iteration from the members' measured phase
samples (what a rollout manager knows from past iterations: never the draws of a run being
predicted). An arc weighs its source event's duration in the source's iteration; a ring arc on a
shared node (a ring of two or more members) adds the warm switch of the member it enters, which the
node loads as soon as the source's phase is done (the prefetch the simulator's group runner does,
:mod:`simulator.groups`); a member's own arcs carry no switch, and on a node of its own a member
pays none.

A member's iteration is the gap between two successive training ends (training plus weight sync),
as the simulator measures it. :func:`slowest_iterations` returns, per member, the given quantile
of those gaps over ``reps`` independent runs of ``iterations`` meta-iterations after a warm-up
(``quantile = 1``: the slowest simulated iteration). Numbers only: no solver, no simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np


@dataclass(frozen=True)
class SampledMember:
    """A member with phase samples (seconds) instead of one number per phase."""

    name: str
    rollout_s: tuple  # samples of its rollout on its rollout nodes
    train_s: tuple  # samples of its training (log-probs included) on its training nodes
    sync_s: float
    rollout_nodes: frozenset = field(default_factory=frozenset)
    train_nodes: frozenset = field(default_factory=frozenset)
    rollout_switch_s: float = 0.0  # charged before each rollout on a shared rollout node
    train_switch_s: float = 0.0  # charged before each training on a shared training node


def _rings(members: Sequence[SampledMember]) -> tuple[list, list]:
    """Arcs ``(src, dst, delay)`` of the event graph (event ``2i`` = rollout of member ``i``,
    ``2i + 1`` its training) and whether each member's rollout / training ring is shared."""
    arcs = set()
    shared = [[False, False] for _ in members]
    for i in range(len(members)):
        arcs.add((2 * i, 2 * i + 1, 0))
        arcs.add((2 * i + 1, 2 * i, 1))
    for side, attr in ((0, "rollout_nodes"), (1, "train_nodes")):
        nodes: dict = {}
        for i, m in enumerate(members):
            for n in getattr(m, attr):
                nodes.setdefault(n, []).append(i)
        for ring in nodes.values():
            if len(ring) < 2:
                continue
            for pos, i in enumerate(ring):
                shared[i][side] = True
                j = ring[(pos + 1) % len(ring)]
                arcs.add((2 * i + side, 2 * j + side, 1 if pos + 1 == len(ring) else 0))
    return sorted(arcs), shared


def run(members: Sequence[SampledMember], iterations: int, reps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence from a common start: event start times ``x`` and drawn durations ``dur``,
    both of shape ``(iterations, reps, 2 m)`` (event ``2i`` = rollout of member ``i``, ``2i + 1``
    its training)."""
    m = len(members)
    arcs, shared = _rings(members)
    n = 2 * m
    zero = [(u, v) for u, v, d in arcs if d == 0]
    one = [(u, v) for u, v, d in arcs if d == 1]
    # zero-delay arcs go forward in the order: a topological order of the events
    indeg = [0] * n
    for _, v in zero:
        indeg[v] += 1
    order = [v for v in range(n) if indeg[v] == 0]
    k = 0
    while k < len(order):
        for u, v in zero:
            if u == order[k]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    order.append(v)
        k += 1
    if len(order) != n:
        raise ValueError("a cycle of delay 0 (deadlock) in the event graph")
    ins0: list[list[int]] = [[] for _ in range(n)]
    for u, v in zero:
        ins0[v].append(u)
    ins1: list[list[int]] = [[] for _ in range(n)]
    for u, v in one:
        ins1[v].append(u)
    rng = np.random.default_rng(seed)
    dur = np.empty((iterations, reps, n))
    sw = np.zeros(n)  # switch into each event on a ring arc (its node loads that member's state)
    for i, mem in enumerate(members):
        ra, tb = np.asarray(mem.rollout_s, dtype=float), np.asarray(mem.train_s, dtype=float)
        sw[2 * i] = mem.rollout_switch_s if shared[i][0] else 0.0
        sw[2 * i + 1] = mem.train_switch_s if shared[i][1] else 0.0
        dur[:, :, 2 * i] = ra[rng.integers(0, ra.size, size=(iterations, reps))]
        dur[:, :, 2 * i + 1] = tb[rng.integers(0, tb.size, size=(iterations, reps))] + mem.sync_s

    def w(it: int, u: int, v: int) -> np.ndarray:
        return x[it, :, u] + dur[it, :, u] + (sw[v] if u % 2 == v % 2 else 0.0)

    x = np.zeros((iterations, reps, n))
    for it in range(iterations):
        for v in order:
            t = np.zeros(reps)
            if it > 0:
                for u in ins1[v]:
                    t = np.maximum(t, w(it - 1, u, v))
            for u in ins0[v]:
                t = np.maximum(t, w(it, u, v))
            x[it, :, v] = t
    return x, dur


def iteration_gaps(members: Sequence[SampledMember], iterations: int = 64, reps: int = 16, seed: int = 0,
                   warmup: int | None = None) -> np.ndarray:
    """Gaps between successive training ends, shape ``(reps, iterations - warmup - 1, members)``:
    the recurrence from a common start, the first ``warmup`` meta-iterations (default ``2 m + 2``)
    dropped so that the start's transient does not count."""
    m = len(members)
    if m == 0:
        return np.zeros((reps, 0, 0))
    warm = 2 * m + 2 if warmup is None else warmup
    if iterations <= warm + 1:
        raise ValueError(f"iterations ({iterations}) must exceed the warm-up ({warm}) + 1")
    x, dur = run(members, iterations, reps, seed)
    ends = x[:, :, 1::2] + dur[:, :, 1::2]  # (iterations, reps, m): training ends
    gaps = np.diff(ends[warm:], axis=0)  # (iterations - warm - 1, reps, m)
    return np.transpose(gaps, (1, 0, 2))


def slowest_iterations(members: Sequence[SampledMember], quantile: float = 1.0, iterations: int = 64, reps: int = 16,
                       seed: int = 0) -> np.ndarray:
    """Per member, the ``quantile`` of its simulated iteration gaps (:func:`iteration_gaps`)."""
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    g = iteration_gaps(members, iterations, reps, seed)
    if g.size == 0:
        return np.zeros(len(members))
    return np.quantile(g.reshape(-1, len(members)), quantile, axis=0)


@dataclass(frozen=True)
class RingState:
    """A member of a running group's shared training ring, as a scheduler sees it now: phase samples,
    the end of its last iteration, and when it can next train (its rollout's start, or ready now)."""

    name: str
    rollout_s: tuple
    train_s: tuple
    sync_s: float
    train_switch_s: float
    slo_s: float
    last_end: float  # end of its last iteration (its first rollout start before the first)
    rollout_start: Optional[float] = None  # its rollout under way started then (None: ready to train now)
    training_start: Optional[float] = None  # its training on the nodes it holds (the ring's owner) started then, its state loaded


def join_forward(ring: Sequence[RingState], newcomer: RingState, now: float, start_s: float, rounds: int, reps: int = 16,
                 seed: int = 0, counted_from: Optional[float] = None,
                 stop_above: Optional[tuple[Union[Sequence[float], np.ndarray], float]] = None) -> tuple[np.ndarray, float]:
    """Members on rollout nodes of their own sharing one training ring, run forward from ``now`` with
    durations drawn from their samples (a phase under way: at least what has elapsed), the newcomer
    starting its first rollout at ``start_s`` and taking the training ring's turn when that rollout is
    done (before the first member that has not started training by then: what
    :meth:`simulator.groups.GroupRun.add_member` does). ``ring`` is in ring order from the member
    whose turn it is (the owner first, if the ring is busy). Returns each ring member's slowest
    iteration over ``rounds`` rounds and ``reps`` runs (the one under way included, from its last
    end) and the newcomer's slowest (its first from ``start_s``, or from ``counted_from`` where it
    counts from earlier: a member moved from another group, from the end of its last iteration there;
    ``inf`` if it got no turn).

    ``stop_above``: (each ring member's limit, the newcomer's limit): the run stops at the first
    iteration above its limit and returns what it has then (some value above its limit: the caller's
    check fails as it would have on the whole run; the draws before it are the same, so a run that
    stays within every limit returns exactly what it returns without ``stop_above``). A refused join
    tries every start of a period (:meth:`planner.instances.sampled_admission.SampledAcceptance.timed_join`),
    each a whole run without it."""
    rng = np.random.default_rng(seed)
    lim = [float("inf")] * (len(ring) + 1)
    if stop_above is not None:
        lim = [float(x) for x in stop_above[0]] + [float(stop_above[1])]
    m = len(ring)
    worst = np.zeros(m)
    worst_new = 0.0
    members = list(ring) + [newcomer]  # the newcomer is index m
    sw = [r.train_switch_s if m + 1 >= 2 else 0.0 for r in members]

    def draw(x: tuple) -> float:
        return float(x[rng.integers(0, len(x))])

    for _ in range(reps):
        last = [r.last_end for r in members]
        ready = [now] * (m + 1)
        free = now
        order = list(range(m))
        for i, r in enumerate(ring):
            if r.training_start is not None:  # the owner: its training ends after what has elapsed
                end = max(now, r.training_start + draw(r.train_s) + r.sync_s)
                worst[i] = max(worst[i], end - last[i])
                if worst[i] > lim[i]:
                    return worst, worst_new
                last[i], free = end, end
                ready[i] = end + draw(r.rollout_s)
            elif r.rollout_start is not None:
                ready[i] = max(now, r.rollout_start + draw(r.rollout_s))
        if ring and ring[0].training_start is not None:
            order = order[1:] + order[:1]  # the owner trains again after everyone else
        last[m] = start_s if counted_from is None else min(start_s, counted_from)
        ready[m] = start_s + draw(newcomer.rollout_s)
        inserted = False
        for _round in range(rounds):
            seq = []
            for i in order:
                if not inserted and ready[m] <= max(free, ready[i]):  # the newcomer's rollout is done first: it takes the turn
                    inserted = True
                    seq.append(m)
                    # the node was loading member i's state: the newcomer's whole switch comes after its claim
                    end = max(free, ready[m]) + sw[m] + draw(newcomer.train_s) + newcomer.sync_s
                    worst_new = max(worst_new, end - last[m])
                    if worst_new > lim[m]:
                        return worst, worst_new
                    last[m], free = end, end
                    ready[m] = end + draw(newcomer.rollout_s)
                seq.append(i)
                r = members[i]
                start = max(free + sw[i], ready[i])  # the node loads i's state as soon as it is free
                end = start + draw(r.train_s) + r.sync_s
                if i == m:
                    worst_new = max(worst_new, end - last[i])
                else:
                    worst[i] = max(worst[i], end - last[i])
                if (worst_new if i == m else worst[i]) > lim[i]:
                    return worst, worst_new
                last[i], free = end, end
                ready[i] = end + draw(r.rollout_s)
            order = seq
        if not inserted:
            worst_new = float("inf")
            if stop_above is not None:
                return worst, worst_new
    return worst, worst_new
