"""``diff(observed, target)``: the ordered, capacity-safe steps that turn one state into the other.

Every component that differs becomes a *unit* of steps, chosen by its migration kind:

* **workload** (rollout engines): create the new engines, drain the engines being released,
  hand their requests to the kept and new engines, stop the released ones;
* **p2p** (trainer): create every rank of the new layout, reshard into them, switch, stop the
  old ranks (create-before-destroy: the old ranks keep training until the switch); when only DP
  changes (TP and PP kept: what a reallocation does), the old replicas that fit where the new
  layout wants ranks stay in place and take their new rank at the switch, and only the added
  replicas are created and filled — so growing a trainer needs room for the added ranks only;
* **reboot**: save, stop, create on the target from the saved state (the one kind that stops
  before it starts; a plan picks it when there is no room for both copies);
* **add** / **remove**: components new to the plan, or gone from it (a co-execution group's
  reservation of a node is a component of its own, so a pool grows and shrinks node by node);
* **park** / **restore**: a reboot staged in two units (see below);
* **replace**: a component every worker of which is dead (its processes gone, on live nodes), or
  a trainer with a dead rank (a P2P copy and a reboot read every rank's shards): there is nothing
  to migrate from, so its workers are stopped, the dead ones reaped, and new ones created in their
  place, as an addition would. What the dead workers held is gone: an
  engine's requests wait in the ledger and go to the new engines, a service starts empty, a
  trainer restarts from the checkpoint of a staged reboot that parked it, else from its initial
  state, and only if it never committed an optimizer step (its initial state is then all it
  had); a trainer that did is refused (:func:`lost_state`): the executor keeps no checkpoint of a
  running trainer.

Capacity follows :mod:`executor.capacity` (members of a co-execution group share its reserved
GPUs in time). Units are ordered by :mod:`executor.order` so that at every intermediate state no
node or reservation is over-full. When no such order of the planned migrations exists — groups
that swap nodes need each other's nodes first — the fewest units needed are *staged*: parked
(saved and stopped, giving their resources back) early and restored from their checkpoint once
the others have made room; the plan's notes say which and why. A target that is invalid is
refused with :class:`Unreachable`, naming the component, the node and the shortfall, and how to
fix it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import AbstractSet, Optional

from estimators.errors import Problem, UserError, did_you_mean

from executor import capacity
from executor.capacity import Need
from executor.order import Free, order_units, unit_effect  # noqa: F401 - unit_effect: part of this module's interface
from executor.state import ALLOWED_MIGRATIONS, ClusterState, Component, Worker
from executor.steps import STEP_KINDS, Step, Unit

EPS = 1e-9

Reserved = AbstractSet[tuple[str, str]]  # (group, node) pairs held by reservation components


class Unreachable(UserError):
    """The target cannot be reached safely from the observed state (exit status 2 on the CLI)."""


def worker_id(component: str, generation: int, index: int, role: str) -> str:
    tag = "r" if role == "trainer" else ("e" if role == "rollout" else "w")
    return f"{component.replace('/', '.')}.g{generation}.{tag}{index}"


@dataclass
class StepPlan:
    units: list[Unit]
    steps: list[Step]
    observed: ClusterState
    target: ClusterState
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if not self.steps:
            return "nothing to do: the cluster already matches the plan"
        return "\n".join(s.describe() for s in self.steps)


# ----------------------------------------------------------------------------- validation
def reservations(st: ClusterState) -> set[tuple[str, str]]:
    """(group, node) pairs a state's reservation components hold (target: placed; observed: live)."""
    return {(c.reserves, n) for c in st.components.values() if c.reserves for n in c.placement_counts()}


def share_at(c: Component, node: str, reserved: Reserved) -> str:
    """How a worker of ``c`` on ``node`` counts its GPUs: inside its group's reservation there, if any."""
    return c.group if c.group and (c.group, node) in reserved else ""


