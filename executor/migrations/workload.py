"""Workload migration: drain released rollout engines, hand their requests to kept engines.

1. **drain**: the released engines stop admitting and decoding (their batch is frozen where it
   is); a released engine that is unreachable is declared dead (fenced) and its requests are
   recovered from the ledger's last progress report.
2. **handoff**: every unfinished request the ledger gives to a released engine (pending, or
   in flight with partial output) is assigned to a kept engine by cache affinity
   (:mod:`executor.migrations.affinity`); the ledger moves ownership in one transaction, with the
   partial output as the resume point; the kept engines admit what the ledger says they own.
   Re-running the step after a crash re-admits exactly the requests the ledger assigns (admission
   is idempotent by request id), so a request is never lost and never run twice.

Exactly once: a completion counts only when it comes from the request's current owner with a
valid lease, and only the first time (the coordinator refuses and records every other).
"""

from __future__ import annotations

from executor.backends.base import WorkerLost
from executor.context import Ctx
from executor.migrations import affinity
from executor.steps import Step


def run_drain(ctx: Ctx, step: Step) -> dict:
    out = {}
    for w in step.args["workers"]:
        ok, res = ctx.try_call(w, "drain")
        out[w] = res if ok else f"declared dead: {res}"
        if ok:
            ctx.coord("set_status", w, "draining")
        ctx.fault("mid")  # (fires once: after the first engine stopped admitting)
    return out


def compensate_drain(ctx: Ctx, step: Step, outcome) -> str:
    back = []
    for w in step.args["workers"]:
        rec = ctx.record(w)
        if rec and rec.get("status") != "dead" and ctx.backend.worker_alive(w):
            ok, _ = ctx.try_call(w, "undrain")
            if ok:
                ctx.coord("set_status", w, "running")
                back.append(w)
    return f"engines serving again: {back}"


def _live_engines(ctx: Ctx, component: str, exclude: list[str]) -> list[str]:
    out = []
    for r in ctx.component_records(component):
        if r["id"] in exclude or r.get("status") not in ("running",) or ctx.coord("lease", r["id"]) is None:
            continue
        if ctx.backend.worker_alive(r["id"]):
            out.append(r["id"])
    return out


def _place(ctx: Ctx, reqs: list[dict], targets: list[str], snapshots: dict[str, list[int]]) -> dict:
    """Assign ``reqs`` to ``targets`` by affinity, move ownership in the ledger, admit."""
    if not reqs:
        return {"moved": 0}
    prompts = [r["prompt"] for r in reqs]
    scores, load = {}, {}
    for t in targets:
        scores[t] = ctx.call(t, "score", prompts)
        ld = ctx.call(t, "load")
        load[t] = ld["pending"] + ld["running"]
    moves = affinity.assign(reqs, scores, load)
    ctx.coord("transfer", moves, snapshots)
    ctx.fault("mid")  # ownership moved in the ledger, nothing admitted yet
    for t in targets:
        ctx.call(t, "admit", ctx.coord("owned_by", [t]))
    hits = sum(scores[moves[r["id"]]][i] for i, r in enumerate(reqs))
    return {"moved": len(reqs), "cached_prefix_tokens": hits,
            "per_engine": {t: sum(1 for v in moves.values() if v == t) for t in targets}}


def run_handoff(ctx: Ctx, step: Step) -> dict:
    src, dst = step.args["from"], step.args["to"]
    snapshots: dict[str, list[int]] = {}
    lost = []
    for w in src:
        if not ctx.backend.worker_alive(w) or (ctx.record(w) or {}).get("status") == "dead":
            lost.append(w)
            continue
        ok, res = ctx.try_call(w, "export")
        if ok:
            snapshots.update({r["id"]: r["output"] for r in res})
        else:
            lost.append(w)
    reqs = ctx.coord("owned_by", src)
    targets = [d for d in dst if ctx.backend.worker_alive(d) and ctx.coord("lease", d) is not None]
    if len(targets) < len(dst):
        gone = sorted(set(dst) - set(targets))
        raise WorkerLost(gone[0], "a kept engine is gone; the handoff cannot place its share")
    if not reqs:
        ctx.fault("mid")
    out = _place(ctx, reqs, targets, snapshots)
    if not reqs:
        # Nothing left on the sources: an earlier attempt moved them in the ledger and may have
        # died before every target admitted its share. Admission is idempotent by request id.
        for t in targets:
            ctx.call(t, "admit", ctx.coord("owned_by", [t]))
    for w in src:
        if w not in lost:
            ctx.try_call(w, "release", [r["id"] for r in reqs])
    out["sources_lost"] = lost
    ctx.event("handed off", step.cause, **{k: v for k, v in out.items() if k != "per_engine"})
    return out


def rehome(ctx: Ctx, component: str, exclude: tuple[str, ...] | list[str] = ()) -> dict:
    """Give every unfinished request of ``component`` whose owner cannot run it a live engine."""
    live = _live_engines(ctx, component, list(exclude))
    live_set = set(live)
    orphans = [r for r in ctx.coord("request_records") if r.get("component") == component and not r["done"]
               and r["owner"] not in live_set]
    if not orphans:
        return {"moved": 0}
    if not live:
        raise WorkerLost(orphans[0]["owner"], f"no live engine of {component} to take {len(orphans)} request(s)")
    snaps = {}
    for owner in sorted({r["owner"] for r in orphans} & set(exclude)):
        if ctx.backend.worker_alive(owner):
            try:  # its lease is revoked already: what it holds is read, it can no longer complete
                for x in ctx.call(owner, "export"):
                    snaps[x["id"]] = x["output"]
            except WorkerLost:
                pass
    out = _place(ctx, orphans, live, snaps)
    ctx.event("rehomed", f"{len(orphans)} request(s) of {component} had no live owner", moved=len(orphans))
    return out
