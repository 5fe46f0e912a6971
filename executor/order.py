"""A capacity-safe order of a diff's units, staging some as park-then-restore when none exists.

A unit's steps take and give capacity one worker at a time (:mod:`executor.capacity`); an order
is *safe* when no node or reservation is over-full after any step. The search:

1. **Give-backs first.** A unit that fits now and leaves every slot at least as free as before
   (it only gives back, or its net effect does) is done at once. This never loses a safe order:
   every later state only has more room, and the capacity checks are thresholds.
2. **Independent clusters.** The remaining units are split into clusters that touch disjoint
   nodes; each is ordered on its own (any interleaving of safe cluster orders is safe).
3. **Greedy, then exhaustive.** Inside a cluster, the fitting unit that gives most back goes
   first; when that gets stuck, a depth-first search over done-sets (the free capacity depends
   only on which units are done) with memoised dead ends, bounded by ``budget`` expansions;
   units that bind no one or only take go last, give-backs are taken without branching and
   the units left split by node as they go (:func:`exhaustive`): that keeps a proof that no
   order exists small (groups swapping nodes in a 30-job daemon run: milliseconds, where a
   plain search over done-sets ran out of 50,000 states).
4. **Staging.** When the search proves there is no safe order (or stops at its budget) and the
   caller allows it (``split``), units are turned, one at a time, into a *park* unit (save and
   stop: gives everything back) and a *restore* unit (restart from the checkpoint, after its
   park), choosing each time the unit whose staging lets the greedy pass get furthest (then the
   one with fewest workers), until the greedy pass orders the cluster. Staging every movable unit
   always succeeds for a target that fits: parks and removals only give back, restores and
   additions only take, and every state on the way is below the target. The notes say which
   units were staged and why.
"""

from __future__ import annotations

from typing import Callable, Optional

from executor import capacity
from executor.capacity import Need
from executor.steps import STEP_KINDS, Unit

Free = dict  # capacity slots (executor.capacity)


def _deltas(u: Unit) -> list[tuple[bool, Need, str]]:
    """The unit's capacity changes in step order: (takes, need, step id); computed once per unit
    object (the search evaluates each unit many times, its steps never change while it orders)."""
    d = u.__dict__.get("_capacity_deltas")
    if d is None or d[0] is not u.steps or d[1] != len(u.steps):
        out = []
        for s in u.steps:
            info = STEP_KINDS[s.kind]
            if info.takes_resources or info.releases_resources:
                out.append((bool(info.takes_resources), Need.of_args(s.args), s.id))
        d = (u.steps, len(u.steps), out)
        u.__dict__["_capacity_deltas"] = d
    return d[2]


def unit_effect(u: Unit, free: Free) -> tuple[Optional[Free], Optional[str]]:
    """Free capacity after ``u``, or (None, why) if some step of ``u`` over-fills a node or reservation."""
    cur = dict(free)
    for takes, need, sid in _deltas(u):
        why = capacity.take(cur, need) if takes else capacity.give(cur, need)
        if why:
            return None, (f"step '{sid}' needs {need.gpus} GPU(s) and {need.dram_gb:g} GB DRAM on node {need.node}: {why}"
                          if takes else f"step '{sid}': {why}")
    return cur, None


def _effect_of_fitting(u: Unit, free: Free) -> Free:
    """Free capacity after ``u``, a unit the search found fits in ``free``."""
    after, why = unit_effect(u, free)
    if after is None:
        raise RuntimeError(f"internal error: the order found for {u.id} ({u.kind}) over-fills capacity: {why}")
    return after


def _release_score(u: Unit) -> tuple[float, float]:
    """Node GPUs and host DRAM the unit gives back, net (the same in every state it fits in)."""
    g = d = 0.0
    for takes, need, _ in _deltas(u):
        sign = -1 if takes else 1
        d += sign * need.dram_gb
        if not need.share:
            g += sign * need.gpus
    return g, d


def _nodes_of(u: Unit) -> set[str]:
    return {s.args["worker"]["node"] for s in u.steps if "worker" in s.args}


def _local(free: Free, units: list[Unit]) -> Free:
    """The slots of the nodes ``units`` touch (every slot key ends with its node): a cluster's
    search copies these, not the whole cluster's."""
    nodes = set().union(*(_nodes_of(u) for u in units)) if units else set()
    return {k: v for k, v in free.items() if k[-1] in nodes}