def validate_target(observed: ClusterState, target: ClusterState) -> list[Problem]:
    """Problems with the target on its own (before any ordering): each names where and the fix."""
    probs: list[Problem] = []
    nodes = observed.nodes or target.nodes
    reserved = reservations(target)
    needs: list[Need] = []
    for c in sorted(target.components.values(), key=lambda c: c.name):
        where = f"components[{c.name}]"
        if c.migration not in ALLOWED_MIGRATIONS.get(c.role, ()):
            probs.append(Problem(f"{where}.migration", f"{c.migration!r} cannot move a {c.role} component",
                                 f"use one of {', '.join(ALLOWED_MIGRATIONS.get(c.role, ()))}"))
        counts = c.placement_counts()
        if not counts:
            probs.append(Problem(f"{where}.placement", "places no workers",
                                 "give at least one node with a worker count, or drop the component from the plan"))
        if c.role == "trainer" and sum(counts.values()) != c.layout.world:
            probs.append(Problem(f"{where}.placement", f"places {sum(counts.values())} trainer ranks but layout "
                                 f"{c.layout} has {c.layout.world}", "make the per-node rank counts add up to tp*pp*dp"))
        for node, k in counts.items():
            n = nodes.get(node)
            if n is None:
                probs.append(Problem(f"{where}.placement.{node}", f"unknown node {node!r}.{did_you_mean(node, nodes)}",
                                     "use a node name the cluster reports (planner status)"))
                continue
            if not n.alive:  # (what a dead node had is not known, nor needed: nothing may be placed there)
                probs.append(Problem(f"{where}.placement.{node}", f"node {node} is dead", "re-plan without that node"))
                continue
            if c.gpu_type and n.gpu_type != c.gpu_type:
                probs.append(Problem(f"{where}.placement.{node}", f"node {node} has {n.gpu_type} GPUs, the component wants {c.gpu_type}",
                                     f"place it on {c.gpu_type} nodes or change its gpu_type"))
            needs += [Need(node, c.gpus_per_worker, c.dram_gb_per_worker, share_at(c, node, reserved), c.job, c.reserves)] * k
    slots = capacity.initial(nodes, needs)
    for k, v in sorted(slots.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        if k[0] == "gpus" and v < 0:
            probs.append(Problem(f"node {k[1]}", f"the plan itself places {nodes[k[1]].gpus - v} GPUs of workers on a node with "
                                                 f"{nodes[k[1]].gpus}", "move workers to other nodes or shrink them"))
        elif k[0] == "dram" and v < -EPS:
            probs.append(Problem(f"node {k[1]}", f"the plan itself needs {nodes[k[1]].dram_gb - v:g} GB host DRAM on a node with "
                                                 f"{nodes[k[1]].dram_gb:g} GB", "move some jobs' resident state to other nodes"))
        elif k[0] == "use" and v > slots.get(("res", k[1], k[3]), 0):
            probs.append(Problem(f"node {k[3]}", f"the plan itself gives job {k[2]} {v} GPUs inside group {k[1]}'s reservation of "
                                                 f"{slots.get(('res', k[1], k[3]), 0)}",
                                 "a member's workers (all its components together) must fit in what its group reserves on the node"))
    for name, why in sorted(lost_state(observed).items()):
        if name in target.components:
            probs.append(Problem(f"components[{name}]", why, LOST_FIX))
    for c in observed.components.values():
        if c.role == "trainer":  # (ranks on a dead node: replaced where it never trained, else lost_state above refused it)
            continue
        dead = [w for w in c.live_workers() if w.node in nodes and not nodes[w.node].alive]
        t = target.components.get(c.name)
        if dead and t is not None and t.migration == "p2p":
            probs.append(Problem(f"components[{c.name}].migration",
                                 f"rank(s) {', '.join(w.id for w in dead)} sit on dead node(s): their shards are lost, a P2P copy has no source",
                                 "use migration 'reboot' for this component (it restarts from the last saved state)"
                                 if c.role != "trainer" else LOST_FIX))
    return probs


LOST_FIX = ("the trainer's state went with its ranks: leave the component out of the plan (its workers are reaped), "
            "then add it back, from its initial state or your framework's own checkpoint")


def gone(w: Worker, nodes: dict) -> bool:
    """The worker's process is gone, or its node is dead (what it held went with the node)."""
    return w.status == "dead" or (w.node in nodes and not nodes[w.node].alive)


def dead_workers(o: Component, nodes: dict) -> list[Worker]:
    """The dead workers (:func:`gone`: their processes, or their nodes) of ``o`` when it has nothing
    to migrate from: every worker dead, or for a trainer any rank (a P2P copy and a reboot read
    every rank's shards), or for a service any worker (a reboot saves from every worker; a service
    starts empty anyway); else [] (a rollout that keeps live engines migrates them, its dead ones
    reaped first)."""
    ws = o.live_workers()
    dead = [w for w in ws if gone(w, nodes)]
    if not dead:
        return []
    return sorted(dead, key=lambda w: w.index) if o.role in ("trainer", "service") or len(dead) == len(ws) else []


def lost_state(observed: ClusterState) -> dict[str, str]:
    """Trainer components with a dead rank whose state nothing holds any more: each committed
    optimizer steps (so its initial state is not its state) and no staged reboot parked it in a
    checkpoint. (The executor checkpoints a trainer only during a reboot, until its switch.)"""
    out = {}
    for c in observed.components.values():
        steps = observed.trained.get(c.name, 0)
        dead = dead_workers(c, observed.nodes) if c.role == "trainer" else []
        if dead and steps and c.name not in observed.parked:
            every = len(dead) == len(c.live_workers())
            out[c.name] = (f"{'every rank' if every else 'rank(s) ' + ', '.join(w.id for w in dead)} of {c.name} "
                           f"{'is' if every else 'are'} dead ({', '.join(w.id for w in dead) + ': ' if every else ''}their processes "
                           f"are gone) and {'its state' if every else 'their shards'} with them (a P2P copy and a reboot read every "
                           f"rank's shards): it committed {steps} optimizer step(s), and the executor keeps no checkpoint of a running trainer")
    return out


# ----------------------------------------------------------------------------- units
def _needs_change(o: Component, t: Component, reserved: Reserved) -> bool:
    return (o.placement_counts() != t.placement_counts() or o.layout != t.layout
            or o.gpus_per_worker != t.gpus_per_worker or abs(o.dram_gb_per_worker - t.dram_gb_per_worker) > EPS
            or o.group != t.group or o.reserves != t.reserves
            or any(w.status != "running" or w.share != share_at(t, w.node, reserved) for w in o.live_workers())
            or bool(t.keep and set(t.keep) != {w.id for w in o.live_workers()}))


def _new_workers(t: Component, generation: int, start_index: int = 0, reserved: Reserved = frozenset()) -> list[Worker]:
    out, idx = [], start_index
    for node, k in t.placement_counts().items():
        for _ in range(k):
            out.append(Worker(id=worker_id(t.name, generation, idx, t.role), component=t.name, node=node,
                              gpus=t.gpus_per_worker, dram_gb=t.dram_gb_per_worker, index=idx, generation=generation,
                              status="requested", share=share_at(t, node, reserved)))
            idx += 1
    return out


def _wargs(w: Worker, comp: Component, **extra) -> dict:
    return {"worker": {"id": w.id, "component": w.component, "node": w.node, "gpus": w.gpus, "dram_gb": w.dram_gb,
                       "index": w.index, "generation": w.generation, "share": w.share},
            "role": comp.role, "job": comp.job, "gpu_type": comp.gpu_type,
            "layout": {"tp": comp.layout.tp, "pp": comp.layout.pp, "dp": comp.layout.dp}, "migration": comp.migration,
            "model": dict(comp.model), "engine": dict(comp.engine), "group": comp.group, "reserves": comp.reserves,
            **({"impl": comp.impl} if comp.impl else {}), **extra}


def _unit_workload(o: Component, t: Component, reserved: Reserved) -> Unit:
    uid = f"{t.name}/workload"
    same_shape = o.gpus_per_worker == t.gpus_per_worker and abs(o.dram_gb_per_worker - t.dram_gb_per_worker) <= EPS
    want = t.placement_counts()
    kept, released = [], []
    by_node: dict[str, list[Worker]] = {}
    for w in sorted(o.live_workers(), key=lambda w: w.index):
        by_node.setdefault(w.node, []).append(w)
    prefer = set(t.keep)
    for node, ws in by_node.items():
        k = min(len(ws), want.get(node, 0)) if same_shape else 0
        ok = [w for w in ws if w.status == "running" and w.share == share_at(t, node, reserved)]
        if prefer:  # the plan chose which engines stay (e.g. the reallocation planner's drain order)
            ok = [w for w in ok if w.id in prefer]
        ok = ok[:k]
        kept += ok
        released += [w for w in ws if w not in ok]
    gen = o.generation + 1
    need = dict(want)
    for w in kept:
        need[w.node] -= 1
    start = max([w.index for w in o.workers] + [-1]) + 1
    new = _new_workers(replace(t, placement={n: k for n, k in need.items() if k > 0}), gen, start, reserved)
    cause_shape = "" if same_shape else f" (engine size changes: {o.gpus_per_worker}->{t.gpus_per_worker} GPUs, none can be kept)"
    u = Unit(uid, t.name, "workload",
             f"engine placement {o.placement_counts()} -> {want}{cause_shape}: workload migration keeps {len(kept)} engine(s), "
             f"adds {len(new)}, releases {len(released)}")
    kept_ids = [w.id for w in kept] + [w.id for w in new]
    dead = [w for w in released if w.status == "dead"]  # nothing to drain or hand off: reaped first, their room freed
    released = [w for w in released if w.status != "dead"]
    for w in dead:
        u.steps.append(_step(u, "stop", w.id, f"engine {w.id} on {w.node} is dead (its process is gone): reaped before any "
                                              f"engine is started; its requests go to the engines that stay", _wargs(w, o)))
    for w in new:
        u.steps.append(_step(u, "create", w.id, f"target has {want.get(w.node, 0)} engine(s) of {t.name} on {w.node}; "
                                               f"started before any engine is released (create-before-destroy)",
                             _wargs(w, t)))
    if released:
        rel = [w.id for w in released]
        u.steps.append(_step(u, "drain", "", f"{len(rel)} engine(s) of {t.name} are released by the plan; stop routing "
                                             f"new requests to them", {"workers": rel, "generation": gen}))
        u.steps.append(_step(u, "handoff", "", f"requests on the released engines must finish exactly once on the "
                                               f"{len(kept_ids)} engine(s) that stay", {"from": rel, "to": kept_ids}))
        for w in released:
            u.steps.append(_step(u, "stop", w.id, f"engine {w.id} on {w.node} released after its requests were handed off",
                                 _wargs(w, o)))
    if not released and (new or dead):
        u.steps.append(_step(u, "switch", "", f"the new engines of {t.name} join the serving set",
                             {"active": kept_ids, "retired": [w.id for w in dead], "generation": gen}))
    return u


def _in_place(o: Component, t: Component, reserved: Reserved) -> Optional[tuple[dict[str, int], list[Worker]]]:
    """A DP resize with TP and PP kept: the old replicas that stay where they are (old rank id ->
    its rank in the new layout) and the new ranks to create; None when it does not apply."""
    old = sorted(o.live_workers(), key=lambda w: w.index)
    # kept ranks keep their GPUs and their host DRAM: a change of either needs new ranks
    if (o.layout.tp, o.layout.pp) != (t.layout.tp, t.layout.pp) or o.gpus_per_worker != t.gpus_per_worker or o.group != t.group \
            or len(old) != o.layout.world or any(w.status != "running" or w.share != share_at(t, w.node, reserved)
                                                 or w.dram_gb != t.dram_gb_per_worker for w in old):
        return None
    room = dict(t.placement_counts())
    by_replica: dict[int, list[Worker]] = {}
    for w in old:
        by_replica.setdefault(o.layout.coords(w.index)[1], []).append(w)
    kept: dict[str, int] = {}
    for r in sorted(by_replica):
        d = len({o.layout.coords(x.index)[1] for x in old if x.id in kept})
        if d >= t.layout.dp:
            break
        need: dict[str, int] = {}
        for w in by_replica[r]:
            need[w.node] = need.get(w.node, 0) + 1
        if all(room.get(n, 0) >= k for n, k in need.items()):
            for n, k in need.items():
                room[n] -= k
            for w in by_replica[r]:
                pp_i, _, tp_i = o.layout.coords(w.index)
                kept[w.id] = t.layout.rank_of(pp_i, d, tp_i)
    if not kept:
        return None
    gen = o.generation + 1
    taken = set(kept.values())
    slots = [n for n, k in sorted(room.items()) for _ in range(k)]
    new = []
    for idx in range(t.layout.world):
        if idx in taken:
            continue
        node = slots.pop(0)
        new.append(Worker(id=worker_id(t.name, gen, idx, t.role), component=t.name, node=node, gpus=t.gpus_per_worker,
                          dram_gb=t.dram_gb_per_worker, index=idx, generation=gen, status="requested",
                          share=share_at(t, node, reserved)))
    return kept, new


def _unit_p2p(o: Component, t: Component, reserved: Reserved) -> Unit:
    gen = o.generation + 1
    old = sorted(o.live_workers(), key=lambda w: w.index)
    inplace = _in_place(o, t, reserved)
    kept, new = inplace if inplace else ({}, _new_workers(t, gen, 0, reserved))
    retired = [w for w in old if w.id not in kept]
    how = (f"P2P migration in place: {len(kept)} rank(s) keep their replicas, {len(new)} new rank(s) get a copy"
           if kept else "P2P migration")
    u = Unit(f"{t.name}/p2p", t.name, "p2p",
             f"trainer {o.layout} on {o.placement_counts()} -> {t.layout} on {t.placement_counts()}: {how}")
    for w in new:
        u.steps.append(_step(u, "create", w.id, f"rank {w.index} of the new layout {t.layout} on {w.node}, created while the "
                                               f"old ranks keep training", _wargs(w, t, init="empty")))
    u.steps.append(_step(u, "reshard", "", f"parameters, Adam moments and gradient buffers must move from {o.layout} to "
                                           f"{t.layout} before the switch",
                         {"old": [w.id for w in old], "new": [w.id for w in new], "kept": dict(kept),
                          "old_layout": vars(o.layout) | {}, "new_layout": vars(t.layout) | {}, "generation": gen}))
    active = sorted([(i, wid) for wid, i in kept.items()] + [(w.index, w.id) for w in new])
    switch = {"active": [wid for _, wid in active], "retired": [w.id for w in retired], "generation": gen}
    if kept:  # the kept ranks take their place in the new layout (and back, if the switch is undone)
        index = {w.id: w.index for w in old}
        switch["relayout"] = {wid: {"index": i, "layout": vars(t.layout) | {}, "generation": gen} for wid, i in kept.items()}
        switch["relayout_back"] = {wid: {"index": index[wid], "layout": vars(o.layout) | {}, "generation": o.generation}
                                   for wid in kept}
    u.steps.append(_step(u, "switch", "", f"checksums verified: the new ranks take over training of {t.name}", switch))
    for w in retired:
        u.steps.append(_step(u, "stop", w.id, f"old rank {w.index} on {w.node} retired by the switch", _wargs(w, o)))
    return u


def _save_step(u: Unit, o: Component, ckpt: str, gen: int, park: bool = False) -> Step:
    # (a dead engine has nothing to save: its requests wait in the ledger, with the output it last reported)
    workers = [w.id for w in sorted(o.live_workers(), key=lambda w: w.index) if not (o.role == "rollout" and w.status == "dead")]
    args: dict[str, object] = {"workers": workers, "checkpoint": ckpt, "generation": gen}
    if park:  # where the state waits while the component is stopped (the next diff restores from it)
        args["park"] = {"checkpoint": ckpt, "layout": vars(o.layout) | {}, "count": len(workers), "generation": gen,
                        "role": o.role}
    return _step(u, "save", "", f"the state of {o.name} must survive the restart", args)


def _restore_steps(u: Unit, t: Component, new: list[Worker], ckpt: str, old_layout: dict, old_count: int, gen: int,
                   retired: list[str], park: Optional[dict] = None) -> None:
    for w in new:
        u.steps.append(_step(u, "create", w.id, f"{t.name} restarts on {w.node} from checkpoint {ckpt}",
                             _wargs(w, t, restore=ckpt, init="empty", restore_layout=old_layout, restore_count=old_count)))
    args = {"active": [w.id for w in new], "retired": retired, "generation": gen, "checkpoint": ckpt}
    if park:  # undoing the switch parks the component again
        args["park"] = park
    u.steps.append(_step(u, "switch", "", f"restarted workers of {t.name} take over", args))


def _unit_reboot(o: Component, t: Component, reserved: Reserved) -> Unit:
    gen = o.generation + 1
    old = sorted(o.live_workers(), key=lambda w: w.index)
    new = _new_workers(t, gen, 0, reserved)
    ckpt = f"{t.name}@g{gen}"
    u = Unit(f"{t.name}/reboot", t.name, "reboot",
             f"{t.name} {o.placement_counts()} -> {t.placement_counts()}: reboot (save, stop, restart from the saved state)")
    u.steps.append(_save_step(u, o, ckpt, gen))
    for w in old:
        u.steps.append(_step(u, "stop", w.id, f"reboot stops {w.id} on {w.node} after its state was saved", _wargs(w, o)))
    _restore_steps(u, t, new, ckpt, vars(o.layout) | {}, len(old), gen, [w.id for w in old])
    return u


def staged(o: Component, t: Component, reserved: Reserved, why: str) -> list[Unit]:
    """A reboot in two units that other units may run between: **park** (save, stop: gives the
    component's GPUs and DRAM back) and **restore** (restart on the target from the checkpoint).
    The journal holds both; while the component is parked the coordinator records its checkpoint,
    so a later diff restores it from there."""
    gen = o.generation + 1
    old = sorted(o.live_workers(), key=lambda w: w.index)
    new = _new_workers(t, gen, 0, reserved)
    ckpt = f"{t.name}@g{gen}"
    park = Unit(f"{t.name}/park", t.name, "park", f"{t.name} is stopped from its saved state while other components move: {why}")
    save = _save_step(park, o, ckpt, gen, park=True)
    park.steps.append(save)
    for w in old:
        park.steps.append(_step(park, "stop", w.id, f"parked: {w.id} on {w.node} stops after its state was saved", _wargs(w, o)))
    restore = Unit(f"{t.name}/restore", t.name, "restore", f"{t.name} restarts on {t.placement_counts()} from checkpoint {ckpt}",
                   after=[park.id])
    _restore_steps(restore, t, new, ckpt, vars(o.layout) | {}, len(old), gen, [], save.args["park"])
    return [park, restore]


def _unit_unpark(info: dict, t: Component, reserved: Reserved) -> Unit:
    """A component a staged reboot parked (an earlier apply stopped before restoring it): restore it."""
    gen = int(info["generation"])
    new = _new_workers(t, gen, 0, reserved)
    u = Unit(f"{t.name}/restore", t.name, "restore", f"{t.name} was parked in checkpoint {info['checkpoint']}: restart it on "
                                                      f"{t.placement_counts()}")
    _restore_steps(u, t, new, info["checkpoint"], info["layout"], int(info["count"]), gen, [], dict(info))
    return u


def _unit_add(t: Component, generation: int = 1, reserved: Reserved = frozenset()) -> Unit:
    new = _new_workers(t, generation, 0, reserved)
    u = Unit(f"{t.name}/add", t.name, "add", f"{t.name} is new in the plan")
    for w in new:
        u.steps.append(_step(u, "create", w.id, f"the plan adds {t.name}: worker {w.index} on {w.node}", _wargs(w, t)))
    u.steps.append(_step(u, "switch", "", f"{t.name} starts serving", {"active": [w.id for w in new], "retired": [],
                                                                      "generation": generation}))
    return u


def _unit_replace(o: Component, t: Component, reserved: Reserved, parked: Optional[dict], dead: list[Worker]) -> Unit:
    """``o`` has nothing to migrate from (:func:`dead_workers`): stop its workers, the dead ones
    reaped (their resources come back), then create ``t``'s workers anew, restored from the
    component's parked checkpoint when it has one."""
    old = sorted(o.live_workers(), key=lambda w: w.index)
    if parked is not None:
        u = _unit_unpark(parked, t, reserved)
    else:
        u = _unit_add(t, o.generation + 1, reserved)
        u.id, u.kind = f"{t.name}/replace", "replace"
        for s in u.steps:
            s.unit = u.id
            s.id = s.id.replace(f"{t.name}/add/", f"{t.name}/replace/", 1)
        u.steps[-1].args["retired"] = [w.id for w in old]
    some = "" if len(dead) == len(old) else f" (the other {len(old) - len(dead)} rank(s) hold their initial state only: stopped too)"
    u.cause = (f"{'every worker' if not some else 'rank(s)'} of {t.name} {'is' if not some else 'are'} dead "
               f"({', '.join(w.id for w in dead)}){some}: they are reaped and {t.worker_count} new one(s) take their place"
               + (f" from checkpoint {parked['checkpoint']}" if parked else ""))
    stops = [_step(u, "stop", w.id, f"{w.id} on {w.node} is dead (its process is gone): reaped, its resources given back"
                   if w in dead else f"{w.id} on {w.node} is stopped: its component restarts (its other ranks are dead)",
                   _wargs(w, o)) for w in old]
    u.steps[:0] = stops
    return u


def _unit_remove(o: Component) -> Unit:
    u = Unit(f"{o.name}/remove", o.name, "remove", f"{o.name} is not in the plan")
    ws = sorted(o.live_workers(), key=lambda w: w.index)
    u.steps.append(_step(u, "switch", "", f"{o.name} leaves the plan: its leases are revoked before its workers stop",
                         {"active": [], "retired": [w.id for w in ws], "generation": o.generation + 1}))
    for w in ws:
        u.steps.append(_step(u, "stop", w.id, f"{o.name} is not in the plan", _wargs(w, o)))
    return u


def _step(u: Unit, kind: str, worker: str, cause: str, args: dict) -> Step:
    assert kind in STEP_KINDS, kind
    sid = f"{u.id}/{kind}" + (f":{worker}" if worker else "")
    return Step(seq=0, id=sid, kind=kind, component=u.component, unit=u.id, cause=cause, args=args)


def build_units(observed: ClusterState, target: ClusterState) -> list[Unit]:
    units: list[Unit] = []
    reserved = reservations(target)
    for name in sorted(set(observed.components) | set(target.components)):
        o, t = observed.components.get(name), target.components.get(name)
        if o is None or not o.live_workers():
            if t is not None and name in observed.parked:
                units.append(_unit_unpark(observed.parked[name], t, reserved))
            elif t is not None:
                units.append(_unit_add(t, (o.generation + 1) if o else 1, reserved))
        elif t is None:
            units.append(_unit_remove(o))
        elif dead_workers(o, observed.nodes):  # nothing to migrate from (a trainer whose state is lost was refused)
            units.append(_unit_replace(o, t, reserved, observed.parked.get(name), dead_workers(o, observed.nodes)))
        elif _needs_change(o, t, reserved):
            units.append({"workload": _unit_workload, "p2p": _unit_p2p, "reboot": _unit_reboot}[t.migration](o, t, reserved))
    return units


def _free_capacity(observed: ClusterState) -> Free:
    return observed.slots(dead_free_zero=True)


def _replace_note(u: Unit, observed: ClusterState) -> str:
    """What a replace unit's new workers start from (the plan's notes say it: the dead ones' state is gone)."""
    o = observed.components[u.component]
    start = {"trainer": "their initial state (it never committed an optimizer step)",
             "rollout": "nothing: the dead engines' unfinished requests wait in the ledger and go to them"}.get(o.role, "an empty state")
    if u.kind == "restore":
        start = f"checkpoint {observed.parked[u.component]['checkpoint']} (a staged reboot parked it)"
    every = "every worker was dead" if all(w.status == "dead" for w in o.live_workers()) else "some ranks were dead"
    return f"{u.component}: {every}; new ones replace them, from {start}"


def diff(observed: ClusterState, target: ClusterState, *, stage: bool = False, budget: int = 50_000) -> StepPlan:
    """Ordered steps from ``observed`` to ``target``; raises :class:`Unreachable` with the reasons.

    When no capacity-safe order of the planned migrations exists (e.g. groups that swap nodes),
    ``stage`` turns as few of them as it needs into staged reboots (:func:`staged`: park, and
    restore once the others have made room) and says so in the plan's notes."""
    if not target.nodes:
        target.nodes = dict(observed.nodes)
    problems = validate_target(observed, target)
    if problems:
        raise Unreachable(problems, title="the plan cannot be applied to this cluster:")
    units = build_units(observed, target)
    reserved = reservations(target)

    def split(u: Unit, why: str) -> Optional[list[Unit]]:
        if u.kind not in ("workload", "p2p", "reboot"):
            return None
        return staged(observed.components[u.component], target.components[u.component], reserved, why)

    ordered, reasons, notes = order_units(units, _free_capacity(observed), budget=budget, split=split if stage else None)
    notes = [_replace_note(u, observed) for u in units if u.steps and u.steps[0].kind == "stop" and u.kind in ("replace", "restore")] + notes
    if ordered is None:
        fixes = ("give the components that grow room on other nodes, or choose migration 'reboot' for a component "
                 "whose old and new copies cannot both fit (it stops before it restarts)"
                 + ("" if stage else ", or let the executor stage such migrations as park-then-restore (planner apply --stage)"))
        raise Unreachable([Problem(r.split(" (")[0], r, "") for r in reasons] + [Problem("", "no capacity-safe order of the steps exists", fixes)],
                          title="the plan cannot be reached without overfilling a node:")
    steps: list[Step] = []
    for u in ordered:
        for s in u.steps:
            s.seq = len(steps) + 1
            steps.append(s)
    return StepPlan(ordered, steps, observed, target, notes)
