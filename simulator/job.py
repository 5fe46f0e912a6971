"""Request-level model of one RL job's iterations (the detailed speed).

One iteration (GRPO / PPO, synchronous on-policy)::

    rollout (engines)  ─ each finished response ─▶  log-prob inference  ─▶  reward  ─▶  trainer
                                                                   (all samples trained) ─▶ optimizer step ─▶ weight sync

* rollout: :class:`simulator.rollout.RolloutStage` (continuous batching, KV, prefix cache, tools);
* log-prob inference (``reference`` component: old-policy and reference log-probs, critic values
  for PPO) and the update (``trainer``): :class:`simulator.stages.WorkStage`, work per sample from
  :func:`estimators.training.forward_flops` (``forwards`` passes at the inference MFU, ``3 x``
  forward per update at the training MFU), so their time scales with their GPUs;
* reward: rule-based for single-turn math, sandboxed tests (RollPacker latencies) for agentic jobs;
* optimizer step: reading and writing the 16 B/param Adam state once over the trainer's HBM plus
  a ring all-reduce of the bf16 gradients over the trainer's NICs (assumption: no overlap);
* weight sync: :func:`estimators.comm.weight_sync_s` (flat or scatter + broadcast); colocated jobs
  reshard inside each node over NVLink instead.

Under ``streaming`` (RLinf-style pipelining, and DynaRL's dataflow) a finished response flows on at
once; otherwise the downstream stages start when the rollout has finished. Colocated (veRL) runs
the three GPU phases one after the other on every GPU, with an offload/onload warm switch
(:func:`estimators.comm.warm_switch_s` of the trainer's per-GPU state) between rollout and
training and back.

Dynamic reallocation applies a :class:`simulator.policies.Reallocation` with these migration
costs (constants from :mod:`estimators.comm`):

* rollout shrinks by Workload migration: the least-loaded engines are drained, their requests go
  to the kept engines (re-prefilled there); the GPUs are free at once;
* rollout grows: engines parked when their GPUs were lent (sleep mode, weights in host DRAM)
  wake up with a warm switch (:func:`estimators.comm.warm_switch_s` of their weight shard);
* reference grows/shrinks (Workload or Reboot): new inference ranks start (``RESTART_S`` plus the
  weights over NVLink) before they count; shrinking pauses the stage for ``GROUP_REBUILD_S``;
* trainer (P2P): new ranks are created first and receive their shard of the training state (the
  per-GPU ZeRO-1 state over the inter-node link), then the group is rebuilt (``GROUP_REBUILD_S``
  pause) and the new layout takes over; shrinking reshards to the kept ranks the same way.

A dynamic policy needs one GPU type for rollout and training (DynaRL's homogeneous pool); moving
GPUs across types is the reallocation planner's business, not modelled here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional, Protocol

import numpy as np

from estimators import comm, memory, training
from estimators.gpus import GPUSpec
from estimators.lengths import sample_tool_latency_s
from estimators.models import ModelDims
from formulation.realloc.telemetry import ComponentTelemetry, TelemetrySnapshot, WorkerTelemetry
from simulator.core import EventLoop
from simulator.models import engine_model
from simulator.policies import ComponentInfo, Policy, ReallocContext, Reallocation
from simulator.rollout import EngineSlot, RolloutStage
from simulator.stages import REWARD_RULE_S, GpuLedger, RewardStage, WorkStage
from simulator.workload import Request, WorkloadSpec, make_requests, residual_table

COMPONENTS = ("rollout", "reference", "trainer")


@dataclass(frozen=True)
class JobSetup:
    """Plain numbers for one job's request-level simulation."""

    name: str
    model: ModelDims
    workload: WorkloadSpec
    rollout_gpu: GPUSpec
    train_gpu: GPUSpec
    gpus_per_node: int
    rollout_nodes: int
    train_nodes: int
    rollout_tp: int = 1
    train_unit: int = 1  # trainer TP x PP
    forwards: int = 2  # log-prob passes per sample: old policy, reference (+ critic values)
    updates: int = 1  # actor (+ critic)
    train_mfu: float = training.DEFAULT_TRAIN_MFU
    infer_mfu: float = training.DEFAULT_INFER_MFU
    weight_sync: str = "scatter_broadcast"
    inter_cluster_gb_per_s: Optional[float] = None
    price_rollout_per_gpu_h: float = 0.0
    price_train_per_gpu_h: float = 0.0
    slo_s: float = math.inf
    overhead_ms: Optional[float] = None  # None: estimators.rollout.ENGINE_STEP_OVERHEAD_MS
    algorithm: str = "grpo"  # grpo | ppo: GRPO's trainer takes whole groups (see Policy.intake)

    @property
    def same_type(self) -> bool:
        return self.rollout_gpu.name == self.train_gpu.name

    @property
    def total_gpus(self) -> int:
        return (self.rollout_nodes + self.train_nodes) * self.gpus_per_node

    @property
    def reward(self) -> str:
        return "sandbox" if self.workload.turns > 1 else "rule"


def setup_from_profile(profile, rollout_pool, train_pool, *, inter_cluster_gb_per_s=None, slo_s=math.inf,
                       overhead_ms=None) -> JobSetup:
    """Build a :class:`JobSetup` from an :class:`estimators.phases.JobProfile` and two pool shapes."""
    wl = WorkloadSpec(n_prompts=profile.batch_prompts, group_size=profile.group_size,
                      prompt_tokens=profile.prompt_tokens, max_response_tokens=profile.max_response_tokens,
                      lengths=profile.lengths, turns=profile.turns, observation_tokens=profile.observation_tokens,
                      tool_latency_fixed_s=profile.tool_latency_fixed_s,
                      tool_latency_table=getattr(profile, "tool_latency_table", None),
                      prompt_table=getattr(profile, "prompt_table", None))
    if getattr(profile.lengths, "kind", None) == "fixed":  # every response the same length: no per-prompt difficulty
        wl = replace(wl, prompt_spread=0.0)
    if rollout_pool.gpus_per_node != train_pool.gpus_per_node:
        raise ValueError("rollout and training nodes must have the same GPUs per node")
    return JobSetup(
        name=profile.name, model=profile.model, workload=wl, rollout_gpu=rollout_pool.gpu, train_gpu=train_pool.gpu,
        gpus_per_node=rollout_pool.gpus_per_node, rollout_nodes=rollout_pool.nodes, train_nodes=train_pool.nodes,
        rollout_tp=profile.rollout_tp, train_unit=profile.trainer_tp * profile.trainer_pp,
        forwards=1 + int(profile.has_reference) + int(profile.has_critic), updates=1 + int(profile.has_critic),
        train_mfu=profile.train_mfu, weight_sync=profile.weight_sync, inter_cluster_gb_per_s=inter_cluster_gb_per_s,
        price_rollout_per_gpu_h=rollout_pool.gpu.price_per_gpu_hour or 0.0,
        price_train_per_gpu_h=train_pool.gpu.price_per_gpu_hour or 0.0, slo_s=slo_s, overhead_ms=overhead_ms,
        algorithm="ppo" if profile.has_critic else "grpo")


