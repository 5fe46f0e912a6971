"""Hindsight references for one job's iterations: the best schedule of a declared family, and a
work-conservation bound. Both read the iteration's sampled lengths; neither is ever fed to a policy.

**Schedule family** :math:`\\mathcal{F}_{K}` (one iteration, its requests fixed by the seed): a start
allocation :math:`A_0` and up to ``K`` moves :math:`(p_m, A_m)`, :math:`p_1 \\le p_2 \\le \\dots` fractions of the
iteration's requests done (any fraction in (0, 1); the search's own moves lie on the grid ``{0.05, 0.10, ..., 0.95}``),
a move optionally "not before" a given second of the iteration; an allocation is
:math:`A = (r, f, t)` GPUs of rollout, log-prob inference and trainer with :math:`r` a multiple of the
engine TP, :math:`t` a multiple of the trainer's TP x PP, :math:`f \\ge 1`, :math:`r + f + t = G`.
A move is carried out by the simulator itself (:meth:`simulator.job.JobSim.apply`: drained engines,
woken engines, resharded trainer, restarted inference ranks, each with its migration cost) at the
first telemetry tick at which the fraction done has reached :math:`p_m` (and the second its "not before"),
exactly as a policy's decision would be. The schedule's value is the iteration time the simulator measures.
A schedule may also say, as a replayed policy's does (:func:`played_schedule`): ``fill`` (GPUs a unit-bound
receiver cannot take go to log-prob inference), ``prior`` (a later iteration of a longer run: the run starts from
the allocation held before its boundary and moves to :math:`A_0` at the boundary, with that migration's cost),
``first_tick_s`` (the longer run's tick phase) and ``observes`` (the telemetry snapshot is taken every tick, as by a
policy that reads it: taking it advances the engines to the tick, which the times depend on). With these the
played schedule replayed alone gives the policy's iteration time (``tests/simulator/test_oracle.py``).

**Search** (:func:`best_schedule`; the family is too large to enumerate, about :math:`(19 \\cdot G^2)^3`
schedules even on the grid, so the result is the best schedule *found*, not the family's optimum):

1. start: every rollout size on a coarse grid (``coarse`` points), each with the non-rollout GPUs split
   between log-prob inference and the trainer by work (:func:`simulator.job.partition`'s rule), then finer
   (a quarter of the coarse step, then every unit) around the best, then the trainer sizes within 3 units of
   that split;
2. moves, one at a time, greedily: at every 10% of requests done (and 95%) after the last move, every rollout
   size on the coarse grid (shrink and grow, the rest split by work); then the 5% grid points next to the best
   one with finer sizes around the best size, and the trainer / inference split of the best move; a move is
   kept only if it shortens the iteration; stop after ``K`` moves or when no move helps;
3. with a seed (``start_from``: the policy's played schedule of the same iteration): the seed is simulated; from
   the faster of it and step 2's best, steepest descent over one change at a time (:func:`_neighbours`: the start or
   a move's allocation one or two engines or one trainer replica off, a move's point 1, 2.5 or 5 points of requests
   done earlier or later, a move's "not before" dropped, a move left out; at most two steps), then moves added as in
   step 2 up to ``max(K, the seed's moves + 1)``.

The result is the fastest schedule simulated; with a seed it is therefore never slower than the seed simulated,
so a policy judged against the oracle seeded with its own schedule is at most as fast as the oracle.
Each candidate is a whole simulation of the iteration (a deep copy of a paused run cost more than the
run itself, so prefixes are not shared); a schedule met twice is simulated once.
Every candidate is simulated on the same requests (same seed, :class:`simulator.job.JobSim` with
``skip_batches``), and :class:`SearchStats` records how many and how long, and where the best came from.

**Work-conservation bound** (:func:`work_bound`): no schedule of any family beats it in this model.
Every decode step of an engine costs ``a + b B + c K`` ms for ``B`` running sequences holding ``K``
cached tokens (:class:`simulator.engine.EngineModel`), so a response token generated at context ``x``
costs at least ``a / B_max + b + c x`` engine-ms (``B_max``: the engine's running cap), prefill ignored;
log-prob and update FLOPs run at best at ``G`` GPUs' peak x MFU.
With every GPU busy all the time, the iteration's work ends no sooner than (all work)/``G``, and no
sooner than its longest response decoded alone; the optimizer step and the weight sync follow (each at
its fastest over the allocations). ``bound = max(work / G, longest decode) + min optimizer + min sync``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))  # fractions of requests done where a move may happen
MAX_MOVES = 3


@dataclass(frozen=True)
class Schedule:
    """A start allocation and moves ``(fraction done, allocation)`` or ``(fraction done, allocation, not before s)``;
    allocations are (rollout, reference, trainer). ``fill``: the moves give what a unit-bound receiver cannot take to
    log-prob inference (:attr:`simulator.policies.Reallocation.fill`), as the completion decision's moves do."""

    start: tuple
    moves: tuple = ()
    fill: bool = False
    # a replayed later iteration of a longer run: the allocation held before its boundary, where ``start`` is then
    # reached by a move at the boundary (with its migration cost); and the first telemetry tick's seconds into it
    prior: Optional[tuple] = None
    first_tick_s: Optional[float] = None
    start_fill: bool = False  # ``fill`` of the move from ``prior`` to ``start``
    # take the telemetry snapshot at every tick, as a replayed policy that reads it did: taking it advances the engines
    # to the tick (:meth:`simulator.engine.Engine.sync`, cache evictions included), which the run's times depend on
    observes: bool = False
    # with ``prior``: where its GPUs are (:attr:`simulator.job.JobResult.layouts`: which engines a later drain picks
    # depends on the nodes), ((component, ((node, GPUs), ...)), ...)
    layout: Optional[tuple] = None

    def describe(self) -> str:
        s = "" if self.prior is None else f"from {self.prior[0]}+{self.prior[1]}+{self.prior[2]} at the boundary to "
        s += f"start {self.start[0]}+{self.start[1]}+{self.start[2]}"
        for mv in self.moves:
            p, a = mv[0], mv[1]
            when = f"{p:.0%}" if abs(p * 20 - round(p * 20)) < 1e-9 else f"{p:.1%}"
            s += f"; at {when} done" + (f" (not before {mv[2]:.0f} s)" if len(mv) > 2 and mv[2] > 0 else "")
            s += f" -> {a[0]}+{a[1]}+{a[2]}"
        return s + (" (fill)" if self.fill and self.moves else "")


