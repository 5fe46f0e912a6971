"""Phase-level model of co-execution groups: the round-robin meta-iteration, executed event by event.

A group (Weave) has a rollout pool and a training pool; each member is pinned to some nodes of
both. The runner carries out the fixed-order schedule that :mod:`formulation.placement.cycle`
analyses, with resources instead of algebra:

* every node keeps a *ring*, the members pinned to it in the group's order, and serves them in
  turn: a member's phase starts when every node it is pinned to has come round to it and is free,
  and (rollout) its previous training and weight sync are done, or (training) its rollout is done;
* a rollout occupies its rollout nodes for its duration; a training step occupies its training
  nodes for training plus weight sync (the trainer sends the weights, as in the cycle-time model);
* a node that changes member pays a switch first: warm when the member's state is resident in
  that node's host DRAM (:func:`estimators.comm.warm_switch_s`), cold otherwise
  (:func:`estimators.comm.cold_start_s`). The node starts loading the member whose turn comes
  next as soon as it is released (*prefetch*: the member's state on that node does not change
  while it runs its other phase elsewhere), so a member that arrives late finds its state loaded
  and waits only for what is left of the load; a member that joins a running ring, or whose turn
  came by a departure, pays its whole switch when it claims the nodes. This is the schedule the
  cycle-time model describes (the switch on the ring arcs, never on a member's own arcs);
* phase durations are drawn per iteration from each member's samples (the request-level model's
  rollouts and training, see :mod:`simulator.trace`) or are fixed numbers;
* **long-tail consolidation**: a member with a tail profile runs its rollout body on all its
  GPUs until ``body_frac`` of its rollout time (the moment ``consolidate_at`` of its requests are
  done), then keeps ``tail_gpus`` GPUs for the rest (stretched by ``tail_stretch``) and releases the
  others: the next member in the ring starts on the released GPUs at once and runs at the share
  of the GPUs it holds until the tail's GPUs come back. Progress of a rollout body is fluid:
  ``d(work)/dt = GPUs held / GPUs pinned`` (the body is throughput-bound, so its rate is linear in
  its engines).

A member's *cycle time* is the mean gap between its successive iteration ends once the schedule is
in steady state; with fixed phase times and no switches it equals the maximum cycle ratio of the
event graph that :func:`formulation.placement.cycle.cycle_times` computes.

Membership can change between iterations (:meth:`GroupRun.add_member`, :meth:`GroupRun.retire`),
which the multi-job trace uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import numpy as np

from simulator.core import EventLoop, Handle

Duration = Union[float, Sequence[float]]  # a fixed number, or samples drawn one per iteration


@dataclass(frozen=True)
class TailProfile:
    """Long-tail consolidation of one member's rollout (fractions of its rollout time)."""

    body_frac: float  # time until consolidation (consolidate_at of the requests done) over the unconsolidated rollout time
    tail_gpus: int  # GPUs kept for the tail
    tail_stretch: float = 1.0  # tail duration with consolidation / without


@dataclass(frozen=True)
class MemberSpec:
    name: str
    rollout_s: Duration
    train_s: Duration
    sync_s: float
    rollout_nodes: tuple
    train_nodes: tuple
    rollout_switch_s: float = 0.0  # per node change of member (warm or cold, decided by the caller)
    train_switch_s: float = 0.0
    tail: Optional[TailProfile] = None
    iterations: Optional[int] = None  # leave the group after this many iterations (None: run on)
    tokens_per_iteration: float = 0.0
    slo_s: float = math.inf


@dataclass(frozen=True)
class GroupSpec:
    name: str
    members: tuple  # MemberSpec, in round-robin order
    gpus_per_node: int = 8
    price_rollout_per_gpu_h: float = 0.0
    price_train_per_gpu_h: float = 0.0
    rollout_nodes: tuple = ()  # the pools (default: every node a member is pinned to)
    train_nodes: tuple = ()


def _draw(d: Duration, rng: np.random.Generator) -> float:
    if isinstance(d, (int, float)):
        return float(d)
    arr = np.asarray(d, dtype=float)
    return float(arr[rng.integers(0, arr.size)])


