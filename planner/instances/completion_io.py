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

import math
from dataclasses import fields
from typing import Any, Optional

import numpy as np

from planner.schema.scenario import (MAX_CLUSTER_NODES, MAX_GPUS_PER_NODE, MAX_REQUESTS, MAX_SECONDS, MAX_TOKENS,
                                     MAX_TURNS)

CONTEXT_VERSION = 1
_REQUEST_ARRAYS = {"engine": int, "group": int, "generated": float, "context": float, "running": bool, "prompt": float,
                   "drain_key": float, "done_group": int, "done_length": float, "pend_length": float}
_PER_REQUEST = ("engine", "group", "generated", "context", "running", "prompt")
_TOP = {"time_s": float, "iteration": int, "total_gpus": int, "free_gpus": int}
COMPONENTS = ("rollout", "reference", "trainer")
FIX = "write the field as planner.instances.completion_io describes (context_to_data writes it)"

# Bounds of a context's numbers: what one job of a scenario (planner.schema.scenario's limits) can hold. A number
# past its bound is refused with its field named, so the decision never computes on (or prints) NaN or inf.
MAX_GPUS = MAX_CLUSTER_NODES * MAX_GPUS_PER_NODE  # GPUs of one job
MAX_COUNT = 1 << 30  # iterations and GRPO group ids (telemetry's MAX_COUNT)
MAX_REQUEST_TOKENS = float(MAX_TOKENS * MAX_TURNS)  # tokens of one request: prompt, generated, context, all turns
MAX_TOKENS_LEFT = float(MAX_REQUESTS) * MAX_REQUEST_TOKENS  # the rollout's expected remaining tokens, all requests
MAX_ROLLOUT_RATE = 1e9  # tokens/s per rollout GPU
MIN_FLOPS_PER_GPU = 1e9  # FLOP/s per GPU of log-prob inference and the trainer (a GPU does ~1e14-1e15)
MAX_FLOPS_PER_GPU = 1e18
MAX_WORK = 1e30  # FLOPs queued at a stage
MAX_DRAIN_KEY = 1e30  # an engine's drain order key (its load x 1e12 + its cached tokens)


class ContextError(ValueError):
    """A context that the decision cannot use; ``field`` names the offending field path, ``fix`` says how to fix it."""

    def __init__(self, field: str, message: str, fix: str = FIX) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.fix = fix


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


def _range(lo: float, hi: float, kind) -> str:
    return f"{'a whole number' if kind is int else 'a number'} in [{lo:g}, {hi:g}]"


def _show(v) -> str:
    t = repr(v)
    return t if len(t) <= 40 else f"{t[:20]}... ({len(t)} characters)"


def _num(v, path: str, kind, lo: float = 0.0, hi: float = float(MAX_COUNT), why: str = ""):
    """``v`` as ``kind`` (int or float), finite and in ``[lo, hi]``; else :class:`ContextError` on ``path``."""
    want = _range(lo, hi, kind) + (f" ({why})" if why else "")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ContextError(path, f"{_show(v)} is not a number", f"write {want}")
    if (isinstance(v, float) and not math.isfinite(v)) or not lo <= v <= hi:  # (an int past any float is compared exactly)
        raise ContextError(path, f"{_show(v)} is out of range", f"write {want}")
    if kind is int and v != int(v):
        raise ContextError(path, f"{_show(v)} is not a whole number", f"write {want}")
    return kind(v)


