"""Create, stop and switch: the steps every unit uses. Each is idempotent by worker id."""

from __future__ import annotations

from executor.backends.base import StartFailed, WorkerLost
from executor.context import Ctx
from executor.state import Layout
from executor.steps import Step
from executor.workers.factory import record_of


def run_create(ctx: Ctx, step: Step) -> dict:
    args = step.args
    wid = args["worker"]["id"]
    b = ctx.backend
    if b.worker_alive(wid):
        # A crash after the worker started but before the outcome was journaled: adopt it.
        epoch = ctx.coord("lease", wid)
        if epoch is None:
            epoch = ctx.coord("grant", wid)
            ctx.call(wid, "set_epoch", epoch)
        rec = ctx.record(wid)
        if rec is None:
            ctx.coord("register", record_of(args, "running"))
        elif rec.get("status") == "starting":  # killed after the start, before it was marked running
            ctx.coord("set_status", wid, "running")
        ctx.event("adopted", "the worker was already running (resumed apply)", worker=wid)
        out = {"worker": wid, "epoch": epoch, "adopted": True}
    else:
        reserve = getattr(b, "reserve", None)
        if reserve is not None:  # the unit's new workers are reserved at once, before the first is created
            unit_creates = [s.args for s in ctx.unit if s.kind == "create"]
            if wid not in {a["worker"]["id"] for a in unit_creates}:
                unit_creates = [args]  # a restore in place during a rollback
            reserve(unit_creates)
        epoch = ctx.coord("grant", wid)
        ctx.coord("register", record_of(args, "starting"))
        ctx.fault("mid")
        try:
            b.create_worker(args, epoch)
        except StartFailed:
            ctx.coord("set_status", wid, "failed")
            ctx.coord("unregister", wid)
            raise
        ctx.fault("started")  # up, but not yet marked running (a kill here left it 'starting' for good)
        ctx.coord("set_status", wid, "running")
        out = {"worker": wid, "epoch": epoch, "node": args["worker"]["node"]}
    if args.get("restore"):
        from executor.migrations.reboot import restore

        out["restored"] = restore(ctx, step)
    return out


def compensate_create(ctx: Ctx, step: Step, outcome) -> str:
    wid = step.args["worker"]["id"]
    if step.args["role"] == "rollout":
        from executor.migrations.workload import rehome

        ctx.coord("revoke", wid, "rolled back")
        try:
            rehome(ctx, step.component, exclude=[wid])
        except WorkerLost:  # no other engine of the component is up (a restore being undone): the ledger keeps them
            ctx.event("requests waiting", f"no live engine of {step.component} to take them", component=step.component)
    ctx.coord("revoke", wid, "rolled back")
    note = ctx.backend.stop_worker(wid)
    ctx.coord("unregister", wid)
    return f"discarded {wid}: {note}"


def _check_successors(ctx: Ctx, step: Step) -> None:
    """Before the first old trainer rank stops: every rank that took over must still be alive,
    else the switch is undone while the old ranks still hold the whole state."""
    active = ctx.coord("active_set", step.component)
    wid = step.args["worker"]["id"]
    if wid in active or ctx.committed:
        return
    for a in active:
        ctx.call(a, "ready")  # raises WorkerLost for a dead or frozen successor


def run_stop(ctx: Ctx, step: Step) -> dict:
    wid = step.args["worker"]["id"]
    if step.args["role"] == "trainer" and step.unit.endswith("/p2p"):
        _check_successors(ctx, step)
    if step.args["role"] == "rollout" and step.unit.endswith("/remove"):
        n = ctx.coord("cancel", step.component, "the component left the plan")
        if n:
            ctx.event("cancelled", step.cause, requests=n)
    elif step.args["role"] == "rollout" and step.unit.endswith("/workload") and ctx.coord("owned_by", [wid]):
        # (a reboot's requests wait in the ledger, saved, for the restarted engines)
        from executor.migrations.workload import rehome

        ctx.coord("revoke", wid, "stopping")
        rehome(ctx, step.component, exclude=[wid])
    ctx.coord("revoke", wid, "stopped by plan")
    ctx.fault("mid")
    try:
        note = ctx.backend.stop_worker(wid)
    except WorkerLost as exc:  # cannot reach it: it stays fenced, the reaper kills it later
        note = f"fenced; reap pending ({exc.why})"
    ctx.coord("unregister", wid)
    return {"worker": wid, "note": note}


def run_switch(ctx: Ctx, step: Step) -> dict:
    a = step.args
    active, retired, gen = a["active"], a["retired"], a["generation"]
    recs = {r["id"]: r for r in ctx.coord("records")}
    missing = [w for w in active if w not in recs or recs[w].get("status") == "dead"]
    if missing:
        raise WorkerLost(missing[0], "not running at the switch")
    if active and recs[active[0]]["role"] == "trainer":
        from executor.migrations.p2p import check_unchanged_since_reshard

        check_unchanged_since_reshard(ctx, step)
        if a.get("relayout"):
            _relayout(ctx, a["relayout"])
            recs = {r["id"]: r for r in ctx.coord("records")}
        layout = Layout(**recs[active[0]]["layout"])
        ctx.backend.form_training_group(step.component, [recs[w] for w in active], layout)
    ctx.fault("mid")
    ctx.coord("switch", step.component, active, retired, gen)
    if step.unit.endswith("/restore"):
        ctx.coord("unpark", step.component)
    if step.unit.endswith(("/reboot", "/restore")) and a.get("checkpoint") and active and recs[active[0]]["role"] != "rollout":
        # the restarted workers hold the state now (a rollout's saved requests live in the ledger)
        ctx.coord("drop_checkpoints", a["checkpoint"])
    ctx.event("switched", step.cause, active=active, retired=retired)
    return {"active": active, "retired": retired, "generation": gen}


def _relayout(ctx: Ctx, moves: dict) -> None:
    """Kept trainer ranks take their rank and layout in the other layout (worker and registry; idempotent)."""
    for wid, info in sorted(moves.items()):
        ctx.call(wid, "relayout", info["index"], info["layout"])
        ctx.coord("update_record", wid, {"index": info["index"], "layout": info["layout"], "generation": info["generation"]})


def compensate_switch(ctx: Ctx, step: Step, outcome) -> str:
    a = step.args
    if a.get("relayout_back"):
        try:
            _relayout(ctx, {w: i for w, i in a["relayout_back"].items() if ctx.backend.worker_alive(w)})
        except WorkerLost as exc:
            ctx.declare_dead(exc.worker_id, exc.why)
    back = []
    for w in a["retired"]:
        if ctx.backend.worker_alive(w) and ctx.coord("lease", w) is None:
            rec = ctx.record(w)
            if rec is None or rec.get("status") == "dead":
                continue
            epoch = ctx.coord("grant", w)
            try:
                ctx.call(w, "set_epoch", epoch)
            except WorkerLost as exc:
                ctx.declare_dead(w, exc.why)
                continue
            ctx.coord("set_status", w, "running")
            back.append(w)
        elif ctx.coord("lease", w) is not None:
            back.append(w)
    kept = a.get("relayout_back", {})
    back += [w for w in sorted(kept, key=lambda w: kept[w]["index"]) if ctx.coord("lease", w) is not None]
    ctx.coord("switch", step.component, back, [], a["generation"] - 1)
    if a.get("park"):  # an undone restore: the component is parked again, its checkpoint kept
        ctx.coord("park", step.component, a["park"])
    return f"serving set restored to {back}"