@dataclass
class _Node:
    name: str
    gpus: int
    ring: list = field(default_factory=list)  # member names in order
    ptr: int = 0
    owner: Optional[str] = None  # member whose phase holds the node (its body, or its training)
    last: Optional[str] = None  # member whose state is on the node, or being loaded (switch detection)
    ready_at: float = 0.0  # when the load of ``last``'s state is (or was) done
    tails: dict = field(default_factory=dict)  # member -> GPUs its consolidated tail keeps here

    def insert(self, name: str, order: list) -> None:
        """Add a member to the ring at its place in the group's order."""
        pos = sum(1 for m in self.ring if order.index(m) < order.index(name)) if name in order else len(self.ring)
        self.ring.insert(pos, name)
        if len(self.ring) > 1 and pos <= self.ptr:
            self.ptr += 1  # keep the turn with the member that had it
        self.ptr %= len(self.ring)

    def insert_at_turn(self, name: str) -> None:
        """Add a member that goes next (a job joining a running group): before the member whose turn
        it is, or right after the member running on the node now (its release moves the turn on)."""
        if name in self.ring:
            return
        if not self.ring:
            self.ring.append(name)
            self.ptr = 0
            return
        pos = self.ptr % len(self.ring)
        if self.owner is not None and self.ring[pos] == self.owner:
            pos += 1
        self.ring.insert(pos, name)

    def turn(self) -> Optional[str]:
        return self.ring[self.ptr % len(self.ring)] if self.ring else None

    def advance_past(self, name: str) -> None:
        if name in self.ring:
            self.ptr = (self.ring.index(name) + 1) % len(self.ring)

    def free_gpus(self) -> int:
        return self.gpus - sum(self.tails.values())


@dataclass
class PhaseRecord:
    member: str
    iteration: int
    kind: str  # rollout | train | switch
    start_s: float
    end_s: float
    nodes: tuple


@dataclass
class _Member:
    spec: MemberSpec
    k: int = 0  # iterations completed
    state: str = "ready_r"  # ready_r | rollout | tail | ready_t | train | done
    work: float = 0.0  # rollout body work left (seconds at the full rate)
    rate: float = 0.0
    t_sync: float = 0.0  # time the body work was last brought up to date
    hold: dict = field(default_factory=dict)  # node -> GPUs held in the rollout body
    handle: Optional[Handle] = None
    rollout_starts: list = field(default_factory=list)
    iter_end: list = field(default_factory=list)  # end of each training (+ sync)
    cur_rollout_s: float = 0.0
    phase_start: float = 0.0
    tail_start: float = 0.0
    retiring: bool = False
    last_end: Optional[float] = None
    pinned: int = 1  # GPUs of the rollout nodes when the current rollout started
    joining: bool = False  # joined a running group: not yet on its training nodes' rings
    train_start: float = 0.0  # when its training under way started (its state loaded on the training nodes)