def context_from_data(d: Any, where: str = "context"):
    """The :class:`~simulator.policies.ReallocContext` of :func:`context_to_data`'s data; :class:`ContextError`
    names the first bad field (``where`` prefixes the path). Every number finite and within its bound (the
    ``MAX_*`` above), the request arrays of matching lengths, every component running on at least one GPU."""
    from simulator.policies import INTAKES, ComponentInfo, ReallocContext

    if not isinstance(d, dict):
        raise ContextError(where, f"expected a mapping, got {type(d).__name__}", "write the context as a JSON object")
    if isinstance(d.get("version"), bool) or d.get("version", CONTEXT_VERSION) != CONTEXT_VERSION:  # (True == 1)
        raise ContextError(f"{where}.version", f"{_show(d.get('version'))} is not a known context version", f"write {CONTEXT_VERSION}")
    extra = sorted(set(d) - {"version", "initial", "intake", "components", "at_boundary", "last_lengths", "last_groups", *_TOP})
    if extra:
        raise ContextError(f"{where}.{extra[0]}", "unknown field", "remove it (planner.instances.completion_io lists the fields)")
    top: dict[str, Any] = {}
    for k in _TOP:
        if k not in d:
            raise ContextError(f"{where}.{k}", "missing")
    top["time_s"] = _num(d["time_s"], f"{where}.time_s", float, 0.0, MAX_SECONDS, "seconds since the job started")
    top["iteration"] = _num(d["iteration"], f"{where}.iteration", int, 0, MAX_COUNT)
    total = top["total_gpus"] = _num(d["total_gpus"], f"{where}.total_gpus", int, 1, MAX_GPUS, "the job's GPUs")
    top["free_gpus"] = _num(d["free_gpus"], f"{where}.free_gpus", int, 0, total, "at most total_gpus")
    at_boundary = d.get("at_boundary", False)
    if not isinstance(at_boundary, bool):
        raise ContextError(f"{where}.at_boundary", f"{_show(at_boundary)} is not true or false", "write true or false")
    intake = d.get("intake", "sample")
    if intake not in INTAKES:
        raise ContextError(f"{where}.intake", f"{_show(intake)} is not a known intake", f"write one of {', '.join(INTAKES)}")
    comps_in = d.get("components")
    if not isinstance(comps_in, dict):
        raise ContextError(f"{where}.components", "expected a mapping of component name to its fields",
                           f"write {{{', '.join(COMPONENTS)}}} with their fields")
    unknown = sorted(set(comps_in) - set(COMPONENTS), key=str)
    if unknown:
        raise ContextError(f"{where}.components.{unknown[0]}", "unknown component",
                           f"remove it (the completion decision knows {', '.join(COMPONENTS)})")
    known = {f.name: f for f in fields(ComponentInfo)}
    comps = {name: _component(comps_in.get(name), f"{where}.components.{name}", name, total, set(known), ComponentInfo)
             for name in COMPONENTS}
    held = sum(c.gpus for c in comps.values())
    if held > total:
        raise ContextError(f"{where}.components", f"the components hold {held} GPUs, more than total_gpus ({total})",
                           "give each component the GPUs it holds, together at most total_gpus")
    if held + top["free_gpus"] != total:  # every GPU of the job is held by a component or free
        raise ContextError(f"{where}.free_gpus", f"{top['free_gpus']}, but the components hold {held} of total_gpus ({total}): "
                                                 f"together {held + top['free_gpus']}",
                           f"write free_gpus = total_gpus - the components' GPUs ({total - held}), or the GPUs each "
                           "component holds")
    initial = d.get("initial", {})
    if not isinstance(initial, dict):
        raise ContextError(f"{where}.initial", "expected a mapping of component name to GPUs", "write {rollout: GPUs, ...}")
    for k, v in initial.items():
        if k not in COMPONENTS:
            raise ContextError(f"{where}.initial.{k}", "unknown component", f"use {', '.join(COMPONENTS)}")
        _num(v, f"{where}.initial.{k}", int, 1, total, "GPUs of the starting partition: at least 1, at most total_gpus")
    if initial:  # the starting partition names every component (an iteration boundary returns to it)
        for k in COMPONENTS:
            if k not in initial:
                raise ContextError(f"{where}.initial.{k}", "missing (the starting partition names every component)",
                                   f"write the GPUs of each of {', '.join(COMPONENTS)} at the iteration's start, or drop initial")
    if sum(initial.values()) > total:
        raise ContextError(f"{where}.initial", f"the starting partition holds {sum(initial.values())} GPUs, more than "
                                               f"total_gpus ({total})", "give the job's starting partition")
    last, groups = _last_lengths(d, where)
    return ReallocContext(time_s=top["time_s"], iteration=top["iteration"], total_gpus=total,
                          free_gpus=top["free_gpus"], components=comps, initial=dict(initial),
                          at_boundary=at_boundary, intake=intake, last_lengths=last, last_groups=groups)


