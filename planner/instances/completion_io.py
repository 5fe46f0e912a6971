"""The completion decision outside the simulator: one call for ``simulate``, ``planner realloc`` and the daemon.

The completion decision (:class:`planner.instances.completion.CompletionPlannerDecision`) reads two things at
each step: the telemetry snapshot (its trigger reads the engines' load and the fraction of requests done) and
the job's reallocation context (:class:`simulator.policies.ReallocContext`: per component its GPUs, measured
rates, queued work, samples to come, and the rollout's unfinished requests one by one, as a rollout manager
knows them). The simulator hands both over in process; a running system posts them. This module turns a
context into plain JSON data and back (:func:`context_to_data`, :func:`context_from_data`: every field
checked, a bad one named) and runs the decision on a stream of snapshots (:func:`decide_stream`), so what the
simulator measures is what ``planner realloc --decision completion`` and the daemon's completion reallocator
decide on the same input.

A context file is ``{"version": 1, "time_s", "iteration", "total_gpus", "free_gpus", "initial": {component:
GPUs}, "intake", "components": {name: {ComponentInfo's fields; "requests": {array name: list}}}}``, what
:func:`context_to_data` writes for the context the simulator hands its decision function
(``tests/realloc/test_completion_paths.py`` takes one from a simulation and feeds it to ``planner realloc``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Optional

import numpy as np

CONTEXT_VERSION = 1
_REQUEST_ARRAYS = {"engine": int, "group": int, "generated": float, "context": float, "running": bool, "prompt": float,
                   "drain_key": float, "done_group": int, "done_length": float, "pend_length": float}
_TOP = {"time_s": float, "iteration": int, "total_gpus": int, "free_gpus": int}


class ContextError(ValueError):
    """A context that the decision cannot use; ``field`` names the offending field path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def context_to_data(ctx) -> dict:
    """A :class:`~simulator.policies.ReallocContext` as JSON-ready data (numpy arrays as lists)."""
    comps = {}
    for name, ci in ctx.components.items():
        d: dict[str, Any] = {}
        for f in fields(ci):
            v = getattr(ci, f.name)
            if f.name == "requests":
                v = None if v is None else {k: np.asarray(a).tolist() for k, a in v.items()}
            d[f.name] = v
        comps[name] = d
    return {"version": CONTEXT_VERSION, "time_s": float(ctx.time_s), "iteration": int(ctx.iteration),
            "total_gpus": int(ctx.total_gpus), "free_gpus": int(ctx.free_gpus), "initial": dict(ctx.initial),
            "at_boundary": bool(ctx.at_boundary), "intake": ctx.intake, "components": comps,
            **({"last_lengths": np.asarray(ctx.last_lengths, dtype=float).tolist(), "last_groups": int(ctx.last_groups)}
               if ctx.last_lengths is not None else {})}


def _num(v, path: str, kind):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ContextError(path, f"{v!r} is not a number")
    if kind is int and float(v) != int(v):
        raise ContextError(path, f"{v!r} is not a whole number")
    if not np.isfinite(float(v)) or float(v) < 0:
        raise ContextError(path, f"{v!r} is not a finite number >= 0")
    return kind(v)


def context_from_data(d: Any, where: str = "context"):
    """The :class:`~simulator.policies.ReallocContext` of :func:`context_to_data`'s data; :class:`ContextError`
    names the first bad field (``where`` prefixes the path)."""
    from simulator.policies import INTAKES, ComponentInfo, ReallocContext

    if not isinstance(d, dict):
        raise ContextError(where, f"expected a mapping, got {type(d).__name__}")
    if d.get("version", CONTEXT_VERSION) != CONTEXT_VERSION:
        raise ContextError(f"{where}.version", f"{d.get('version')!r} is not a known context version (use {CONTEXT_VERSION})")
    extra = sorted(set(d) - {"version", "initial", "intake", "components", "at_boundary", "last_lengths", "last_groups", *_TOP})
    if extra:
        raise ContextError(f"{where}.{extra[0]}", "unknown field")
    top = {}
    for k, kind in _TOP.items():
        if k not in d:
            raise ContextError(f"{where}.{k}", "missing")
        top[k] = _num(d[k], f"{where}.{k}", kind)
    intake = d.get("intake", "sample")
    if intake not in INTAKES:
        raise ContextError(f"{where}.intake", f"{intake!r} is not one of {', '.join(INTAKES)}")
    comps_in = d.get("components")
    if not isinstance(comps_in, dict):
        raise ContextError(f"{where}.components", "expected a mapping of component name to its fields")
    known = {f.name: f for f in fields(ComponentInfo)}
    comps = {}
    for name in ("rollout", "reference", "trainer"):
        c = comps_in.get(name)
        path = f"{where}.components.{name}"
        if not isinstance(c, dict):
            raise ContextError(path, "missing (the completion decision needs rollout, reference and trainer)")
        extra = sorted(set(c) - set(known))
        if extra:
            raise ContextError(f"{path}.{extra[0]}", f"unknown field (known: {', '.join(known)})")
        kw: dict[str, Any] = {}
        for k, v in c.items():
            p = f"{path}.{k}"
            if k in ("name", "kind"):
                if not isinstance(v, str):
                    raise ContextError(p, f"{v!r} is not a string")
                kw[k] = v
            elif k == "interruptible":
                if not isinstance(v, bool):
                    raise ContextError(p, f"{v!r} is not true or false")
                kw[k] = v
            elif k == "requests":
                kw[k] = None if v is None else _requests(v, p)
            else:
                kw[k] = _num(v, p, int if k in ("gpus", "unit_gpus", "min_gpus", "pending", "groups_left", "queued") else float)
        for k in ("name", "kind", "gpus", "unit_gpus", "min_gpus", "work_rate_per_gpu", "backlog_s", "pending"):
            if k not in kw:
                raise ContextError(f"{path}.{k}", "missing")
        comps[name] = ComponentInfo(**kw)
    initial = d.get("initial", {})
    if not isinstance(initial, dict) or any(isinstance(v, bool) or not isinstance(v, int) for v in initial.values()):
        raise ContextError(f"{where}.initial", "expected a mapping of component name to GPUs")
    if sum(c.gpus for c in comps.values()) > top["total_gpus"]:
        raise ContextError(f"{where}.components", f"the components hold {sum(c.gpus for c in comps.values())} GPUs, "
                                                  f"more than total_gpus ({top['total_gpus']})")
    last, groups = _last_lengths(d, where)
    return ReallocContext(time_s=top["time_s"], iteration=top["iteration"], total_gpus=top["total_gpus"],
                          free_gpus=top["free_gpus"], components=comps, initial=dict(initial),
                          at_boundary=bool(d.get("at_boundary", False)), intake=intake, last_lengths=last, last_groups=groups)


