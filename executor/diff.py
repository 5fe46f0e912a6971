"""``diff(observed, target)``: the ordered, capacity-safe steps that turn one state into the other.

Every component that differs becomes a *unit* of steps, chosen by its migration kind:

* **workload** (rollout engines): create the new engines, drain the engines being released,
  hand their requests to the kept and new engines, stop the released ones;
* **p2p** (trainer): create every rank of the new layout, reshard into them, switch, stop the
  old ranks (create-before-destroy: the old ranks keep training until the switch);
* **reboot**: save, stop, create on the target from the saved state (the one kind that stops
  before it starts; a plan picks it when there is no room for both copies);
* **add** / **remove**: components new to the plan, or gone from it.

Units are then ordered so that at every intermediate state no node holds more GPUs or host
DRAM than it has: a greedy pass (units that give capacity back first), then an exhaustive
search with memoised dead ends when the greedy pass gets stuck. A target that is invalid, or
for which no safe order exists, is refused with :class:`Unreachable`, naming the component,
the node and the shortfall, and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from planner.errors import Problem, UserError, did_you_mean

from executor.state import ALLOWED_MIGRATIONS, ClusterState, Component, Worker
from executor.steps import STEP_KINDS, Step, Unit

EPS = 1e-9


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
def validate_target(observed: ClusterState, target: ClusterState) -> list[Problem]:
    """Problems with the target on its own (before any ordering): each names where and the fix."""
    probs: list[Problem] = []
    nodes = observed.nodes or target.nodes
    per_node: dict[str, list[int | float]] = {n: [0, 0.0] for n in nodes}
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
            if not n.alive:
                probs.append(Problem(f"{where}.placement.{node}", f"node {node} is dead", "re-plan without that node"))
            if c.gpu_type and n.gpu_type != c.gpu_type:
                probs.append(Problem(f"{where}.placement.{node}", f"node {node} has {n.gpu_type} GPUs, the component wants {c.gpu_type}",
                                     f"place it on {c.gpu_type} nodes or change its gpu_type"))
            per_node[node][0] += k * c.gpus_per_worker
            per_node[node][1] += k * c.dram_gb_per_worker
    for node, (g, d) in sorted(per_node.items()):
        n = nodes[node]
        if g > n.gpus:
            probs.append(Problem(f"node {node}", f"the plan itself places {g} GPUs of workers on a node with {n.gpus}",
                                 "move workers to other nodes or shrink them"))
        if d > n.dram_gb + EPS:
            probs.append(Problem(f"node {node}", f"the plan itself needs {d:g} GB host DRAM on a node with {n.dram_gb:g} GB",
                                 "move some jobs' resident state to other nodes"))
    for c in observed.components.values():
        dead = [w for w in c.live_workers() if w.node in nodes and not nodes[w.node].alive]
        t = target.components.get(c.name)
        if dead and t is not None and t.migration == "p2p":
            probs.append(Problem(f"components[{c.name}].migration",
                                 f"rank(s) {', '.join(w.id for w in dead)} sit on dead node(s): their shards are lost, a P2P copy has no source",
                                 "use migration 'reboot' for this component (it restarts from the last saved state)"))
    return probs


# ----------------------------------------------------------------------------- units
def _needs_change(o: Component, t: Component) -> bool:
    return (o.placement_counts() != t.placement_counts() or o.layout != t.layout
            or o.gpus_per_worker != t.gpus_per_worker or abs(o.dram_gb_per_worker - t.dram_gb_per_worker) > EPS
            or any(w.status != "running" for w in o.live_workers()))


def _new_workers(t: Component, generation: int, start_index: int = 0) -> list[Worker]:
    out, idx = [], start_index
    for node, k in t.placement_counts().items():
        for _ in range(k):
            out.append(Worker(id=worker_id(t.name, generation, idx, t.role), component=t.name, node=node,
                              gpus=t.gpus_per_worker, dram_gb=t.dram_gb_per_worker, index=idx, generation=generation,
                              status="requested"))
            idx += 1
    return out


def _wargs(w: Worker, comp: Component, **extra) -> dict:
    return {"worker": {"id": w.id, "component": w.component, "node": w.node, "gpus": w.gpus, "dram_gb": w.dram_gb,
                       "index": w.index, "generation": w.generation},
            "role": comp.role, "job": comp.job, "gpu_type": comp.gpu_type,
            "layout": {"tp": comp.layout.tp, "pp": comp.layout.pp, "dp": comp.layout.dp}, "migration": comp.migration,
            "model": dict(comp.model), "engine": dict(comp.engine), **extra}


def _unit_workload(o: Component, t: Component) -> Unit:
    uid = f"{t.name}/workload"
    same_shape = o.gpus_per_worker == t.gpus_per_worker and abs(o.dram_gb_per_worker - t.dram_gb_per_worker) <= EPS
    want = t.placement_counts()
    kept, released = [], []
    by_node: dict[str, list[Worker]] = {}
    for w in sorted(o.live_workers(), key=lambda w: w.index):
        by_node.setdefault(w.node, []).append(w)
    for node, ws in by_node.items():
        k = min(len(ws), want.get(node, 0)) if same_shape else 0
        ok = [w for w in ws if w.status == "running"][:k]
        kept += ok
        released += [w for w in ws if w not in ok]
    gen = o.generation + 1
    need = dict(want)
    for w in kept:
        need[w.node] -= 1
    start = max([w.index for w in o.workers] + [-1]) + 1
    new = _new_workers(replace(t, placement={n: k for n, k in need.items() if k > 0}), gen, start)
    cause_shape = "" if same_shape else f" (engine size changes: {o.gpus_per_worker}->{t.gpus_per_worker} GPUs, none can be kept)"
    u = Unit(uid, t.name, "workload",
             f"rollout placement {o.placement_counts()} -> {want}{cause_shape}: workload migration keeps {len(kept)} engine(s), "
             f"adds {len(new)}, releases {len(released)}")
    kept_ids = [w.id for w in kept] + [w.id for w in new]
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
    if not released and new:
        u.steps.append(_step(u, "switch", "", f"the new engines of {t.name} join the serving set",
                             {"active": kept_ids, "retired": [], "generation": gen}))
    return u


def _unit_p2p(o: Component, t: Component) -> Unit:
    gen = o.generation + 1
    old = sorted(o.live_workers(), key=lambda w: w.index)
    new = _new_workers(t, gen)
    u = Unit(f"{t.name}/p2p", t.name, "p2p",
             f"trainer {o.layout} on {o.placement_counts()} -> {t.layout} on {t.placement_counts()}: P2P migration")
    for w in new:
        u.steps.append(_step(u, "create", w.id, f"rank {w.index} of the new layout {t.layout} on {w.node}, created while the "
                                               f"old ranks keep training", _wargs(w, t, init="empty")))
    u.steps.append(_step(u, "reshard", "", f"parameters, Adam moments and gradient buffers must move from {o.layout} to "
                                           f"{t.layout} before the switch",
                         {"old": [w.id for w in old], "new": [w.id for w in new],
                          "old_layout": vars(o.layout) | {}, "new_layout": vars(t.layout) | {}, "generation": gen}))
    u.steps.append(_step(u, "switch", "", f"checksums verified: the new ranks take over training of {t.name}",
                         {"active": [w.id for w in new], "retired": [w.id for w in old], "generation": gen}))
    for w in old:
        u.steps.append(_step(u, "stop", w.id, f"old rank {w.index} on {w.node} retired by the switch", _wargs(w, o)))
    return u


def _unit_reboot(o: Component, t: Component) -> Unit:
    gen = o.generation + 1
    old = sorted(o.live_workers(), key=lambda w: w.index)
    new = _new_workers(t, gen)
    ckpt = f"{t.name}@g{gen}"
    u = Unit(f"{t.name}/reboot", t.name, "reboot",
             f"{t.name} {o.placement_counts()} -> {t.placement_counts()}: reboot (save, stop, restart from the saved state)")
    u.steps.append(_step(u, "save", "", f"the state of {t.name} must survive the restart", {"workers": [w.id for w in old],
                                                                                          "checkpoint": ckpt, "generation": gen}))
    for w in old:
        u.steps.append(_step(u, "stop", w.id, f"reboot stops {w.id} on {w.node} after its state was saved", _wargs(w, o)))
    for w in new:
        u.steps.append(_step(u, "create", w.id, f"reboot restarts {t.name} on {w.node} from checkpoint {ckpt}",
                             _wargs(w, t, restore=ckpt, init="empty", restore_layout=vars(o.layout) | {},
                                    restore_count=len(old))))
    u.steps.append(_step(u, "switch", "", f"restarted workers of {t.name} take over", {"active": [w.id for w in new],
                                                                                     "retired": [w.id for w in old],
                                                                                     "generation": gen, "checkpoint": ckpt}))
    return u


def _unit_add(t: Component, generation: int = 1) -> Unit:
    new = _new_workers(t, generation)
    u = Unit(f"{t.name}/add", t.name, "add", f"{t.name} is new in the plan")
    for w in new:
        u.steps.append(_step(u, "create", w.id, f"the plan adds {t.name}: worker {w.index} on {w.node}", _wargs(w, t)))
    u.steps.append(_step(u, "switch", "", f"{t.name} starts serving", {"active": [w.id for w in new], "retired": [],
                                                                      "generation": generation}))
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
    for name in sorted(set(observed.components) | set(target.components)):
        o, t = observed.components.get(name), target.components.get(name)
        if o is None or not o.live_workers():
            if t is not None:
                units.append(_unit_add(t, (o.generation + 1) if o else 1))
        elif t is None:
            units.append(_unit_remove(o))
        elif _needs_change(o, t):
            units.append({"workload": _unit_workload, "p2p": _unit_p2p, "reboot": _unit_reboot}[t.migration](o, t))
    return units


# ----------------------------------------------------------------------------- ordering
Free = dict[str, tuple[int, float]]


def unit_effect(u: Unit, free: Free) -> tuple[Optional[Free], Optional[str]]:
    """Free capacity after ``u``, or (None, why) if some step of ``u`` overfills a node."""
    cur = dict(free)
    for s in u.steps:
        info = STEP_KINDS[s.kind]
        if not (info.takes_resources or info.releases_resources):
            continue
        w = s.args["worker"]
        g, d = cur.get(w["node"], (0, 0.0))
        sign = -1 if info.takes_resources else 1
        g, d = g + sign * w["gpus"], d + sign * w["dram_gb"]
        if g < 0 or d < -EPS:
            short = f"{-g} GPU(s)" if g < 0 else f"{-d:g} GB host DRAM"
            return None, (f"step '{s.id}' needs {w['gpus']} GPU(s) and {w['dram_gb']:g} GB DRAM on node {w['node']}, "
                          f"{short} short")
        cur[w["node"]] = (g, d)
    return cur, None


def _release_score(u: Unit, free: Free) -> tuple[int, float]:
    after, _ = unit_effect(u, free)
    assert after is not None
    return (sum(after[n][0] - free[n][0] for n in free), sum(after[n][1] - free[n][1] for n in free))


def order_units(units: list[Unit], free0: Free, budget: int = 50_000) -> tuple[Optional[list[Unit]], list[str]]:
    """A capacity-safe order of ``units`` (or None and the reasons no order was found)."""
    # Greedy: among the units that fit now, the one that gives most capacity back goes first.
    free, done, remaining = dict(free0), [], list(units)
    while remaining:
        fits = [u for u in remaining if unit_effect(u, free)[0] is not None]
        if not fits:
            break
        u = max(fits, key=lambda u: (_release_score(u, free), -units.index(u)))
        free = unit_effect(u, free)[0]
        done.append(u)
        remaining.remove(u)
    if not remaining:
        return done, []
    # Exhaustive search over done-sets (the free capacity depends only on which units are done).
    dead: set[frozenset[int]] = set()
    expansions = [0]

    def search(done_ix: frozenset[int], free: Free, path: list[int]) -> Optional[list[int]]:
        if len(done_ix) == len(units):
            return path
        if done_ix in dead or expansions[0] > budget:
            return None
        expansions[0] += 1
        for i, u in enumerate(units):
            if i in done_ix:
                continue
            after, _ = unit_effect(u, free)
            if after is not None:
                got = search(done_ix | {i}, after, path + [i])
                if got is not None:
                    return got
        dead.add(done_ix)
        return None

    found = search(frozenset(), dict(free0), [])
    if found is not None:
        return [units[i] for i in found], []
    reasons = []
    for u in remaining:
        _, why = unit_effect(u, free)
        reasons.append(f"{u.id} ({u.kind}): {why}")
    if expansions[0] > budget:
        reasons.append(f"(search stopped after {budget} states; the order may exist but was not found)")
    return None, reasons


def _free_capacity(observed: ClusterState) -> Free:
    out: Free = {}
    for name, n in observed.nodes.items():
        if not n.alive:
            out[name] = (0, 0.0)
            continue
        out[name] = observed.free(name)
    return out


def diff(observed: ClusterState, target: ClusterState) -> StepPlan:
    """Ordered steps from ``observed`` to ``target``; raises :class:`Unreachable` with the reasons."""
    if not target.nodes:
        target.nodes = dict(observed.nodes)
    problems = validate_target(observed, target)
    if problems:
        raise Unreachable(problems, title="the plan cannot be applied to this cluster:")
    units = build_units(observed, target)
    ordered, reasons = order_units(units, _free_capacity(observed))
    if ordered is None:
        fixes = ("give the components that grow room on other nodes, or choose migration 'reboot' for a component "
                 "whose old and new copies cannot both fit (it stops before it restarts)")
        raise Unreachable([Problem(r.split(" (")[0], r, "") for r in reasons] + [Problem("", "no capacity-safe order of the steps exists", fixes)],
                          title="the plan cannot be reached without overfilling a node:")
    steps: list[Step] = []
    for u in ordered:
        for s in u.steps:
            s.seq = len(steps) + 1
            steps.append(s)
    return StepPlan(ordered, steps, observed, target)
