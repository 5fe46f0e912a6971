"""Phase-level model of a multi-job trace: arrivals, placement, groups running, departures, cost.

Jobs arrive at their ``arrival_s``; each needs ``iterations`` iterations (its duration in the
scenario divided by its solo iteration time, see :func:`planner.instances.simulate.trace_jobs`) and
leaves when they are done. A *placer* decides where a job runs:

* ``groups``: the placement planner's online admission (Weave's inter-group scheduler: fill a
  bubble, extend the rollout pool, or open a new group) through the :class:`Placer` interface;
* ``solo-d``: one disaggregated pool pair per job (its own rollout and training nodes);
* ``colocated-jobs``: one pool of the training type per job (its rollout plus training nodes),
  generation and training time-shared on it (veRL).

Long-tail consolidation (``consolidate``) is applied to a member only where its predicted gain
(:func:`consolidation_gain`: the GPU time its tail releases to another member waiting on the same
rollout nodes, against the re-prefill's stretch) is positive.

A member whose state fits in its nodes' host DRAM beside the members that joined before it switches
warm; one that does not fit pays a cold start (process launch, framework init, state read from
storage: :func:`estimators.comm.cold_start_s`) at every switch.

Every group, a one-member group included, runs as a :class:`simulator.groups.GroupRun` on one
event loop: members in the group's order on the whole pools, or (a pinned configuration,
``PoolConfig.members >= 1``) each on rollout nodes of its own -- the slot it took when it joined,
kept until it leaves -- sharing the training pool, phase times drawn from the job's
:class:`simulator.profiles.PhaseProfile` on the group's pools, warm switches between members,
and long-tail consolidation when enabled. A job that no placement fits waits (first come, first
served) until a departure frees capacity.

A placer may also *move* running jobs (the re-pack admission, :meth:`formulation.placement.greedy.
Packer.admit_repack`): a member that the placer's groups put elsewhere leaves its run at the end of
its current iteration (its old pools stay provisioned until their last member has left) and joins
its new group's run then; the iteration it starts there is measured from the end of its last one
in the old run, so the move's wait counts against its SLO.

A placer may also *time* a join (``start_s``): the member it admitted into a running group starts its
first rollout at that moment (the wait until then counts as waiting for admission); ``bind`` hands
the placer this trace, whose running groups' state it may read.

Cost is what the pools cost while they are provisioned: a group's pools from its creation to its
last member's departure (a pool extended later costs more from then on). SLO attainment per job
is the share of its iterations (the gap between two iteration ends, the first measured from its
first rollout start) no longer than its SLO; the time a job waits for admission is reported
apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional, Protocol

import numpy as np

from formulation.placement.evaluate import Config as PoolConfig  # the placement planner's pool pair: one definition
from simulator.core import EventLoop
from simulator.groups import GroupRun, GroupSpec, MemberSpec
from simulator.profiles import PhaseProfile


@dataclass(frozen=True)
class TraceJob:
    name: str
    arrival_s: float
    iterations: int
    slo_s: float
    profile: Callable[[PoolConfig], PhaseProfile]  # phase times on a pool pair (cached by the caller)
    switch_s: Callable[[PoolConfig], tuple]  # (rollout, training) warm-switch seconds on a pool pair
    solo: PoolConfig  # its own pools (Solo-D)
    colocated: Optional[PoolConfig] = None  # its own colocated pool (train type on both sides)
    cold_switch_s: Optional[Callable[[PoolConfig], tuple]] = None  # (rollout, training) cold starts; None: as warm
    dram_rollout_node_gb: float = 0.0  # host DRAM it keeps on every rollout node of its group
    train_state_gb: float = 0.0  # host DRAM it keeps on the training pool, spread over its nodes


def consolidation_gain(tail, rollout_s: float, pinned_gpus: int, shared: bool) -> float:
    """Predicted GPU-seconds one consolidated rollout gains: the GPUs it releases for its tail
    (``pinned - tail_gpus`` for ``(1 - body_frac) x rollout``), usable only when another member
    waits on the same rollout nodes (``shared``), against what the re-prefill costs (the tail
    stretched by ``tail_stretch - 1`` on every GPU the member holds until its iteration ends).
    Consolidation is applied only where this is positive."""
    tail_s = (1.0 - tail.body_frac) * rollout_s
    freed = max(0, pinned_gpus - tail.tail_gpus) * tail_s if shared else 0.0
    return freed - max(0.0, tail.tail_stretch - 1.0) * tail_s * pinned_gpus


def move_s(job: TraceJob, c) -> float:
    """Seconds before a member that leaves its group for another can start there: its state loaded on
    the new group's pools from scratch (the cold start of each side, the longer one), an upper bound
    on copying it from the nodes it leaves."""
    w = c.whole()
    r, t = job.cold_switch_s(w) if job.cold_switch_s is not None else job.switch_s(w)
    return float(max(r, t))


class Placer(Protocol):
    """Where jobs run. ``admit`` returns False when the job cannot be placed now."""

    def admit(self, job: str) -> bool: ...

    def remove(self, job: str) -> None: ...

    def groups(self) -> dict:  # group id -> (PoolConfig, [member names in round-robin order])
        ...


class SoloPlacer:
    """One group per job on its own pool pair (Solo-D), or its own colocated pool."""

    def __init__(self, jobs: dict, capacity: dict, colocated: bool = False) -> None:
        self.jobs = jobs
        self.free = dict(capacity)
        self.capacity = dict(capacity)
        self.colocated = colocated
        self._groups: dict = {}

    def _config(self, name: str) -> PoolConfig:
        j = self.jobs[name]
        return j.colocated if self.colocated else j.solo

    def _need(self, c: PoolConfig) -> dict:
        if self.colocated:
            return {c.train_type: c.train_nodes}
        need = {c.rollout_type: c.rollout_nodes}
        need[c.train_type] = need.get(c.train_type, 0) + c.train_nodes
        return need

    def admit(self, job: str) -> bool:
        c = self._config(job)
        need = self._need(c)
        if any(self.free.get(t, 0) < n for t, n in need.items()):
            return False
        for t, n in need.items():
            self.free[t] -= n
        self._groups[f"solo-{job}"] = (c, [job])
        return True

    def shortage(self, job: str) -> dict:
        """Nodes per GPU type the job's own pool(s) need beyond the whole fleet (empty: it fits once
        enough others leave; otherwise it is never admitted)."""
        cap = self.capacity
        return {t: n - cap.get(t, 0) for t, n in self._need(self._config(job)).items() if n > cap.get(t, 0)}

    def remove(self, job: str) -> None:
        c, _ = self._groups.pop(f"solo-{job}")
        for t, n in self._need(c).items():
            self.free[t] += n

    def groups(self) -> dict:
        return dict(self._groups)


@dataclass
class JobRecord:
    name: str
    arrival_s: float
    admitted_s: Optional[float] = None
    done_s: Optional[float] = None
    group: Optional[str] = None
    iteration_s: list = field(default_factory=list)
    slo_s: float = math.inf
    tokens: float = 0.0

    @property
    def slo_attainment(self) -> float:
        if not self.iteration_s:
            return math.nan
        return float(np.mean([d <= self.slo_s * (1 + 1e-9) for d in self.iteration_s]))


@dataclass
class TraceResult:
    policy: str
    end_s: float
    jobs: dict  # name -> JobRecord
    cost: float
    gpu_hours: dict  # gpu type -> GPU-hours provisioned
    provisioned: list  # (t, gpu type, GPUs provisioned from t)
    groups: dict  # group id -> GroupRun
    group_spans: dict  # group id -> (created, ended, PoolConfig)
    events: int = 0
    moves: dict = field(default_factory=dict)  # admission move -> count (set by the caller that knows the placer)
    consolidated: int = 0  # members whose tail was consolidated (predicted gain > 0)
    migrations: int = 0  # running members the placer moved to another group (re-pack)

    def summary(self) -> dict:
        """Totals of the run. SLO attainment (``slo_attainment_mean``, ``jobs_meeting_slo``) is over the
        jobs that ran at least one iteration (``jobs_ran``; a trace stopped at its horizon counts the
        iterations so far), NaN when none did; ``jobs_not_admitted``: jobs that never started."""
        done = [j for j in self.jobs.values() if j.done_s is not None]
        att = [j.slo_attainment for j in self.jobs.values() if j.iteration_s]
        waits = [j.admitted_s - j.arrival_s for j in self.jobs.values() if j.admitted_s is not None]
        tokens = sum(j.tokens for j in self.jobs.values())
        return {
            "policy": self.policy,
            "jobs": len(self.jobs),
            "jobs_done": len(done),
            "jobs_ran": len(att),
            "jobs_not_admitted": sum(1 for j in self.jobs.values() if j.admitted_s is None),
            "end_s": self.end_s,
            "cost": self.cost,
            "gpu_hours": dict(self.gpu_hours),
            "tokens": tokens,
            "tokens_per_dollar": tokens / self.cost if self.cost > 0 else math.nan,
            "slo_attainment_mean": float(np.mean(att)) if att else math.nan,
            "jobs_meeting_slo": float(np.mean([a >= 1.0 - 1e-9 for a in att])) if att else math.nan,
            "mean_wait_s": float(np.mean(waits)) if waits else math.nan,
            "max_wait_s": float(np.max(waits)) if waits else math.nan,
            "groups": len(self.group_spans),
            "events": self.events,
            "consolidated_members": self.consolidated,
        }


class TraceSim:
    def __init__(self, jobs: list, placer: Placer, prices: dict, gpus_per_node: int = 8, *, consolidate: bool = False,
                 seed: int = 0, horizon_s: Optional[float] = None, policy: str = "groups", record_phases: bool = False,
                 node_dram_gb: Optional[dict] = None) -> None:
        """``node_dram_gb``: host DRAM per node by GPU type; members whose state does not fit beside the
        group's earlier members on a node are not resident there and pay cold starts at every switch."""
        self.node_dram_gb = node_dram_gb or {}
        self.loop = EventLoop(seed)
        self.jobs = {j.name: j for j in jobs}
        self.placer = placer
        self.prices = prices
        self.gpn = gpus_per_node
        self.consolidate = consolidate
        self.horizon_s = horizon_s
        self.policy = policy
        self.record_phases = record_phases
        self.records = {j.name: JobRecord(j.name, j.arrival_s, slo_s=j.slo_s) for j in jobs}
        self.queue: list[str] = []
        self.runs: dict[str, GroupRun] = {}
        self.configs: dict[str, PoolConfig] = {}
        self.spans: dict = {}
        self.slots: dict[str, dict[str, int]] = {}  # pinned groups: member -> its rollout-node slot
        self.consolidated: set[str] = set()  # members whose tail was consolidated (predicted gain > 0)
        self.migrating: set[str] = set()  # members leaving their run for another group (the placer moved them)
        self.moved_from: dict[str, float] = {}  # a moved member -> the end of its last iteration in its old run
        self.ready_at: dict[str, float] = {}  # a moved member -> when its state is on its new group's pools (move_s)
        self.migrations = 0
        self.provisioned: list = []
        self._level: dict = {}
        self.pending: set[str] = set()  # members admitted into a running group whose first rollout starts later
        self.joined: set[str] = set()  # members that have run in a group (a later timed join is a move, not an admission)
        for j in sorted(jobs, key=lambda j: (j.arrival_s, j.name)):
            self.loop.at(j.arrival_s, self._arrive, j.name)
        if hasattr(placer, "bind"):  # a placer that times joins on the running groups' state
            placer.bind(self)

    # ------------------------------------------------------------------ provisioning ledger
    def _provision(self, gpu_type: str, delta: int) -> None:
        now = self.loop.now
        self._level[gpu_type] = self._level.get(gpu_type, 0) + delta
        self.provisioned.append((now, gpu_type, self._level[gpu_type]))

    def _pool_gpus(self, c: PoolConfig) -> dict:
        if self.policy == "colocated-jobs":
            return {c.train_type: c.train_nodes * self.gpn}
        out = {c.rollout_type: c.rollout_pool_nodes * self.gpn}
        out[c.train_type] = out.get(c.train_type, 0) + c.train_nodes * self.gpn
        return out

    # ------------------------------------------------------------------ members
    def _slot(self, gid: str, name: str) -> int:
        """The member's slot in a pinned group (its own rollout nodes): kept while it stays; a
        newcomer takes the lowest slot no running member holds."""
        slots = self.slots.setdefault(gid, {})
        run = self.runs.get(gid)
        if (name in slots and run is not None and run.active() and name not in run.members
                and any(slots.get(m) == slots[name] for m in run.members)):  # placed back into a run it left: its slot was taken
            del slots[name]
        if name not in slots:
            fresh = run is None or not run.active()  # a run being built: every slot given so far is held
            held = {slots[m] for m in slots if fresh or (run is not None and m in run.members)}
            slots[name] = min(i for i in range(len(slots) + 1) if i not in held)
        return slots[name]

    def _member(self, name: str, c: PoolConfig, gid: str) -> MemberSpec:
        job = self.jobs[name]
        w = c.whole()  # phase times and switches depend on the member's own pools
        prof = job.profile(w)
        sw_r, sw_t = job.switch_s(w)
        resident_r, resident_t = self._resident(name, c, gid)
        if job.cold_switch_s is not None and not (resident_r and resident_t):
            cold_r, cold_t = job.cold_switch_s(w)
            sw_r = sw_r if resident_r else cold_r
            sw_t = sw_t if resident_t else cold_t
        first = self._slot(gid, name) * c.rollout_nodes if c.pinned else 0
        rn = tuple(f"{gid}-r{i}" for i in range(first, first + c.rollout_nodes))
        tn = tuple(f"{gid}-t{i}" for i in range(c.train_nodes))
        tail = prof.tail if self.consolidate else None
        if tail is not None:
            run = self.runs.get(gid)
            others = [m for m in (run.order if run is not None and run.active() else []) if m != name]
            shared = bool(others) and not c.pinned  # another member waits on these rollout nodes
            gain = consolidation_gain(tail, float(np.mean(prof.rollout_s)), c.rollout_nodes * self.gpn, shared)
            if gain <= 0.0:
                tail = None
            else:
                self.consolidated.add(name)
        left = max(1, job.iterations - len(self.records[name].iteration_s))
        rollout_s, train_s = prof.rollout_s, prof.train_s
        if self.policy == "colocated-jobs":
            # one pool does both phases: every phase change offloads one state and loads the other
            rollout_s = tuple(x + sw_r for x in rollout_s)
            train_s = tuple(x + sw_t for x in train_s)
            sw_r = sw_t = 0.0
        return MemberSpec(name=name, rollout_s=rollout_s, train_s=train_s, sync_s=prof.sync_s, rollout_nodes=rn,
                          train_nodes=tn, rollout_switch_s=sw_r, train_switch_s=sw_t, tail=tail, iterations=left,
                          tokens_per_iteration=prof.tokens_per_iteration, slo_s=job.slo_s)

    def _resident(self, name: str, c: PoolConfig, gid: str) -> tuple[bool, bool]:
        """Whether ``name``'s state fits in host DRAM beside the group's members that joined before it."""
        run = self.runs.get(gid)
        before = [m for m in (run.order if run is not None and run.active() else []) if m != name]
        jobs = [self.jobs[m] for m in before] + [self.jobs[name]]
        if c.pinned:  # alone on its rollout nodes
            use_t = sum(j.train_state_gb for j in jobs) / max(1, c.train_nodes)
            return (self.jobs[name].dram_rollout_node_gb <= self.node_dram_gb.get(c.rollout_type, math.inf) * (1 + 1e-9),
                    use_t <= self.node_dram_gb.get(c.train_type, math.inf) * (1 + 1e-9))
        d_r = self.node_dram_gb.get(c.rollout_type, math.inf)
        d_t = self.node_dram_gb.get(c.train_type, math.inf)
        use_r = sum(j.dram_rollout_node_gb for j in jobs)
        use_t = sum(j.train_state_gb for j in jobs) / max(1, c.train_nodes)
        return use_r <= d_r * (1 + 1e-9), use_t <= d_t * (1 + 1e-9)

    def _on_iteration(self, name: str, start: float, end: float, tokens: float) -> None:
        start = self.moved_from.pop(name, start)  # a moved member's first iteration in its new run counts the move
        rec = self.records[name]
        rec.iteration_s.append(end - start)
        rec.tokens += tokens
        # the placer may move a member at its iteration boundary (draining its group): it leaves now
        at_boundary = getattr(self.placer, "at_boundary", None)
        if (at_boundary is not None and rec.done_s is None and len(rec.iteration_s) < self.jobs[name].iterations
                and at_boundary(name)):
            self._reconcile()

    def _on_member_done(self, gid: str, name: str, now: float) -> None:
        finished = len(self.records[name].iteration_s) >= self.jobs[name].iterations
        self.migrating.discard(name) if finished else None
        if name in self.migrating:  # it left for another group: it joins that one's run (not from inside this callback)
            self.migrating.discard(name)
            last = self.runs[gid].finished[name].last_end
            if last is not None:
                self.moved_from[name] = last
            placed = {m: c for c, ms in self.placer.groups().values() for m in ms}
            delay = move_s(self.jobs[name], placed[name]) if name in placed else 0.0
            ahead = getattr(self.placer, "move_delay", None)  # the placer launched its processes ahead (None: it did not)
            got = ahead(name) if ahead is not None else None
            delay = delay if got is None else float(got)
            self.ready_at[name] = now + delay
            self.loop.after(delay, self._reconcile)
            return
        rec = self.records[name]
        if rec.done_s is None and len(rec.iteration_s) >= self.jobs[name].iterations:
            rec.done_s = now
        self.placer.remove(name)
        self._reconcile()
        self._admit_waiting()

    # ------------------------------------------------------------------ flow
    def _arrive(self, name: str) -> None:
        self.queue.append(name)
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        still = []
        changed = False
        for name in self.queue:
            if self.placer.admit(name):
                self.records[name].admitted_s = self.loop.now
                changed = True
            else:
                still.append(name)
        self.queue = still
        if changed:
            self._reconcile()

    def _reconcile(self) -> None:
        """Make the running groups match the placer's groups."""
        now = self.loop.now
        for gid, open_run in self.runs.items():  # close emptied groups first (their ids may be reused)
            if not open_run.active() and self.spans[gid][1] is None:
                self.spans[gid][1] = now
                for t, g in self._pool_gpus(self.configs[gid]).items():
                    self._provision(t, -g)
        placed = self.placer.groups()
        where = {m: gid for gid, (_, ms) in placed.items() for m in ms}
        for gid, open_run in list(self.runs.items()):  # members the placer moved leave after their current iteration
            if not open_run.active():
                continue
            for m in list(open_run.members):
                if where.get(m, gid) != gid and m not in self.migrating and self.records[m].done_s is None:
                    self.migrating.add(m)
                    self.migrations += 1
                    open_run.retire(m)
        busy = {m for r in self.runs.values() if r.active() for m in r.members}  # still running elsewhere (moving)
        for gid, (c, members) in placed.items():
            run = self.runs.get(gid)
            members = [m for m in members if self.records[m].done_s is None and self.ready_at.get(m, now) <= now + 1e-9
                       and not (m in busy and (run is None or m not in run.members))]
            if not members:
                continue
            if run is None or not run.active():
                if not members:
                    continue
                self.pending.difference_update(members)
                key = gid if run is None else f"{gid}#{now:.3f}"
                self.configs[gid] = c
                self.slots.pop(gid, None)  # a new run: its members take slots afresh
                specs = tuple(self._member(m, c, gid) for m in members)
                pool_r = tuple(f"{gid}-r{i}" for i in range(c.rollout_pool_nodes)) if c.pinned else specs[0].rollout_nodes
                run = GroupRun(self.loop, GroupSpec(name=gid, members=specs, gpus_per_node=self.gpn,
                                                    rollout_nodes=pool_r, train_nodes=specs[0].train_nodes),
                               rng=np.random.default_rng([self.loop.seed, len(self.spans)]),
                               on_member_done=partial(self._on_member_done, gid), record=self.record_phases,
                               on_iteration=self._on_iteration)
                if key != gid:  # a reused id: keep the finished run's record under another key
                    self.runs[key], self.spans[key], self.configs[key] = self.runs[gid], self.spans[gid], self.configs[gid]
                self.runs[gid] = run
                self.configs[gid] = c
                for t, g in self._pool_gpus(c).items():
                    self._provision(t, g)
                self.spans[gid] = [now, None, c]
                for m in members:
                    self.records[m].group = gid
                self.joined.update(members)
                continue
            old = self.configs[gid]
            if c != old:  # the rollout pool was extended: new nodes join the rings, phase times shrink
                self._extend(gid, run, old, c)
            for m in members:
                if m not in run.members and m not in self.pending:  # (one that left this run and is placed back rejoins it)
                    start = self._start_of(m)
                    if start is not None and start > now + 1e-9:  # the placer timed its first rollout
                        self.pending.add(m)
                        self.loop.at(start, self._late_join, gid, m)
                        continue
                    run.add_member(self._member(m, c, gid))
                    self.records[m].group = gid
                    self.joined.add(m)

    def _start_of(self, name: str) -> Optional[float]:
        start_s = getattr(self.placer, "start_s", None)
        return start_s(name) if start_s is not None else None

    def _late_join(self, gid: str, name: str) -> None:
        """A member whose first rollout the placer timed joins its group's run now (its wait for that
        moment counts as waiting for admission; a member that ran before, moved here by the placer, keeps
        its admission time: its time moving is no wait)."""
        if name not in self.pending:  # it started with a fresh run of its group meanwhile
            return
        self.pending.discard(name)
        if name not in self.joined:
            self.records[name].admitted_s = self.loop.now
        run = self.runs.get(gid)
        placed = self.placer.groups().get(gid)
        if run is None or not run.active() or placed is None or name not in placed[1] or self.records[name].done_s is not None:
            self._reconcile()
            return
        if name not in run.members:
            run.add_member(self._member(name, placed[0], gid))
            self.records[name].group = gid
            self.joined.add(name)

    def _extend(self, gid: str, run: GroupRun, old: PoolConfig, new: PoolConfig) -> None:
        for t, g in self._pool_gpus(old).items():
            self._provision(t, -g)
        for t, g in self._pool_gpus(new).items():
            self._provision(t, g)
        self.configs[gid] = new
        self.spans[gid][2] = new
        if new.pinned:  # a member joins on rollout nodes of its own (or one left with its own): the others keep theirs
            if not old.pinned:  # a lone member on the whole pools: its nodes are the first slot's
                slots = self.slots.setdefault(gid, {})
                for name in run.members:
                    slots.setdefault(name, 0)
            return
        run.add_nodes("rollout", [f"{gid}-r{i}" for i in range(new.rollout_nodes)])
        for name in list(run.members):
            spec = self._member(name, new, gid)
            run.replace_member(spec)

    def run(self) -> TraceResult:
        self.loop.run(until=self.horizon_s, max_events=100_000_000)
        end = self.loop.now
        cost, hours = 0.0, {}
        by_type: dict = {}
        for t, typ, level in self.provisioned:
            by_type.setdefault(typ, []).append((t, level))
        for typ, pts in by_type.items():
            h = 0.0
            for i, (t, lv) in enumerate(pts):
                t1 = pts[i + 1][0] if i + 1 < len(pts) else end
                h += lv * max(0.0, min(t1, end) - t) / 3600.0
            hours[typ] = h
            cost += h * self.prices.get(typ, 0.0)
        spans = {g: (a, b if b is not None else end, c) for g, (a, b, c) in self.spans.items()}
        return TraceResult(policy=self.policy, end_s=end, jobs=self.records, cost=cost, gpu_hours=hours,
                           provisioned=self.provisioned, groups=self.runs, group_spans=spans, events=self.loop.events_run,
                           consolidated=len(self.consolidated), migrations=self.migrations)
