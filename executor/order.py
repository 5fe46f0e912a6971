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
   only on which units are done) with memoised dead ends, bounded by ``budget`` expansions.
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


def unit_effect(u: Unit, free: Free) -> tuple[Optional[Free], Optional[str]]:
    """Free capacity after ``u``, or (None, why) if some step of ``u`` over-fills a node or reservation."""
    cur = dict(free)
    for s in u.steps:
        info = STEP_KINDS[s.kind]
        if not (info.takes_resources or info.releases_resources):
            continue
        need = Need.of_args(s.args)
        why = capacity.take(cur, need) if info.takes_resources else capacity.give(cur, need)
        if why:
            return None, (f"step '{s.id}' needs {need.gpus} GPU(s) and {need.dram_gb:g} GB DRAM on node {need.node}: {why}"
                          if info.takes_resources else f"step '{s.id}': {why}")
    return cur, None


def _release_score(before: Free, after: Free) -> tuple[float, float]:
    g = sum(after.get(k, 0) - v for k, v in before.items() if k[0] == "gpus")
    d = sum(after.get(k, 0.0) - v for k, v in before.items() if k[0] == "dram")
    return g, d


def _nodes_of(u: Unit) -> set[str]:
    return {s.args["worker"]["node"] for s in u.steps if "worker" in s.args}


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
    ids = set(done_ids or ())
    while remaining:
        best = None
        for u in remaining:
            if not _ready(u, ids):
                continue
            after, _ = unit_effect(u, free)
            if after is not None:
                key = (_release_score(free, after), -units.index(u))
                if best is None or key > best[0]:
                    best = (key, u, after)
        if best is None:
            break
        _, u, free = best
        done.append(u)
        ids.add(u.id)
        remaining.remove(u)
    return done, free


def exhaustive(units: list[Unit], free0: Free, budget: int) -> tuple[Optional[list[Unit]], bool]:
    """A safe order by depth-first search over done-sets, or None; and whether the budget ran out."""
    dead: set[frozenset[int]] = set()
    expansions = [0]

    def search(done_ix: frozenset[int], free: Free, path: list[int]) -> Optional[list[int]]:
        if len(done_ix) == len(units):
            return path
        if done_ix in dead or expansions[0] > budget:
            return None
        expansions[0] += 1
        done_ids = {units[i].id for i in done_ix}
        for i, u in enumerate(units):
            if i in done_ix or not _ready(u, done_ids):
                continue
            after, _ = unit_effect(u, free)
            if after is not None:
                got = search(done_ix | {i}, after, path + [i])
                if got is not None:
                    return got
        if expansions[0] <= budget:
            dead.add(done_ix)
        return None

    found = search(frozenset(), dict(free0), [])
    return ([units[i] for i in found] if found is not None else None), expansions[0] > budget


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
        got, out_of_budget, stuck = _order_cluster(cl, free, budget)  # 3.
        if got is None:
            why = (f"the search stopped after {budget} states" if out_of_budget else
                   "no capacity-safe order of " + ", ".join(u.id for u in cl) + " exists (they need each other's room first)")
            if split is not None:  # 4.
                got, more = _stage(cl, free, split, why)
                notes += more
            if got is None:
                left = [u for u in cl if u not in greedy(cl, free)[0]]
                reasons = [f"{u.id} ({u.kind}): {unit_effect(u, stuck)[1] or 'waits for a unit that cannot run'}" for u in left]
                if out_of_budget:
                    reasons.append(f"(search stopped after {budget} states; the order may exist but was not found)")
                return None, reasons, notes
        for u in got:
            free, _ = unit_effect(u, free)
        done += got
    return done, [], notes