def job_nodes(setup: JobSetup, colocated: bool = False) -> dict[str, str]:
    """The job's nodes as :class:`JobSim` names them (and its snapshots declare them), each with its GPU
    type: ``<GPU type, lowercased>-<i>``, numbered per type from 0. Colocated (veRL: everything on one
    pool) and one-type jobs: the training type, all the job's nodes; else the rollout nodes, then the
    training nodes. A scenario's nodes are ``<node group>-<i>``: the same names only when its node
    groups are named after their GPU types (lowercased)."""
    s = setup
    if colocated or s.same_type:
        t = s.train_gpu.name
        return {f"{t.lower()}-{i}": t for i in range(s.rollout_nodes + s.train_nodes)}
    out = {f"{s.rollout_gpu.name.lower()}-{i}": s.rollout_gpu.name for i in range(s.rollout_nodes)}
    out.update({f"{s.train_gpu.name.lower()}-{i}": s.train_gpu.name for i in range(s.train_nodes)})
    return out


def intake_of(setup: JobSetup, policy: Policy) -> str:
    """The trainer intake a run uses: the policy's, or by default ``group`` for GRPO with groups."""
    if policy.intake is not None:
        return policy.intake
    return "group" if setup.algorithm == "grpo" and setup.workload.group_size > 1 else "sample"


def _round_down(x: float, unit: int) -> int:
    return int(max(0, math.floor(x / unit)) * unit)


def partition(setup: JobSetup, policy: Policy) -> dict[str, int]:
    """GPUs per component at the start. The training nodes are split between log-prob inference
    and the update in proportion to their work (forwards at the inference MFU versus 3 x forward
    per update at the training MFU), at the trainer's granularity, leaving the trainer at least one unit."""
    g = setup.gpus_per_node
    if policy.name == "colocated":
        total = setup.total_gpus
        return {"rollout": total, "reference": total, "trainer": total}
    r = policy.rollout_gpus if policy.rollout_gpus is not None else setup.rollout_nodes * g
    train_pool = setup.train_nodes * g
    if policy.reference_gpus is not None or policy.trainer_gpus is not None:
        ref = policy.reference_gpus if policy.reference_gpus is not None else train_pool - (policy.trainer_gpus or 0)
        tr = policy.trainer_gpus if policy.trainer_gpus is not None else train_pool - ref
    else:
        w_ref = setup.forwards / setup.infer_mfu
        w_tr = 3.0 * setup.updates / setup.train_mfu
        ref = int(round(train_pool * w_ref / (w_ref + w_tr) / setup.train_unit)) * setup.train_unit
        ref = max(setup.train_unit, min(ref, train_pool - setup.train_unit))
        tr = train_pool - ref
    if r < setup.rollout_tp or tr < setup.train_unit or ref < 1:
        raise ValueError(
            f"job {setup.name}: infeasible split: {r} rollout GPUs (engines need {setup.rollout_tp} each), {ref} for "
            f"log-prob inference and {tr} for the trainer (TP x PP = {setup.train_unit}) out of {train_pool} training GPUs "
            f"({setup.rollout_nodes} rollout + {setup.train_nodes} training nodes of {g}). Fix: give the job at least "
            f"{math.ceil((setup.train_unit + max(1, setup.train_unit if policy.reference_gpus is None else 1)) / g)} training "
            "node(s), or a smaller trainer TP x PP")
    return {"rollout": int(r), "reference": int(ref), "trainer": int(tr)}


