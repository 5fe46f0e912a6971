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

Workers whose implementation declares ``p2p="dcp"`` (:mod:`executor.workers.registry`, e.g.
``tinylm``) copy through torch.distributed.checkpoint instead (:func:`reshard_by_checkpoint`):
the old layout's DP replica 0 writes its shards, each new rank loads the chunks it owns (DCP's
load planner intersects them), and every element must be covered (the new rank refuses holes).

In place (DP resize, TP and PP kept): the kept replicas are not copied to — their shards are
already what their new rank holds (data-parallel replicas are identical) — only the added ranks
are filled; at the switch the kept ranks take their new rank number and layout
(``relayout``), undone if the switch is.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

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
    if not new:  # an in-place shrink: the kept replicas hold their state already
        return {"pieces": 0, "pairs": 0, "bytes": 0, "checksum_mismatches": [], "old_step": old_step, "pairs_verified": 0}
    from executor.workers import registry

    if registry.get(new[0].get("impl", "")).p2p == "dcp":
        out = reshard_by_checkpoint(ctx, step, old, new)
    else:
        out = ctx.backend.reshard(step.component, old, new, Layout(**a["old_layout"]), Layout(**a["new_layout"]), a["generation"])
    if out.get("checksum_mismatches"):
        raise ChecksumMismatch(f"{step.component}: checksums differ on {out['checksum_mismatches']}")
    for r in new:
        ctx.call(r["id"], "finish_migration", old_step)
    out["old_step"] = old_step
    ctx.event("resharded", step.cause, bytes=out.get("bytes"), seconds=out.get("seconds"))
    return {k: v for k, v in out.items() if k != "checksums"} | {"pairs_verified": len(out.get("checksums", {}))}


def shard_dir(component: str, generation: int) -> Path:
    """Where a P2P copy's checkpoint files go: ``$RL_PLANNER_SHARD_DIR`` (a directory every
    node can read, on a multi-node cluster) or the system temp directory."""
    root = Path(os.environ.get("RL_PLANNER_SHARD_DIR") or tempfile.gettempdir())
    return root / f"rlp-p2p-{component.replace('/', '--')}-g{generation}-{os.getpid()}"


def reshard_by_checkpoint(ctx: Ctx, step: Step, old: list[dict], new: list[dict]) -> dict:
    """P2P copy through torch.distributed.checkpoint (implementations with ``p2p="dcp"``): the
    old layout's DP replica 0 writes its shards (one DCP checkpoint per rank, under its lease),
    every new rank loads the parts it owns (DCP's load planner intersects the saved chunks with
    the new rank's), then the files are removed. A re-run after a crash rewrites them."""
    t0 = time.time()
    a = step.args
    old_layout = Layout(**a["old_layout"])
    root = shard_dir(step.component, a["generation"])
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        writers = [r for r in old if old_layout.coords(r["index"])[1] == 0]
        dirs = [str(root / f"rank{r['index']}") for r in writers]
        written = sum(ctx.backend.call_many([(r["id"], "save_shards", (d,)) for r, d in zip(writers, dirs)],
                                            deadline_s=ctx.backend.deadlines.reshard_s))
        loaded = ctx.backend.call_many([(r["id"], "load_shards", (dirs,)) for r in new], deadline_s=ctx.backend.deadlines.reshard_s)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"pieces": len(new), "pairs": len(writers) * len(new), "bytes": written + sum(x["bytes"] for x in loaded),
            "seconds": time.time() - t0, "checksum_mismatches": [], "via": "torch.distributed.checkpoint"}


def check_unchanged_since_reshard(ctx: Ctx, step: Step) -> None:
    """Before a trainer switch: the old ranks must not have trained since their state was copied."""
    retired = list(step.args["retired"]) + sorted(step.args.get("relayout", {}))
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
