"""Hindsight references for one job's iterations: the best schedule of a declared family, and a
work-conservation bound. Both read the iteration's sampled lengths; neither is ever fed to a policy.

**Schedule family** :math:`\\mathcal{F}_{K}` (one iteration, its requests fixed by the seed): a start
allocation :math:`A_0` and up to ``K`` moves :math:`(p_m, A_m)`, :math:`p_1 < p_2 < \\dots` on the grid
``{0.05, 0.10, ..., 0.95}`` of the fraction of the iteration's requests done; an allocation is
:math:`A = (r, f, t)` GPUs of rollout, log-prob inference and trainer with :math:`r` a multiple of the
engine TP, :math:`t` a multiple of the trainer's TP x PP, :math:`f \\ge 1`, :math:`r + f + t = G`.
A move is carried out by the simulator itself (:meth:`simulator.job.JobSim.apply`: drained engines,
woken engines, resharded trainer, restarted inference ranks, each with its migration cost) at the
first telemetry tick at which the fraction done has reached :math:`p_m`, exactly as a policy's
decision would be. The schedule's value is the iteration time the simulator measures.

**Search** (:func:`best_schedule`; the family is too large to enumerate, about :math:`(19 \\cdot G^2)^3`
schedules, so the result is the best schedule *found*, an upper bound on the family's optimum):

1. start: every rollout size on a coarse grid (``coarse`` points), each with the non-rollout GPUs split
   between log-prob inference and the trainer by work (:func:`simulator.job.partition`'s rule), then finer
   (a quarter of the coarse step, then every unit) around the best, then the trainer sizes within 3 units of
   that split;
2. moves, one at a time, greedily: at every 10% of requests done (and 95%) after the last move, every rollout
   size on the coarse grid (shrink and grow, the rest split by work); then the 5% grid points next to the best
   one with finer sizes around the best size, and the trainer / inference split of the best move; a move is
   kept only if it shortens the iteration;
3. stop after ``K`` moves or when no move helps.

Each candidate is a whole simulation of the iteration (a deep copy of a paused run cost more than the
run itself, so prefixes are not shared); a schedule met twice is simulated once.
Every candidate is simulated on the same requests (same seed, :class:`simulator.job.JobSim` with
``skip_batches``), and :class:`SearchStats` records how many and how long.

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
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))  # fractions of requests done where a move may happen
MAX_MOVES = 3


@dataclass(frozen=True)
class Schedule:
    """A start allocation and moves ``(fraction done, allocation)``; allocations are (rollout, reference, trainer)."""

    start: tuple
    moves: tuple = ()

    def describe(self) -> str:
        s = f"start {self.start[0]}+{self.start[1]}+{self.start[2]}"
        for p, a in self.moves:
            s += f"; at {p:.0%} done -> {a[0]}+{a[1]}+{a[2]}"
        return s


class ScheduleDecision:
    """A dynamic policy's decision function that plays a :class:`Schedule`."""

    reads_snapshot = False  # plays a fixed schedule: the simulator passes no telemetry snapshot

    def __init__(self, schedule: Schedule, n_requests: int) -> None:
        self.schedule = schedule
        self.n_requests = n_requests
        self.next_move = 0

    def progress(self, ctx) -> float:
        return 1.0 - ctx.components["rollout"].pending / max(1, self.n_requests)

    def __call__(self, snap, ctx):
        from simulator.policies import Reallocation

        if ctx.at_boundary:
            return None
        p = self.progress(ctx)
        moves = self.schedule.moves
        if self.next_move < len(moves) and p >= moves[self.next_move][0] - 1e-12:
            _, a = moves[self.next_move]
            self.next_move += 1
            return Reallocation(target={"rollout": a[0], "reference": a[1], "trainer": a[2]}, reason="schedule")
        return None


@dataclass
class SearchStats:
    simulations: int = 0
    simulated_s: float = 0.0  # wall time in simulation
    wall_s: float = 0.0
    trace: list = field(default_factory=list)  # (stage, schedule, iteration seconds)


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
        from simulator.policies import Policy

        t0 = time.perf_counter()
        a = sched.start
        pol = Policy("dynamic", rollout_gpus=a[0], reference_gpus=a[1], trainer_gpus=a[2],
                     decision=ScheduleDecision(sched, self.setup.workload.n_requests))
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


def best_schedule(setup, seed: int = 0, iteration: int = 0, max_moves: int = MAX_MOVES, coarse: int = 9,
                  stats: Optional[SearchStats] = None) -> tuple[Schedule, float, SearchStats]:
    """The best schedule found in the family (see the module docstring) for iteration ``iteration`` of
    seed ``seed``: (schedule, iteration seconds, search statistics)."""
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
    for _ in range(max_moves):
        after = sched.moves[-1][0] if sched.moves else 0.0
        times = [p for p in GRID if p > after + 1e-9 and (round(p * 100) % 10 == 0 or p == GRID[-1])]
        if not times:
            break
        sizes = allocs(_sizes(setup, u, top, coarse))
        cands = [Schedule(sched.start, sched.moves + ((p, a),)) for p in times for a in sizes]
        cand, cand_t = run.best(cands, "move")
        if cand is None:
            break
        p0, a0 = cand.moves[-1]
        near = [p for p in GRID if after + 1e-9 < p and abs(p - p0) < 0.051]
        for half, spacing in ((step, step // 4), (step // 4, u)):
            rs = _around(setup, a0[0], half, spacing)
            c2, t2 = run.best([Schedule(sched.start, sched.moves + ((p, a),)) for p in near for a in allocs(rs)], "move refine")
            if c2 is not None and t2 < cand_t:
                cand, cand_t = c2, t2
                p0, a0 = cand.moves[-1]
        c2, t2 = run.best([Schedule(sched.start, sched.moves + ((p0, a),)) for a in _trainer_variants(setup, a0)], "move split")
        if c2 is not None and t2 < cand_t:
            cand, cand_t = c2, t2
        if cand_t >= best_t * (1 - 1e-6):
            break
        sched, best_t = cand, cand_t
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


__all__ = ["GRID", "MAX_MOVES", "Schedule", "ScheduleDecision", "SearchStats", "best_schedule", "oracle", "work_bound"]