def _component(c: Any, path: str, name: str, total: int, known: set, cls):
    """One component's :class:`~simulator.policies.ComponentInfo`, every field checked (bounds: module top)."""
    if not isinstance(c, dict):
        raise ContextError(path, "missing (the completion decision needs rollout, reference and trainer)",
                           f"write the {name}'s fields")
    extra = sorted(set(c) - known, key=str)
    if extra:
        raise ContextError(f"{path}.{extra[0]}", "unknown field", f"remove it (known: {', '.join(sorted(known))})")
    for k in ("name", "kind", "gpus", "unit_gpus", "min_gpus", "work_rate_per_gpu", "backlog_s", "pending"):
        if k not in c:
            raise ContextError(f"{path}.{k}", "missing")
    kw: dict[str, Any] = {}
    for k in ("name", "kind"):
        if c[k] != name:
            raise ContextError(f"{path}.{k}", f"{_show(c[k])} for the {name}", f"write {name!r}")
        kw[k] = name
    if "interruptible" in c:
        if not isinstance(c["interruptible"], bool):
            raise ContextError(f"{path}.interruptible", f"{_show(c['interruptible'])} is not true or false", "write true or false")
        kw["interruptible"] = c["interruptible"]
    # every component runs while the decision decides (its candidates give each at least one unit)
    kw["gpus"] = _num(c["gpus"], f"{path}.gpus", int, 1, total, "the GPUs it holds: at least 1, at most total_gpus")
    kw["unit_gpus"] = _num(c["unit_gpus"], f"{path}.unit_gpus", int, 1, total, "its GPU granularity, at most total_gpus")
    kw["min_gpus"] = _num(c["min_gpus"], f"{path}.min_gpus", int, 0, kw["gpus"], "the fewest it runs on, at most its gpus")
    if name == "rollout":
        kw["work_rate_per_gpu"] = _num(c["work_rate_per_gpu"], f"{path}.work_rate_per_gpu", float, 0.0, MAX_ROLLOUT_RATE,
                                       "tokens/s per GPU")
    else:
        kw["work_rate_per_gpu"] = _num(c["work_rate_per_gpu"], f"{path}.work_rate_per_gpu", float, MIN_FLOPS_PER_GPU,
                                       MAX_FLOPS_PER_GPU, "the measured FLOP/s per GPU")
    kw["backlog_s"] = _num(c["backlog_s"], f"{path}.backlog_s", float, 0.0, MAX_SECONDS, "seconds")
    kw["pending"] = _num(c["pending"], f"{path}.pending", int, 0, MAX_REQUESTS, "requests of this iteration")
    opt = {"grow_s": (float, MAX_SECONDS, "seconds"), "remaining_tokens": (float, MAX_TOKENS_LEFT, "tokens, all requests"),
           "remaining_max": (float, MAX_REQUEST_TOKENS, "tokens of one request"),
           "context_tokens": (float, MAX_REQUEST_TOKENS, "tokens of one request"),
           "groups_left": (int, MAX_REQUESTS, "GRPO groups of this iteration"), "queued_work": (float, MAX_WORK, "FLOPs"),
           "queued": (int, MAX_REQUESTS, "samples of this iteration")}
    for k, (kind, hi, why) in opt.items():
        if k in c:
            kw[k] = _num(c[k], f"{path}.{k}", kind, 0, hi, why)
    if c.get("requests") is not None:
        kw["requests"] = _requests(c["requests"], f"{path}.requests", total)
    return cls(**kw)


MAX_LAST_LENGTHS = 1_000_000  # responses of one iteration a context may report


