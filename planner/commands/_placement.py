"""Shared by the placement commands: read a scenario or an instance file, read and write plans."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from planner.errors import Problem, UserError

KIND = "PlacementPlan"


ESTIMATES = ("conservative", "sampled", "p90", "p99", "max")


def recorded_estimate(doc, mode: Optional[str] = None) -> tuple[Optional[str], float]:
    """(phase-time estimate, margin) a plan document was made with (its solver record), the estimate
    ``mode`` instead when the user gives one: what a plan is checked, admitted into and applied on (a
    plan made with ``--mode sampled`` or ``--margin 0.1`` was refused against the scenario's default
    estimate by validate-plan, admit and apply)."""
    rec = doc.solver
    recorded = rec.phase_time_estimate if rec.phase_time_estimate in ESTIMATES else None
    margin = float(rec.margin or 0.0)
    return (mode or recorded), (margin if 0.0 <= margin <= 1.0 else 0.0)


def plan_and_estimate(path: str, command: str, mode: Optional[str] = None):
    """(document, plan, estimate, margin, error) of the plan at ``path`` before its input is loaded: the
    estimate and margin it records (:func:`recorded_estimate`), ``mode`` instead when given. A plan that
    cannot be read gives ``mode`` and no margin, and its error for the caller to raise after the input's
    own (which are named first)."""
    try:
        doc, plan = read_plan(path, command)
    except UserError as exc:
        return None, None, mode, 0.0, exc
    return (doc, plan, *recorded_estimate(doc, mode), None)


def load_input(path: str, mode: Optional[str] = None, margin: float = 0.0, command: str = "plan", progress=None,
               recorded_margin: float = 0.0, asked_mode: Optional[str] = None, deadline=None):
    """(instance, name, digest, scenario or None) from a scenario YAML or a numbers-only instance file;
    ``progress``: a :class:`planner.statusline.Status` told which job's phase times are being estimated;
    ``recorded_margin``: a plan's margin, for a scenario only (an instance file holds its phase times);
    ``asked_mode``: the ``--mode`` the user gave, refused for an instance file (it was ignored there);
    ``deadline``: a function of the scenario giving the :func:`planner.instances.placement.clock`
    value by which its phase-time estimates must be done, else
    :class:`planner.instances.placement.CompileCut` (what it estimated is cached)."""
    from planner.instances.placement_files import instance_data, load_instance, read_doc

    if not Path(path).exists():
        raise UserError(Problem("", f"file not found: {path}", "check the path"))
    if not 0.0 <= margin <= 1.0:
        raise UserError(Problem("--margin", f"must lie between 0 and 1, got {margin:g}",
                                "give the fraction added to every phase time, e.g. --margin 0.1"))
    from planner.dockind import INSTANCE, SCENARIO, expect

    found = expect(path, [SCENARIO, INSTANCE], "INPUT", command)
    # the sniffed document's scan of its numbers spares the instance reader a second walk
    doc = read_doc(path) if found.data is None else found.parsed
    data = instance_data(found.data) if found.data is not None else doc.data if doc is not None else None
    if data is not None:
        if margin:
            raise UserError(Problem("--margin", "an instance file holds phase times already",
                                    "plan the scenario with --margin, or drop --margin"))
        if asked_mode is not None:
            raise UserError(Problem("--mode", f"{path} is a numbers-only instance file: its phase times are written in it, "
                                              f"so no estimate ({asked_mode}) applies",
                                    "drop --mode (it picks how a scenario's phase times are estimated)"))
        inst = load_instance(path, data, doc)
        return inst, inst.name, instance_digest(inst), None
    from planner.plandoc import scenario_digest
    from planner.schema import load_scenario

    sc = load_scenario(path, parsed=found.doc)
    margin = margin or recorded_margin
    on_job = None
    if progress is not None:
        est = mode or sc.solver.phase_time_estimate

        def on_job(k: int, n: int, job: str) -> None:
            progress.update(f"{command}: estimating phase times ({est}, by simulation): job {k + 1}/{n}, {job}")
    from planner.instances import cache

    digest = scenario_digest(sc)
    inst = cache.compiled(sc, mode, margin, on_job=on_job, deadline=deadline(sc) if deadline is not None else None)
    return inst, sc.name, digest, sc


def instance_digest(inst) -> str:
    """The digest a plan records of the instance it was made for: SHA-256 of the instance's JSON
    (pydantic's serializer: 0.09 s at 10,000 jobs, against 0.6 s for sorted-key ``json.dumps``)."""
    import hashlib

    return hashlib.sha256(inst.model_dump_json().encode()).hexdigest()[:16]


def digest_problem(recorded: str, plan_path: str, input_path: str, fix: str = "") -> Optional[Problem]:
    """Why a plan's ``scenario_digest`` cannot say which input it was made for (empty: nothing says
    it; not the 16 hexadecimal digits every plan records: edited), or None when it is one."""
    import re

    from estimators.errors import safe_text

    if not recorded:
        message = f"{plan_path} records no scenario digest: nothing says it was made for {input_path}"
    elif not re.fullmatch(r"[0-9a-f]{16}", recorded):
        message = (f"{plan_path} records a malformed scenario digest ({safe_text(recorded, 40)!r}); a plan records 16 "
                   f"hexadecimal digits of its input's digest, so nothing says it was made for {input_path}")
    else:
        return None
    return Problem("scenario_digest", message,
                   fix or "re-run `planner plan INPUT --out PLAN` (a plan records the digest of its input)")


def same_input(recorded: str, digest: str, inst) -> bool:
    """Whether a plan's recorded digest names this input: the digest, or the one plans made from
    instance files before the digest was computed by pydantic's serializer (SHA-256 of the
    sorted-key ``json.dumps``; computed only on a mismatch). An empty digest names no input."""
    if not recorded:
        return False
    if recorded == digest:
        return True
    import hashlib
    import json

    canon = json.dumps(inst.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return recorded == hashlib.sha256(canon.encode()).hexdigest()[:16]


def read_plan(path: str, command: str = "plan"):
    from formulation.placement.plan import PlacementPlan
    from planner import plandoc

    from planner.dockind import expect

    expect(path, [KIND], "PLAN", command)
    doc = plandoc.read(path, expect_kind=KIND)
    body = doc.body_as(PlacementPlan)  # validated once, by plandoc.read
    assert isinstance(body, PlacementPlan)
    return doc, body


def plan_text(body, record: dict, name: str, digest: str, fmt: str) -> str:
    """The plan document's text, byte for byte what :func:`planner.plandoc.dumps` writes for it,
    without validating and dumping the body a second time through the document model (at
    thousands of jobs that round trip took longer than the fast path's solve)."""
    from planner import __version__, plandoc

    solver = plandoc.SolverRecord(**record).model_dump(mode="json")
    data = {"kind": KIND, "version": plandoc.PLAN_VERSION, "generator": f"rl-planner {__version__}", "scenario": name,
            "scenario_digest": digest, "solver": plandoc._round(solver), "body": plandoc._round(body)}
    if fmt == "json":
        return plandoc.dumps_json(data)
    return plandoc.dumps_yaml(data)


def default_out(name: str, suffix: str = "plan") -> str:
    """The file a plan goes to without ``--out``: ``NAME.plan.yaml`` in the current folder (the
    scenario's name, made safe for a file name)."""
    import re

    return (re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-") or "plan") + f".{suffix}.yaml"


def default_out_for(name: str, input_path: str, suffix: str = "plan") -> str:
    """:func:`default_out`, refused (exit 2) when it is the input file itself: `planner plan
    NAME.plan.yaml`, run beside a scenario so named, replaced the scenario by its plan (an outside audit)."""
    from planner.commands._args import same_file

    out = default_out(name, suffix)
    if same_file(out, input_path):
        raise UserError(Problem("--out", f"the default output {out} (the input's name '{name}' + .{suffix}.yaml) is the input "
                                f"{input_path} itself: writing there would replace it", "give --out FILE (another file)"))
    return out


def write_plan(body, record: dict, name: str, digest: str, out: Optional[str], as_json: bool = False) -> str:
    """Write the plan document to ``out`` (``-``: YAML on stdout only); ``as_json``: also print it
    as JSON on stdout (with ``-``: JSON instead of YAML)."""
    if out and out != "-":
        from planner.safewrite import write_atomic

        p = Path(out)  # atomic, as plandoc.write: a failed write never leaves half a plan
        write_atomic(p, plan_text(body, record, name, digest, "json" if p.suffix == ".json" else "yaml"), where="--out")
    if not out or out == "-" or as_json:
        print(plan_text(body, record, name, digest, "json" if as_json else "yaml"), end="")
    return out or "-"


def unplaced_error(unplaced: list, title: str) -> UserError:
    """Each unplaced job (``Unplaced``: job, reason, message, fix) as a problem naming it."""
    return UserError([Problem(f"job {u.job}", f"cannot be placed ({u.reason}): {u.message}", u.fix) for u in unplaced], title=title)


def same_fleet(plan_path: str, input_path: str, current, inst) -> None:
    """The current plan's nodes are the input's: a plan made for another cluster (its node groups named
    otherwise) had its pins renamed onto this one's in silence (an outside audit, session 45).

    Its group ids are distinct: the plans `plan --current` and `admit --current` write keep the current
    groups' ids, so a current plan with two groups ``g0`` gave a new plan with two groups ``g0``,
    written with exit 0, that `validate-plan` and `apply` refuse (rule group-id; an outside audit)."""
    from collections import Counter

    dup = sorted(g for g, k in Counter(g.id for g in current.groups).items() if k > 1)
    if dup:
        shown = ", ".join(dup[:5]) + (f" and {len(dup) - 5} more" if len(dup) > 5 else "")
        raise UserError(Problem(f"{plan_path}: body.groups", f"the current plan lists group id(s) {shown} more than once "
                                "(`planner validate-plan` refuses it: rule group-id)",
                                "give each group its own id, or re-plan with `planner plan INPUT` (without --current)"))
    # a job is a member of one group once: admit read a job listed twice as "group(s) g1 of the current plan
    # no longer fit this input (pools or SLOs changed)" (an outside audit)
    twice = sorted(j for j, k in Counter(m.job for g in current.groups for m in g.members).items() if k > 1)
    if twice:
        shown = ", ".join(twice[:5]) + (f" and {len(twice) - 5} more" if len(twice) > 5 else "")
        raise UserError(Problem(f"{plan_path}: body.groups", f"the current plan lists job(s) {shown} as a member more than once "
                                "(`planner validate-plan` refuses it: rule placed-once)",
                                "keep each job in one group's members (and order), or re-plan with `planner plan INPUT` "
                                "(without --current)"))
    # a pool's size is the count of its nodes: the group's configuration is read from the size, so a pool
    # edited to size 5 over 3 listed nodes was admitted into as 5 nodes (two paid for and idle, the
    # summary's "+0.00 $/h" beside "cost 56.00 -> 72.00"; an outside audit)
    for i, g in enumerate(current.groups):
        for side in ("rollout_pool", "train_pool"):
            pool = getattr(g, side)
            if len(set(pool.nodes)) != pool.size or len(pool.nodes) != pool.size:
                raise UserError(Problem(f"{plan_path}: body.groups.{i}.{side}", f"group {g.id}'s {side.replace('_', ' ')} has "
                                        f"size {pool.size} but lists {len(set(pool.nodes))} distinct node(s) "
                                        f"(`planner validate-plan` refuses it: rule pool-nodes)",
                                        "list each of the pool's nodes once and set size to their count, or re-plan with "
                                        "`planner plan INPUT` (without --current)"))
    have = {n for t in inst.pool_types for n in inst.node_names(t)}
    pinned = {n for g in current.groups for n in (*g.rollout_pool.nodes, *g.train_pool.nodes)}
    missing = sorted(pinned - have)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UserError(Problem(plan_path, f"the current plan pins node(s) {shown} that {input_path}'s cluster does not have "
                                f"(a plan made for another cluster?)", "pass the plan made for this input's cluster, or "
                                "re-plan with `planner plan INPUT`"))
    # a plan made for another scenario on a cluster named alike: `plan --current` refused it, `admit --current`
    # wrote a plan with every one of its jobs "left out, their nodes freed" and exit 0 (an outside audit)
    cur_jobs = {m.job for g in current.groups for m in g.members}
    if cur_jobs and not cur_jobs & {j.name for j in inst.jobs}:
        raise UserError(Problem(plan_path, f"the current plan places none of {input_path}'s jobs (a plan made for another "
                                "input?)", "pass the plan made for this input, or plan it afresh with `planner plan INPUT` "
                                "(without --current)"))