def played_schedule(res, iteration: int = 0) -> Schedule:
    """The schedule a dynamic policy played in iteration ``iteration`` of its run ``res``
    (:class:`simulator.job.JobResult`): the allocation held when the iteration starts (after a decision at its
    boundary), and each later decision as a move at the fraction of the iteration's requests done when it was taken
    and not before the seconds into the iteration at which it was taken (the fraction may stand still for several
    ticks, and the policy may have moved at a later one of them); ``fill`` as the decisions asked. A later iteration
    starts from where the previous one left the GPUs (``prior`` and ``layout``, the nodes included: a drain picks
    engines by node), moves to its start at the boundary as the run did, and ticks in the run's phase."""
    comps = ("rollout", "reference", "trainer")
    it = res.iterations[iteration]
    start = tuple(int(round(res.ledger.held_at(c, it.start_s))) for c in comps)
    prior = None
    moves, fills, start_fill = [], [], False
    for (_, tgt, _), (k, t_rel, done, boundary, fill) in zip(res.decisions, res.decision_points):
        if k != iteration:
            continue
        a = tuple(int(tgt[c]) for c in comps)
        if boundary:
            start, start_fill = a, bool(fill)
        else:
            moves.append((float(done), a, float(t_rel)))
            fills.append(bool(fill))
    if len(set(fills)) > 1:
        raise ValueError(f"iteration {iteration}: moves with and without fill, which one schedule cannot replay")
    observes = bool(getattr(res.policy.decision, "reads_snapshot", True) or res.policy.record_snapshots)
    dt = res.policy.telemetry_interval_s
    first = layout = None
    if iteration > 0:
        # a later iteration starts where the previous one left its GPUs, and always with a decision at its boundary
        lay = res.layouts[iteration]
        layout = tuple((c, tuple(tuple(x) for x in lay[c])) for c in comps)
        prior = tuple(sum(g for _, g in lay[c]) for c in comps)
        # the run's ticks fall every ``dt`` seconds from its start, not from this iteration's
        first = dt * math.ceil(it.start_s / dt + 1e-9) - it.start_s
        first = first if first > 1e-9 else dt
    return Schedule(start, tuple(moves), fill=all(fills) if fills else False, prior=prior, first_tick_s=first,
                    start_fill=start_fill, observes=observes, layout=layout)