def optimizer_step_s(setup: JobSetup, gpu: GPUSpec, gpus: int) -> float:
    """Adam step: the 16 B/param state read and written once over the trainer's HBM, plus a ring
    all-reduce of the bf16 gradients over the NICs across data-parallel ranks (no overlap assumed)."""
    p = setup.model.num_params
    hbm = 2.0 * 16.0 * p / (max(1, gpus) * gpu.hbm_bw_tb_per_s * 1e12)
    dp = max(1, gpus // setup.train_unit)
    grads = 2.0 * p / setup.train_unit
    ring = 2.0 * grads * (dp - 1) / dp / (gpu.inter_node_bw_gb_per_s * 1e9) if dp > 1 else 0.0
    return hbm + ring


def weight_sync_time_s(setup: JobSetup, r_gpu: GPUSpec, t_gpu: GPUSpec, r_gpus: int, t_gpus: int, colocated: bool) -> float:
    """New weights to every engine: :func:`estimators.comm.weight_sync_s` between two pools, or a
    reshard inside each node over NVLink when the job is colocated."""
    wbytes = setup.model.num_params * 2.0
    if colocated:
        return comm.transfer_s(t_gpu, wbytes / setup.rollout_tp, inter_node=False)
    links = comm.SyncLinks(trainer_nic_gb_per_s=t_gpus * t_gpu.inter_node_bw_gb_per_s,
                           rollout_nic_gb_per_s=r_gpus * r_gpu.inter_node_bw_gb_per_s,
                           inter_cluster_gb_per_s=setup.inter_cluster_gb_per_s)
    nodes = max(1, math.ceil(r_gpus / setup.gpus_per_node))
    return comm.weight_sync_s(wbytes, max(1, r_gpus // setup.rollout_tp), nodes, r_gpu, links, setup.weight_sync)


class WorkShape(Protocol):
    """What :func:`sample_work_flops` reads of a set-up: the model and the passes per sample."""

    @property
    def model(self) -> ModelDims: ...

    @property
    def forwards(self) -> int: ...

    @property
    def updates(self) -> int: ...


def sample_work_flops(setup: WorkShape, req: Request) -> tuple[float, float]:
    """(log-prob FLOPs, update FLOPs) of one finished sample."""
    f = training.sample_forward_flops(setup.model, float(req.total_tokens))
    return setup.forwards * f, setup.updates * 3.0 * f


class NodePool:
    """Free GPUs per node (for engine placement and telemetry node names)."""

    def __init__(self, nodes: dict[str, int]) -> None:
        self.free = dict(nodes)

    def take(self, n: int, unit: int, partial: bool = False) -> list[tuple[str, int]]:
        """``n`` GPUs in blocks of ``unit`` on one node each, fullest-first packing; [(node, gpus)].
        With ``partial``, as many blocks as fit (fragmented nodes may leave fewer than ``n``)."""
        out = []
        left = n
        while left >= unit:
            cands = [k for k, v in self.free.items() if v >= unit]
            if not cands:
                if partial:
                    break
                raise RuntimeError(f"no node has {unit} free GPUs ({left} of {n} still needed)")
            node = min(cands, key=lambda k: (self.free[k], k))
            self.free[node] -= unit
            out.append((node, unit))
            left -= unit
        return out

    def give(self, node: str, n: int) -> None:
        self.free[node] += n

    def total_free(self) -> int:
        return sum(self.free.values())


@dataclass
class IterationRecord:
    index: int
    start_s: float
    rollout_end_s: float = math.nan
    train_end_s: float = math.nan
    end_s: float = math.nan
    requests: int = 0
    response_tokens: float = 0.0
    reprefill_tokens: float = 0.0
    preemptions: int = 0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class JobResult:
    setup: JobSetup
    policy: Policy
    seed: int
    iterations: list
    end_s: float
    ledger: GpuLedger
    engines: list  # every RolloutEngine ever started
    engine_held: dict  # eid -> [start, end]
    requests: list
    completion_times: list  # (time, rid)
    snapshots: list = field(default_factory=list)
    decisions: list = field(default_factory=list)  # (time, target, reason)
    # one per decision, in the same order: (iteration, seconds into it, fraction of its requests done, at a boundary, fill)
    decision_points: list = field(default_factory=list)
    # per iteration after the first, before its boundary decision: where each component's GPUs are (the hindsight
    # oracle replays an iteration from there): {component: ((node, GPUs), ...)}, rollout one entry per engine
    layouts: dict = field(default_factory=dict)
    cluster_gpus: dict = field(default_factory=dict)  # gpu type -> GPUs the job's cluster has
    events: int = 0


class JobSim:
    """Simulate ``iterations`` iterations of one job under a policy."""

    def __init__(self, setup: JobSetup, policy: Policy, seed: int = 0, iterations: int = 1, skip_batches: int = 0) -> None:
        if policy.name == "dynamic" and not setup.same_type:
            raise ValueError("the dynamic policy needs one GPU type for rollout and training "
                             f"(got {setup.rollout_gpu.name} and {setup.train_gpu.name})")
        self.setup = setup
        self.policy = policy
        self.seed = seed
        self.n_iterations = iterations
        self.loop = EventLoop(seed)
        self.ledger = GpuLedger()
        s = setup
        g = s.gpus_per_node
        self.colocated = policy.name == "colocated"
        nodes = {n: g for n in job_nodes(s, self.colocated)}
        if self.colocated:
            self.r_gpu = self.t_gpu = s.train_gpu
        elif s.same_type:
            self.r_gpu = self.t_gpu = s.rollout_gpu
        else:
            self.r_gpu, self.t_gpu = s.rollout_gpu, s.train_gpu
        self.cluster_gpus: dict[str, int] = {}
        for n, c in nodes.items():
            t = n.rsplit("-", 1)[0]
            self.cluster_gpus[t] = self.cluster_gpus.get(t, 0) + c
        self.all_nodes = dict(nodes)
        self.pool = NodePool(nodes) if (self.colocated or s.same_type) else None
        self.r_pool = None if self.pool else NodePool({k: v for k, v in nodes.items() if k.startswith(s.rollout_gpu.name.lower())})
        self.t_pool = None if self.pool else NodePool({k: v for k, v in nodes.items() if k.startswith(s.train_gpu.name.lower())})
        chooser = getattr(policy.decision, "start_split", None)
        if policy.name == "dynamic" and chooser is not None and policy.rollout_gpus is None:
            # the decision function chooses the starting split (a planner's search over splits)
            start = chooser(s)
            if start is not None:
                policy = replace(policy, rollout_gpus=start["rollout"], reference_gpus=start["reference"],
                                 trainer_gpus=start["trainer"])
                self.policy = policy
        self.part = partition(s, policy)
        self.em = engine_model(s.model, self.r_gpu, s.rollout_tp, overhead_ms=s.overhead_ms)
        if memory.kv_capacity_tokens(s.model, self.r_gpu.hbm_gb, s.rollout_tp) < s.workload.prompt_tokens + s.workload.max_response_tokens:
            raise ValueError(f"job {s.name}: one response ({s.workload.prompt_tokens + s.workload.max_response_tokens} tokens) "
                             f"does not fit the KV cache of a TP-{s.rollout_tp} engine on {self.r_gpu.name}")
        self.held: dict[str, int] = {c: 0 for c in COMPONENTS}
        self.comp_nodes: dict[str, list] = {"reference": [], "trainer": []}
        self.engine_nodes: dict[int, tuple[str, int]] = {}
        self.rollout = RolloutStage(self.loop, self.em, [], queue_policy=policy.queue, max_wait_s=policy.max_wait_s,
                                    on_request_done=self._on_rollout_done, on_gpus_released=self._on_engines_released,
                                    consolidate_at=policy.consolidate_at, pack_slack=policy.pack_slack)
        peak_t = self.t_gpu.bf16_tflops * 1e12
        self.ref = WorkStage(self.loop, "reference", "reference", 0, peak_t * s.infer_mfu, self._on_ref_done, self.ledger, 1)
        self.trainer = WorkStage(self.loop, "trainer", "trainer", 0, peak_t * s.train_mfu, self._on_trained, self.ledger, s.train_unit)
        rng_reward = np.random.default_rng(seed + 7919)
        if s.reward == "sandbox":
            self.reward = RewardStage(self.loop, self._on_rewarded, lambda: float(sample_tool_latency_s(1, rng_reward)[0]))
        else:
            self.reward = RewardStage(self.loop, self._on_rewarded, lambda: REWARD_RULE_S)
        self.iterations: list[IterationRecord] = []
        self.requests: list[Request] = []
        self.snapshots: list[TelemetrySnapshot] = []
        self.decisions: list = []
        self.decision_points: list = []
        self.layouts: dict = {}
        self._at_boundary = False
        self._iter_reqs: list[Request] = []
        self._last_lengths: Optional[tuple] = None  # (the last iteration's response lengths, its groups)
        self._collected: list[Request] = []
        self._trained = 0
        self._migrating_until = -1.0
        self._last_tokens: dict[int, tuple[float, float]] = {}
        self._done = False
        self._last_snapshot: Optional[TelemetrySnapshot] = None
        self._residual = residual_table(setup.workload)
        # the estimate costs a pass over the unfinished requests: only when the decision function reads it
        self._report_remaining = bool(getattr(policy.decision, "wants_remaining_tokens", False) or policy.record_snapshots)
        self._unfinished: dict[int, Request] = {}
        self.intake = intake_of(setup, policy)
        self._gate: dict[int, list] = {}  # group -> rewarded samples waiting for their siblings
        self._at_trainer: set = set()  # this iteration's samples pushed to the trainer (queued or trained)
        self._index_requests([])
        self._residuals_cache: Optional[dict] = None  # within one decision tick: time -> _rollout_residuals' result
        self._batch: list = []  # complete groups waiting for a mini-batch
        self._groups_in = 0  # complete groups released to the trainer this iteration
        # ``skip_batches``: draw (and drop) that many iterations' requests first, so that this run's first
        # iteration samples what iteration ``skip_batches`` of a longer run with the same seed samples
        # (the loop's generator feeds nothing but the requests); the hindsight oracle runs each iteration alone
        for k in range(skip_batches):
            make_requests(s.workload, self.loop.rng, rid0=k * s.workload.n_requests)
        self._rid0 = skip_batches * s.workload.n_requests

    # ------------------------------------------------------------------ GPUs
    def _hold(self, comp: str, gpus: int) -> None:
        self.held[comp] = gpus
        self.ledger.hold(comp, self.loop.now, gpus)

    def _pool_of(self, comp: str) -> NodePool:
        """The free GPUs ``comp`` takes from: the shared pool, or its own type's."""
        pool = self.pool or (self.r_pool if comp == "rollout" else self.t_pool)
        assert pool is not None  # __init__ sets the shared pool or both typed ones
        return pool

    def _take(self, comp: str, n: int, unit: int, partial: bool = False) -> list[tuple[str, int]]:
        return self._pool_of(comp).take(n, unit, partial)

    def _give(self, comp: str, node: str, n: int) -> None:
        self._pool_of(comp).give(node, n)

    def _add_engines(self, n_gpus: int, ready_s: float) -> None:
        tp = self.setup.rollout_tp
        for node, gg in self._take("rollout", _round_down(n_gpus, tp), tp, partial=True):
            e = self.rollout.add_engine(EngineSlot(node, self.r_gpu.name, gg), ready_s=ready_s)
            self.engine_nodes[e.eid] = (node, gg)
        self._hold("rollout", self.rollout.gpus())

    def _on_engines_released(self, slots: list[EngineSlot], now: float) -> None:
        for sl in slots:
            self._give("rollout", sl.node, sl.gpus)
        self._hold("rollout", self.rollout.gpus())

    def _resize_stage(self, stage: WorkStage, comp: str, target: int, ready_s: float, pause_s: float) -> None:
        cur = sum(n for _, n in self.comp_nodes[comp])
        if target > cur:
            got = self._take(comp, target - cur, stage.unit_gpus, partial=True)
            if not got:
                return
            self.comp_nodes[comp] += got
            target = cur + sum(n for _, n in got)
            self._hold(comp, target)
            if ready_s <= self.loop.now:
                stage.set_gpus(target, pause_s)
            else:
                self.loop.at(ready_s, self._stage_ready, stage, target, pause_s)
        elif target < cur:
            drop = cur - target
            keep = []
            for node, n in sorted(self.comp_nodes[comp], key=lambda x: x[0], reverse=True):
                if drop >= n:
                    self._give(comp, node, n)
                    drop -= n
                else:
                    keep.append((node, n))
            self.comp_nodes[comp] = keep
            stage.set_gpus(target, pause_s)
            self._hold(comp, target)

    def _drain_choice(self, alive: list, n_drop: int, units: int) -> list[int]:
        """The ``n_drop`` engines a shrink drains (``alive`` in the drain order: the emptiest first), node-aware: when the
        trainer grows by ``units`` replicas of ``train_unit`` GPUs, each on one node, first the fewest (then emptiest)
        engines whose GPUs complete a replica's unit on their node with what is free there, one replica at a time;
        the rest in the drain order. Draining the emptiest engines alone scatters the freed GPUs over nodes, and a
        trainer replica cannot span nodes (the executor's release order drains whole nodes for the same reason)."""
        unit = self.setup.train_unit
        if units <= 0 or unit <= self.setup.rollout_tp or n_drop <= 0:
            return [e.eid for e in alive[:n_drop]]
        free = dict(self._pool_of("trainer").free)
        on: dict[str, list] = {}
        for e in alive:
            on.setdefault(self.engine_nodes[e.eid][0], []).append(e)
        chosen: list[int] = []
        while units > 0 and len(chosen) < n_drop:
            best = None
            for node, engs in on.items():
                f, k = free.get(node, 0), 0
                while f < unit and k < len(engs):
                    f += self.engine_nodes[engs[k].eid][1]
                    k += 1
                if f >= unit and k <= n_drop - len(chosen):
                    key = (k, sum(x.load() for x in engs[:k]), node)
                    best = min(best, (key, node, k, f)) if best is not None else (key, node, k, f)
            if best is None:
                break
            _, node, k, f = best
            chosen += [x.eid for x in on[node][:k]]
            on[node] = on[node][k:]
            free[node] = f - unit
            units -= 1
        taken = set(chosen)
        return chosen + [e.eid for e in alive if e.eid not in taken][:n_drop - len(chosen)]

    def _stage_ready(self, stage: WorkStage, target: int, pause_s: float) -> None:
        if self.held[stage.name] >= target:
            stage.set_gpus(min(target, self.held[stage.name]), pause_s)

    # ------------------------------------------------------------------ costs of moves
    def _engine_boot_s(self) -> float:
        """Engines whose GPUs were lent are parked (verl/SGLang sleep mode, weights in host DRAM), not
        killed: bringing one back is a warm switch of its weight shard over PCIe."""
        s = self.setup
        return comm.engine_wake_s(s.model.num_params * 2.0 / s.rollout_tp, self.r_gpu)

    def _ref_boot_s(self) -> float:
        """New log-prob inference ranks: process start plus the weights from a peer over NVLink."""
        return comm.RESTART_S + comm.transfer_s(self.t_gpu, self.setup.model.num_params * 2.0, inter_node=False)

    def _trainer_state_per_gpu(self, gpus: int) -> float:
        s = self.setup
        dp = max(1, gpus // max(1, s.train_unit))
        return memory.training_bytes_per_gpu(s.model, s.train_unit, 1, dp)

    def _p2p_s(self, new_gpus: int) -> float:
        return comm.migration_s(self.t_gpu, self._trainer_state_per_gpu(max(1, new_gpus)), inter_node=True,
                                restart=True, rebuild_group=False)

    def _sync_s(self) -> float:
        r_gpus = max(self.setup.rollout_tp, self.held["rollout"] or self.part["rollout"])
        return weight_sync_time_s(self.setup, self.r_gpu, self.t_gpu, r_gpus, max(1, self.held["trainer"]), self.colocated)

    def _optimizer_s(self, gpus: int) -> float:
        return optimizer_step_s(self.setup, self.t_gpu, gpus)

    def _switch_s(self) -> float:
        """Colocated offload/onload between rollout and training (host-DRAM resident: warm)."""
        total = self.setup.total_gpus
        return comm.warm_switch_s(self._trainer_state_per_gpu(total), self.t_gpu)

    # ------------------------------------------------------------------ work per sample

    # ------------------------------------------------------------------ flow
    def run(self) -> JobResult:
        s, p = self.setup, self.policy
        layout = getattr(p.decision, "initial_layout", None)
        if layout is not None and self.pool is not None and not self.colocated:
            self._place(dict(layout))
        elif self.colocated:
            self._add_engines(self.part["rollout"], self.loop.now)
        else:
            self._add_engines(self.part["rollout"], self.loop.now)
            self._resize_stage(self.ref, "reference", self.part["reference"], self.loop.now, 0.0)
            self._resize_stage(self.trainer, "trainer", self.part["trainer"], self.loop.now, 0.0)
        self._start_iteration()
        if p.decision is not None or p.record_snapshots:
            # a decision function may set the first tick (the hindsight oracle's replay of an iteration that started
            # between two ticks of a longer run)
            first = getattr(p.decision, "first_tick_s", None)
            self.loop.after(p.telemetry_interval_s if first is None else first, self._tick)
        self.loop.run(max_events=50_000_000)
        end = self.loop.now
        if not self._done:
            k = len(self.iterations) - 1
            raise RuntimeError(f"job {s.name}: iteration {k} never finished (stalled at {end:.1f} s with "
                               f"{self.rollout.n_finished}/{self.rollout.n_total} responses done and {self._trained} trained; "
                               f"GPUs held {self.held})")
        for e in self.rollout.all_engines():
            e.sync(end)
        self.rollout.release_all(end)
        for _eid, e in self.rollout.engines.items():
            self.ledger.add_busy("rollout", e.busy_s * e.gpus)
        for st in (self.ref, self.trainer):
            st.finish_accounting(end)
        return JobResult(setup=s, policy=p, seed=self.seed, iterations=self.iterations, end_s=end, ledger=self.ledger,
                         engines=self.rollout.all_engines(), engine_held=self.rollout.held, requests=self.requests,
                         completion_times=self.rollout.stats.completion_times, snapshots=self.snapshots,
                         decisions=self.decisions, cluster_gpus=self.cluster_gpus, events=self.loop.events_run,
                         decision_points=self.decision_points, layouts=self.layouts)

    def _layout(self) -> dict:
        return {"rollout": tuple((e.node, e.gpus) for e in sorted(self.rollout.alive(), key=lambda e: e.eid)),
                "reference": tuple(self.comp_nodes["reference"]), "trainer": tuple(self.comp_nodes["trainer"])}

    def _place(self, layout: dict) -> None:
        """The starting GPUs exactly where ``layout`` (:meth:`_layout`'s) puts them, engines in its order."""
        now = self.loop.now
        assert self.pool is not None
        for node, g in layout["rollout"]:
            self.pool.free[node] -= g
            e = self.rollout.add_engine(EngineSlot(node, self.r_gpu.name, g), ready_s=now)
            self.engine_nodes[e.eid] = (node, g)
        self._hold("rollout", self.rollout.gpus())
        for comp, st in (("reference", self.ref), ("trainer", self.trainer)):
            for node, g in layout[comp]:
                self.pool.free[node] -= g
            self.comp_nodes[comp] = list(layout[comp])
            total = sum(g for _, g in layout[comp])
            self._hold(comp, total)
            st.set_gpus(total, 0.0)
        assert min(self.pool.free.values()) >= 0, f"layout over the nodes' GPUs: {layout}"

    def _start_iteration(self) -> None:
        k = len(self.iterations)
        if k > 0:
            self.layouts[k] = self._layout()
        now = self.loop.now
        s = self.setup
        rec = IterationRecord(index=k, start_s=now)
        self.iterations.append(rec)
        reqs = make_requests(s.workload, self.loop.rng, rid0=self._rid0 + k * s.workload.n_requests)
        if self._iter_reqs:
            last = self._iter_reqs
            self._last_lengths = (np.array([float(sum(r.turn_tokens)) for r in last]), len({r.group for r in last}))
        self._iter_reqs = reqs
        self._unfinished = {r.rid: r for r in reqs}
        self._index_requests(reqs)
        self.requests.extend(reqs)
        self._collected = []
        self._trained = 0
        self._gate, self._batch, self._groups_in = {}, [], 0
        self._at_trainer = set()
        self._rollout_tokens0 = sum(e.tokens_out for e in self.rollout.all_engines())
        self._reprefill0 = self.rollout.reprefill_tokens()
        self._preempt0 = sum(e.preemptions for e in self.rollout.all_engines())
        if self.policy.decision is not None and (k > 0 or getattr(self.policy.decision, "decides_at_start", False)):
            # the new batch waits in the engines' queues while the decision function sees it, then is
            # spread over the engines the decision leaves (verl dispatches after a resize)
            self.rollout.start(reqs, kick=False)
            self._decide(at_boundary=True)
            self.rollout.redispatch()
        else:
            self.rollout.start(reqs)

    def _index_requests(self, reqs: list[Request]) -> None:
        """This iteration's requests as arrays, in their order (group, response length) with a mask of the finished
        ones and of those pushed to the trainer, kept as they change: what a decision's view of the rollout reads
        every tick (:meth:`_rollout_requests`) without a pass over every request of the batch."""
        self._req_pos = {r.rid: i for i, r in enumerate(reqs)}
        self._req_group = np.array([r.group for r in reqs], dtype=int)
        self._req_length = np.array([float(sum(r.turn_tokens)) for r in reqs], dtype=float)
        self._req_finished = np.zeros(len(reqs), dtype=bool)
        self._req_at_trainer = np.zeros(len(reqs), dtype=bool)

    def _mark_at_trainer(self, rid: int) -> None:
        self._at_trainer.add(rid)
        i = self._req_pos.get(rid)
        if i is not None:
            self._req_at_trainer[i] = True

    def _on_rollout_done(self, req: Request) -> None:
        if self._unfinished.pop(req.rid, None) is not None:
            self._req_finished[self._req_pos[req.rid]] = True
        rec = self.iterations[-1]
        if self.rollout.n_finished == self.rollout.n_total:
            rec.rollout_end_s = self.loop.now
            if self.colocated:
                self.loop.after(0.0, self._colocated_to_training)
        if self.colocated or not self.policy.streaming:
            self._collected.append(req)
            if self.rollout.n_finished == self.rollout.n_total and not self.colocated:
                for r in self._collected:
                    self.ref.push(r, sample_work_flops(self.setup, r)[0])
            return
        self.ref.push(req, sample_work_flops(self.setup, req)[0])

    def _colocated_to_training(self) -> None:
        now = self.loop.now
        for eid, e in self.rollout.engines.items():
            if e.alive:
                e.sync(now)
                e.alive = False
                self.rollout.held[eid][1] = now
                node, gg = self.engine_nodes[eid]
                self._give("rollout", node, gg)
        self._hold("rollout", 0)
        sw = self._switch_s()
        total = self.setup.total_gpus
        # the pool is held by the log-prob phase during the switch, then by the update
        self.comp_nodes["reference"] = self._take("reference", total, 1)
        self._hold("reference", total)
        self.loop.after(sw, self._colocated_ref_start)

    def _colocated_ref_start(self) -> None:
        self.ref.set_gpus(self.setup.total_gpus)
        for r in self._collected:
            self.ref.push(r, sample_work_flops(self.setup, r)[0])

    def _on_ref_done(self, req: Request) -> None:
        self.reward.push(req)
        n_req = self.setup.workload.n_requests
        if self.colocated and self.ref.completed == (self.iterations[-1].index + 1) * n_req:
            # log-prob phase over: the update takes the pool
            total = self.setup.total_gpus
            self.ref.set_gpus(0)
            self._hold("reference", 0)
            self.comp_nodes["trainer"], self.comp_nodes["reference"] = self.comp_nodes["reference"], []
            self._hold("trainer", total)
            self.trainer.set_gpus(total)

    def _on_rewarded(self, req: Request) -> None:
        """Trainer intake: every sample at once, or whole GRPO groups, or mini-batches of groups."""
        if self.intake == "sample":
            self._mark_at_trainer(req.rid)
            self.trainer.push(req, sample_work_flops(self.setup, req)[1])
            return
        g = self.setup.workload.group_size
        waiting = self._gate.setdefault(req.group, [])
        waiting.append(req)
        if len(waiting) < g:
            return
        del self._gate[req.group]
        self._groups_in += 1
        if self.intake == "group":
            self._to_trainer(waiting)
            return
        self._batch.extend(waiting)
        if len(self._batch) >= self.policy.minibatch_groups * g or self._groups_in == self.setup.workload.n_prompts:
            batch, self._batch = self._batch, []
            self._to_trainer(batch)

    def _to_trainer(self, reqs: list) -> None:
        for r in reqs:
            self._mark_at_trainer(r.rid)
            self.trainer.push(r, sample_work_flops(self.setup, r)[1])

    def gated_samples(self) -> int:
        """Rewarded samples held at the trainer's intake (waiting for their group or mini-batch)."""
        return sum(len(v) for v in self._gate.values()) + len(self._batch)

    def _on_trained(self, req: Request) -> None:
        self._trained += 1
        if self._trained == self.setup.workload.n_requests:
            self.iterations[-1].train_end_s = self.loop.now
            self.loop.after(self._optimizer_s(max(1, self.trainer.gpus)), self._after_optimizer)

    def _after_optimizer(self) -> None:
        sync = self._sync_s()
        if self.colocated:
            # reshard into the engines' layout, switch back to generation
            self.trainer.set_gpus(0)
            self._hold("trainer", 0)
            for node, n in self.comp_nodes["trainer"]:
                self._give("trainer", node, n)
            self.comp_nodes["trainer"] = []
            sync += self._switch_s()
            self._add_engines(self.part["rollout"], self.loop.now + sync)
        self.loop.after(sync, self._end_iteration)

    def _end_iteration(self) -> None:
        now = self.loop.now
        rec = self.iterations[-1]
        rec.end_s = now
        rec.requests = len(self._iter_reqs)
        rec.response_tokens = float(sum(r.response_tokens for r in self._iter_reqs))
        rec.reprefill_tokens = self.rollout.reprefill_tokens() - self._reprefill0
        rec.preemptions = sum(e.preemptions for e in self.rollout.all_engines()) - self._preempt0
        self.rollout.new_weights(now)
        if len(self.iterations) >= self.n_iterations:
            self._done = True
            self.loop.stop()
            return
        if not self.colocated and self.policy.consolidate_at is not None:
            # engines released by consolidation come back (weights are host-resident: warm)
            missing = self.part["rollout"] - self.rollout.gpus()
            if missing > 0 and self.policy.decision is None:
                self._add_engines(missing, now + self._engine_boot_s())
        self._start_iteration()

    # ------------------------------------------------------------------ telemetry and decisions
    def snapshot(self) -> TelemetrySnapshot:
        now = self.loop.now
        rec = self.iterations[-1]
        comps, workers = [], []
        alive = self.rollout.alive()
        if alive:
            n = max(1, self.rollout.n_total)
            tot_rate = 0.0
            for e in alive:
                e.sync(now)
                t0, tok0 = self._last_tokens.get(e.eid, (now, e.tokens_out))
                rate = (e.tokens_out - tok0) / (now - t0) if now > t0 else 0.0
                self._last_tokens[e.eid] = (now, e.tokens_out)
                tot_rate += rate
                cap = self.em.kv_capacity_tokens
                workers.append(WorkerTelemetry(worker_id=f"rollout-{e.eid}", component="rollout", node=e.node,
                                               gpu_type=e.gpu_type, gpus=e.gpus, kv_used_tokens=min(cap, e.kv_used),
                                               kv_capacity_tokens=cap, queue_depth=len(e.queue),
                                               tokens_per_s=max(0.0, rate), requests_in_flight=e.b))
            extra_c = {}
            if self._report_remaining and "remaining_tokens" in ComponentTelemetry.model_fields:
                extra_c["remaining_tokens"] = self._rollout_remaining_estimate(now)
            comps.append(ComponentTelemetry(name="rollout", kind="rollout", progress=min(1.0, self.rollout.n_finished / n),
                                            interruptible=True, throughput=max(0.0, tot_rate), **extra_c))
        n_req = self.setup.workload.n_requests
        for st, kind in ((self.ref, "reference"), (self.trainer, "trainer")):
            if self.held[st.name] <= 0:
                continue
            done = st.completed - rec.index * n_req
            comps.append(ComponentTelemetry(name=st.name, kind=kind, progress=min(1.0, max(0.0, done / n_req)),
                                            interruptible=now >= self._migrating_until,
                                            throughput=st.rate if st.q else 0.0))
            for i, (node, gg) in enumerate(self.comp_nodes[st.name]):
                workers.append(WorkerTelemetry(worker_id=f"{st.name}-{i}", component=st.name, node=node,
                                               gpu_type=self.t_gpu.name, gpus=gg, queue_depth=len(st.q)))
        extra = {}
        if "nodes" in TelemetrySnapshot.model_fields:  # declare every node so free GPUs are visible
            from formulation.realloc.telemetry import NodeTelemetry

            extra["nodes"] = [NodeTelemetry(node=n, gpu_type=self._node_type(n), gpus=g) for n, g in sorted(self.all_nodes.items())]
        snap = TelemetrySnapshot(job=self.setup.name, time_s=max(0.0, now - rec.start_s), iteration=rec.index,
                                 components=comps, workers=workers, **extra)
        self._last_snapshot = snap
        return snap

    def _rollout_remaining_estimate(self, now: float) -> float:
        """Expected response tokens still to generate this iteration (:func:`simulator.workload.residual_table`): what the
        rollout manager can estimate from tokens generated so far, not the lengths the simulator drew."""
        res, _ = self._rollout_residuals(now)
        return float(res.sum()) if res.size else 0.0

    def _rollout_residuals(self, now: float) -> tuple[np.ndarray, float]:
        """(expected remaining tokens of every unfinished request, their mean context in tokens). A decision's
        snapshot and context read it at the same instant (nothing happens in between): computed once there."""
        cache = self._residuals_cache
        if cache is not None and now in cache:
            return cache[now]
        out = self._rollout_residuals_at(now)
        if cache is not None:
            cache[now] = out
        return out

    def _rollout_residuals_at(self, now: float) -> tuple[np.ndarray, float]:
        gens: list = []
        running: set = set()
        single = self.setup.workload.turns == 1
        for e in self.rollout.alive():
            e.sync(now)
            S = e.S
            for rid, (req, s_a, _, gen0, _) in e.running.items():
                g = gen0 + S - s_a
                gens.append(g if single else g + sum(req.turn_tokens[: req.turn]))
                running.add(rid)
        for rid, r in self._unfinished.items():
            if rid not in running:
                gens.append(r.generated_in_turn if single else r.generated_in_turn + sum(r.turn_tokens[: r.turn]))
        if not gens:
            return np.zeros(0), 0.0
        g = np.asarray(gens, dtype=float)
        return self._residual.expected_remaining(g), float(self.setup.workload.prompt_tokens + g.mean())

    def _rollout_requests(self, now: float) -> dict:
        """The unfinished requests one by one, as a rollout manager sees them (engine, group, tokens generated,
        context, decoding or queued) and each alive engine's drain order (:mod:`formulation.realloc.tail`)."""
        alive = self.rollout.alive()
        index = {e.eid: i for i, e in enumerate(alive)}
        rows: list[tuple] = []  # (engine, group, generated, context, running, prompt)
        running: set = set()
        for e in alive:
            e.sync(now)
            for rid, (req, s_a, _, gen0, _) in e.running.items():
                g = gen0 + e.S - s_a
                rows.append((index[e.eid], req.group, g, req.prompt_tokens + g, True, req.prompt_tokens))
                running.add(rid)
        for rid in sorted(self._unfinished):
            r = self._unfinished[rid]
            if rid not in running and r.engine in index:
                rows.append((index[r.engine], r.group, r.generated_in_turn, r.prompt_tokens + r.generated_in_turn, False, r.prompt_tokens))
        cols = list(zip(*rows)) if rows else [()] * 6
        # this iteration's finished samples (in request order) of the groups still open, and those of complete groups
        # not yet pushed to the trainer (log-prob inference, reward, the gate): the manager knows their lengths, so
        # their update work need not be taken at the mean
        in_open = np.isin(self._req_group, np.asarray(cols[1], dtype=int))
        done = self._req_finished & in_open
        pend = self._req_finished & ~in_open & ~self._req_at_trainer
        return {"engine": np.asarray(cols[0], dtype=int), "group": np.asarray(cols[1], dtype=int),
                "generated": np.asarray(cols[2], dtype=float), "context": np.asarray(cols[3], dtype=float),
                "running": np.asarray(cols[4], dtype=bool), "prompt": np.asarray(cols[5], dtype=float),
                "drain_key": np.array([e.load() * 1e12 + e.kv_used for e in alive], dtype=float),
                "done_group": self._req_group[done], "done_length": self._req_length[done],
                "pend_length": self._req_length[pend]}

    def _rollout_longest_remaining(self, now: float) -> float:
        """The expected remaining tokens of the longest unfinished request, ``E[max_i R_i]`` with ``R_i`` the residual of
        the length distribution given what request ``i`` has generated (independent; not the drawn lengths)."""
        gens = []
        for e in self.rollout.alive():
            S = e.S
            for _rid, (_req, s_a, _, gen0, _) in e.running.items():
                gens.append(gen0 + S - s_a)
        running = {rid for e in self.rollout.alive() for rid in e.running}
        gens += [r.generated_in_turn for rid, r in self._unfinished.items() if rid not in running]
        if not gens:
            return 0.0
        L = self._residual.lengths
        cap = self._residual.max_tokens
        g, cnt = np.unique(np.round(np.asarray(gens, dtype=float) / 32.0) * 32.0, return_counts=True)
        alive = np.maximum(1, L.size - np.searchsorted(L, g, side="right"))
        ms = np.concatenate([[0.0], np.geomspace(1.0, max(2.0, cap), 96)])
        above = L.size - np.searchsorted(L, g[:, None] + ms[None, :], side="right")
        p = np.clip(above / alive[:, None], 0.0, 1.0 - 1e-12)
        # P(max > m) = 1 - prod_i (1 - p_i(m)); E[max] = integral of it over m
        tail = 1.0 - np.exp((cnt[:, None] * np.log1p(-p)).sum(axis=0))
        return float(np.sum((tail[1:] + tail[:-1]) / 2.0 * np.diff(ms)))

    def _node_type(self, node: str) -> str:
        s = self.setup
        if self.colocated or s.same_type:
            return self.t_gpu.name if self.colocated else s.rollout_gpu.name
        return s.rollout_gpu.name if node.startswith(s.rollout_gpu.name.lower() + "-") else s.train_gpu.name

    def context(self, at_boundary: bool = False) -> ReallocContext:
        now = self.loop.now
        rec = self.iterations[-1]
        n_req = self.setup.workload.n_requests
        r_gpus = self.rollout.gpus()
        rate = sum(w.tokens_per_s for w in self._last_snapshot.workers if w.component == "rollout") if self._last_snapshot else 0.0
        extra: dict = {}
        if self._report_remaining:
            res, ctx_tokens = self._rollout_residuals(now)
            extra = {"remaining_tokens": float(res.sum()) if res.size else 0.0,
                     "remaining_max": self._rollout_longest_remaining(now) if res.size else 0.0, "context_tokens": ctx_tokens,
                     "groups_left": len({r.group for r in self._unfinished.values()})}
            if self.setup.workload.turns == 1:
                extra["requests"] = self._rollout_requests(now)
        comps = {
            "rollout": ComponentInfo("rollout", "rollout", r_gpus, self.setup.rollout_tp, self.setup.rollout_tp,
                                     rate / r_gpus if r_gpus else 0.0, 0.0, self.rollout.remaining(),
                                     grow_s=self._engine_boot_s(), **extra),
            "reference": ComponentInfo("reference", "reference", self.held["reference"], 1, 1,
                                       self.ref.flops_per_gpu_s, self.ref.backlog_s(),
                                       n_req - (self.ref.completed - rec.index * n_req), now >= self._migrating_until,
                                       grow_s=self._ref_boot_s(), queued_work=self.ref.backlog_work(), queued=len(self.ref.q)),
            "trainer": ComponentInfo("trainer", "trainer", self.held["trainer"], self.setup.train_unit, self.setup.train_unit,
                                     self.trainer.flops_per_gpu_s, self.trainer.backlog_s(),
                                     n_req - self._trained, now >= self._migrating_until,
                                     grow_s=self._p2p_s(self.held["trainer"] + self.setup.train_unit) + comm.GROUP_REBUILD_S,
                                     queued_work=self.trainer.backlog_work(), queued=len(self.trainer.q)),
        }
        pool = self.pool
        return ReallocContext(time_s=now, iteration=rec.index, total_gpus=self.setup.total_gpus,
                              free_gpus=pool.total_free() if pool else 0, components=comps, initial=dict(self.part),
                              at_boundary=at_boundary, intake=self.intake,
                              last_lengths=self._last_lengths[0] if at_boundary and self._last_lengths else None,
                              last_groups=self._last_lengths[1] if at_boundary and self._last_lengths else 0)

    def _tick(self) -> None:
        if self._done:
            return
        if self.policy.record_snapshots and self.policy.decision is None:
            self.snapshots.append(self.snapshot())
        elif self.policy.decision is not None:
            self._decide(at_boundary=False)
        self.loop.after(self.policy.telemetry_interval_s, self._tick)

    def _decide(self, at_boundary: bool) -> None:
        # a decision function that reads no telemetry (``reads_snapshot = False``: a fixed schedule) is
        # called with ``None`` instead of a snapshot, which costs most of a tick
        wants = getattr(self.policy.decision, "reads_snapshot", True) or self.policy.record_snapshots
        self._residuals_cache = {}  # the snapshot and the context share one pass (no event between)
        try:
            snap = self.snapshot() if wants else None
            if self.policy.record_snapshots and snap is not None:
                self.snapshots.append(snap)
            if self.loop.now < self._migrating_until and not at_boundary:
                return
            decision = self.policy.decision
            if decision is None:
                return
            ctx = self.context(at_boundary)
        finally:
            self._residuals_cache = None
        dec = decision(snap, ctx)
        if dec is not None:
            self._at_boundary = at_boundary
            try:
                self.apply(dec)
            finally:
                self._at_boundary = False

    def apply(self, dec: Reallocation) -> None:
        """Carry out a reallocation (shrinks first, then growth into the freed GPUs)."""
        now = self.loop.now
        tgt = {c: int(dec.target.get(c, self.held[c])) for c in COMPONENTS}
        s = self.setup
        cur = {"rollout": self.rollout.gpus(), "reference": self.held["reference"], "trainer": self.held["trainer"]}
        if sum(tgt.values()) > s.total_gpus:
            raise ValueError(f"reallocation asks for {sum(tgt.values())} GPUs, the job has {s.total_gpus}")
        # every component keeps one engine / replica: a component with no worker would vanish from
        # the telemetry, and nothing could give it GPUs back
        tgt["rollout"] = max(tgt["rollout"], s.rollout_tp)
        tgt["reference"] = max(tgt["reference"], 1)
        tgt["trainer"] = max(tgt["trainer"], s.train_unit)
        if tgt == cur:
            return
        self.decisions.append((now, dict(tgt), dec.reason))
        rec = self.iterations[-1]
        self.decision_points.append((rec.index, now - rec.start_s, 1.0 - self.rollout.remaining() / max(1, s.workload.n_requests),
                                     self._at_boundary, dec.fill))
        ready = now
        # shrink: the stages first, so the rollout drain sees every GPU they free
        for comp, st in (("reference", self.ref), ("trainer", self.trainer)):
            if tgt[comp] < cur[comp]:
                pause = comm.GROUP_REBUILD_S if st.q or comp == "trainer" else 0.0
                self._resize_stage(st, comp, tgt[comp], now, pause)
        if tgt["rollout"] < cur["rollout"]:
            n_drop = (cur["rollout"] - tgt["rollout"]) // s.rollout_tp
            alive = sorted(self.rollout.alive(), key=lambda e: (e.load(), e.kv_used, -e.eid))
            units = (tgt["trainer"] - cur["trainer"]) // s.train_unit if tgt["trainer"] > cur["trainer"] else 0
            drop = self._drain_choice(alive, n_drop, units)
            if drop and len(drop) < len(alive):
                self.rollout.drain(drop, now)
        # grow
        free = self._pool_of("rollout").total_free()  # one shared pool: dynamic runs have one GPU type (checked in __init__)
        if tgt["rollout"] > cur["rollout"]:
            add = min(tgt["rollout"] - cur["rollout"], free)
            if add >= s.rollout_tp:
                self._add_engines(add, now + self._engine_boot_s())
                ready = max(ready, now + self._engine_boot_s())
        for comp, st in (("reference", self.ref), ("trainer", self.trainer)):
            free = self._pool_of(comp).total_free()
            if tgt[comp] > cur[comp] and free > 0:
                new = min(tgt[comp], cur[comp] + _round_down(free, st.unit_gpus))
                if new <= cur[comp]:
                    continue
                if comp == "trainer":
                    r = now + self._p2p_s(new)
                    self._resize_stage(st, comp, new, r, comm.GROUP_REBUILD_S)
                else:
                    r = now + self._ref_boot_s()
                    self._resize_stage(st, comp, new, r, 0.0)
                ready = max(ready, r)
        # no GPU left unowned: what a unit-bound receiver could not take (a trainer replica needs its TP x PP GPUs on one
        # node) goes to log-prob inference, which runs on any GPU count; the decision record says so
        pool = self._pool_of("reference")
        left = pool.total_free()
        if dec.fill and left > 0 and not self.colocated and self.pool is not None:
            new = self.held["reference"] + left
            self._resize_stage(self.ref, "reference", new, now + self._ref_boot_s(), 0.0)
            ready = max(ready, now + self._ref_boot_s())
            t, tg, why = self.decisions[-1]
            self.decisions[-1] = (t, tg, why + f"; {left} GPU(s) no unit of the target could use (node fragmentation) "
                                  "went to log-prob inference")
        self._migrating_until = ready