def _last_lengths(d: dict, where: str) -> tuple[Optional[np.ndarray], int]:
    """``last_lengths`` (the last iteration's response lengths, tokens) and ``last_groups`` (its GRPO groups): both or
    neither, finite, positive, at most one group per response."""
    if "last_lengths" not in d and "last_groups" not in d:
        return None, 0
    for k in ("last_lengths", "last_groups"):
        if k not in d:
            raise ContextError(f"{where}.{k}", "missing (last_lengths and last_groups come together)", "write both or neither")
    v = d["last_lengths"]
    if not isinstance(v, list) or not v or len(v) > MAX_LAST_LENGTHS:
        raise ContextError(f"{where}.last_lengths", "not a list of response lengths",
                           f"write a list of 1 to {MAX_LAST_LENGTHS} response lengths (tokens)")
    arr = _array(v, f"{where}.last_lengths", float, MAX_REQUEST_TOKENS, "tokens of one response", MAX_LAST_LENGTHS)
    groups = _num(d["last_groups"], f"{where}.last_groups", int, 0, MAX_COUNT)
    if not 1 <= groups <= arr.size:
        raise ContextError(f"{where}.last_groups", f"{groups} groups for {arr.size} responses",
                           f"write 1 to {arr.size} (at most one group per response)")
    return arr, groups


def _array(a: Any, path: str, kind, hi: float, why: str, max_len: int = MAX_REQUESTS) -> np.ndarray:
    """A flat list as an array of ``kind`` (int, float or bool): at most ``max_len`` items, numbers finite in
    ``[0, hi]`` (whole for int); else :class:`ContextError` naming the first bad item."""
    if not isinstance(a, list) or len(a) > max_len:
        raise ContextError(path, "not a list" if not isinstance(a, list) else f"{len(a)} items",
                           f"write a list of at most {max_len:,} items")
    if kind is bool:
        bad = next((i for i, x in enumerate(a) if not isinstance(x, bool)), None)
        if bad is not None:
            raise ContextError(f"{path}[{bad}]", f"{_show(a[bad])} is not true or false", "write true or false")
        return np.array(a, dtype=bool)
    bad = next((i for i, x in enumerate(a) if isinstance(x, bool) or not isinstance(x, (int, float))), None)
    if bad is None:
        try:
            arr = np.array(a, dtype=float)
        except OverflowError:  # an integer past any float
            arr = np.array([float(x) if abs(x) < 1e300 else math.inf for x in a])
        ok = np.isfinite(arr) & (arr >= 0) & (arr <= hi)
        if kind is int:
            ok &= arr == np.floor(np.where(ok, arr, 0.0))
        if ok.all():
            return arr.astype(int) if kind is int else arr
        bad = int(np.argmin(ok))
    _num(a[bad], f"{path}[{bad}]", kind, 0, hi, why)  # raises, naming the item
    raise AssertionError("unreachable")


def _requests(v: Any, path: str, total: int) -> dict:
    """The rollout's unfinished requests (:class:`formulation.realloc.tail.TailRequests`' arrays): one entry per request
    in ``engine``, ``group``, ``generated``, ``context``, ``running``, ``prompt``; one per engine in ``drain_key``; the
    finished samples of open groups in ``done_group`` and ``done_length`` (together, one each); ``pend_length``."""
    if not isinstance(v, dict):
        raise ContextError(path, "expected a mapping of array name to list", "write {engine: [...], group: [...], ...}")
    bounds = {"engine": (total - 1, "an engine index"), "group": (MAX_COUNT, "a GRPO group id"),
              "generated": (MAX_REQUEST_TOKENS, "tokens"), "context": (MAX_REQUEST_TOKENS, "tokens"), "running": (1, ""),
              "prompt": (MAX_REQUEST_TOKENS, "tokens"), "drain_key": (MAX_DRAIN_KEY, "the engine's load x 1e12 + cached tokens"),
              "done_group": (MAX_COUNT, "a GRPO group id"), "done_length": (MAX_REQUEST_TOKENS, "tokens"),
              "pend_length": (MAX_REQUEST_TOKENS, "tokens")}
    out = {}
    for k, a in v.items():
        kind = _REQUEST_ARRAYS.get(k)
        if kind is None:
            raise ContextError(f"{path}.{k}", "unknown array", f"remove it (known: {', '.join(_REQUEST_ARRAYS)})")
        hi, why = bounds[k]
        out[k] = _array(a, f"{path}.{k}", kind, hi, why)
    missing = [k for k in (*_PER_REQUEST, "drain_key") if k not in out]
    if missing:
        raise ContextError(f"{path}.{missing[0]}", "missing", f"write the {missing[0]} array")
    n = {k: out[k].size for k in _PER_REQUEST}
    if len(set(n.values())) > 1:
        common = max(set(n.values()), key=list(n.values()).count)
        odd = next(k for k in _PER_REQUEST if n[k] != common)
        raise ContextError(f"{path}.{odd}", f"the per-request arrays differ in length: {n}",
                           f"write one entry per unfinished request in each of {', '.join(_PER_REQUEST)}")
    if out["drain_key"].size > total:
        raise ContextError(f"{path}.drain_key", f"{out['drain_key'].size} engines, more than total_gpus ({total})",
                           "write one drain_key per alive rollout engine")
    if out["engine"].size and out["engine"].max() >= out["drain_key"].size:
        raise ContextError(f"{path}.engine", f"engine indices must lie in [0, {out['drain_key'].size})",
                           "write one drain_key per engine and index the engines from 0")
    if ("done_group" in out) != ("done_length" in out):
        k = "done_length" if "done_group" in out else "done_group"
        raise ContextError(f"{path}.{k}", "missing (done_group and done_length come together)", "write both or neither")
    if "done_group" in out and out["done_group"].size != out["done_length"].size:
        raise ContextError(f"{path}.done_length", f"{out['done_length'].size} lengths for {out['done_group'].size} "
                                                  "done_group entries", "write one length per finished sample in done_group")
    return out


