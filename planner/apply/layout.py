"""A placed job's running components: one model for the executor, the telemetry and the planners.

When a job is placed (a member of a co-execution group, with rollout nodes and training nodes),
the executor runs, as components named ``<job>/<name>`` where ``<name>`` is what the job's
telemetry calls the component (:class:`formulation.realloc.telemetry.ComponentTelemetry`) and
the workers' ids are the executor's own:

* ``rollout``: inference engines of ``rollout.tp`` GPUs each, filling every GPU of the member's
  rollout nodes (moved by Workload migration);
* ``trainer``: ranks of ``trainer.tp`` x ``trainer.pp`` x DP, one GPU each, packed node by node on
  the training nodes in whole TP x PP replicas (Megatron's rank order: TP innermost, so a TP
  group never straddles nodes); DP is ``trainer.dp`` or as many replicas as fit (moved by P2P);
* ``reference`` (log-prob inference, GRPO and PPO): one engine of ``rollout.tp`` GPUs, in the GPUs
  the trainer's whole replicas leave on a training node; when they leave none, in one replica
  slot of the last training node if the trainer keeps a replica, else in one engine slot of the
  first rollout node (moved by Workload migration: it is an inference engine too);
* ``critic`` (PPO): half of the training replicas (at least one), the trainer the other half;
* ``reward`` and ``tool_agent``: CPU services (a rule-based reward, a tool sandbox) on the first
  rollout node, holding no GPUs: telemetry, which counts GPUs, leaves them out;
* ``resident-rollout`` / ``resident-train``: the member's weights and optimizer state pinned in
  host DRAM on each of its rollout / training nodes (Weave's residency; no GPUs; moved by reboot:
  a cold start elsewhere).

**Co-execution.** The group reserves every GPU of its pool nodes (``<group>/pool-<node>``, one
component per node so a pool grows and shrinks node by node). Each member's engines and ranks run
*inside* those reservations: members take turns on the same GPUs (the round-robin runs one
member's phase at a time), so the executor counts each member's GPUs against the reservation on
its own (:mod:`executor.capacity`), not summed over members. Inside a member's phase its own
components hold disjoint GPUs and run concurrently (DynaRL's streaming pipeline), which is what
an in-iteration reallocation redistributes: it applies inside one member's iteration, within the
GPUs its group reserves (the member's telemetry declares its group's pool nodes), and the next
placement apply restores the planned layout.

The trainer's tensors in the executor's stand-in ranks are a tiny model:
the real model's state lives in the training framework; what the executor moves and checks is
the layout and the resharding (:func:`standin_model`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Optional

from planner.errors import Problem, UserError
from planner.schema.scenario import JobSpec

# The executor's stand-in engines: small batches and caches (they hold real requests in the sim).
ENGINE = {"max_batch": 16, "cache_blocks": 256, "progress_every": 8, "tokens_per_tick": 1}


def standin_model(job: str, tp: int, pp: int) -> dict:
    """Dimensions of the stand-in model a job's trainer ranks hold (divisible by its TP and PP)."""
    return {"hidden": 8, "ffn": 8 * tp, "layers": 2 * pp, "vocab": 16 * tp, "seed": zlib.crc32(job.encode()) % 10_000}



@dataclass(frozen=True)
class Pools:
    """Where one member runs: its group, and its rollout and training nodes with their GPU type."""

    group: str
    rollout_type: str
    rollout_nodes: tuple[str, ...]
    rollout_gpus_per_node: int
    train_type: str
    train_nodes: tuple[str, ...]
    train_gpus_per_node: int


def _pack(nodes: tuple[str, ...], slots: dict[str, int], replicas: int, unit: int) -> dict[str, int]:
    """``replicas`` whole replicas of ``unit`` GPUs, node by node; ``slots`` (replicas per node) is used up."""
    out: dict[str, int] = {}
    for n in nodes:
        k = min(slots[n], replicas)
        if k:
            out[n] = out.get(n, 0) + k * unit
            slots[n] -= k
            replicas -= k
    return out


