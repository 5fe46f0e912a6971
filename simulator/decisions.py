"""Decision functions for the dynamic policy.

:class:`ThresholdDecision` is the simulator's own *baseline* decision function, used in tests and
whenever the reallocation planner is not asked for. It applies DynaRL's published trigger and a
plain greedy target, with no throughput predictor and no solver:

* trigger: more than ``theta`` of the rollout engines have stayed below ``u_low`` KV utilisation
  (``kv_used / kv_capacity`` of the snapshot) for ``window_s`` seconds (a shorter dip resets the
  clock);
* target: keep the engines that are not donors, and at least enough to hold the requests in
  flight at ``keep_batch`` each; give the rest to the downstream stage with the longest backlog
  (the trainer when neither has one), but only when that backlog outlasts the time the GPUs need
  to start working there (``grow_s``: the migration's cost); once the rollout has finished,
  every engine goes;
* at an iteration boundary: back to the starting partition (the rollout is the bottleneck again).

``planner simulate --policy dynamic`` uses the reallocation planner by default
(:class:`planner.instances.simulate.PlannerDecision`: ``formulation.realloc.decide`` on the same
snapshots); this baseline is ``--decision threshold``. Both take a
:class:`~formulation.realloc.telemetry.TelemetrySnapshot` and a
:class:`~simulator.policies.ReallocContext`.
"""

from __future__ import annotations

import math
from typing import Optional

from formulation.realloc.telemetry import TelemetrySnapshot
from simulator.defaults import WINDOW_S
from simulator.policies import ReallocContext, Reallocation


class ThresholdDecision:
    def __init__(self, u_low: float = 0.2, window_s: float = WINDOW_S, theta: float = 0.5, keep_batch: int = 32) -> None:
        if not 0.0 < u_low < 1.0:
            raise ValueError(f"u_low must lie in (0, 1), got {u_low}")
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        self.u_low = u_low
        self.window_s = window_s
        self.theta = theta
        self.keep_batch = keep_batch
        self._low_since: dict[str, float] = {}

    def __call__(self, snap: TelemetrySnapshot, ctx: ReallocContext) -> Optional[Reallocation]:
        now = ctx.time_s
        comps = ctx.components
        if ctx.at_boundary:
            self._low_since.clear()
            return Reallocation(target=dict(ctx.initial), kinds={"rollout": "workload", "reference": "workload", "trainer": "p2p"},
                                reason="iteration start: rollout is the bottleneck again")
        rollout = snap.workers_of("rollout")
        if not rollout:
            return None
        seen = set()
        for w in rollout:
            seen.add(w.worker_id)
            if w.kv_utilization < self.u_low:
                self._low_since.setdefault(w.worker_id, now)
            else:
                self._low_since.pop(w.worker_id, None)
        for k in list(self._low_since):
            if k not in seen:
                del self._low_since[k]
        donors = [w for w in rollout if w.worker_id in self._low_since and now - self._low_since[w.worker_id] >= self.window_s]
        r = comps["rollout"]
        if r.pending == 0:
            keep = 0
        else:
            if len(donors) <= self.theta * len(rollout):
                return None
            in_flight = sum(w.requests_in_flight + w.queue_depth for w in rollout)
            keep_engines = max(len(rollout) - len(donors), math.ceil(in_flight / max(1, self.keep_batch)), 1)
            keep = keep_engines * r.unit_gpus
        freed = r.gpus - keep
        if freed < r.unit_gpus and ctx.free_gpus <= 0:
            return None
        give = freed + ctx.free_gpus
        ref, tr = comps["reference"], comps["trainer"]
        if not (ref.interruptible and tr.interruptible):
            return None
        dest = "reference" if ref.backlog_s > tr.backlog_s else "trainer"
        if r.pending == 0 and comps[dest].backlog_s <= comps[dest].grow_s:
            return None  # the rollout is over and the work left ends before new GPUs would help
        unit = comps[dest].unit_gpus
        add = int(give // unit) * unit
        if add <= 0:
            return None
        target = {"rollout": keep, "reference": ref.gpus, "trainer": tr.gpus}
        target[dest] += add
        self._low_since.clear()
        return Reallocation(target=target, kinds={"rollout": "workload", dest: "p2p" if dest == "trainer" else "workload"},
                            reason=f"{len(donors)}/{len(rollout)} engines under U_low={self.u_low:g} for {self.window_s:g}s; "
                                   f"{add} GPUs to {dest}")


class ConsolidateDecision:
    """RLHFuse-style baseline: once ``at`` of the iteration's requests are done and the requests left fit fewer
    engines at ``keep_batch`` each, the rollout's tail is consolidated onto those engines (the kept engines take the
    drained ones' requests, re-prefilled), and the freed GPUs start the next stages' work: the GPUs not kept by
    the rollout are divided between log-prob inference and the trainer by work (:func:`simulator.job.partition`'s
    rule). One move per iteration; back to the starting split at the next iteration. No predictor, no solver."""

    def __init__(self, at: float = 0.8, keep_batch: int = 32) -> None:
        if not 0.0 < at < 1.0:
            raise ValueError(f"at must lie in (0, 1), got {at}")
        self.at, self.keep_batch = at, keep_batch
        self.setup = None
        self._done_iteration = -1

    def start_split(self, setup):
        self.setup = setup  # the scenario's split stays the start; only the set-up is kept
        return None

    def __call__(self, snapshot: TelemetrySnapshot, ctx: ReallocContext) -> Optional[Reallocation]:
        if ctx.at_boundary:
            return Reallocation(target=dict(ctx.initial), reason="iteration start: the starting split")
        if ctx.iteration == self._done_iteration or self.setup is None:
            return None
        r = ctx.components["rollout"]
        n = self.setup.workload.n_requests
        if 1.0 - r.pending / n < self.at:
            return None
        from simulator.oracle import _alloc

        keep = min(r.gpus, max(r.unit_gpus, math.ceil(r.pending / self.keep_batch) * r.unit_gpus))
        a = _alloc(self.setup, keep)
        if a is None or keep >= r.gpus:
            return None  # the requests left still fill every engine at keep_batch each: not yet
        self._done_iteration = ctx.iteration
        return Reallocation(target={"rollout": a[0], "reference": a[1], "trainer": a[2]},
                            kinds={"rollout": "workload", "reference": "reboot", "trainer": "p2p"}, fill=True,
                            reason=f"tail consolidated at {self.at:.0%} done onto {keep} GPUs; the rest to the next stages")