def clusters(units: list[Unit]) -> list[list[Unit]]:
    """Units split into groups that touch disjoint nodes (a restore stays with its park)."""
    parent = list(range(len(units)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    ids = {u.id: i for i, u in enumerate(units)}
    for i, u in enumerate(units):
        for key in [f"node:{n}" for n in _nodes_of(u)] + [f"unit:{a}" for a in u.after if a in ids]:
            j = owner.setdefault(key, i) if not key.startswith("unit:") else ids[key[5:]]
            parent[find(i)] = find(j)
    out: dict[int, list[Unit]] = {}
    for i, u in enumerate(units):
        out.setdefault(find(i), []).append(u)
    return list(out.values())


def _ready(u: Unit, done: set[str]) -> bool:
    return all(a in done for a in u.after)


def greedy(units: list[Unit], free: Free, done_ids: set[str] | None = None) -> tuple[list[Unit], Free]:
    """Among the units that fit now, the one that gives most capacity back goes first; stops when none fits."""
    free, done, remaining = dict(free), [], list(units)
    pos = {id(u): i for i, u in enumerate(units)}
    ids = set(done_ids or ())
    while remaining:
        best = None
        for u in remaining:
            if not _ready(u, ids):
                continue
            after, _ = unit_effect(u, free)
            if after is not None:
                key = (_release_score(u), -pos[id(u)])
                if best is None or key > best[0]:
                    best = (key, u, after)
        if best is None:
            break
        _, u, free = best
        done.append(u)
        ids.add(u.id)
        remaining.remove(u)
    return done, free


def _only_takes(u: Unit) -> bool:
    """Every step of ``u`` takes, and none is a reservation (which would add room for members):
    doing ``u`` never leaves any slot freer."""
    return all(takes and not need.reserves for takes, need, _ in _deltas(u))


def _net_gives(u: Unit) -> bool:
    """The unit's net effect leaves every slot at least as free (whatever the state it runs in)."""
    net: Free = {}
    for takes, need, _ in _deltas(u):
        (capacity.take if takes else capacity.give)(net, need)
    return capacity.no_worse({k: 0 for k in net}, net)


def _tight(units: list[Unit], free: Free) -> set:
    """The slots some step of ``units`` could find over-full, in some order.

    Every worsening change of every step applied and no improving one gives a state that every
    state on the way of any order is at least as free as; a node's GPUs or DRAM, or a job's use
    inside a group's reservation, that is not over-full there can never be (those are *slack*).
    A unit that touches only slack slots can go anywhere: it always fits and changes nothing the
    others are checked against."""
    worst = dict(free)
    for u in units:
        for takes, need, _ in _deltas(u):
            if takes:
                worst[("dram", need.node)] = worst.get(("dram", need.node), 0.0) - need.dram_gb
                key: tuple[str, ...] = ("use", need.share, need.job, need.node) if need.share else ("gpus", need.node)
                worst[key] = worst.get(key, 0) + (need.gpus if need.share else -need.gpus)
            elif need.reserves:
                key = ("res", need.reserves, need.node)
                worst[key] = worst.get(key, 0) - need.gpus
    return _over(worst)


def _over(slots: Free) -> set:
    """The over-full slots (a job's use over its group's reservation: both)."""
    out = set()
    for k, v in slots.items():
        if (k[0] == "dram" and v < -capacity.EPS) or (k[0] == "gpus" and v < 0):
            out.add(k)
        elif k[0] == "use" and v > slots.get(("res", k[1], k[3]), 0):
            out |= {k, ("res", k[1], k[3])}
    return out


def _touches(u: Unit, tight: set) -> bool:
    """Some step of ``u`` changes a tight slot (a step that holds nothing of a slot cannot find it
    over-full when the state it starts from is not: each step checks every slot it worsens)."""
    for _, need, _ in _deltas(u):
        if need.dram_gb and ("dram", need.node) in tight:
            return True
        if need.gpus and (("use", need.share, need.job, need.node) if need.share else ("gpus", need.node)) in tight:
            return True
        if need.reserves and ("res", need.reserves, need.node) in tight:
            return True
    return False


def exhaustive(units: list[Unit], free0: Free, budget: int) -> tuple[Optional[list[Unit]], bool]:
    """A safe order by depth-first search, or None; and whether the budget (``budget`` expanded
    states) ran out.

    Capacity checks are thresholds, so a state with every slot at least as free admits whatever
    the other admits; the search uses that four ways to keep proofs that no order exists small:

    * units that touch only slack slots (:func:`_tight`: say, resident state moving between
      nodes with DRAM to spare) are left out and go last: they fit anywhere and bind no one;
    * units that only take (:func:`_only_takes`, none waiting for them) go last: moving such a
      unit after its successor in a safe order keeps it safe (the successor ran with less room
      before; the unit ends where it ended). The state after all the others is the same whatever
      their order, so the takers are checked there once;
    * at every state, a ready unit that fits and leaves every slot at least as free is done
      without branching (as in the give-backs-first pass);
    * at every state, the units left are split into groups that touch disjoint nodes (units
      done no longer link them), each searched on its own; dead ends are remembered by the units
      left and the tight slots' values, so orders that reach the same state meet.
    """
    ix = {u.id: i for i, u in enumerate(units)}
    deps = [frozenset(ix[a] for a in u.after if a in ix) for u in units]
    waited = set().union(*deps) if deps else set()
    tight = _tight(units, free0)
    loose = [] if _over(free0) else [i for i, u in enumerate(units) if i not in waited and not _touches(u, tight)]
    last = [i for i, u in enumerate(units) if i not in waited and i not in loose and _only_takes(u)]
    rest = frozenset(range(len(units))) - set(last) - set(loose)
    end = dict(free0)
    for i in rest:  # the state after every other unit, whatever their order
        for takes, need, _ in _deltas(units[i]):
            (capacity.take if takes else capacity.give)(end, need)
    tail, end = greedy([units[i] for i in last], end, done_ids={units[i].id for i in rest})
    if len(tail) < len(last):
        return None, False
    tail += [units[i] for i in loose]

    nodes = [frozenset(_nodes_of(u)) for u in units]
    gives = [_net_gives(u) for u in units]
    dead: set = set()
    expansions = [0]

    def split(left: frozenset[int]) -> list[frozenset[int]]:
        parts: list[tuple[set[int], set[str]]] = []
        for i in sorted(left):
            mine, ns = {i}, set(nodes[i])
            for p in [p for p in parts if p[1] & ns or any(j in deps[i] or i in deps[j] for j in p[0])]:
                parts.remove(p)
                mine |= p[0]
                ns |= p[1]
            parts.append((mine, ns))
        return [frozenset(p[0]) for p in parts]

    def search(left: frozenset[int], free: Free) -> Optional[list[int]]:
        path: list[int] = []
        moved = True
        while moved:  # give-backs: no branching
            moved = False
            for i in sorted(left):
                if gives[i] and not (deps[i] & left):
                    after, _ = unit_effect(units[i], free)
                    if after is not None:
                        left, free, moved = left - {i}, after, True
                        path.append(i)
        if not left:
            return path
        parts = split(left)
        if len(parts) > 1:
            for part in parts:  # disjoint nodes: each part's order is safe whatever the others do
                got = search(part, free)
                if got is None:
                    return None
                for i in got:
                    free = _effect_of_fitting(units[i], free)
                path += got
            return path
        key = (left, tuple(sorted((k, v) for k, v in free.items() if k in tight)))
        if key in dead or expansions[0] > budget:
            return None
        expansions[0] += 1
        for i in sorted(left):
            if deps[i] & left:
                continue
            after, _ = unit_effect(units[i], free)
            if after is not None:
                got = search(left - {i}, after)
                if got is not None:
                    return path + [i] + got
        if expansions[0] <= budget:
            dead.add(key)
        return None

    found = search(rest, dict(free0))
    if found is None:
        return None, expansions[0] > budget
    return [units[i] for i in found] + tail, False


def _order_cluster(units: list[Unit], free: Free, budget: int) -> tuple[Optional[list[Unit]], bool, Free]:
    done, after = greedy(units, free)
    if len(done) == len(units):
        return done, False, after
    found, out_of_budget = exhaustive(units, free, budget)
    return found, out_of_budget, after


def _stage(units: list[Unit], free: Free, split: Callable[[Unit, str], Optional[list[Unit]]],
           why: str) -> tuple[Optional[list[Unit]], list[str]]:
    current = list(units)
    notes: list[str] = []
    while True:
        done, _ = greedy(current, free)
        if len(done) == len(current):
            return done, notes
        best = None
        for u in current:
            parts = split(u, why)
            if parts is None:
                continue
            trial = [x for x in current if x is not u] + parts
            got, _ = greedy(trial, free)
            workers = sum(1 for s in u.steps if s.kind in ("create", "stop"))
            key = (len(got) - len(trial), -workers, u.id)
            if best is None or key > best[0]:
                best = (key, u, parts)
        if best is None:
            return None, notes
        _, u, parts = best
        notes.append(f"staged {u.component}: {u.kind} migration turned into park (save, stop) then restore from the "
                     f"checkpoint, because {why}")
        current = [x for x in current if x is not u] + parts


def order_units(units: list[Unit], free0: Free, budget: int = 50_000,
                split: Optional[Callable[[Unit, str], Optional[list[Unit]]]] = None
                ) -> tuple[Optional[list[Unit]], list[str], list[str]]:
    """(a safe order or None, the reasons none was found, notes on what was staged)."""
    free, done, remaining = dict(free0), [], list(units)
    done_ids: set[str] = set()
    moved = True
    while moved:  # 1. give-backs first
        moved = False
        for u in list(remaining):
            if not _ready(u, done_ids):
                continue
            after, _ = unit_effect(u, free)
            if after is not None and capacity.no_worse(free, after):
                free = after
                done.append(u)
                done_ids.add(u.id)
                remaining.remove(u)
                moved = True
    notes: list[str] = []
    for cl in clusters(remaining):  # 2. independent clusters
        local = _local(free, cl)
        got, out_of_budget, stuck = _order_cluster(cl, local, budget)  # 3.
        if got is None:
            why = (f"the search stopped after {budget} states" if out_of_budget else
                   "no capacity-safe order of " + ", ".join(u.id for u in cl) + " exists (they need each other's room first)")
            if split is not None:  # 4.
                got, more = _stage(cl, local, split, why)
                notes += more
            if got is None:
                left = [u for u in cl if u not in greedy(cl, local)[0]]
                reasons = [f"{u.id} ({u.kind}): {unit_effect(u, stuck)[1] or 'waits for a unit that cannot run'}" for u in left]
                if out_of_budget:
                    reasons.append(f"(search stopped after {budget} states; the order may exist but was not found)")
                return None, reasons, notes
        for u in got:
            free = _effect_of_fitting(u, free)
        done += got
    return done, [], notes
