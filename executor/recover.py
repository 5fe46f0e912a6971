"""Recovery from the cluster itself, for when the journal of an interrupted apply is gone.

The journal is the record of an interrupted migration; without it (deleted, moved, or resumed from
another directory) the cluster still says enough to end in a whole state. :func:`settle` looks at
what runs and, per component:

* **trainer with ranks of two generations alive** (a P2P or in-place reshard cut short): the
  coordinator's *active set* is the serving generation (the old ranks until the switch, the new
  ones after it). If every rank of it is alive and it is a whole layout, the other ranks are
  fenced and stopped: rolled back to all-old before the switch, forward to all-new after it.
  If the active set lost a rank, the other generation takes over only if it is a whole layout,
  every rank is alive, loaded (the reshard reached it) and at the same training step; else the
  apply is refused (exit 2) with what is left, never guessed;
* **workers registered but never started** (a create cut short): their records are dropped; a
  worker that did start, killed before it was marked running, is marked running (left *starting*,
  every later diff saw its component as not whole and migrated it);
* **rollout engines left draining** (a workload migration cut short before its handoff): they
  serve again; the next diff drains them again if the plan still moves them.

Every move is fenced the executor's way (revoke the lease, stop, unregister), the simulated
backend is saved after it, and each is reported. A cluster with nothing half done is left alone.
"""

from __future__ import annotations

from typing import Any

from estimators.errors import Problem, UserError


def _stop(backend: Any, wid: str, why: str) -> str:
    from executor.backends.base import WorkerLost

    backend.coord("revoke", wid, why)
    try:
        note = backend.stop_worker(wid)
    except WorkerLost as exc:
        note = f"fenced; reap pending ({exc.why})"
    backend.coord("unregister", wid)
    return note


def _whole(recs: list[dict]) -> bool:
    """The records are one whole trainer layout: one layout, ranks 0..world-1 each once."""
    layouts = {tuple(sorted(r.get("layout", {}).items())) for r in recs}
    if len(layouts) != 1 or not recs:
        return False
    lay = dict(next(iter(layouts)))
    world = lay.get("tp", 1) * lay.get("pp", 1) * lay.get("dp", 1)
    return sorted(r["index"] for r in recs) == list(range(world))


def _trainer(backend: Any, comp: str, recs: list[dict]) -> list[str]:
    from executor.backends.base import WorkerLost

    live = [r for r in recs if r.get("status") != "dead" and backend.worker_alive(r["id"])]
    gens = sorted({r.get("generation", 0) for r in live})
    active = list(backend.coord("active_set", comp))
    act = [r for r in live if r["id"] in active]
    rest = [r for r in live if r["id"] not in active]
    if len(gens) < 2 and not (rest and act):
        return []
    notes = []
    if len(act) == len(active) and active and _whole(act):
        gen = max(r.get("generation", 0) for r in act)
        way = "forward to the new" if gen == gens[-1] and len(gens) > 1 else "back to the old"
        for r in sorted(rest, key=lambda r: r["id"]):
            notes.append(f"{comp}: stopped {r['id']} (generation {r.get('generation', 0)}): {_stop(backend, r['id'], 'settled without a journal')}")
        return [f"{comp}: ranks of generations {gens} were alive; rolled {way} serving set {sorted(active)} "
                f"(generation {gen})"] + notes
    # The serving set is not whole: the other generation takes over only if it holds the whole state.
    other_gen = max((r.get("generation", 0) for r in rest), default=None)
    cand = [r for r in rest if r.get("generation", 0) == other_gen]
    try:
        infos = {r["id"]: backend.call(r["id"], "info") for r in cand}
        serving_steps = {backend.call(r["id"], "info")["step"] for r in act}
    except WorkerLost as exc:
        infos, serving_steps = None, set()
        why = str(exc)
    else:
        why = ""
    ok = (infos is not None and cand and _whole(cand) and all(i["loaded"] for i in infos.values())
          and len({i["step"] for i in infos.values()} | serving_steps) == 1)
    if not ok:
        lost = sorted(set(active) - {r["id"] for r in act})
        raise UserError(Problem(comp, f"the trainer's migration was interrupted and its journal is gone: the serving ranks "
                                      f"{sorted(active)} lost {lost}, and the other ranks {sorted(r['id'] for r in cand)} do not hold "
                                      f"a whole, loaded copy at the same step{f' ({why})' if why else ''}",
                                "restore the component from its last checkpoint (apply a plan that reboots it), or find the journal "
                                "of the interrupted apply and pass it with --journal"))
    ids = [r["id"] for r in sorted(cand, key=lambda r: r["index"])]
    for wid in ids:
        if backend.coord("lease", wid) is None:
            epoch = backend.coord("grant", wid)
            backend.call(wid, "set_epoch", epoch)
    backend.coord("switch", comp, ids, [r["id"] for r in act], other_gen)
    notes.append(f"{comp}: the serving ranks were incomplete; switched to the whole generation {other_gen} {ids}")
    for r in sorted(act + [r for r in rest if r not in cand], key=lambda r: r["id"]):
        notes.append(f"{comp}: stopped {r['id']}: {_stop(backend, r['id'], 'settled without a journal')}")
    return notes


def settle(backend: Any) -> list[str]:
    """Bring every component the cluster shows half-migrated to a whole state; what was done."""
    notes: list[str] = []
    recs = []
    for r in backend.coord("records"):
        if r.get("status") in ("requested", "starting") and not backend.worker_alive(r["id"]):
            backend.coord("revoke", r["id"], "its start was cut short")
            backend.coord("unregister", r["id"])
            notes.append(f"{r['component']}: {r['id']} was registered but never started; dropped")
        elif r.get("status") == "starting":  # it came up, the kill came before it was marked running
            backend.coord("set_status", r["id"], "running")
            notes.append(f"{r['component']}: {r['id']} started but was never marked running; it runs")
            recs.append({**r, "status": "running"})
        else:
            recs.append(r)
    by_comp: dict[str, list[dict]] = {}
    for r in recs:
        by_comp.setdefault(r["component"], []).append(r)
    for comp, rs in sorted(by_comp.items()):
        role = rs[0]["role"]
        if role == "trainer":
            notes += _trainer(backend, comp, rs)
        elif role == "rollout":
            for r in rs:
                if r.get("status") == "draining" and backend.worker_alive(r["id"]):
                    backend.call(r["id"], "undrain")
                    backend.coord("set_status", r["id"], "running")
                    notes.append(f"{comp}: engine {r['id']} was left draining; it serves again")
    if notes and hasattr(backend, "save"):
        backend.save()
    return notes
