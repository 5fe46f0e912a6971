"""The dynamic policy's decision function judged on completion time (:mod:`formulation.realloc.completion`).

:class:`CompletionPlannerDecision` (``planner simulate --policy dynamic --decision completion``):

* **start split** (:meth:`start_split`): the planner's choice, not the scenario's node counts. Default
  (``start_search="auto"``): for single-turn rollouts the start is searched *for the dynamic policy*
  (:func:`search_dynamic_start`): a screen scores each candidate start by simulating it under this very decision
  up to its first committed move plus the decision's own predicted rest; the screen's two best and the best static
  split are then simulated whole under the decision and the fastest wins. Multi-turn rollouts (whose prediction
  after a move is aggregate, not request by request) and ``start_search="static"`` take the best *static* split
  (:func:`search_start_split`): static splits simulated with the request-level model (:class:`simulator.job.JobSim`),
  node splits first, then half and quarter nodes around the best. Every candidate runs on the planner's own seeds
  ``PLAN_SEED_BASE + k``, never a seed the run uses; every iteration starts from the chosen split. The two
  searches side by side on the nine DynaRL math set-ups: ``results/realloc/dynamic-start-search.md``;
* **trigger** (:class:`TailDetector`): DynaRL's θ / U_low / T, read on the tail rather than the age of the
  sequences: an engine is low when its requests (running and queued) are below ``U_low`` of the most it
  held this iteration; the rollout is a donor when more than ``θ`` of its engines are low, at least
  ``min_done`` (half) of the iteration's requests are done, for ``T`` seconds. A young rollout's engines hold
  all they were dispatched (multi-turn requests in a tool call hold none, hence the fraction done), so it
  never fires there;
* **no re-asking** (opt-in, ``trainer_cap=True``; it hurts with the dynamic start) for a trainer that could not
  be placed: when the last committed move asked for a larger trainer than the freed nodes could hold (a replica
  needs its TP x PP GPUs on one node; the rest went to log-prob inference), the trainer is capped at what it got
  for the rest of the iteration (otherwise every later solve asks again and GPUs shuttle between log-prob
  inference and the trainer; the cap also blocks growth a later, larger drain could place: with the dynamic start
  on 32B-64 it left an 8-GPU trainer for the rest of the iteration, 4,155 s against 2,502 s without it);
* **decision**: the allocation of least predicted completion time, every GPU owned
  (:func:`formulation.realloc.completion.decide`), net of the migration pause; the record keeps both the
  completion times and the min-over-stages proxy (``records``), and ``commits`` in the form the
  reproduction's fidelity table reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np

from simulator.defaults import WINDOW_S

PLAN_SEED_BASE = 20_000  # the planner's own iterations for the start split (runs use seeds 0, 1, ...)


@dataclass
class TailDetector:
    theta: float = 0.5
    u_low: float = 0.2
    hold_s: float = WINDOW_S
    min_done: float = 0.5  # the tail starts once this fraction of the iteration's requests is done
    _iteration: int = -1
    _peak: dict = field(default_factory=dict)
    _low_since: Optional[float] = None

    def observe(self, snap) -> bool:
        if snap.iteration != self._iteration:
            self._iteration, self._peak, self._low_since = snap.iteration, {}, None
        engines = [w for w in snap.workers if w.component == "rollout"]
        if not engines:
            return True
        done = next((c.progress for c in snap.components if c.kind == "rollout"), 1.0)
        low = 0
        for w in engines:
            load = float((w.requests_in_flight or 0) + (w.queue_depth or 0))
            pk = max(self._peak.get(w.worker_id, 0.0), load)
            self._peak[w.worker_id] = pk
            if pk > 0 and load < self.u_low * pk:
                low += 1
        if low > self.theta * len(engines) and done >= self.min_done:
            if self._low_since is None:
                self._low_since = snap.time_s
            return snap.time_s - self._low_since >= self.hold_s - 1e-9
        self._low_since = None
        return False


_START_CACHE: dict = {}


class _MovePoint(Exception):
    """Raised by :class:`_StartProbe` at its first committed move: the predicted iteration time."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def _candidate_starts(setup, value) -> dict:
    """Start allocations ``(rollout, reference, trainer)`` -> ``value(a)`` (seconds; ``None``: infeasible): node
    splits first (every other node past 8 nodes), then half and quarter nodes around the best so far."""
    from simulator.oracle import _alloc

    G, g, u = setup.total_gpus, setup.gpus_per_node, setup.rollout_tp
    seen: dict = {}

    def run(r: int) -> None:
        a = _alloc(setup, r)
        if a is None or a in seen:
            return
        v = value(a)
        if v is not None:
            seen[a] = v

    nodes = G // g
    step = 1 if nodes <= 8 else 2
    for n in range(1, nodes, step):
        run(n * g)
    for frac in (2, 4):
        if not seen:
            break
        best = min(seen, key=lambda a: seen[a])
        d = max(u, g // frac // u * u)
        run(best[0] - d)
        run(best[0] + d)
    return seen


def _static_time(setup, a: tuple, seeds: int) -> Optional[float]:
    from simulator.job import JobSim
    from simulator.policies import Policy

    ts = []
    for k in range(seeds):
        pol = Policy("static", rollout_gpus=a[0], reference_gpus=a[1], trainer_gpus=a[2])
        try:
            res = JobSim(setup, pol, seed=PLAN_SEED_BASE + k, iterations=1).run()
        except (ValueError, RuntimeError):
            return None
        ts.append(res.iterations[0].duration_s)
    return float(np.mean(ts))


def _no_start(setup) -> None:
    """No candidate start could be simulated: the ValueError the static policy gives on the job's own split (it names
    the split and the fix), else one that says so."""
    from simulator.job import partition
    from simulator.policies import Policy

    partition(setup, Policy("static"))  # raises when the job's own split is infeasible (e.g. too few training GPUs)
    raise ValueError(f"job {setup.name}: no split of its {setup.total_gpus} GPUs into rollout engines of "
                     f"{setup.rollout_tp} GPU(s), log-prob inference and trainer replicas of {setup.train_unit} GPU(s) "
                     "could be simulated. Fix: give the job more GPUs, or smaller rollout TP or trainer TP x PP")


def search_start_split(setup, seeds: int = 1) -> tuple[dict, list]:
    """The static split of least simulated iteration time on the planner's seeds: (split, [(split, seconds)])."""
    key = ("static", repr(setup), seeds)
    if key in _START_CACHE:
        return _START_CACHE[key]
    seen = _candidate_starts(setup, lambda a: _static_time(setup, a, seeds))
    if not seen:
        _no_start(setup)
    best = min(seen, key=lambda a: seen[a])
    out = ({"rollout": best[0], "reference": best[1], "trainer": best[2]}, sorted(seen.items(), key=lambda kv: kv[1]))
    _START_CACHE[key] = out
    return out


def _dynamic_time(setup, a: tuple, seeds: int, make) -> Optional[float]:
    """Predicted iteration time of the dynamic policy started at ``a`` on the planner's seeds: the request-level
    simulation of the start allocation up to the policy's first committed move, then the decision's own
    predicted time to the end of training after that move (migration included); with no move, the simulated
    static iteration."""
    from simulator.job import JobSim
    from simulator.policies import Policy

    ts = []
    for k in range(seeds):
        probe = make()
        pol = Policy("dynamic", rollout_gpus=a[0], reference_gpus=a[1], trainer_gpus=a[2], decision=probe)
        try:
            res = JobSim(setup, pol, seed=PLAN_SEED_BASE + k, iterations=1).run()
            ts.append(res.iterations[0].duration_s)
        except _MovePoint as mp:
            ts.append(mp.seconds)
        except (ValueError, RuntimeError):
            return None
    return float(np.mean(ts))


REFIT_WINDOW = 3  # iterations of observed response lengths the refit test reads


FINALISTS = 2  # the best starts by the move-point score that are then simulated whole, beside the best static split


def _full_time(setup, a: tuple, seeds: int, make) -> Optional[float]:
    """Simulated iteration time of the dynamic policy (``make()``, every move carried out) started at ``a``, on the
    planner's seeds."""
    from simulator.job import JobSim
    from simulator.policies import Policy

    ts = []
    for k in range(seeds):
        pol = Policy("dynamic", rollout_gpus=a[0], reference_gpus=a[1], trainer_gpus=a[2], decision=make())
        try:
            ts.append(JobSim(setup, pol, seed=PLAN_SEED_BASE + k, iterations=1).run().iterations[0].duration_s)
        except (ValueError, RuntimeError):
            return None
    return float(np.mean(ts))


def search_dynamic_start(setup, make, make_full, seeds: int = 1) -> tuple[dict, list]:
    """The start split of least simulated iteration time *for the dynamic policy*: (split, [(split, seconds)]).

    Screen: every candidate start scored by :func:`_dynamic_time` (simulated up to the policy's first committed move,
    then the decision's own prediction: cheap, but it trusts the prediction after a move, which knows neither which
    nodes a drain frees nor how far off it is after a large move). Final: the ``FINALISTS`` best of the screen and
    the best static split (:func:`search_start_split`) simulated whole under the policy (``make_full()``), every move
    carried out; the least wins. So a start that a static run would not pick (a larger rollout that gives GPUs away
    in the tail) can win, and a start whose promised move the nodes cannot hold loses. The table gives the whole
    simulation's seconds for the finalists and the screen's for the others."""
    key = ("dynamic", repr(setup), seeds)
    if key in _START_CACHE:
        return _START_CACHE[key]
    screen = _candidate_starts(setup, lambda a: _dynamic_time(setup, a, seeds, make))
    st = search_start_split(setup, seeds)[0]
    finalists = list(dict.fromkeys([(st["rollout"], st["reference"], st["trainer"]),
                                    *sorted(screen, key=lambda a: screen[a])[:FINALISTS]]))
    full = {a: v for a in finalists if (v := _full_time(setup, a, seeds, make_full)) is not None}
    if not full:
        _no_start(setup)
    best = min(full, key=lambda a: full[a])
    table = {**screen, **full}
    out = ({"rollout": best[0], "reference": best[1], "trainer": best[2]}, sorted(table.items(), key=lambda kv: kv[1]))
    _START_CACHE[key] = out
    return out


class CompletionPlannerDecision:
    wants_remaining_tokens = True

    def __init__(self, sc=None, u_low: float = 0.2, window_s: float = WINDOW_S, theta: float = 0.5, margin: float = 0.05,
                 choose_start: bool = True, setup=None, log_every_s: float = 0.0, request_level: bool = True,
                 draws: int = 3, resolve_s: float = 5.0, start_search: str = "auto", trainer_cap: bool = False,
                 refit: bool = True, declared_lengths=None) -> None:
        if start_search not in ("auto", "dynamic", "static"):
            raise ValueError(f"start_search: {start_search!r} is not 'auto', 'dynamic' or 'static'")
        self.trainer_cap = trainer_cap
        self.sc = sc
        self.start_search = start_search
        self._knobs: dict[str, Any] = dict(u_low=u_low, window_s=window_s, theta=theta, margin=margin, request_level=request_level,
                           draws=draws, resolve_s=resolve_s, trainer_cap=trainer_cap)
        self._asked: dict = {}  # iteration -> the last committed target (rollout, reference, trainer)
        self._trainer_cap: dict = {}  # iteration -> the trainer size it could not grow past
        self.request_level = request_level
        self.draws = draws
        self.resolve_s = resolve_s
        self._last_solve: tuple = (-1, 0.0)
        self.detector = TailDetector(theta=theta, u_low=u_low, hold_s=window_s)
        self.margin = margin
        self.choose_start = choose_start
        self.setup = setup
        self.start: Optional[dict] = None
        self.start_table: list = []
        self.records: list = []  # every solve: time, current, target, completion keep / chosen, proxies, committed
        self.commits: list = []  # committed moves, in the form planner.sim.repro_jobs._fidelity reads
        self.starts: dict = {}
        self.calls = 0
        self.committed = 0
        self.solve_ms: list = []  # wall time of each solve (state built, every candidate scored)
        self.solve_cpu_ms: list = []
        self._opt = None
        self.log_every_s = log_every_s
        self.keep_log: list = []  # (iteration, seconds into it, predicted seconds to the end of training if kept)
        self._moved: set = set()
        self._next_log = 0.0
        self.refit = refit
        self.declared_lengths = declared_lengths
        self._observed: list = []  # (response lengths, groups) of the last REFIT_WINDOW iterations
        self.refits: list = []  # every boundary's test of the lengths the model plans on: iteration, ks, critical, refit

    # ------------------------------------------------------------------ set-up
    def start_split(self, setup) -> Optional[dict]:
        if self.declared_lengths is not None:
            # the job declares lengths that are not the ones its rollouts generate (the simulator's set-up is the truth)
            setup = replace(setup, workload=replace(setup.workload, lengths=self.declared_lengths))
        self.setup = setup
        if not self.choose_start:
            return None
        start = self._search_start()
        self.starts[0] = dict(start)
        return start

    def _search_start(self) -> dict:
        """Search the start split on the lengths the decision plans on (sets and returns ``self.start``)."""
        setup = self.setup
        self._state_tables()  # one-time tables (optimizer step, weight sync per allocation): not in a decision's latency
        how = self.start_search
        if how == "auto":
            # the dynamic search trusts the decision's prediction after a move, which is request by request for
            # single-turn rollouts only (multi-turn ones keep the aggregate formulas): static search there
            how = "dynamic" if setup.workload.turns == 1 and self.request_level else "static"
        if how == "static":
            self.start, self.start_table = search_start_split(setup)
        else:
            self.start, self.start_table = search_dynamic_start(setup, self._probe, self._whole)
        return dict(self.start)

    def _observe_lengths(self, iteration: int, lengths, groups: int) -> None:
        """Telemetry refit (:mod:`estimators.length_refit`): test the lengths the model plans on against the last
        iterations' observed ones; when they differ, plan on the refitted base distribution from now on (the
        residual tables, the log-prob and update work per sample, and the start split searched again)."""
        from estimators.length_refit import lengths_differ, refit_lengths

        self._observed = (self._observed + [(np.asarray(lengths, dtype=float), int(groups))])[-REFIT_WINDOW:]
        obs = np.concatenate([a for a, _ in self._observed])
        g = sum(n for _, n in self._observed)
        w = self.setup.workload
        test = lengths_differ(obs, g, w)
        rec = {"iteration": iteration, "ks": round(test["ks"], 4), "critical": round(test["critical"], 4), "groups": g,
               "refit": False, "declared_mean": round(test["reference_mean"], 1), "observed_mean": round(float(obs.mean()), 1)}
        if test["differ"]:
            dist = refit_lengths(obs, float(w.prompt_spread), float(w.max_response_tokens))
            self.setup = replace(self.setup, workload=replace(w, lengths=dist))
            self._opt = None  # the tables that depend on the lengths are rebuilt on the refitted distribution
            if self.choose_start:
                rec["start"] = self._search_start()
            else:
                self._state_tables()
            rec["refit"] = True
        self.refits.append(rec)

    def _probe(self) -> "_StartProbe":
        """The same decision, started where the search puts it, stopping at its first committed move."""
        pr = _StartProbe(self.sc, choose_start=False, setup=self.setup, **self._knobs)
        pr._opt, pr._lengths, pr._base = self._opt, self._lengths, self._base  # the one-time tables, shared
        return pr

    def _whole(self) -> "CompletionPlannerDecision":
        """The same decision on a fixed start, every move carried out (the search's finalists)."""
        d = CompletionPlannerDecision(self.sc, choose_start=False, setup=self.setup, **self._knobs)
        d._opt, d._lengths, d._base = self._opt, self._lengths, self._base
        return d

    def _state_tables(self):
        from estimators import training
        from simulator.job import optimizer_step_s, weight_sync_time_s
        from simulator.models import engine_model
        from simulator.workload import residual_table

        s = self.setup
        gpu = s.rollout_gpu
        if self._opt is None:
            em = engine_model(s.model, gpu, s.rollout_tp, overhead_ms=s.overhead_ms)
            opt = {t: optimizer_step_s(s, s.train_gpu, t) for t in range(s.train_unit, s.total_gpus, s.train_unit)}
            self._lengths = residual_table(s.workload).lengths  # the clipped marginal of the lengths, as past iterations show it
            # a sample's mean work over that marginal (the work is not linear in the tokens)
            f = float(np.mean(training.sample_forward_flops(s.model, s.workload.prompt_tokens + self._lengths)))
            ur, ut, G = s.rollout_tp, s.train_unit, s.total_gpus
            sync_tab = np.array([[weight_sync_time_s(s, gpu, s.train_gpu, r, t, False) for t in range(ut, G + 1, ut)]
                                 for r in range(ur, G + 1, ur)])
            opt_tab = np.array([opt.get(t, 0.0) for t in range(ut, G + 1, ut)])
            self._opt = (em, (opt_tab, sync_tab), s.forwards * f, s.updates * 3.0 * f)
            dist = replace(s.workload.lengths, max_tokens=s.workload.max_response_tokens)
            self._base = np.sort(dist.quantile((np.arange(1000) + 0.5) / 1000))  # the base distribution (difficulty 1)
        return self._opt

    def _tail(self, ro, intake: str):
        """The request-level view of the rollout (:mod:`formulation.realloc.tail`), when the telemetry has it."""
        from formulation.realloc.tail import TailRequests

        q = getattr(ro, "requests", None)
        if not q or not len(q["engine"]):
            return None
        em = self._state_tables()[0]
        s = self.setup
        # the context a slot holds on average over the rest of the drain: each request's now plus half its expected
        # remaining tokens (the context now alone left a packed engine's cache too many slots: after 32B-128's move to
        # 11 engines the rollout's end was predicted 6-8% early; with the mean over the drain, 3-6%)
        rem = float(ro.remaining_tokens) / max(1.0, float(ro.pending)) if getattr(ro, "remaining_tokens", None) else 0.0
        ctx = max(1.0, float(np.mean(q["context"])) + 0.5 * rem)
        slots = int(max(1, min(em.max_running, em.kv_capacity_tokens / ctx)))
        grp = q["group"] if intake != "sample" else np.arange(len(q["engine"]))
        return TailRequests(engine=q["engine"], group=grp, generated=q["generated"], context=q["context"], running=q["running"],
                            drain_key=q["drain_key"], lengths=self._lengths, prompt_tokens=q["prompt"], slots=slots,
                            gate=s.workload.group_size if intake != "sample" else 1, prefill_ms=em.prefill, draws=self.draws,
                            base_lengths=self._base, spread=float(s.workload.prompt_spread),
                            max_tokens=float(s.workload.max_response_tokens), done_group=q.get("done_group"),
                            done_length=q.get("done_length"), pend_length=q.get("pend_length"))

    def _to_come_work(self, ro, tr) -> Optional[float]:
        """Update FLOPs of the samples not yet at the trainer once the rollout has finished, from their lengths
        (``requests["pend_length"]``, as the manager knows them); ``None`` while requests are unfinished or
        without the lengths."""
        q = getattr(ro, "requests", None)
        to_come = max(0, tr.pending - tr.queued)
        if not q or len(q.get("engine", ())) or q.get("pend_length") is None or not len(q["pend_length"]) or ro.pending > 0:
            return None
        _, w = self._sample_work(self.setup.workload.prompt_tokens + np.asarray(q["pend_length"], dtype=float))
        return float(np.mean(np.broadcast_to(w, (len(q["pend_length"]),)))) * to_come

    def _sample_work(self, tokens):
        from estimators import training

        f = training.sample_forward_flops(self.setup.model, tokens)
        return self.setup.forwards * f, self.setup.updates * 3.0 * f

    def _state(self, ctx, snap=None):
        from formulation.realloc.completion import CompletionState

        s = self.setup
        em, (opt_tab, sync_tab), w_f, w_t = self._state_tables()
        c = ctx.components
        ro, rf, tr = c["rollout"], c["reference"], c["trainer"]
        ur, ut = s.rollout_tp, s.train_unit

        def opt_s(t):
            return opt_tab[np.asarray(t, dtype=int) // ut - 1]

        def sync(r, t):
            return sync_tab[np.asarray(r, dtype=int) // ur - 1, np.asarray(t, dtype=int) // ut - 1]
        busy = max((w for w in (snap.workers if snap is not None else []) if w.component == "rollout"),
                   key=lambda w: (w.requests_in_flight or 0), default=None)
        b_l = float(busy.requests_in_flight or 0) if busy is not None else 0.0
        x_l = float(busy.kv_used_tokens or 0) / b_l if busy is not None and b_l > 0 else ro.context_tokens
        return CompletionState(
            gpus=s.total_gpus, current=(ro.gpus, rf.gpus, tr.gpus), unit_r=s.rollout_tp, unit_t=s.train_unit,
            n_left=float(ro.pending), rem_tokens=ro.remaining_tokens, rem_max=ro.remaining_max, ctx_tokens=ro.context_tokens,
            busiest_batch=b_l, busiest_ctx=x_l,
            a_ms=em.a_ms, b_ms=em.b_ms, c_ms=em.c_ms, batch_cap=float(em.max_running), kv_tokens=em.kv_capacity_tokens,
            ref_queued=rf.queued_work, ref_per_sample=w_f, ref_rate=rf.work_rate_per_gpu,
            tr_queued=tr.queued_work, tr_to_come=float(max(0, tr.pending - tr.queued)), tr_per_sample=w_t,
            tr_rate=tr.work_rate_per_gpu, group=s.workload.group_size,
            groups_left=float(ro.groups_left) if ctx.intake != "sample" else 1.0,
            grow_s={"rollout": ro.grow_s, "reference": rf.grow_s, "trainer": tr.grow_s}, opt_s=opt_s, sync_s=sync,
            tail=self._tail(ro, ctx.intake) if self.request_level else None, sample_work=self._sample_work,
            to_come_work=self._to_come_work(ro, tr))

    def predict_keep(self, snap, ctx) -> float:
        """Predicted seconds to the end of the iteration's training if the allocation is kept."""
        from formulation.realloc.completion import predict

        st = self._state(ctx, snap)
        return float(predict(st, *[np.array([v]) for v in st.current])["completion_s"][0])

    # ------------------------------------------------------------------ decision
    def __call__(self, snap, ctx):
        import time

        from formulation.realloc.completion import decide
        from simulator.policies import Reallocation

        if self.setup is None:
            raise RuntimeError("CompletionPlannerDecision needs the job's set-up: the simulator passes it via start_split")
        if ctx.at_boundary:
            self._next_log = 0.0
            if self.refit and getattr(ctx, "last_lengths", None) is not None:
                self._observe_lengths(snap.iteration, ctx.last_lengths, ctx.last_groups)
            target = dict(self.start) if self.start else dict(ctx.initial)
            self.starts[snap.iteration] = dict(target)
            return Reallocation(target=target, kinds={"rollout": "workload", "reference": "workload", "trainer": "p2p"},
                                reason="iteration start: the planner's start split")
        c = ctx.components
        if c["rollout"].pending <= 0 and c["trainer"].pending <= 0:
            return None
        if self.log_every_s and snap.iteration not in self._moved and snap.time_s >= self._next_log:
            # the prediction if the allocation is kept, before the iteration's first move (fidelity, see planner.sim.repro_dynarl)
            self._next_log = (snap.time_s // self.log_every_s + 1) * self.log_every_s
            self.keep_log.append({"iteration": snap.iteration, "time_s": snap.time_s, "keep_s": self.predict_keep(snap, ctx)})
        fired = self.detector.observe(snap) or c["rollout"].pending <= 0
        if not fired:
            return None
        if snap.iteration == self._last_solve[0] and snap.time_s - self._last_solve[1] < self.resolve_s - 1e-9:
            return None  # solved moments ago: the state has barely moved (and a solve simulates every rollout size's drain)
        self._last_solve = (snap.iteration, snap.time_s)
        t0, c0 = time.perf_counter(), time.process_time()
        st = self._state(ctx, snap)
        from estimators import comm

        it = snap.iteration
        asked = self._asked.get(it)
        if self.trainer_cap and asked is not None and st.current[2] < asked[2]:
            # the last move asked for a trainer the freed nodes could not hold (a replica needs its TP x PP GPUs on
            # one node; the rest went to log-prob inference): asking again would only shuffle GPUs back and forth
            self._trainer_cap[it] = min(self._trainer_cap.get(it, st.current[2]), st.current[2])
        dec = decide(st, self.margin, migration_s=comm.GROUP_REBUILD_S, max_rollout=st.current[0],
                     max_trainer=self._trainer_cap.get(it))
        self.calls += 1
        self.solve_ms.append((time.perf_counter() - t0) * 1e3)
        self.solve_cpu_ms.append((time.process_time() - c0) * 1e3)
        self.records.append({"iteration": snap.iteration, "time_s": snap.time_s, "current": list(dec.current),
                             "target": list(dec.target), "completion_keep_s": dec.completion_keep_s,
                             "completion_s": dec.completion_s, "proxy_keep": dec.proxy_keep, "proxy": dec.proxy,
                             "committed": dec.committed, "reason": dec.reason})
        if not dec.committed:
            return None
        self._moved.add(snap.iteration)
        self._asked[it] = tuple(dec.target)
        self.committed += 1
        self.commits.append({"iteration": snap.iteration, "time_s": snap.time_s, "unit": "1/s",
                             "current": 1.0 / max(dec.completion_keep_s, 1e-9), "predicted": 1.0 / max(dec.completion_s, 1e-9),
                             "objective": 1.0 / max(dec.completion_s, 1e-9)})
        r, f, t = dec.target
        return Reallocation(target={"rollout": r, "reference": f, "trainer": t},
                            kinds={"rollout": "workload", "reference": "reboot", "trainer": "p2p"}, reason=dec.reason, fill=True)


class _StartProbe(CompletionPlannerDecision):
    """:class:`CompletionPlannerDecision` on a fixed start that ends the simulation at its first committed move,
    with the predicted iteration time (seconds so far + the decision's predicted completion, migration included)."""

    def __call__(self, snap, ctx):
        out = super().__call__(snap, ctx)
        if out is not None and not ctx.at_boundary:
            raise _MovePoint(float(snap.time_s) + float(self.records[-1]["completion_s"]))
        return out