class ScheduleDecision:
    """A dynamic policy's decision function that plays a :class:`Schedule` (in a run of one iteration: a move's
    "not before" seconds are the run's)."""

    reads_snapshot = False  # plays a fixed schedule: no telemetry snapshot is taken unless ``schedule.observes``

    def __init__(self, schedule: Schedule, n_requests: int) -> None:
        self.schedule = schedule
        self.n_requests = n_requests
        self.next_move = 0
        self.decides_at_start = schedule.prior is not None  # the move from ``prior`` to ``start``, at the boundary
        self.reads_snapshot = schedule.observes
        self.initial_layout = schedule.layout
        self.first_tick_s = schedule.first_tick_s

    def progress(self, ctx) -> float:
        return 1.0 - ctx.components["rollout"].pending / max(1, self.n_requests)

    def __call__(self, snap, ctx):
        from simulator.policies import Reallocation

        if ctx.at_boundary:
            if self.decides_at_start:
                self.decides_at_start = False
                a = self.schedule.start
                return Reallocation(target={"rollout": a[0], "reference": a[1], "trainer": a[2]}, reason="schedule start",
                                    fill=self.schedule.start_fill)
            return None
        p = self.progress(ctx)
        moves = self.schedule.moves
        if self.next_move < len(moves) and p >= moves[self.next_move][0] - 1e-12:
            mv = moves[self.next_move]
            if len(mv) > 2 and ctx.time_s < mv[2] - 1e-9:
                return None
            a = mv[1]
            self.next_move += 1
            return Reallocation(target={"rollout": a[0], "reference": a[1], "trainer": a[2]}, reason="schedule",
                                fill=self.schedule.fill)
        return None


def schedule_policy(sched: Schedule, n_requests: int):
    """The dynamic policy that plays ``sched`` in a run of one iteration (from ``sched.prior`` when it has one)."""
    from simulator.policies import Policy

    a = sched.prior if sched.prior is not None else sched.start
    return Policy("dynamic", rollout_gpus=a[0], reference_gpus=a[1], trainer_gpus=a[2], decision=ScheduleDecision(sched, n_requests))


@dataclass
class SearchStats:
    simulations: int = 0
    simulated_s: float = 0.0  # wall time in simulation
    wall_s: float = 0.0
    trace: list = field(default_factory=list)  # (stage, schedule, iteration seconds)
    own_s: float = math.nan  # the coarse-to-fine search's best, before any seed
    seeded_s: float = math.nan  # the seed schedule (a policy's played one) simulated; nan without a seed
    best_from: str = "search"  # search | seed | search, refined | seed, refined


def _split(setup, rest: int) -> Optional[tuple[int, int]]:
    """(reference, trainer) of ``rest`` non-rollout GPUs, by work (:func:`simulator.job.partition`'s rule)."""
    u = setup.train_unit
    if rest < u + 1:
        return None
    w_ref = setup.forwards / setup.infer_mfu
    w_tr = 3.0 * setup.updates / setup.train_mfu
    ref = int(round(rest * w_ref / (w_ref + w_tr) / u)) * u
    ref = max(1, min(ref, rest - u))
    tr = (rest - ref) // u * u
    ref = rest - tr
    return ref, tr


def _alloc(setup, r: int) -> Optional[tuple]:
    G = setup.total_gpus
    sp = _split(setup, G - r)
    return None if sp is None or r < setup.rollout_tp else (r, sp[0], sp[1])