MAX_LAST_LENGTHS = 1_000_000  # responses of one iteration a context may report


def _last_lengths(d: dict, where: str) -> tuple[Optional[np.ndarray], int]:
    """``last_lengths`` (the last iteration's response lengths, tokens) and ``last_groups`` (its GRPO groups): both or
    neither, finite, positive, at most one group per response."""
    if "last_lengths" not in d and "last_groups" not in d:
        return None, 0
    for k in ("last_lengths", "last_groups"):
        if k not in d:
            raise ContextError(f"{where}.{k}", "missing (last_lengths and last_groups come together)")
    v = d["last_lengths"]
    if not isinstance(v, list) or not v or len(v) > MAX_LAST_LENGTHS:
        raise ContextError(f"{where}.last_lengths", f"expected a list of 1 to {MAX_LAST_LENGTHS} response lengths (tokens)")
    arr = np.array([_num(x, f"{where}.last_lengths[{i}]", float) for i, x in enumerate(v)], dtype=float)
    groups = _num(d["last_groups"], f"{where}.last_groups", int)
    if not 1 <= groups <= arr.size:
        raise ContextError(f"{where}.last_groups", f"{groups} groups for {arr.size} responses: expected 1 to {arr.size}")
    return arr, groups


def _requests(v: Any, path: str) -> dict:
    if not isinstance(v, dict):
        raise ContextError(path, "expected a mapping of array name to list")
    out = {}
    for k, a in v.items():
        kind = _REQUEST_ARRAYS.get(k)
        if kind is None:
            raise ContextError(f"{path}.{k}", f"unknown array (known: {', '.join(_REQUEST_ARRAYS)})")
        if not isinstance(a, list):
            raise ContextError(f"{path}.{k}", "expected a list")
        try:
            arr: np.ndarray = np.asarray(a, dtype=kind)
        except (TypeError, ValueError) as exc:
            raise ContextError(f"{path}.{k}", f"not a list of {kind.__name__}: {exc}") from None
        if arr.ndim != 1 or (kind is not bool and arr.size and not np.all(np.isfinite(arr.astype(float)))):
            raise ContextError(f"{path}.{k}", "expected a flat list of finite numbers")
        out[k] = arr
    n = {k: out[k].size for k in ("engine", "group", "generated", "context", "running", "prompt") if k in out}
    if len(set(n.values())) > 1:
        raise ContextError(path, f"the per-request arrays differ in length: {n}")
    missing = [k for k in ("engine", "group", "generated", "context", "running", "prompt", "drain_key") if k not in out]
    if missing:
        raise ContextError(f"{path}.{missing[0]}", "missing")
    if out["engine"].size and (out["engine"].min() < 0 or out["engine"].max() >= out["drain_key"].size):
        raise ContextError(f"{path}.engine", f"engine indices must lie in [0, {out['drain_key'].size}) (one drain_key per engine)")
    return out


def make_decision(setup, sc=None, **knobs):
    """The completion decision of ``simulate --policy dynamic`` for a job's set-up, without its start-split search
    (a running job already has its allocation)."""
    from planner.instances.completion import CompletionPlannerDecision

    return CompletionPlannerDecision(sc, choose_start=False, setup=setup, **knobs)


def decide_stream(decision, snapshots: list, ctx) -> tuple[Optional[Any], Optional[dict]]:
    """Feed the snapshots in order to the decision's trigger and decide at the last one with ``ctx`` (the call the
    simulator makes at that step): (the :class:`~simulator.policies.Reallocation` or ``None``, the decision
    record of this step or ``None`` when the trigger did not fire)."""
    for s in snapshots[:-1]:
        decision.detector.observe(s)
    n = len(decision.records)
    out = decision(snapshots[-1], ctx)
    rec = decision.records[-1] if len(decision.records) > n else None
    return out, rec
