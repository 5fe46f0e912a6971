"""P2P migration of a trainer: new ranks first, reshard, verify, switch, stop the old ranks.

The units' steps are ``create`` (every rank of the new layout, empty, on its target node, while
the old ranks keep training), ``reshard`` (this module), ``switch`` and ``stop``. The reshard:

1. computes the plan from the old to the new TP/PP/DP layout (:mod:`executor.migrations.reshard`);
2. moves parameters, Adam moments and gradient buffers old → new over a *migration* process group
   (gloo, built for this copy only; the training group is never used), one packed buffer per
   (source, destination) pair;
3. verifies every pair's checksum at both ends (the receiver recomputes it from its own shards
   after unpacking), and gives the new ranks the old ranks' step count.

Any failure before the switch discards the new ranks (their create steps are compensated) and
the old ranks never noticed: they keep their leases, their training group and their state.
The switch refuses if the old ranks trained after the copy (their state moved on).
"""

from __future__ import annotations

from executor.context import Ctx
from executor.state import Layout
from executor.steps import Step


class ChecksumMismatch(RuntimeError):
    pass


def run_reshard(ctx: Ctx, step: Step) -> dict:
    a = step.args
    recs = {r["id"]: r for r in ctx.coord("records")}
    old = [recs[w] for w in a["old"] if w in recs]
    new = [recs[w] for w in a["new"] if w in recs]
    if len(new) != len(a["new"]):
        from executor.backends.base import WorkerLost

        raise WorkerLost(sorted(set(a["new"]) - {r["id"] for r in new})[0], "new rank missing before the reshard")
    old_step = ctx.call(old[0]["id"], "info")["step"]
    ctx.fault("mid")
    out = ctx.backend.reshard(step.component, old, new, Layout(**a["old_layout"]), Layout(**a["new_layout"]), a["generation"])
    if out.get("checksum_mismatches"):
        raise ChecksumMismatch(f"{step.component}: checksums differ on {out['checksum_mismatches']}")
    for r in new:
        ctx.call(r["id"], "finish_migration", old_step)
    out["old_step"] = old_step
    ctx.event("resharded", step.cause, bytes=out.get("bytes"), seconds=out.get("seconds"))
    return {k: v for k, v in out.items() if k != "checksums"} | {"pairs_verified": len(out.get("checksums", {}))}


def check_unchanged_since_reshard(ctx: Ctx, step: Step) -> None:
    """Before a trainer switch: the old ranks must not have trained since their state was copied."""
    retired = step.args["retired"]
    if not retired:
        return
    j = getattr(ctx, "journal_outcomes", {})
    reshard = j.get(f"{step.unit}/reshard")
    if not reshard:
        return
    live = [w for w in retired if ctx.backend.worker_alive(w)]
    if not live:
        return
    now = ctx.call(live[0], "info")["step"]
    if now != reshard["old_step"]:
        raise RuntimeError(f"{step.component}: the old ranks trained (step {reshard['old_step']} -> {now}) after the "
                           f"reshard; the copy is stale")
