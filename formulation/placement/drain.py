"""Draining a group online: its members move, one at a time, into the other groups, and its nodes go.

Weave's online admission only ever adds: a departure shrinks a group (a pinned member takes its own
rollout nodes with it) but the group keeps its training nodes while one member is left, and the
groups that remain are seldom the ones an offline packing of the jobs present would choose. On the
traces of ``results/reproductions/trace-baselines.md`` that is where the online groups lose against
the offline optimum of the jobs present: mostly training nodes (H800) held by groups that emptied
out. Draining a group is the move that gives them back:

1. **decide** (:func:`drain_gain`, at a departure): group ``g``'s members, largest first, each take
   the cheapest join into another group (fill a bubble or extend its rollout pool; never a new
   group), on the packing as the earlier members left it; the $/h of the packing after all of
   them against before. Nothing is changed: the packing is restored exactly (positions, orders,
   configurations). A group whose every member finds a join and whose drain lowers the $/h is
   worth draining; it is closed to new joins (:meth:`Packer.set_closed`).
2. **move** (:func:`move_member`, at one of the member's iteration boundaries): the member takes the
   cheapest join into another group *then*, under the packer's ``accept`` (the caller's timing of
   the move: e.g. a timed join that starts the member's first rollout there only once its state
   has been copied and every member of the group it joins keeps its SLO). A member no join takes
   stays, and tries again at its next boundary.

Between the two the $/h does not rise much: a pinned member takes its own rollout nodes with it
(the joined group grows by what the drained one gives back); the saving comes when the last member
has left and the group's training nodes are freed. A drain no member of which can move is given up
by the caller.
"""

from __future__ import annotations

from typing import Optional

from formulation.placement.greedy import Admission, Packer


def rate(pk: Packer) -> float:
    """The packing's $/h: every group with members on its configuration."""
    return float(sum(pk.idx.cost[pk.group_config[g]] for g, m in enumerate(pk.groups) if m))


def _join_elsewhere(pk: Packer, j: int, g: int) -> Optional[Admission]:
    """The cheapest join of ``j`` (already out of ``g``) into a group other than ``g``, or None."""
    adm = pk.best_move(j)
    if adm.move is None or adm.move == "new-group" or adm.group == g:  # a join dearer than a new group: not worth it
        return None
    return adm


def drain_gain(pk: Packer, g: int) -> Optional[float]:
    """The $/h draining group ``g`` would save (positive: cheaper), or None where some member finds
    no join. The packing is left exactly as it was."""
    members = list(pk.groups[g])
    if not members:
        return None
    k0, fams = pk.group_config[g], pk.families_of(g)
    before = rate(pk)
    touched: dict[int, tuple[int, list[int], frozenset[int]]] = {}
    moved: list[int] = []
    ok = True
    try:
        for j in members:  # the group is empty now: it admits nothing
            pk.remove_job(j)
        order = sorted(members, key=lambda j: (-float(pk.idx.tot[:, j].min()), j))
        for j in order:
            adm = _join_elsewhere(pk, j, g)
            if adm is None:
                ok = False
                break
            assert adm.group is not None
            h = adm.group
            touched.setdefault(h, (pk.group_config[h], list(pk.groups[h]), pk.families_of(h)))
            pk.apply(adm)
            moved.append(j)
        after = rate(pk)
    finally:
        for j in moved:
            pk.remove_job(j)
        for h, (k, ms, fs) in touched.items():
            pk.restore_group(h, k, ms, fs)
        pk.restore_group(g, k0, members, fams)
    return before - after if ok else None


def move_member(pk: Packer, j: int) -> Optional[Admission]:
    """Move ``j`` out of its group into the cheapest other group that takes it (the packer's
    ``accept`` asked as for any join), or leave everything as it was and return None."""
    g = pk.job_group[j]
    k0, members, fams = pk.group_config[g], list(pk.groups[g]), pk.families_of(g)
    pk.remove_job(j)
    closed = g in pk.closed
    pk.set_closed(g, True)
    adm = _join_elsewhere(pk, j, g)
    pk.set_closed(g, closed)
    if adm is None:
        pk.restore_group(g, k0, members, fams)
        return None
    pk.apply(adm)
    return adm
