"""A rollout engine (one vLLM/SGLang instance on ``tp`` GPUs) with continuous batching.

State between two events is fixed: ``b`` running sequences whose cached lengths all grow by one
token per decode step. With the step time linear in the batch and the total cached tokens
(:class:`estimators.rollout.LinearStep` plus the engine's per-step overhead, see
:func:`estimators.rollout.engine_step_model`), ``k`` steps from total cache ``K`` take

    T(k) = k (a + b_ms b + c K) + c b k (k - 1) / 2        (ms)

so the engine jumps from event to event: the next completion (the running sequence with the
fewest tokens left), or the step where the cache outgrows the KV capacity. ``T`` is inverted in
closed form to know how far the engine got at any instant (telemetry, migration, consolidation).
Steps are treated as a continuous quantity between events (each sequence is at most one step
off), which is what keeps one 8,192-request iteration to a few thousand events.

Admission (vLLM/SGLang-like): waiting requests are taken in queue order (FIFO, or the request
priority of :mod:`formulation.realloc.priority`) while the batch is below ``max_running`` and their
context fits in the free KV cache (cached prefixes are evicted, least recently used first, to make
room). Head-of-line blocking as in vLLM: when the head does not fit, admission stops. Admitted
contexts are prefilled in one batch (time from :func:`estimators.rollout.prefill_ms`) during
which the engine does not decode (the total time equals chunked prefill's, without the overlap).

KV accounting: every running sequence counts its whole context (prefix sharing between group
siblings saves prefill time, not memory: conservative). When the running contexts outgrow the
capacity, the most recently admitted sequence is preempted in recompute mode (vLLM's default): it
keeps its generated tokens and goes back to the head of the queue; re-admitting it re-prefills
its context.

Prefix cache: when a turn ends with turns left, its context stays cached (key: the request) for
the next turn; when the last running member of a GRPO group leaves, the group's prompt stays
cached for later siblings. Cached tokens use free KV and are evicted LRU when running sequences
need room. *Re-prefilled tokens* are tokens of a request's own context that had been computed
before and are prefilled again (after eviction, preemption or a migration to another engine).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional

from formulation.realloc.priority import QueuedRequest, make_queue
from simulator.core import EventLoop, Handle
from simulator.workload import Request

EPS = 1e-6
FINISH_TOL = 1e-6  # steps: a running request this close to its finish is done


@dataclass(frozen=True)
class EngineModel:
    """Per (model, GPU type, TP) constants of an engine; plain numbers."""

    a_ms: float  # per-step fixed time: kernels at batch 0 plus the engine overhead
    b_ms: float  # per running sequence
    c_ms: float  # per cached token (attention reads each cached token once per step)
    kv_capacity_tokens: float
    max_running: int
    prefill: Callable[[float, float], float]  # (n_seqs, mean new tokens per seq) -> ms
    watermark: float = 0.01  # fraction of KV kept free at admission (vLLM watermark)

    def step_ms(self, batch: float, total_kv: float) -> float:
        return self.a_ms + self.b_ms * batch + self.c_ms * total_kv


class RolloutEngine:
    """One engine. The owner gets ``on_turn_done(engine, request)`` callbacks."""

    def __init__(self, eid: int, loop: EventLoop, model: EngineModel, *, node: str = "n0", gpu_type: str = "H100",
                 gpus: int = 1, queue_policy: str = "fifo", max_wait_s: float = 30.0,
                 on_turn_done: Optional[Callable] = None, start_s: Optional[float] = None) -> None:
        self.eid = eid
        self.loop = loop
        self.m = model
        self.node = node
        self.gpu_type = gpu_type
        self.gpus = gpus
        self.on_turn_done = on_turn_done
        self.queue = make_queue(queue_policy, max_wait_s)
        self.alive = True
        self.t = loop.now if start_s is None else start_s  # state is synced to this time
        self.busy_until = self.t  # no decoding before this (prefill, boot)
        self.S = 0.0  # decode steps done
        self.b = 0
        self._sum_ctx0 = 0.0
        self._sum_s = 0.0
        self.running: dict[int, tuple] = {}  # rid -> (req, admit_step, ctx0, gen0, admit_seq)
        self._fin: list = []  # (end_step, admit_seq, rid)
        self._admit_seq = 0
        self.cache: OrderedDict = OrderedDict()  # key -> tokens
        self.cached = 0.0
        self.group_running: dict[int, int] = {}
        self._handle: Optional[Handle] = None
        # accounting
        self.busy_s = 0.0
        self.tokens_out = 0.0
        self.prefill_tokens = 0.0
        self.reprefill_tokens = 0.0
        self.cache_hit_tokens = 0.0
        self.preemptions = 0
        self.evicted_tokens = 0.0
        self.peak_kv = 0.0

    # ----------------------------------------------------------------- state
    @property
    def kv_used(self) -> float:
        """Tokens held by running sequences."""
        return self._sum_ctx0 - self._sum_s + self.b * self.S

    def load(self) -> int:
        return self.b + len(self.queue)

    def _steps_time_ms(self, k: float) -> float:
        m = self.m
        return k * (m.a_ms + m.b_ms * self.b + m.c_ms * self.kv_used) + m.c_ms * self.b * k * (k - 1.0) / 2.0

    def _steps_in_ms(self, dt_ms: float) -> float:
        """Inverse of :meth:`_steps_time_ms` (steps completed in ``dt_ms``)."""
        if self.b == 0 or dt_ms <= 0:
            return 0.0
        m = self.m
        alpha = m.c_ms * self.b / 2.0
        beta = m.a_ms + m.b_ms * self.b + m.c_ms * self.kv_used - alpha
        if alpha <= 1e-15:
            return dt_ms / beta
        return 2.0 * dt_ms / (beta + math.sqrt(beta * beta + 4.0 * alpha * dt_ms))

    def sync(self, now: float) -> None:
        """Advance the state to ``now``."""
        if now <= self.t:
            return
        t0 = self.t
        if self.busy_until > t0:
            stall_end = min(now, self.busy_until)
            self.busy_s += stall_end - t0
            t0 = stall_end
        if now > t0 and self.b > 0:
            k = self._steps_in_ms((now - t0) * 1e3)
            self.S += k
            self.tokens_out += k * self.b
            self.busy_s += now - t0
        self.t = now
        kv = self.kv_used
        if kv > self.peak_kv:
            self.peak_kv = kv
        self._evict_to(self.m.kv_capacity_tokens - kv)

    # ----------------------------------------------------------------- cache
    def _evict_to(self, room: float, keep=None) -> None:
        while self.cached > max(0.0, room) + EPS and self.cache:
            key = next(iter(self.cache))
            if key == keep:
                if len(self.cache) == 1:
                    break
                self.cache.move_to_end(key)
                continue
            tok = self.cache.pop(key)
            self.cached -= tok
            self.evicted_tokens += tok

    def _cache_put(self, key, tokens: float) -> None:
        if key in self.cache:
            self.cached -= self.cache.pop(key)
        room = self.m.kv_capacity_tokens - self.kv_used
        if tokens > room:
            return
        self.cache[key] = tokens
        self.cached += tokens
        self._evict_to(room, keep=key)

    def cached_prefix(self, req: Request) -> float:
        """Tokens of ``req``'s context this engine can reuse now."""
        if ("r", req.rid) in self.cache:
            return self.cache[("r", req.rid)]
        if req.turn == 0 and (self.group_running.get(req.group, 0) > 0 or ("g", req.group) in self.cache):
            return float(req.prompt_tokens)
        return 0.0

    # ----------------------------------------------------------------- requests
    def submit(self, req: Request, now: float, enqueued_s: Optional[float] = None) -> None:
        req.engine = self.eid
        self.queue.push(QueuedRequest(str(req.rid), req.submitted_s if enqueued_s is None else enqueued_s,
                                      tool_calls_done=req.turn, cached_prefix_tokens=int(self.cached_prefix(req)),
                                      payload=req))
        self.kick(now)

    def kick(self, now: float) -> None:
        self.sync(now)
        self._admit(now)
        self._reschedule(now)

    def _admit(self, now: float) -> None:
        cap = self.m.kv_capacity_tokens * (1.0 - self.m.watermark)
        n_new, new_tokens = 0, 0.0
        while self.b < self.m.max_running and len(self.queue):
            q = self.queue.peek(now)
            req: Request = q.payload
            ctx = req.context_tokens()
            if self.kv_used + ctx > cap and self.b > 0:
                break  # head-of-line blocking
            self.queue.pop(now)
            reuse = self.cached_prefix(req)
            key = ("r", req.rid)
            if key in self.cache:
                self.cached -= self.cache.pop(key)
            elif reuse > 0 and ("g", req.group) in self.cache:
                self.cache.move_to_end(("g", req.group))
            fresh = max(0.0, ctx - req.computed_tokens)
            prefill = max(0.0, ctx - reuse)
            re = max(0.0, prefill - fresh)
            req.computed_tokens = ctx
            req.prefilled_tokens += prefill
            req.reprefilled_tokens += re
            self.prefill_tokens += prefill
            self.reprefill_tokens += re
            self.cache_hit_tokens += reuse
            n_new += 1
            new_tokens += prefill
            self._admit_seq += 1
            self.running[req.rid] = (req, self.S, ctx, req.generated_in_turn, self._admit_seq)
            heapq.heappush(self._fin, (self.S + req.remaining_in_turn(), self._admit_seq, req.rid))
            self.b += 1
            self._sum_ctx0 += ctx
            self._sum_s += self.S
            self.group_running[req.group] = self.group_running.get(req.group, 0) + 1
            req.engine = self.eid
        if n_new:
            self._evict_to(self.m.kv_capacity_tokens - self.kv_used)
            if new_tokens > 0:
                stall = self.m.prefill(n_new, new_tokens / n_new) / 1e3
                self.busy_until = max(self.busy_until, now) + stall

    def _remove_running(self, rid: int) -> Request:
        req, s_a, ctx0, gen0, _ = self.running.pop(rid)
        self.b -= 1
        self._sum_ctx0 -= ctx0
        self._sum_s -= s_a
        req.generated_in_turn = min(float(req.turn_tokens[req.turn]), gen0 + (self.S - s_a))
        req.computed_tokens = req.context_tokens()
        g = self.group_running.get(req.group, 0) - 1
        if g > 0:
            self.group_running[req.group] = g
        else:
            self.group_running.pop(req.group, None)
        if self.b == 0:  # exact zero, no drift
            self._sum_ctx0 = 0.0
            self._sum_s = 0.0
        return req

    def _reschedule(self, now: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self.alive or self.b == 0:
            return
        while self._fin:
            _, seq, rid = self._fin[0]
            ent = self.running.get(rid)
            if ent is not None and ent[4] == seq:
                break
            heapq.heappop(self._fin)
        k_fin = max(0.0, self._fin[0][0] - self.S)
        room = self.m.kv_capacity_tokens - self.kv_used
        k_kv = room / self.b if room > 0 else 0.0
        k = min(k_fin, max(k_kv, 1.0))
        start = max(now, self.busy_until)
        t = start + self._steps_time_ms(k) / 1e3
        if t <= now and k_fin > FINISH_TOL:
            # the steps left to the next finish take less than half the clock's resolution at this time (late
            # in a long simulated span, e.g. hours-long tool calls), yet more than _on_event's tolerance: wait
            # one tick, so that sync moves S on. An event at ``now`` left S as it was and finished nothing, and
            # the engine rescheduled itself at ``now`` forever (an outside audit)
            t = math.nextafter(now, math.inf)
        self._handle = self.loop.at(t, self._on_event)

    def _on_event(self) -> None:
        now = self.loop.now
        self._handle = None
        self.sync(now)
        done = []
        while self._fin:
            end, seq, rid = self._fin[0]
            ent = self.running.get(rid)
            if ent is None or ent[4] != seq:
                heapq.heappop(self._fin)
                continue
            if end > self.S + FINISH_TOL:
                break
            heapq.heappop(self._fin)
            done.append(self._remove_running(rid))
        # preemption when the running contexts outgrow the KV capacity
        while self.b > 1 and self.kv_used > self.m.kv_capacity_tokens + EPS:
            rid = max(self.running, key=lambda r: self.running[r][4])
            req = self._remove_running(rid)
            self.preemptions += 1
            self.queue.push(QueuedRequest(str(req.rid), req.submitted_s, tool_calls_done=req.turn,
                                          cached_prefix_tokens=0, payload=req))
        for req in done:
            req.generated_in_turn = float(req.turn_tokens[req.turn])
            ctx = req.context_tokens()
            if req.turn + 1 < req.turns:
                self._cache_put(("r", req.rid), ctx)
            elif self.group_running.get(req.group, 0) == 0:
                self._cache_put(("g", req.group), float(req.prompt_tokens))
        for req in done:
            if self.on_turn_done is not None:
                self.on_turn_done(self, req)
        self._admit(now)
        self._reschedule(now)

    # ----------------------------------------------------------------- migration
    def take_all(self, now: float) -> list[Request]:
        """Stop: hand back every running and waiting request (Workload migration drains an engine)."""
        self.sync(now)
        out = [self._remove_running(rid) for rid in sorted(self.running, key=lambda r: self.running[r][4])]
        while len(self.queue):
            out.append(self.queue.pop(now + 1e12).payload)
        self._fin.clear()
        self._reschedule(now)
        return out

    def take_waiting(self, now: float) -> list[Request]:
        self.sync(now)
        out = []
        while len(self.queue):
            out.append(self.queue.pop(now + 1e12).payload)
        return out

    def shutdown(self, now: float) -> list[Request]:
        reqs = self.take_all(now)
        self.alive = False
        self.cache.clear()
        self.cached = 0.0
        return reqs

    def snapshot_progress(self, now: float) -> list[tuple[Request, float]]:
        """(request, tokens generated in its current turn) for every running request, at ``now``."""
        self.sync(now)
        return [(req, min(float(req.turn_tokens[req.turn]), gen0 + self.S - s_a)) for req, s_a, _, gen0, _ in self.running.values()]
