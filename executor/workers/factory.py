"""Build the worker object a create step asks for (shared by the sim and Ray backends).

The implementation is the component's ``impl`` (:mod:`executor.workers.registry`; default
``toy``); the object follows :mod:`executor.workers.protocol`."""

from __future__ import annotations

from typing import Any, Callable

from executor.workers import registry


def make_worker(args: dict, epoch: int, coord: Callable[..., Any], fail_start: bool = False):
    return registry.get(args.get("impl", "")).factory(args["role"])(args, epoch, coord, fail_start)


def record_of(args: dict, status: str) -> dict:
    """The coordinator's registry record for a worker a create step starts."""
    w = args["worker"]
    return {**w, "role": args["role"], "job": args.get("job", ""), "gpu_type": args.get("gpu_type", ""),
            "layout": args.get("layout", {}), "migration": args.get("migration", ""), "status": status,
            "model": args.get("model") or {}, "engine": args.get("engine") or {}, "group": args.get("group", ""),
            "reserves": args.get("reserves", ""), "impl": args.get("impl", "")}