def job_components(spec: JobSpec, p: Pools, dram_gb: tuple[float, float]) -> list[dict]:
    """The member's components as ``ExecutorTarget`` component dicts (see the module docstring)."""
    job, comps = spec.name, set(spec.components or [])
    where = f"job {job}"
    rtp = spec.rollout.tp
    tp, pp = spec.trainer.tp, spec.trainer.pp
    unit = tp * pp
    if rtp > p.rollout_gpus_per_node:
        raise UserError(Problem(where, f"rollout tp {rtp} exceeds the {p.rollout_gpus_per_node} GPUs of a {p.rollout_type} node",
                                "lower rollout.tp or place the job on nodes with more GPUs"))
    if unit > p.train_gpus_per_node:
        raise UserError(Problem(where, f"a trainer replica (tp x pp = {unit}) exceeds the {p.train_gpus_per_node} GPUs of a "
                                       f"{p.train_type} node", "lower trainer.tp x trainer.pp"))
    engines = {n: p.rollout_gpus_per_node // rtp for n in p.rollout_nodes}
    free = {n: p.train_gpus_per_node for n in p.train_nodes}
    replicas = sum(g // unit for g in free.values())
    stateful = 2 if "critic" in comps else 1
    if spec.trainer.dp is not None:
        dp_t = spec.trainer.dp
        dp_c = 1 if "critic" in comps else 0
    else:
        dp_t = dp_c = 0
    if dp_t + dp_c > replicas or replicas < stateful:
        raise UserError(Problem(where, f"its training nodes hold {replicas} trainer replica(s) of tp x pp = {unit}, it needs "
                                       f"{max(dp_t + dp_c, stateful)}", "give it more training nodes, a smaller trainer.tp x trainer.pp "
                                                                         "or a smaller trainer.dp"))
    ref_gpus = min(rtp, p.train_gpus_per_node)
    ref_at: dict[str, int] = {}
    if "reference" in comps:
        # next to whole replicas if a training node has GPUs to spare, else in one replica slot
        # (when the trainer fills the nodes and keeps one), else in one engine slot of a rollout node
        # the training node that keeps the most replicas once it holds the reference (the last such node),
        # if the trainer keeps what it needs there: a trainer.dp given, else a replica per stateful model
        # (it took 8 GPUs of the one 8-GPU node a tp-8 trainer needed: dp 0, the target refused by pydantic)
        need = dp_t + dp_c if spec.trainer.dp is not None else stateful
        best: Optional[tuple[str, int]] = None
        for n in reversed(p.train_nodes):
            left = replicas - free[n] // unit + (free[n] - ref_gpus) // unit
            if free[n] >= ref_gpus and left >= need and (best is None or left > best[1]):
                best = (n, left)
        if best is not None:
            free[best[0]] -= ref_gpus
            ref_at = {best[0]: 1}
            replicas = best[1]
        elif engines[p.rollout_nodes[0]] >= 2:
            engines[p.rollout_nodes[0]] -= 1
            ref_at = {p.rollout_nodes[0]: 1}
        else:
            raise UserError(Problem(where, "no room for its reference (log-prob) engine next to its trainer and rollout",
                                    "give the job more nodes, or drop 'reference' from its components"))
    if spec.trainer.dp is None:
        dp_c = max(1, replicas // 2) if "critic" in comps else 0
        dp_t = replicas - dp_c
    slots = {n: free[n] // unit for n in p.train_nodes}
    model = standin_model(job, tp, pp)
    out = [{"name": f"{job}/rollout", "role": "rollout", "gpu_type": p.rollout_type, "gpus_per_worker": rtp,
            "placement": {n: k for n, k in engines.items() if k}, "migration": "workload", "engine": ENGINE, "group": p.group},
           {"name": f"{job}/trainer", "role": "trainer", "gpu_type": p.train_type, "gpus_per_worker": 1,
            "layout": {"tp": tp, "pp": pp, "dp": dp_t}, "placement": _pack(p.train_nodes, slots, dp_t, unit), "migration": "p2p",
            "model": model, "group": p.group}]
    if dp_c:
        out.append({"name": f"{job}/critic", "role": "trainer", "gpu_type": p.train_type, "gpus_per_worker": 1,
                    "layout": {"tp": tp, "pp": pp, "dp": dp_c}, "placement": _pack(p.train_nodes, slots, dp_c, unit),
                    "migration": "p2p", "model": dict(model, seed=model["seed"] + 1), "group": p.group})
    if ref_at:
        node = next(iter(ref_at))
        out.append({"name": f"{job}/reference", "role": "rollout",
                    "gpu_type": p.rollout_type if node in p.rollout_nodes else p.train_type,
                    "gpus_per_worker": ref_gpus if node in p.train_nodes else rtp, "placement": ref_at, "migration": "workload",
                    "engine": ENGINE, "group": p.group})
    for name in ("reward", "tool_agent"):
        if name in comps:
            out.append({"name": f"{job}/{name}", "role": "service", "gpus_per_worker": 0,
                        "placement": {p.rollout_nodes[0]: 1}, "migration": "reboot"})
    r_gb, t_gb = dram_gb
    out.append({"name": f"{job}/resident-rollout", "role": "service", "gpus_per_worker": 0, "dram_gb_per_worker": r_gb,
                "placement": {n: 1 for n in p.rollout_nodes}, "migration": "reboot"})
    out.append({"name": f"{job}/resident-train", "role": "service", "gpus_per_worker": 0, "dram_gb_per_worker": t_gb,
                "placement": {n: 1 for n in p.train_nodes}, "migration": "reboot"})
    return out


def layout_problem(spec: JobSpec, rollout_type: str, rollout_gpus_per_node: int, train_type: str, train_gpus_per_node: int,
                   train_nodes: int) -> Optional[str]:
    """Why the job cannot be laid out as one member on ``train_nodes`` training nodes of ``train_type``
    with rollout nodes of ``rollout_type`` (the message :func:`job_components` would refuse it with),
    or None where it can. The placement model offers a job only the training pool sizes where this is
    None, so that a plan never places a job its apply then refuses (a tp-8 trainer and a tp-8
    reference on one 8-GPU training node beside one-engine rollout nodes: the planner admitted it and
    every apply failed). The rollout side only decides whether a rollout engine slot can take the
    reference, the same on every rollout node, so one rollout node stands for any number."""
    pools = Pools("g", rollout_type, ("r-0",), rollout_gpus_per_node, train_type,
                  tuple(f"t-{i}" for i in range(train_nodes)), train_gpus_per_node)
    try:
        job_components(spec, pools, (0.0, 0.0))
    except UserError as e:
        return e.problems[0].message
    return None


def reservations(group: str, nodes: list[tuple[str, str, int]]) -> list[dict]:
    """The group's reservation of each of its pool nodes: (node, GPU type, GPUs)."""
    return [{"name": f"{group}/pool-{n}", "role": "service", "gpu_type": t, "gpus_per_worker": g, "placement": {n: 1},
             "migration": "reboot", "reserves": group} for n, t, g in nodes]
