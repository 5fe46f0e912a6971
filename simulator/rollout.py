"""The rollout component: engines, the router, tool calls, draining and long-tail consolidation.

* **Dispatch** at the start of an iteration is verl's: the batch (with the ``G`` responses of a
  prompt consecutive) is cut into equal contiguous chunks, one per engine, so siblings share an
  engine and its cached prompt.
* **Routing** of a request that re-enters (its next turn after a tool call, or a request moved off
  a drained engine) is cache-aware, as SGLang's router: the engine that holds its cached context
  if that engine is still up, else the engine with the most running siblings of its group (their
  prompt is cached there), else the least-loaded engine.
* **Tool calls** run outside the GPUs (a sandbox pool with no queueing): a turn's end schedules
  the tool's return after its latency, then the next turn is routed.
* **Workload migration** (:meth:`RolloutStage.drain`): the drained engines stop; their running and
  waiting requests keep the tokens they generated and are routed to the kept engines, where their
  context is prefilled again (counted as re-prefilled tokens).
* **Long-tail consolidation** (Weave, :meth:`RolloutStage.consolidate`): when a configurable
  fraction of the requests has finished (default 80%), the remaining ones are packed onto the
  fewest engines whose predicted step time (at the packed batch and KV, within half the KV
  capacity) stays within ``1 + pack_slack`` (default 1.25) of the slowest engine's step time now,
  keeping the engines that already run the most of them, and the other engines are released.

GPU ownership is recorded as intervals per engine (held from start to release; busy while
decoding or prefilling), from which the metrics and the Figure-13-style plot are drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from simulator.core import EventLoop
from simulator.engine import EngineModel, RolloutEngine
from simulator.workload import Request


@dataclass
class EngineSlot:
    node: str
    gpu_type: str
    gpus: int


@dataclass
class RolloutStats:
    started: int = 0
    finished: int = 0
    turns_done: int = 0
    tool_calls: int = 0
    migrated: int = 0
    completion_times: list = field(default_factory=list)  # (time, rid) of each request's last turn


class RolloutStage:
    def __init__(self, loop: EventLoop, model: EngineModel, slots: list[EngineSlot], *, queue_policy: str = "fifo",
                 max_wait_s: float = 30.0, on_request_done: Optional[Callable[[Request], None]] = None,
                 on_gpus_released: Optional[Callable[[list[EngineSlot], float], None]] = None,
                 consolidate_at: Optional[float] = None, pack_slack: float = 0.25, name: str = "rollout") -> None:
        self.loop = loop
        self.model = model
        self.name = name
        self.queue_policy = queue_policy
        self.max_wait_s = max_wait_s
        self.on_request_done = on_request_done
        self.on_gpus_released = on_gpus_released
        self.consolidate_at = consolidate_at
        self.pack_slack = pack_slack
        self.engines: dict[int, RolloutEngine] = {}
        self.slots: dict[int, EngineSlot] = {}
        self.held: dict[int, list] = {}  # eid -> [start, end or None]
        self._next_eid = 0
        self.stats = RolloutStats()
        self.n_total = 0  # requests of the current iteration
        self.n_finished = 0  # of the current iteration
        self.in_tool: dict[int, Request] = {}
        self.consolidated_at_s: Optional[float] = None
        self.retired: list[RolloutEngine] = []
        for s in slots:
            self.add_engine(s, ready_s=loop.now)

    # ------------------------------------------------------------------ engines
    def add_engine(self, slot: EngineSlot, ready_s: float, held_from_s: Optional[float] = None) -> RolloutEngine:
        eid = self._next_eid
        self._next_eid += 1
        e = RolloutEngine(eid, self.loop, self.model, node=slot.node, gpu_type=slot.gpu_type, gpus=slot.gpus,
                          queue_policy=self.queue_policy, max_wait_s=self.max_wait_s, on_turn_done=self._on_turn_done,
                          start_s=self.loop.now)
        e.busy_until = max(e.busy_until, ready_s)
        self.engines[eid] = e
        self.slots[eid] = slot
        self.held[eid] = [self.loop.now if held_from_s is None else held_from_s, None]
        return e

    def alive(self) -> list[RolloutEngine]:
        return [e for e in self.engines.values() if e.alive]

    def gpus(self) -> int:
        return sum(e.gpus for e in self.alive())

    # ------------------------------------------------------------------ requests
    def start(self, requests: list[Request], kick: bool = True) -> None:
        """verl dispatch: contiguous equal chunks, one per engine. With ``kick=False`` the requests
        only wait in the engines' queues (visible as queue depth) until :meth:`redispatch`."""
        now = self.loop.now
        n = len(requests)
        self.n_total = n
        self.n_finished = 0
        self.consolidated_at_s = None
        self.stats.started += n
        for r in requests:
            r.submitted_s = now
        self._dispatch(requests, now, kick)

    def _dispatch(self, requests: list[Request], now: float, kick: bool = True) -> None:
        engines = sorted(self.alive(), key=lambda e: e.eid)
        per = math.ceil(len(requests) / len(engines)) if engines else 0
        for j, e in enumerate(engines):
            for r in requests[j * per:(j + 1) * per]:
                e.queue.push(_queued(r, e, now))
                r.engine = e.eid
            if kick:
                e.kick(now)

    def redispatch(self) -> None:
        """Spread every waiting request over the engines up now (after a resize at an iteration start)."""
        now = self.loop.now
        waiting = [r for e in self.alive() for r in e.take_waiting(now)]
        self._dispatch(sorted(waiting, key=lambda r: r.rid), now)

    def route(self, req: Request, now: float) -> RolloutEngine:
        alive = self.alive()
        if not alive:
            raise RuntimeError("no rollout engine is up to take a request")
        best = None
        if req.engine is not None:
            e = self.engines.get(req.engine)
            if e is not None and e.alive and ("r", req.rid) in e.cache:
                best = e
        if best is None and req.turn == 0:
            sib = [e for e in alive if e.group_running.get(req.group, 0) > 0]
            if sib:
                best = max(sib, key=lambda e: (e.group_running[req.group], -e.load(), -e.eid))
        if best is None:
            best = min(alive, key=lambda e: (e.load(), e.eid))
        best.submit(req, now)
        return best

    def _on_turn_done(self, engine: RolloutEngine, req: Request) -> None:
        now = self.loop.now
        req.turn_done_s.append(now)
        self.stats.turns_done += 1
        if req.turn + 1 < req.turns:
            self.stats.tool_calls += 1
            self.in_tool[req.rid] = req
            self.loop.after(req.tool_s[req.turn], self._tool_returned, req)
            return
        req.done_s = now
        req.finishes += 1
        self.stats.finished += 1
        self.n_finished += 1
        self.stats.completion_times.append((now, req.rid))
        if self.on_request_done is not None:
            self.on_request_done(req)
        if (self.consolidate_at is not None and self.consolidated_at_s is None
                and self.n_finished >= self.consolidate_at * self.n_total and self.n_finished < self.n_total):
            self.consolidate(now)

    def _tool_returned(self, req: Request) -> None:
        now = self.loop.now
        self.in_tool.pop(req.rid, None)
        req.turn += 1
        req.generated_in_turn = 0.0
        req.submitted_s = now
        self.route(req, now)

    def remaining(self) -> int:
        return self.n_total - self.n_finished

    def new_weights(self, now: float) -> None:
        """A weight update invalidates every cached prefix (the KV was computed by the old policy)."""
        for e in self.alive():
            e.sync(now)
            e.evicted_tokens += e.cached
            e.cache.clear()
            e.cached = 0.0

    # ------------------------------------------------------------------ migrations
    def drain(self, eids: list[int], now: float) -> list[EngineSlot]:
        """Workload migration: stop ``eids``, move their requests to the kept engines; returns the freed slots."""
        keep = [e for e in self.alive() if e.eid not in set(eids)]
        if not keep:
            raise ValueError("cannot drain every rollout engine")
        moved: list[Request] = []
        freed = []
        for eid in eids:
            e = self.engines[eid]
            if not e.alive:
                continue
            moved.extend(e.shutdown(now))
            self.held[eid][1] = now
            self.retired.append(e)
            freed.append(self.slots[eid])
        self.stats.migrated += len(moved)
        # siblings first so a group lands together (cache affinity for the shared prompt)
        for req in sorted(moved, key=lambda r: (r.group, r.rid)):
            self.route(req, now)
        if freed and self.on_gpus_released is not None:
            self.on_gpus_released(freed, now)
        return freed

    def consolidate(self, now: float, slack: Optional[float] = None) -> list[EngineSlot]:
        """Pack the remaining requests onto the fewest engines whose predicted step time stays
        within ``1 + slack`` of the slowest engine's now (so packing does not stretch the tail by
        more than that), keeping the engines that run the most of them; release the others."""
        slack = self.pack_slack if slack is None else slack
        alive = self.alive()
        for e in alive:
            e.sync(now)
        m = self.model
        left = sum(e.load() for e in alive) + len(self.in_tool)
        need_kv = sum(e.kv_used for e in alive) + sum(r.context_tokens() for r in self.in_tool.values())
        worst = max((m.step_ms(e.b, e.kv_used) for e in alive), default=m.a_ms)
        k = len(alive)
        for cand in range(1, len(alive) + 1):
            per, kv = left / cand, need_kv / cand
            if per <= m.max_running and kv <= 0.5 * m.kv_capacity_tokens and m.step_ms(per, kv) <= (1.0 + slack) * worst:
                k = cand
                break
        self.consolidated_at_s = now
        if k >= len(alive):
            return []
        keep = sorted(alive, key=lambda e: (-e.load(), e.eid))[:k]
        keep_ids = {e.eid for e in keep}
        for req in self.in_tool.values():  # a request in a tool call comes back to a kept engine
            if req.engine not in keep_ids:
                req.engine = None
        return self.drain([e.eid for e in alive if e.eid not in keep_ids], now)

    def release_all(self, now: float) -> None:
        for eid, e in self.engines.items():
            if e.alive:
                e.sync(now)
                e.alive = False
                self.retired.append(e)
            if self.held[eid][1] is None:
                self.held[eid][1] = now

    # ------------------------------------------------------------------ accounting
    def all_engines(self) -> list[RolloutEngine]:
        return list(self.engines.values())

    def reprefill_tokens(self) -> float:
        return sum(e.reprefill_tokens for e in self.engines.values())


def _queued(req: Request, engine: RolloutEngine, now: float):
    from formulation.realloc.priority import QueuedRequest

    return QueuedRequest(str(req.rid), now, tool_calls_done=req.turn, cached_prefix_tokens=int(engine.cached_prefix(req)), payload=req)
