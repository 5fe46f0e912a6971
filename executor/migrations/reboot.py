"""Reboot migration: save the component's state, stop its workers, restart on the target.

* trainer ranks write their shards (parameters, Adam moments, gradient buffers, step) to the
  checkpoint store under their lease; a restarted rank of the new layout reshards from those
  checkpoint shards locally (the same reshard plan as P2P);
* rollout engines save their unfinished requests; on restart the ledger's requests of the
  component are handed to the new engines by affinity, with the saved partial output;
* other services save and reload their key/value state.

The stop happens before the restart (that is what a reboot is). If the restart fails, the
rollback restarts the old placement from the same checkpoint (:func:`restore_in_place`).

A *staged* reboot (:func:`executor.diff.staged`) runs the two halves as separate units, with
other units between them: the save records the component as parked in the coordinator (with its
checkpoint), the restore's switch clears it; a restore that fails leaves it parked, and the next
diff restores it from the checkpoint.
"""

from __future__ import annotations

from executor.context import Ctx
from executor.steps import Step


def run_save(ctx: Ctx, step: Step) -> dict:
    a = step.args
    recs = {r["id"]: r for r in ctx.coord("records")}
    key = a["checkpoint"]
    saved = []
    snapshots = {}
    ranks: dict[int, str] = {}
    for w in a["workers"]:  # two live trainer ranks of one index would write one checkpoint key: the state saved would be a mix
        r = recs.get(w)
        if r is not None and r["role"] == "trainer":
            if r["index"] in ranks:
                raise RuntimeError(f"{step.component}: ranks {ranks[r['index']]} and {w} both hold rank {r['index']} (generations "
                                   f"of an interrupted migration); nothing was saved. Fix: 'planner apply --rollback' settles it")
            ranks[r["index"]] = w
    for w in a["workers"]:
        r = recs.get(w)
        if r is None:
            continue
        if r["role"] == "trainer":
            ok = ctx.call(w, "save_state", key)
        elif r["role"] == "rollout":
            ctx.call(w, "drain")
            reqs = ctx.call(w, "export")
            snapshots.update({x["id"]: x["output"] for x in reqs})
            ok = True
        else:
            ok = ctx.call(w, "save_state", f"{key}/w{r['index']}")
        if not ok:
            raise RuntimeError(f"{w}: the checkpoint store refused its save (stale lease)")
        saved.append(w)
    if snapshots:  # the ledger keeps the rollout's saved partial outputs (as of the save)
        owners = {rid: o["owner"] for o in ctx.coord("request_records") for rid in [o["id"]] if rid in snapshots}
        ctx.coord("transfer", owners, snapshots)
    if ranks:  # the checkpoint is whole before anything is stopped (the stop is the commit point)
        have = set(ctx.coord("checkpoint_keys", f"{key}/rank"))
        missing = [i for i in range(max(ranks) + 1) if f"{key}/rank{i}" not in have]
        if missing or sorted(ranks) != list(range(len(ranks))):
            raise RuntimeError(f"{step.component}: the checkpoint {key} lacks rank(s) {missing or sorted(set(range(len(ranks))) - set(ranks))}; "
                               "nothing was stopped")
    if a.get("park"):  # a staged reboot: the component will be stopped until its restore unit runs
        ctx.coord("park", step.component, a["park"])
    ctx.fault("mid")
    return {"checkpoint": key, "saved": saved, "requests_saved": len(snapshots)}


def compensate_save(ctx: Ctx, step: Step, outcome) -> str:
    for w in step.args["workers"]:
        rec = ctx.record(w)
        if rec and rec["role"] == "rollout" and ctx.backend.worker_alive(w):
            ctx.try_call(w, "undrain")
    ctx.coord("drop_checkpoints", step.args["checkpoint"])
    if step.args.get("park"):
        ctx.coord("unpark", step.component)
    return f"dropped checkpoint {step.args['checkpoint']}"


def restore(ctx: Ctx, step: Step) -> dict:
    a = step.args
    wid, role, key = a["worker"]["id"], a["role"], a["restore"]
    if role == "trainer":
        return {"digest_params": len(ctx.call(wid, "restore_from", key, a["restore_layout"]))}
    if role == "rollout":
        return {"note": "requests are handed over at the switch"}
    n_old = max(1, a.get("restore_count", 1))
    blob = ctx.coord("get_checkpoint", f"{key}/w{min(a['worker']['index'], n_old - 1)}")
    if blob is None:
        raise RuntimeError(f"{wid}: checkpoint {key} is missing")
    ctx.call(wid, "load_state", blob)
    return {"loaded": True}


def after_switch(ctx: Ctx, step: Step) -> dict:
    """Rollout reboot: hand the saved requests to the restarted engines."""
    from executor.migrations.workload import rehome

    return rehome(ctx, step.component)