def _sizes(setup, lo: int, hi: int, coarse: int) -> list[int]:
    """Rollout sizes (multiples of the engine TP) in [lo, hi]: ``coarse`` points spread evenly."""
    u = setup.rollout_tp
    units = list(range(max(u, (lo + u - 1) // u * u), hi + 1, u))
    if len(units) <= coarse:
        return units
    idx = np.unique(np.round(np.linspace(0, len(units) - 1, coarse)).astype(int))
    return [units[i] for i in idx]


def _trainer_variants(setup, a: tuple, span: int = 3) -> list[tuple]:
    r, _, t = a
    G, u = setup.total_gpus, setup.train_unit
    out = []
    for k in range(-span, span + 1):
        t2 = t + k * u
        if k and u <= t2 and G - r - t2 >= 1:
            out.append((r, G - r - t2, t2))
    return out


class _Runner:
    """Simulates schedules of one iteration (its requests fixed by the seed), each schedule once."""

    def __init__(self, setup, seed: int, iteration: int, stats: SearchStats) -> None:
        self.setup, self.seed, self.iteration, self.stats = setup, seed, iteration, stats
        self.seen: dict = {}

    def __call__(self, sched: Schedule, stage: str) -> float:
        if sched in self.seen:
            return self.seen[sched]
        from simulator.job import JobSim

        t0 = time.perf_counter()
        pol = schedule_policy(sched, self.setup.workload.n_requests)
        res = JobSim(self.setup, pol, seed=self.seed, iterations=1, skip_batches=self.iteration).run()
        self.stats.simulations += 1
        self.stats.simulated_s += time.perf_counter() - t0
        t = res.iterations[0].duration_s
        self.seen[sched] = t
        self.stats.trace.append((stage, sched.describe(), t))
        return t

    def best(self, scheds, stage: str) -> tuple[Optional[Schedule], float]:
        out: tuple[Optional[Schedule], float] = (None, math.inf)
        for sc in scheds:
            t = self(sc, stage)
            if t < out[1]:
                out = (sc, t)
        return out


def _around(setup, center: int, half: int, spacing: int) -> list[int]:
    u = setup.rollout_tp
    spacing = max(u, spacing // u * u)
    return [r for r in range(center - half, center + half + 1, spacing) if u <= r < setup.total_gpus]


def _variants(setup, a: tuple) -> list[tuple]:
    """Allocations next to ``a`` with its GPU count: rollout one or two engines more or less (log-prob inference
    absorbing the difference), the trainer one replica more or less (log-prob inference absorbing it)."""
    r, f, t = a
    u, tu = setup.rollout_tp, setup.train_unit
    out = [(r + d, f - d, t) for d in (-2 * u, -u, u, 2 * u)] + [(r, f - d, t + d) for d in (-tu, tu)]
    return [b for b in out if b[0] >= u and b[1] >= 1 and b[2] >= tu]


def _neighbours(setup, sc: Schedule) -> list[Schedule]:
    """One change to ``sc``: its start allocation (:func:`_variants`); a move's point (a fraction done 1, 2.5 or 5
    points earlier or later, between its neighbours, without a "not before"), its "not before" dropped, its allocation
    (:func:`_variants`), or the move left out."""
    out = [replace(sc, start=a) for a in _variants(setup, sc.start)]
    ms = sc.moves
    for i, mv in enumerate(ms):
        lo = ms[i - 1][0] if i else 0.0
        hi = ms[i + 1][0] if i + 1 < len(ms) else 1.0
        pts = [round(mv[0] + d, 4) for d in (-0.05, -0.025, -0.01, 0.01, 0.025, 0.05)]
        alts = [(q, mv[1]) for q in pts if lo <= q <= hi and 0.0 < q < 1.0]
        if len(mv) > 2:
            alts.append((mv[0], mv[1]))
        alts += [(mv[0], b, *mv[2:]) for b in _variants(setup, mv[1])]
        out += [replace(sc, moves=ms[:i] + (m,) + ms[i + 1:]) for m in alts]
        out.append(replace(sc, moves=ms[:i] + ms[i + 1:]))
    return out


def _refine(run, setup, sc: Schedule, t: float, passes: int = 2) -> tuple[Schedule, float]:
    """Steepest descent over :func:`_neighbours`, at most ``passes`` steps; a step is kept only if it shortens the
    iteration."""
    for _ in range(passes):
        c, ct = run.best(_neighbours(setup, sc), "seed refine")
        if c is None or ct >= t * (1 - 1e-6):
            break
        sc, t = c, ct
    return sc, t


def _greedy_moves(run, setup, sched: Schedule, best_t: float, max_moves: int, coarse: int, stage: str = "move"
                  ) -> tuple[Schedule, float]:
    """Moves added one at a time after ``sched``'s last one (the module docstring's step 2), while fewer than
    ``max_moves`` and one shortens the iteration."""
    G, u = setup.total_gpus, setup.rollout_tp
    top = G - setup.train_unit - 1
    step = max(u, (G // max(1, coarse - 1)) // u * u)

    def allocs(rs):
        return [a for r in rs if (a := _alloc(setup, r)) is not None]

    def extend(m):
        return replace(sched, moves=sched.moves + (m,))

    while len(sched.moves) < max_moves:
        after = sched.moves[-1][0] if sched.moves else 0.0
        times = [p for p in GRID if p > after + 1e-9 and (round(p * 100) % 10 == 0 or p == GRID[-1])]
        if not times:
            break
        sizes = allocs(_sizes(setup, u, top, coarse))
        cand, cand_t = run.best([extend((p, a)) for p in times for a in sizes], stage)
        if cand is None:
            break
        p0, a0 = cand.moves[-1][0], cand.moves[-1][1]
        near = [p for p in GRID if after + 1e-9 < p and abs(p - p0) < 0.051]
        for half, spacing in ((step, step // 4), (step // 4, u)):
            rs = _around(setup, a0[0], half, spacing)
            c2, t2 = run.best([extend((p, a)) for p in near for a in allocs(rs)], stage + " refine")
            if c2 is not None and t2 < cand_t:
                cand, cand_t = c2, t2
                p0, a0 = cand.moves[-1][0], cand.moves[-1][1]
        c2, t2 = run.best([extend((p0, a)) for a in _trainer_variants(setup, a0)], stage + " split")
        if c2 is not None and t2 < cand_t:
            cand, cand_t = c2, t2
        if cand_t >= best_t * (1 - 1e-6):
            break
        sched, best_t = cand, cand_t
    return sched, best_t


def best_schedule(setup, seed: int = 0, iteration: int = 0, max_moves: int = MAX_MOVES, coarse: int = 9,
                  stats: Optional[SearchStats] = None, start_from: Optional[Schedule] = None
                  ) -> tuple[Schedule, float, SearchStats]:
    """The best schedule found in the family (see the module docstring) for iteration ``iteration`` of
    seed ``seed``: (schedule, iteration seconds, search statistics). ``start_from`` (a policy's played schedule,
    :func:`played_schedule`) seeds the search: it is simulated, the better of it and the search's own best is
    refined (:func:`_refine`) and given more moves (up to ``max(max_moves, its moves + 1)``), and the result is the
    best of every schedule simulated, so never slower than ``start_from`` simulated."""
    st = stats or SearchStats()
    t_start = time.perf_counter()
    run = _Runner(setup, seed, iteration, st)
    G, u = setup.total_gpus, setup.rollout_tp
    top = G - setup.train_unit - 1
    step = max(u, (G // max(1, coarse - 1)) // u * u)

    def allocs(rs):
        return [a for r in rs if (a := _alloc(setup, r)) is not None]

    # 1. the start allocation: coarse, then finer around the best, then the trainer / inference split
    sched, best_t = run.best([Schedule(a) for a in allocs(_sizes(setup, u, top, coarse))], "start")
    assert sched is not None, f"job {setup.name}: no feasible allocation of {G} GPUs"
    for half, spacing in ((step, step // 4), (step // 4, u)):
        s2, t2 = run.best([Schedule(a) for a in allocs(_around(setup, sched.start[0], half, spacing))], "start")
        if s2 is not None and t2 < best_t:
            sched, best_t = s2, t2
    s2, t2 = run.best([Schedule(a) for a in _trainer_variants(setup, sched.start)], "start split")
    if s2 is not None and t2 < best_t:
        sched, best_t = s2, t2
    # 2. moves, greedily: times every 10% (and 95%), then the 5% grid around the best; sizes coarse, then finer
    sched, best_t = _greedy_moves(run, setup, sched, best_t, max_moves, coarse)
    st.own_s, st.seeded_s, st.best_from = best_t, math.nan, "search"
    if start_from is not None:
        t_seed = run(start_from, "seed")
        st.seeded_s = t_seed
        if t_seed < best_t:
            sched, best_t, st.best_from = start_from, t_seed, "seed"
        k = max(max_moves, len(start_from.moves) + 1)
        s2, t2 = _refine(run, setup, sched, best_t)
        s2, t2 = _greedy_moves(run, setup, s2, t2, k, coarse, "seed move")
        if t2 < best_t:
            sched, best_t, st.best_from = s2, t2, st.best_from + ", refined"
    st.wall_s += time.perf_counter() - t_start
    return sched, best_t, st


# ------------------------------------------------------------------------------- the bound
def work_bound(setup, seed: int = 0, iteration: int = 0) -> dict:
    """The work-conservation bound of one iteration (module docstring): seconds, and its terms."""
    from simulator.core import EventLoop
    from simulator.job import optimizer_step_s, sample_work_flops, weight_sync_time_s
    from simulator.models import engine_model
    from simulator.workload import make_requests

    s = setup
    gpu = s.rollout_gpu
    rng = EventLoop(seed).rng
    reqs = None
    for k in range(iteration + 1):
        reqs = make_requests(s.workload, rng, rid0=k * s.workload.n_requests)
    assert reqs is not None
    em = engine_model(s.model, gpu, s.rollout_tp, overhead_ms=s.overhead_ms)
    ctx0 = np.array([float(r.prompt_tokens) for r in reqs])  # prompt tokens (observations come later: left out, a lower bound)
    resp = np.array([float(r.response_tokens) for r in reqs])
    b_max = max(1, em.max_running)  # young sequences are short: the KV may hold the running cap, so only the cap bounds B
    # sum over a response's tokens of (a / B_max + b + c x), x its context when the token is generated
    per_req_ms = resp * (em.a_ms / b_max + em.b_ms) + em.c_ms * (resp * ctx0 + resp * (resp - 1) / 2.0)
    roll_gpu_s = float(per_req_ms.sum()) / 1e3 * s.rollout_tp
    alone_ms = resp * (em.a_ms + em.b_ms) + em.c_ms * (resp * ctx0 + resp * (resp - 1) / 2.0)
    longest_s = float(alone_ms.max()) / 1e3
    peak = gpu.bf16_tflops * 1e12
    fl = np.array([sample_work_flops(s, r) for r in reqs])
    ref_gpu_s = float(fl[:, 0].sum()) / (peak * s.infer_mfu)
    tr_gpu_s = float(fl[:, 1].sum()) / (peak * s.train_mfu)
    G = s.total_gpus
    opt = min(optimizer_step_s(s, gpu, t) for t in range(s.train_unit, G, s.train_unit))
    sync = min(weight_sync_time_s(s, gpu, gpu, r, G - r, False) for r in range(s.rollout_tp, G, s.rollout_tp))
    work_s = (roll_gpu_s + ref_gpu_s + tr_gpu_s) / G
    return {"bound_s": max(work_s, longest_s) + opt + sync, "work_s": work_s, "longest_decode_s": longest_s,
            "optimizer_s": opt, "sync_s": sync, "rollout_gpu_s": roll_gpu_s, "reference_gpu_s": ref_gpu_s,
            "trainer_gpu_s": tr_gpu_s}


def oracle(setup, seed: int = 0, iterations: int = 1, max_moves: int = MAX_MOVES, coarse: int = 9) -> dict:
    """Per iteration of the run (seed ``seed``): the best schedule found and the bound; means over iterations."""
    st = SearchStats()
    its = []
    for k in range(iterations):
        sched, t, _ = best_schedule(setup, seed, k, max_moves, coarse, st)
        its.append({"iteration": k, "schedule": sched.describe(), "oracle_s": t, **work_bound(setup, seed, k)})
    return {"oracle_s": float(np.mean([i["oracle_s"] for i in its])), "bound_s": float(np.mean([i["bound_s"] for i in its])),
            "iterations": its, "simulations": st.simulations, "search_wall_s": st.wall_s}


__all__ = ["GRID", "MAX_MOVES", "Schedule", "ScheduleDecision", "SearchStats", "best_schedule", "oracle", "played_schedule",
           "schedule_policy", "work_bound"]