def check_against_setup(ctx, setup, where: str = "context") -> None:
    """The context fits the job's set-up: the GPUs in all, the rollout's GPUs (now and at the start) whole engines
    (``rollout_tp``) and the trainer's whole replicas (``train_unit``), as the decision's tables are indexed, and the
    units it reports the job's."""
    if ctx.total_gpus != setup.total_gpus:
        raise ContextError(f"{where}.total_gpus", f"{ctx.total_gpus}, the scenario's job has {setup.total_gpus}",
                           "give the context of this scenario's job")
    for name, unit, what in (("rollout", setup.rollout_tp, "engine TP"), ("trainer", setup.train_unit, "trainer TP x PP")):
        g = ctx.components[name].gpus
        if g % unit:
            raise ContextError(f"{where}.components.{name}.gpus", f"{g} is not a multiple of the job's {what} ({unit})",
                               f"write the GPUs the {name} holds: whole multiples of {unit}")
        if ctx.components[name].unit_gpus != unit:
            raise ContextError(f"{where}.components.{name}.unit_gpus", f"{ctx.components[name].unit_gpus}, the job's {what} is "
                                                                       f"{unit}", f"write {unit} (the decision sizes the {name} "
                                                                                  "in the job's units)")
        g = ctx.initial.get(name)
        if g is not None and g % unit:
            raise ContextError(f"{where}.initial.{name}", f"{g} is not a multiple of the job's {what} ({unit})",
                               f"write the GPUs the {name} started the iteration on: whole multiples of {unit}")
    # the job's own limits: an iteration's requests (batch_prompts x group_size) and a response's tokens
    # (max_response_tokens); past them the decision predicted an iteration of another job (1e9 tokens generated:
    # refused only afterwards as "completion_keep_s is 6e10, not a finite number of seconds", no field named)
    wl = getattr(setup, "workload", None)  # (a set-up of GPUs and units only: nothing more to compare)
    if wl is None:
        return
    for name, info in ctx.components.items():
        if info.pending > wl.n_requests:
            raise ContextError(f"{where}.components.{name}.pending", f"{info.pending}, more than the {wl.n_requests} requests an "
                                                                     f"iteration of the scenario's job has (batch_prompts x "
                                                                     f"group_size = {wl.n_prompts} x {wl.group_size})",
                               "give the context of this scenario's job")
    reqs = ctx.components["rollout"].requests or {}
    _check_request_counts(reqs, ctx.components["rollout"].pending, wl, where)
    cap = float(wl.max_response_tokens) * max(1, wl.turns)  # (turns: each turn's share rounds up to a token)
    for k in ("generated", "done_length", "pend_length"):
        a = reqs.get(k)
        if a is not None and a.size and float(a.max()) > cap + max(1, wl.turns):
            i = int(np.argmax(a))
            raise ContextError(f"{where}.components.rollout.requests.{k}[{i}]",
                               f"{float(a[i]):g} tokens, more than the job's max_response_tokens ({wl.max_response_tokens})",
                               f"write each response's tokens, at most {wl.max_response_tokens}, or give the scenario the job runs in")