class GroupRun:
    """Run one group's meta-iterations on an event loop (shared with other groups in a trace)."""

    def __init__(self, loop: EventLoop, spec: GroupSpec, rng: Optional[np.random.Generator] = None,
                 on_member_done: Optional[Callable[[str, float], None]] = None, record: bool = True,
                 on_iteration: Optional[Callable[[str, float, float, float], None]] = None) -> None:
        """``on_iteration(member, start, end, tokens)`` after each of a member's iterations: ``start``
        is the end of its previous iteration (its first rollout start for the first)."""
        self.loop = loop
        self.spec = spec
        self.rng = rng if rng is not None else loop.rng
        self.on_member_done = on_member_done
        self.on_iteration = on_iteration
        self.record = record
        self.nodes: dict[str, _Node] = {}
        self.train_nodes: dict[str, _Node] = {}
        self.members: dict[str, _Member] = {}
        self.finished: dict[str, _Member] = {}  # members that have left, kept for statistics
        self.order: list[str] = []
        self.phases: list[PhaseRecord] = []
        self.busy_gpu_s = {"rollout": 0.0, "train": 0.0}
        self.created_s = loop.now
        self.end_s: Optional[float] = None  # when the run's loop ended (set by run_group)
        for n in spec.rollout_nodes:
            self.nodes[n] = _Node(n, spec.gpus_per_node)
        for n in spec.train_nodes:
            self.train_nodes[n] = _Node(n, spec.gpus_per_node)
        for m in spec.members:
            self.add_member(m, start=False)
        for name in list(self.order):
            self._try_start(name)

    # ------------------------------------------------------------------ membership
    def add_member(self, m: MemberSpec, start: bool = True) -> None:
        if m.name in self.members:
            raise ValueError(f"member {m.name!r} is already in group {self.spec.name!r}")
        self.members[m.name] = _Member(m)
        self.order.append(m.name)
        if not start:  # building the group: every ring in the group's order, all at round 0
            self._pin(m)
            return
        # joining a running group: it rolls out next on its rollout nodes, and takes its place on the
        # training nodes when that first rollout is done. The two rings may be a round apart (training
        # lags the rollout); placing the newcomer by ring position alone could make its first training
        # slot come before its first rollout, a deadlock.
        for n in m.rollout_nodes:
            self.nodes.setdefault(n, _Node(n, self.spec.gpus_per_node)).insert_at_turn(m.name)
        self.members[m.name].joining = True
        self._try_start(m.name)

    def _pin(self, m: MemberSpec) -> None:
        mem = self.members.get(m.name)
        joining = mem is not None and mem.joining  # its training rings wait for its first rollout
        for pool, names in ((self.nodes, m.rollout_nodes), (self.train_nodes, () if joining else m.train_nodes)):
            for n in names:
                node = pool.setdefault(n, _Node(n, self.spec.gpus_per_node))
                if m.name not in node.ring:
                    node.insert(m.name, self.order)

    def add_nodes(self, side: str, names: Sequence[str]) -> None:
        """Grow a pool (Weave's "extend the rollout pool"): each new node takes the ring and the turn
        of an existing node of that pool, so every node of a whole-pool group stays in step."""
        pool = self.nodes if side == "rollout" else self.train_nodes
        ref = next(iter(pool.values()), None)
        for n in names:
            if n in pool:
                continue
            node = _Node(n, self.spec.gpus_per_node)
            if ref is not None:  # a rollout under way keeps the turn on the new node until it releases the pool
                node.ring, node.ptr, node.owner, node.last, node.ready_at = list(ref.ring), ref.ptr, ref.owner, ref.last, ref.ready_at
            pool[n] = node

    def replace_member(self, m: MemberSpec) -> None:
        """New phase times or pins for a member (a resized pool). Pins may only grow, onto nodes
        :meth:`add_nodes` created; a phase under way keeps the GPUs and rate it started with.
        ``m.iterations`` counts the iterations left from now."""
        from dataclasses import replace

        mem = self.members[m.name]
        if m.iterations is not None:
            m = replace(m, iterations=mem.k + m.iterations)
        old = set(mem.spec.rollout_nodes) | {("t", n) for n in mem.spec.train_nodes}
        new = set(m.rollout_nodes) | {("t", n) for n in m.train_nodes}
        if old - new:
            raise ValueError(f"member {m.name!r}: a resized pool may only add nodes")
        mem.spec = m
        self._pin(m)
        self._try_start(m.name)

    def retire(self, name: str) -> None:
        """Leave after the current iteration (immediately if it has not started one)."""
        mem = self.members[name]
        mem.retiring = True
        if mem.state == "ready_r":
            self._leave(name)

    def _leave(self, name: str) -> None:
        mem = self.members.pop(name)
        mem.state = "done"
        self.finished[name] = mem
        self.order.remove(name)
        for pool in (self.nodes, self.train_nodes):
            for node in pool.values():
                while name in node.ring:
                    i = node.ring.index(name)
                    node.ring.remove(name)
                    if node.ring:
                        if node.ptr > i:
                            node.ptr -= 1
                        node.ptr %= len(node.ring)
                    else:
                        node.ptr = 0
        for side, pool in (("rollout", self.nodes), ("train", self.train_nodes)):
            for node in pool.values():
                self._prefetch(node, side)
        if self.on_member_done is not None:
            self.on_member_done(name, self.loop.now)
        for other in list(self.order):
            self._try_start(other)

    def active(self) -> bool:
        return bool(self.members)

    # ------------------------------------------------------------------ scheduling
    def _try_start(self, name: str) -> None:
        mem = self.members.get(name)
        if mem is None:
            return
        if mem.state == "ready_r":
            self._try_rollout(mem)
        elif mem.state == "ready_t":
            self._try_train(mem)

    def _claim(self, nodes: list, name: str, switch_s: float) -> Optional[float]:
        """Take ``nodes`` for ``name`` if every one has come round to it and is free: the seconds it
        still waits for its state (the rest of a prefetch under way, or a whole switch on a node
        whose state is another member's), or None when it must wait for the nodes."""
        if any(n.turn() != name or n.owner is not None for n in nodes):
            return None
        now = self.loop.now
        wait = 0.0
        loaded_now = False
        for n in nodes:
            if n.last is not None and n.last != name:  # another member's state: the whole switch now
                n.ready_at = now + switch_s
                loaded_now = True
            wait = max(wait, n.ready_at - now)
            n.owner = name
            n.last = name
        wait = max(0.0, wait)
        if loaded_now and wait > 0 and self.record:
            self.phases.append(PhaseRecord(name, self.members[name].k, "switch", now, now + wait, tuple(x.name for x in nodes)))
        return wait

    def _prefetch(self, node: _Node, side: str) -> None:
        """A released node starts loading the state of the member whose turn comes next."""
        nxt = node.turn()
        if nxt is None or nxt == node.last or node.owner is not None or node.last is None:
            return
        mem = self.members.get(nxt)
        if mem is None:
            return
        switch_s = mem.spec.rollout_switch_s if side == "rollout" else mem.spec.train_switch_s
        now = self.loop.now
        node.last = nxt
        node.ready_at = now + switch_s
        if switch_s > 0 and self.record:
            self.phases.append(PhaseRecord(nxt, mem.k, "switch", now, now + switch_s, (node.name,)))

    def _try_rollout(self, mem: _Member) -> None:
        s = mem.spec
        nodes = [self.nodes[n] for n in s.rollout_nodes]
        switch = self._claim(nodes, s.name, s.rollout_switch_s)
        if switch is None:
            return
        now = self.loop.now
        for n in nodes:
            mem.hold[n.name] = n.free_gpus()
        mem.state = "rollout"
        mem.pinned = len(s.rollout_nodes) * self.spec.gpus_per_node
        a = _draw(s.rollout_s, self.rng)
        mem.cur_rollout_s = a
        mem.work = a * (s.tail.body_frac if s.tail else 1.0)
        mem.t_sync = now + switch
        mem.phase_start = now
        mem.rollout_starts.append(now)
        self._reschedule_body(mem)

    def _sync_body(self, mem: _Member) -> None:
        now = self.loop.now
        if now > mem.t_sync:
            dt = now - mem.t_sync
            mem.work -= dt * mem.rate
            self.busy_gpu_s["rollout"] += dt * sum(mem.hold.values())
            mem.t_sync = now

    def _reschedule_body(self, mem: _Member) -> None:
        if mem.handle is not None:
            mem.handle.cancel()
        mem.rate = sum(mem.hold.values()) / mem.pinned
        start = max(self.loop.now, mem.t_sync)
        if mem.rate <= 0:
            mem.handle = None
            return
        mem.handle = self.loop.at(start + max(0.0, mem.work) / mem.rate, self._body_done, mem.spec.name)

    def _body_done(self, name: str) -> None:
        mem = self.members[name]
        mem.handle = None
        self._sync_body(mem)
        s = mem.spec
        now = self.loop.now
        nodes = [self.nodes[n] for n in s.rollout_nodes]
        if s.tail is not None and s.tail.tail_gpus < mem.pinned:
            keep = s.tail.tail_gpus
            for n in nodes:  # pack the tail onto the first pinned nodes
                k = min(keep, n.gpus)
                if k > 0:
                    n.tails[name] = k
                keep -= k
            mem.state = "tail"
            mem.tail_start = now
            tail_s = s.tail.tail_stretch * (1.0 - s.tail.body_frac) * mem.cur_rollout_s
            self.busy_gpu_s["rollout"] += tail_s * s.tail.tail_gpus
            self._release_rollout_nodes(mem, nodes)
            self.loop.after(tail_s, self._tail_done, name)
        else:
            self._release_rollout_nodes(mem, nodes)
            self._rollout_finished(mem)

    def _release_rollout_nodes(self, mem: _Member, nodes: list) -> None:
        for n in nodes:
            n.owner = None
            n.advance_past(mem.spec.name)
            self._prefetch(n, "rollout")
        mem.hold = {}
        if self.record:
            self.phases.append(PhaseRecord(mem.spec.name, mem.k, "rollout", mem.phase_start, self.loop.now, mem.spec.rollout_nodes))
        for other in list(self.order):
            if other != mem.spec.name:
                self._try_start(other)

    def _tail_done(self, name: str) -> None:
        mem = self.members[name]
        s = mem.spec
        for n in s.rollout_nodes:
            node = self.nodes[n]
            g = node.tails.pop(name, 0)
            if g and node.owner is not None and node.owner in self.members:
                owner = self.members[node.owner]
                if owner.state == "rollout":  # the body running here takes the GPUs back
                    self._sync_body(owner)
                    owner.hold[n] = owner.hold.get(n, 0) + g
                    self._reschedule_body(owner)
        if self.record:
            self.phases.append(PhaseRecord(name, mem.k, "tail", mem.tail_start, self.loop.now, s.rollout_nodes))
        self._rollout_finished(mem)

    def _rollout_finished(self, mem: _Member) -> None:
        if mem.joining:
            for n in mem.spec.train_nodes:
                self.train_nodes.setdefault(n, _Node(n, self.spec.gpus_per_node)).insert_at_turn(mem.spec.name)
            mem.joining = False
        mem.state = "ready_t"
        self._try_train(mem)

    def _try_train(self, mem: _Member) -> None:
        s = mem.spec
        nodes = [self.train_nodes[n] for n in s.train_nodes]
        switch = self._claim(nodes, s.name, s.train_switch_s)
        if switch is None:
            return
        now = self.loop.now
        mem.state = "train"
        mem.train_start = now + switch
        b = _draw(s.train_s, self.rng)
        dur = switch + b + s.sync_s
        self.busy_gpu_s["train"] += (b + s.sync_s) * len(nodes) * self.spec.gpus_per_node
        if self.record:
            self.phases.append(PhaseRecord(s.name, mem.k, "train", now + switch, now + dur, s.train_nodes))
        self.loop.after(dur, self._train_done, s.name)

    def _train_done(self, name: str) -> None:
        mem = self.members[name]
        s = mem.spec
        for n in s.train_nodes:
            node = self.train_nodes[n]
            node.owner = None
            node.advance_past(name)
            self._prefetch(node, "train")
        mem.k += 1
        now = self.loop.now
        mem.iter_end.append(now)
        if self.on_iteration is not None:
            start = mem.last_end if mem.last_end is not None else mem.rollout_starts[0]
            self.on_iteration(name, start, now, s.tokens_per_iteration)
        mem.last_end = now
        mem.state = "ready_r"
        done = mem.retiring or (s.iterations is not None and mem.k >= s.iterations)
        if done:
            self._leave(name)
            return
        for other in list(self.order):
            self._try_start(other)

    # ------------------------------------------------------------------ results
    def cycle_times(self, skip: int = 2) -> dict[str, float]:
        """Mean gap between successive iteration ends (training plus weight sync done) per member,
        after ``skip`` warm-up iterations. Iteration ends settle at the period at once whichever pool
        is the bottleneck; rollout starts can take tens of iterations to feel a training-bound ring
        whose period is close to the rollout ring's (a long max-plus transient)."""
        out = {}
        for name, mem in self._all_members().items():
            st = mem.iter_end[skip:]
            if len(st) >= 2:
                out[name] = (st[-1] - st[0]) / (len(st) - 1)
        return out

    def _all_members(self) -> dict:
        return {**self.finished, **self.members}

    def gpus(self) -> tuple[int, int]:
        return len(self.nodes) * self.spec.gpus_per_node, len(self.train_nodes) * self.spec.gpus_per_node


