"""Build the worker object a create step asks for (shared by the sim and Ray backends)."""

from __future__ import annotations

from typing import Any, Callable


def make_worker(args: dict, epoch: int, coord: Callable[..., Any], fail_start: bool = False):
    w = args["worker"]
    role = args["role"]
    if role == "rollout":
        from executor.workers.engine import RolloutEngine

        return RolloutEngine(w["id"], epoch, coord, args.get("engine"), fail_start=fail_start)
    if role == "trainer":
        from executor.workers.trainer import TrainerRank

        return TrainerRank(w["id"], epoch, w["component"], args["layout"], w["index"], args.get("model") or {}, coord,
                           init=args.get("init", "fresh"), fail_start=fail_start)
    from executor.workers.service import ServiceWorker

    return ServiceWorker(w["id"], epoch, coord, fail_start=fail_start)


def record_of(args: dict, status: str) -> dict:
    """The coordinator's registry record for a worker a create step starts."""
    w = args["worker"]
    return {**w, "role": args["role"], "job": args.get("job", ""), "gpu_type": args.get("gpu_type", ""),
            "layout": args.get("layout", {}), "migration": args.get("migration", ""), "status": status,
            "model": args.get("model") or {}, "engine": args.get("engine") or {}}