def _check_request_counts(reqs: dict, pending: int, wl, where: str) -> None:
    """The rollout's requests fit one iteration of the job: no more unfinished ones than its ``pending`` (every
    unfinished request of the iteration), no GRPO group with more samples open and finished than ``group_size``, and
    no more samples in all (open, finished in open groups, finished on their way to training) than the iteration's
    requests. Past them the decision predicted the end of another, larger iteration (2,280 open requests of a
    384-request job: the keep prediction 26x longer, and the move committed)."""
    path = f"{where}.components.rollout.requests"
    group = reqs.get("group")
    n_open = 0 if group is None else int(group.size)
    if n_open > pending:
        raise ContextError(f"{path}.group", f"{n_open} unfinished requests, more than the rollout's pending ({pending})",
                           "list each unfinished request once, as many as the rollout's pending")
    done = reqs.get("done_group")
    ids = np.concatenate([a for a in (group, done) if a is not None and a.size] or [np.zeros(0, dtype=int)]).astype(int)
    if ids.size:
        gid, count = np.unique(ids, return_counts=True)
        if int(count.max()) > wl.group_size:
            k = int(np.argmax(count))
            field = "done_group" if done is not None and done.size else "group"
            raise ContextError(f"{path}.{field}", f"group {int(gid[k])} has {int(count[k])} samples open or finished, more than "
                                                  f"the job's group_size ({wl.group_size})",
                               "list each sample of a group once (its open request, or its finished length)")
    total = n_open + sum(int(reqs[k].size) for k in ("done_length", "pend_length") if reqs.get(k) is not None)
    if total > wl.n_requests:
        raise ContextError(f"{path}.pend_length", f"{total} samples open or finished, more than the {wl.n_requests} requests "
                                                  f"an iteration of the scenario's job has (batch_prompts x group_size = "
                                                  f"{wl.n_prompts} x {wl.group_size})",
                           "give this iteration's samples only, or the scenario the job runs in")


def check_against_snapshot(ctx, snap, where: str = "context") -> None:
    """The context is the one taken with ``snap`` (the last snapshot, mid-iteration, as ``planner realloc`` decides
    on it): not an iteration boundary, at the snapshot's time, the rollout on the GPUs its workers report."""
    if ctx.at_boundary:
        raise ContextError(f"{where}.at_boundary", "true: an iteration boundary, where the decision only returns to the "
                                                   "starting split; the snapshots are of a running iteration",
                           "write false (or drop it): give the context taken at the last snapshot")
    if abs(ctx.time_s - snap.time_s) > 1e-6 * max(1.0, abs(snap.time_s)):
        raise ContextError(f"{where}.time_s", f"{ctx.time_s:g}, the last snapshot's is {snap.time_s:g}",
                           "give the context taken at the last snapshot (the same time_s)")
    held = sum(w.gpus for w in snap.workers if w.component == "rollout")
    if ctx.components["rollout"].gpus != held:
        raise ContextError(f"{where}.components.rollout.gpus", f"{ctx.components['rollout'].gpus}, the last snapshot's "
                                                               f"rollout workers hold {held}",
                           "give the context taken at the last snapshot (the GPUs its rollout workers hold)")


MAX_COMPLETION_S = MAX_SECONDS  # a predicted completion past this is no prediction: the context is refused


def check_record(rec: Optional[dict], where: str = "context") -> None:
    """The decision record's numbers finite, its completion times within ``MAX_COMPLETION_S`` (a context within its
    bounds can still describe a job that never finishes, e.g. a tiny rate against a huge queue)."""
    if rec is None:
        return
    for k, v in rec.items():
        if (isinstance(v, float) and not math.isfinite(v)) or (k.startswith("completion") and not 0 <= v <= MAX_COMPLETION_S):
            raise ContextError(where, f"the decision's {k} is {v!r}, not a finite number" + (
                                   f" of seconds in [0, {MAX_COMPLETION_S:g}]" if k.startswith("completion") else ""),
                               "check the context's rates (work_rate_per_gpu), queued work and request lengths: they "
                               "describe an iteration that does not finish")


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