def run_group(spec: GroupSpec, iterations: int = 12, seed: int = 0) -> GroupRun:
    """Run every member of ``spec`` for ``iterations`` iterations (a fixed group, no arrivals)."""
    from dataclasses import replace

    loop = EventLoop(seed)
    members = tuple(m if m.iterations is not None else replace(m, iterations=iterations) for m in spec.members)
    run = GroupRun(loop, replace(spec, members=members))
    loop.run()
    run.end_s = loop.now
    return run


def spec_from_plan_group(group, rollout_switch_s: float = 0.0, train_switch_s: float = 0.0,
                         price_rollout_per_gpu_h: float = 0.0, price_train_per_gpu_h: float = 0.0) -> GroupSpec:
    """A :class:`GroupSpec` from a placement plan's group (``PlacementPlan.groups[i]``: pools with node
    names, members with phase seconds and node pins, the round-robin order). Read by attribute, so
    the simulator does not depend on the placement package."""
    by = {m.job: m for m in group.members}
    members = tuple(MemberSpec(name=n, rollout_s=float(by[n].rollout_s), train_s=float(by[n].train_s),
                               sync_s=float(by[n].sync_s), rollout_nodes=tuple(by[n].rollout_nodes),
                               train_nodes=tuple(by[n].train_nodes), rollout_switch_s=rollout_switch_s,
                               train_switch_s=train_switch_s, slo_s=float(by[n].slo_s)) for n in group.order)
    return GroupSpec(name=group.id, members=members, gpus_per_node=group.rollout_pool.gpus_per_node,
                     price_rollout_per_gpu_h=price_rollout_per_gpu_h, price_train_per_gpu_h=price_train_per_gpu_h,
                     rollout_nodes=tuple(group.rollout_pool.nodes), train_nodes=tuple(group.train_pool.nodes))
