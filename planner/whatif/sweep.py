"""Sweep specifications: ``KEY=START:STOP:STEPS``, the keys, the grid of points, and how a point's
values turn the forecast into the instance it is solved on.

Keys (``<T>`` a GPU type of the cluster):

=================  ===================================================================  ==========
key                what it sets                                                         applies to
=================  ===================================================================  ==========
``price.<T>``      $ per GPU-hour of ``T``                                              instance
``max_nodes.<T>``  the most nodes of ``T`` that can be bought (whole numbers)           instance
``budget``         the most $/h the fleet may cost                                      instance
``slo``            every job's SLO times this factor (< 1: tighter)                     instance
``jobs``           the job mix times this factor (job-mix growth: the forecast's jobs   instance
                   repeated in order, ``round(factor x N)`` jobs, copies named
                   ``<job>#2``, ``<job>#3``, ...)
``response``       every job's response lengths times this factor (the maximum and the  scenario
                   distribution), phase times re-estimated; a ratio SLO follows the
                   job's solo time, an ``iteration_s`` SLO stays
=================  ===================================================================  ==========

Several ``--sweep`` options make a grid. Points are ordered as a *snake* through the grid (the
last key changes fastest and reverses direction at each step of the one before), so that
consecutive points differ by one step of one key: each point is warm-started from the one before.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from formulation.capacity.instance import CapacityInstance
from planner.errors import Problem, UserError
from planner.schema.scenario import MIN_PRICE, FixedLengths, GPUTypeSpec, LognormalLengths, Scenario, ServegenLengths

SCALARS = ("budget", "slo", "jobs", "response")
PER_TYPE = ("price", "max_nodes")
MAX_POINTS = 2000
# the largest value each key may take (the scenario schema's bounds; factors within reason)
MAX_VALUE = {"price": 1e4, "max_nodes": 4096.0, "budget": 1e9, "slo": 1e3, "jobs": 64.0, "response": 100.0}


@dataclass(frozen=True)
class Sweep:
    key: str
    values: tuple[float, ...]


def valid_keys(types: list[str]) -> list[str]:
    return [f"{p}.{t}" for p in PER_TYPE for t in types] + list(SCALARS)


def _number(text: str, what: str, spec: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise UserError(Problem("--sweep", f"'{spec}': {what} '{text}' is not a number",
                                "write KEY=START:STOP:STEPS, e.g. price.H800=1.5:3.0:7")) from None
    if not math.isfinite(v):
        raise UserError(Problem("--sweep", f"'{spec}': {what} must be finite", "write KEY=START:STOP:STEPS, e.g. price.H800=1.5:3.0:7"))
    return v


def parse(spec: str, types: list[str]) -> Sweep:
    """One ``KEY=START:STOP:STEPS``; STEPS values evenly from START to STOP (STEPS=1: START)."""
    usage = "write KEY=START:STOP:STEPS, e.g. price.H800=1.5:3.0:7"
    if "=" not in spec:
        raise UserError(Problem("--sweep", f"'{spec}' has no '='", usage))
    key, _, rng = spec.partition("=")
    key = key.strip()
    keys = valid_keys(types)
    if key not in keys:
        from planner.errors import did_you_mean

        raise UserError(Problem("--sweep", f"unknown sweep key '{key}'.{did_you_mean(key, keys)} Valid keys: {', '.join(keys)}",
                                "use one of the valid keys (GPU types are those of the scenario's cluster)"))
    parts = rng.split(":")
    if len(parts) != 3:
        raise UserError(Problem("--sweep", f"'{spec}': the range '{rng}' needs START:STOP:STEPS", usage))
    start, stop = _number(parts[0], "START", spec), _number(parts[1], "STOP", spec)
    try:
        steps = int(parts[2])
    except ValueError:
        raise UserError(Problem("--sweep", f"'{spec}': STEPS '{parts[2]}' is not a whole number", usage)) from None
    if steps < 1:
        raise UserError(Problem("--sweep", f"'{spec}': STEPS must be at least 1, got {steps}", usage))
    if steps > MAX_POINTS:
        raise UserError(Problem("--sweep", f"'{spec}': STEPS may be at most {MAX_POINTS}, got {steps}", "use fewer STEPS"))
    values = tuple(float(v) for v in (np.linspace(start, stop, steps) if steps > 1 else [start]))
    kind = key.split(".")[0]
    if kind == "max_nodes":
        if any(v < 0 or abs(v - round(v)) > 1e-9 for v in values):
            raise UserError(Problem("--sweep", f"'{spec}': max_nodes takes whole numbers >= 0, the range gives "
                                               f"{', '.join(f'{v:g}' for v in values)}",
                                    "choose START, STOP and STEPS so that the step is a whole number, e.g. max_nodes.H800=4:12:5"))
        values = tuple(float(round(v)) for v in values)
    if max(values) > MAX_VALUE.get(kind, math.inf):
        raise UserError(Problem("--sweep", f"'{spec}': {key} may be at most {MAX_VALUE[kind]:g}, the range reaches {max(values):g}",
                                "sweep over a smaller range"))
    if kind != "max_nodes" and any(v <= 0 for v in values):
        raise UserError(Problem("--sweep", f"'{spec}': {key} must be positive, the range reaches {min(values):g}",
                                "sweep over positive values"))
    if kind == "price" and min(values) < MIN_PRICE:  # a subnormal price overflows the solver's ratios
        raise UserError(Problem("--sweep", f"'{spec}': {key} may be no less than {MIN_PRICE:g}, the range reaches {min(values):g}",
                                "sweep over a larger range"))
    return Sweep(key, values)


def check_limits(sc: Scenario, sweeps: list[Sweep]) -> None:
    """The scenario's bounds hold at every point: ``jobs`` grows the job mix to at most
    ``MAX_JOBS`` jobs, ``response`` the responses to at most ``MAX_TOKENS`` tokens."""
    from planner.schema.scenario import MAX_JOBS, MAX_TOKENS

    for s in sweeps:
        top = max(s.values)
        if s.key == "jobs" and round(top * len(sc.jobs)) > MAX_JOBS:
            raise UserError(Problem("--sweep", f"jobs={top:g} grows the {len(sc.jobs)} jobs to {round(top * len(sc.jobs))}, "
                                               f"more than {MAX_JOBS}", "sweep the job mix over a smaller factor"))
        longest = max((j.rollout.max_response_tokens for j in sc.jobs), default=0)
        if s.key == "response" and top * longest > MAX_TOKENS:
            raise UserError(Problem("--sweep", f"response={top:g} makes a {longest}-token response {top * longest:g} tokens, "
                                               f"more than {MAX_TOKENS}", "sweep response lengths over a smaller factor"))


def parse_all(specs: list[str], types: list[str]) -> list[Sweep]:
    sweeps = [parse(s, types) for s in specs]
    seen = set()
    for s in sweeps:
        if s.key in seen:
            raise UserError(Problem("--sweep", f"'{s.key}' is swept twice", "give each key one --sweep"))
        seen.add(s.key)
    total = math.prod(len(s.values) for s in sweeps) if sweeps else 1
    if total > MAX_POINTS:
        raise UserError(Problem("--sweep", f"the grid has {total} points, more than {MAX_POINTS}", "use fewer STEPS or fewer keys"))
    return sweeps


def points(sweeps: list[Sweep]) -> list[dict[str, float]]:
    """The grid in snake order (consecutive points differ by one step of one key)."""
    if not sweeps:
        return [{}]
    combos: list[tuple[int, ...]] = list(itertools.product(*[range(len(s.values)) for s in sweeps]))
    snake = []
    for combo in combos:
        pos = list(combo)
        # reverse a key's direction when the sum of the indices before it is odd
        for i in range(1, len(pos)):
            if sum(combo[:i]) % 2 == 1:
                pos[i] = len(sweeps[i].values) - 1 - combo[i]
        snake.append({s.key: s.values[p] for s, p in zip(sweeps, pos)})
    return snake


# ---------------------------------------------------------------------------------- applying values
def scenario_for(sc: Scenario, values: dict[str, float]) -> Scenario:
    """The scenario a point is compiled from: only ``response`` changes it (re-estimated phase times)."""
    f = values.get("response")
    if f is None or f == 1.0:
        return sc
    jobs = []
    for job in sc.jobs:
        r = job.rollout
        lengths = r.response_lengths
        if isinstance(lengths, ServegenLengths):
            lengths = lengths.model_copy(update={"scale": lengths.scale * f})
        elif isinstance(lengths, LognormalLengths):
            lengths = lengths.model_copy(update={"median_tokens": lengths.median_tokens * f})
        elif hasattr(lengths, "scale"):  # the user's trace column or quantile table
            lengths = lengths.model_copy(update={"scale": lengths.scale * f})
        elif isinstance(lengths, FixedLengths):
            lengths = lengths.model_copy(update={"tokens": max(1, round(lengths.tokens * f))})
        rollout = r.model_copy(update={"max_response_tokens": max(1, round(r.max_response_tokens * f)), "response_lengths": lengths})
        jobs.append(job.model_copy(update={"rollout": rollout}))
    return sc.model_copy(update={"jobs": jobs})


def compile_limits(sc: Scenario, sweeps: list[Sweep]) -> Scenario:
    """The scenario to compile once: every swept ``max_nodes`` at its largest value (a point then
    lowers the limit on the compiled instance); with a ``jobs`` sweep, every type without a limit
    may grow by what the largest job mix could use (:func:`planner.instances.capacity.fleet_limits`
    counts the scenario's own jobs: a 2-job scenario grown 64x was capped at 40 nodes a type and
    reported infeasible)."""
    from planner.instances.capacity import UNLIMITED_NODES_PER_JOB, fleet_limits
    from planner.schema.scenario import MAX_NODES

    specs = dict(sc.gpu_types)
    for s in sweeps:
        if s.key.startswith("max_nodes."):
            t = s.key.split(".", 1)[1]
            base = specs.get(t)
            top = int(max(s.values))
            specs[t] = base.model_copy(update={"max_nodes": top}) if base is not None else GPUTypeSpec(max_nodes=top)
    grow = max((max(s.values) for s in sweeps if s.key == "jobs"), default=1.0)
    if grow > 1.0:
        most = min(MAX_NODES, UNLIMITED_NODES_PER_JOB * max(1, round(grow * len(sc.jobs))))
        for t in fleet_limits(sc):
            base = specs.get(t)
            if base is None or base.max_nodes is None:
                specs[t] = base.model_copy(update={"max_nodes": most}) if base is not None else GPUTypeSpec(max_nodes=most)
    return sc.model_copy(update={"gpu_types": specs})


def instance_for(inst: CapacityInstance, values: dict[str, float]) -> CapacityInstance:
    """Apply the instance-level values of a point (everything but ``response``)."""
    limits = {k.split(".", 1)[1]: inst.owned_nodes(k.split(".", 1)[1]) + int(v) for k, v in values.items() if k.startswith("max_nodes.")}
    if limits:
        inst = inst.with_limits(limits)
    pools = dict(inst.placement.pool_types)
    for k, v in values.items():
        if k.startswith("price."):
            t = k.split(".", 1)[1]
            pools[t] = pools[t].model_copy(update={"price_per_gpu_hour": float(v)})
    jobs = list(inst.placement.jobs)
    colocated = dict(inst.colocated)
    if "slo" in values:
        jobs = [j.model_copy(update={"slo_s": j.slo_s * values["slo"]}) for j in jobs]
    if "jobs" in values and jobs:
        n = max(1, round(values["jobs"] * len(jobs)))
        grown = []
        for i in range(n):
            base = jobs[i % len(jobs)]
            copy = i // len(jobs)
            name = base.name if copy == 0 else f"{base.name}#{copy + 1}"
            grown.append(base.model_copy(update={"name": name}))
            if copy and base.name in colocated:
                colocated[name] = colocated[base.name]
        jobs = grown
        colocated = {k: v for k, v in colocated.items() if k in {j.name for j in jobs}}
    placement = inst.placement.model_copy(update={"pool_types": pools, "jobs": jobs})
    update = {"placement": placement, "colocated": colocated}
    if "budget" in values:
        update["budget_per_hour"] = float(values["budget"])
    return inst.model_copy(update=update)
