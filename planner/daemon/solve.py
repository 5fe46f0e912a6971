"""Phases 4 and 5 of a cycle: from the triggers to a target placement, each step with its reasons.

Pure functions of the snapshot: no database, no clock, no executor. In order:

a. **departures** (mandatory): finished, failed and cancelled jobs leave the placement;
b. **repair** (mandatory): when drift made a group miss a member's SLO, re-optimise (if
   enabled) or, failing that, evict the members admitted last from each broken group and admit
   them again elsewhere; a repair that cannot place everyone is not made (and says so);
   a re-optimisation that fails on jobs no plan found serves is tried again around them
   (:mod:`planner.daemon.around`: their groups kept as they are), and made when that mends every
   other miss;
c. **admissions** (mandatory): arrived pending jobs, oldest first, by the placer's one-job move;
   one that no placement can ever serve is rejected, one that only lacks room waits (up to the
   admission deadline);
d. **re-optimisation** (optional, gated): periodically and after departures, warm-started from
   the current placement, kept only if :func:`planner.daemon.gate.judge` says its gain beats its
   migration cost and the churn budget allows its moves; one that is not valid is tried again
   around the jobs it could not place within SLO (:mod:`planner.daemon.around`), and that plan is
   gated the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from planner.daemon import around, gate
from planner.daemon.config import DaemonConfig
from planner.daemon.estimates import Drift
from planner.daemon.lifecycle import JobState
from planner.daemon.ports import Observation, Placement, PlacementPlanner, PlanningContext
from planner.daemon.ratelimit import TokenBucket
from planner.daemon.store import DecisionKind, DecisionRow, JobRecord


@dataclass
class Move:
    job: str
    to: Optional[JobState]  # None: only the job's reason changes
    reason: str


@dataclass
class Decision:
    kind: DecisionKind  # departure | repair | drift | admit | reject | wait | reoptimise | realloc | restore
    triggers: list[str]
    outcome: str  # changes-plan | kept-current | rejected | waiting | rate-limited | infeasible | not-committed | ...
    jobs: list[str]
    reasons: list[str]
    cost_before: Optional[float] = None
    cost_after: Optional[float] = None
    gain_usd: Optional[float] = None
    migration_usd: Optional[float] = None
    solver: dict = field(default_factory=dict)

    @property
    def changes_plan(self) -> bool:
        return self.outcome == "changes-plan"

    def row(self, *, cycle: int, at: float, outcome: str, plan_id: Optional[int], dry_run: bool) -> DecisionRow:
        """The decision's row in the state database, made in cycle ``cycle`` at ``at``, with its final ``outcome``."""
        return {"cycle": cycle, "at": at, "kind": self.kind, "triggers": self.triggers, "outcome": outcome, "jobs": self.jobs,
                "reasons": self.reasons, "cost_before": self.cost_before, "cost_after": self.cost_after, "gain_usd": self.gain_usd,
                "migration_usd": self.migration_usd, "solver": self.solver, "plan_id": plan_id, "dry_run": dry_run}


@dataclass
class Outcome:
    target: Placement
    moves: list[Move] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    solve_s: dict = field(default_factory=dict)  # kind -> wall seconds spent in the planner
    moved_jobs: int = 0  # jobs moved by optional changes (charged to the churn budget)
    reoptimised: bool = False


# ---------------------------------------------------------------------------- a. departures
def departures(jobs: dict[str, JobRecord], plan: Placement, obs: Observation,
               reprice: Optional[Callable[[Placement], Placement]] = None, unreadable: Optional[dict[str, str]] = None) -> Outcome:
    """The jobs that finished, failed or are cancelled leave the plan. ``reprice`` (the placer's
    evaluation) gives the plan without them its costs and cycles: a pinned group releases a
    leaver's own rollout nodes and gets cheaper, which the decision's cost after should say.
    ``unreadable``: job -> why a file its spec names can no longer be read; such a job fails (one
    being cancelled is cancelled instead) and leaves the plan."""
    out = Outcome(plan)
    leaving: dict[str, str] = {}
    for name, why in sorted(obs.finished.items()):
        r = jobs.get(name)
        if r and r.state in (JobState.RUNNING, JobState.CANCELLING):
            out.moves.append(Move(name, JobState.COMPLETED, f"completed: {why}"))
            leaving[name] = f"{name} completed ({why})"
    for name, why in sorted((unreadable or {}).items()):
        r = jobs.get(name)
        if r and name not in leaving and r.state is not JobState.CANCELLING and r.cancel_requested_at is None:
            out.moves.append(Move(name, JobState.FAILED, f"failed: its inputs can no longer be read: {why}"))
            leaving[name] = f"{name} failed (its inputs can no longer be read: {why})"
    for name, why in sorted(obs.failed.items()):
        r = jobs.get(name)
        if r and r.state in (JobState.RUNNING, JobState.CANCELLING) and name not in leaving:
            out.moves.append(Move(name, JobState.FAILED, f"failed: {why}"))
            leaving[name] = f"{name} failed ({why})"
    for name, r in jobs.items():
        if name in leaving:
            continue
        if r.state is JobState.CANCELLING:
            leaving[name] = f"{name} is being cancelled"
        elif r.cancel_requested_at is not None and r.state is JobState.PENDING:
            out.moves.append(Move(name, JobState.CANCELLED, "cancelled by request before admission"))
        elif r.cancel_requested_at is not None and r.state in (JobState.ADMITTED, JobState.RUNNING):
            out.moves.append(Move(name, JobState.CANCELLING, "cancel requested: leaves the plan"))
            leaving[name] = f"{name} cancelled by request"
    placed = set(plan.jobs())
    for name in placed - set(jobs) - set(leaving):  # ended already, but the plan that removed it was never applied
        leaving[name] = f"{name} has ended; a previous plan without it could not be applied"
    gone = {n for n in leaving if n in placed}
    if gone:
        out.target = plan.without(gone)
        if reprice is not None and out.target.groups:
            out.target = reprice(out.target)
        out.decisions.append(Decision("departure", ["departure"], "changes-plan", sorted(gone), [leaving[n] for n in sorted(gone)],
                                      plan.cost_per_hour, out.target.cost_per_hour))
    return out


# ----------------------------------------------------------------------------- a'. node loss
def groups_on(plan: Placement, dead: set[str]) -> list:
    """The groups of ``plan`` that hold a node of ``dead``."""
    return [g for g in plan.groups if dead & {*g.rollout_nodes, *g.train_nodes}] if dead else []


def node_loss(ctx: PlanningContext, placer: PlacementPlanner, plan: Placement, obs: Observation,
              jobs: dict[str, JobRecord]) -> Outcome:
    """The members on a node the executor reports dead leave the plan (a whole-pool group's members
    all run on every node of its pools, and a pinned group's share its training nodes, so there the
    whole group leaves; a pinned member whose own rollout node died leaves alone, the others stay on
    theirs), and they are admitted again on the live nodes (``ctx.unavailable`` keeps every placement
    off the dead ones), oldest first, each by the placer's moves against what is placed so far. A member no live node has room
    for fails, naming the node (a running job cannot wait as pending: resubmit it once nodes are
    back). Members that already ended or failed this cycle (a trainer whose state went with the
    node: :meth:`planner.daemon.adapters.executor.ExecutorApplier.lost`) just leave; the departures
    step records them."""
    out = Outcome(plan)
    dead = set(obs.dead_nodes)
    hit = groups_on(plan, dead)
    if not hit:
        return out
    ended = set(obs.finished) | set(obs.failed)
    on = {m: sorted(dead & g.nodes_of(m)) for g in hit for m in g.members if dead & g.nodes_of(m)}
    members = sorted(on, key=lambda m: (jobs[m].admitted_at or 0.0, jobs[m].seq) if m in jobs else (0.0, 0))
    fixed = plan.without(set(members))
    reasons = []
    for g in hit:
        ns = sorted(dead & {*g.rollout_nodes, *g.train_nodes})
        leave = [m for m in g.members if m in on]
        reasons.append(f"group {g.id} holds dead node(s) {', '.join(ns)} ({'; '.join(obs.dead_nodes[n] for n in ns)}): "
                       + ("it leaves the plan" if len(leave) == len(g.members) else
                          f"{', '.join(leave)} leave{'s' if len(leave) == 1 else ''} it (pinned there), the others stay"))
    for m in members:
        if m in ended or m not in jobs or m not in ctx.jobs:
            continue
        adm = placer.admit(ctx, fixed, m)
        if adm.placement is not None:
            fixed = adm.placement
            reasons.append(f"{m}: placed again on live nodes ({adm.move}): {adm.reason}")
        else:
            why = f"its node(s) {', '.join(on[m])} died and no live node has room for it ({adm.reason})"
            out.moves.append(Move(m, JobState.FAILED, f"failed: {why}; submit it again once nodes are back"))
            reasons.append(f"{m} fails: {why}")
    if fixed.groups:
        fixed, _ = placer.evaluate(ctx, fixed)
    # (the migration leaves out the members on dead nodes and the jobs that ended: nothing moves their workers there)
    mig = gate.migration_usd(ctx, plan.without(set(on) | (ended & set(plan.jobs()))), fixed)[0] if fixed.groups else 0.0
    out.target = fixed
    out.decisions.append(Decision("repair", ["node-lost"], "changes-plan", members, reasons, plan.cost_per_hour, fixed.cost_per_hour,
                                  None, mig))
    return out



# -------------------------------------------------------------------------------- b. repair
def repair(ctx: PlanningContext, placer: PlacementPlanner, target: Placement, drifts: list[Drift], jobs: dict[str, JobRecord],
           cfg: DaemonConfig, allow_reoptimise: bool = True) -> Outcome:
    out = Outcome(target)
    if not drifts:
        return out
    why = [d.reason() for d in drifts]
    evaluated, bad = placer.evaluate(ctx, target)
    drift_jobs = sorted({d.job for d in drifts})
    if not bad:
        out.target = evaluated
        out.decisions.append(Decision("drift", ["drift"], "kept-current", drift_jobs, why + ["every group still meets its members' SLOs "
                                                                                                "at the updated estimates"],
                                      target.cost_per_hour, target.cost_per_hour))
        return out
    reasons = why + [v.message for v in bad]
    if cfg.reoptimise and not allow_reoptimise:
        reasons.append("no re-optimisation now: the executor refused a recent plan; evicting and re-admitting instead")
    left_out: set[str] = set()  # jobs the re-optimisation found no place for: they stay where they are
    if cfg.reoptimise and allow_reoptimise:
        ctx.move_price_per_job = gate.move_price_per_hour(ctx, target, amortise_s=cfg.amortise_s, margin=cfg.gain_margin)
        t0 = time.perf_counter()
        r = placer.reoptimise(ctx, target, cfg.reoptimise_time_limit_s)
        out.solve_s["repair"] = time.perf_counter() - t0
        cand, still = placer.evaluate(ctx, r.placement)
        left_out = set(target.jobs()) - set(cand.jobs())
        if not still and set(cand.jobs()) == set(target.jobs()):
            mig, moves, _ = gate.migration_usd(ctx, target, cand)
            out.target, out.reoptimised = cand, True
            out.decisions.append(Decision("repair", ["drift"], "changes-plan", drift_jobs,
                                          reasons + [f"re-optimised: every SLO met again at {cand.cost_per_hour:.2f} $/h, "
                                                     f"{len(moves)} job(s) move"],
                                          target.cost_per_hour, cand.cost_per_hour, None, mig, r.solver))
            return out
        reasons.append("the re-optimisation did not place every job within its SLO: "
                       + ("; ".join(v.message for v in still[:3]) or "it left jobs out"))
        # around the jobs no plan found serves: worth it only when it mends misses outside their groups
        ar = around.attempt(ctx, placer, target, cand, still, cfg.reoptimise_time_limit_s)
        if ar is not None:
            out.solve_s["repair"] += ar.solve_s
            if ar.valid and ar.outside:
                mig, moves, _ = gate.migration_usd(ctx, target, ar.placement)
                out.target, out.reoptimised = ar.placement, True
                out.decisions.append(Decision("repair", ["drift"], "changes-plan", drift_jobs,
                                              reasons + [f"{ar.headline()}: every other SLO met again at "
                                                         f"{ar.placement.cost_per_hour:.2f} $/h, {len(moves)} job(s) move"]
                                              + ar.stays(), target.cost_per_hour, ar.placement.cost_per_hour, None, mig,
                                              ar.result.solver))
                return out
            reasons.append(f"{ar.headline('re-optimising')} " + (
                "mends nothing: every miss is in the kept group(s)" if ar.valid else
                "did not give a valid plan either: " + "; ".join(ar.problems[:3])))
    # Evict the newest members of every broken group, then admit them again elsewhere; a job the
    # re-optimisation left out is not evicted (no place was found for it): it stays, its miss with it,
    # and the members it slows down leave it until the others meet their SLOs.
    broken = {v.where for v in bad}
    groups = target.job_groups()
    evict: list[str] = []
    fixed = target
    for gid in sorted({groups[j].id for j in broken if j in groups}):
        g = next(x for x in fixed.groups if x.id == gid)
        members = [m for m in sorted(g.members, key=lambda m: (jobs[m].admitted_at or 0.0, jobs[m].seq) if m in jobs else (0.0, 0))
                   if m not in left_out]
        left = bad  # a group's SLOs depend on its own members only
        while members and any(v.where in members for v in left):
            victim = members.pop()
            evict.append(victim)
            fixed = fixed.without({victim})
            _, left = placer.evaluate(ctx, fixed)
    stays = sorted(left_out & broken)
    stay_note = ([f"{', '.join(stays)} stay{'s' if len(stays) == 1 else ''} where {'it is' if len(stays) == 1 else 'they are'} "
                  "with the miss: the re-optimisation found no place for them"] if stays else [])
    if not evict and stays:
        out.decisions.append(Decision("repair", ["drift"], "infeasible", drift_jobs,
                                      reasons + [f"cannot repair: the re-optimisation found no place for {', '.join(stays)}, and no "
                                                 "other member of their groups misses its SLO; the plan is kept and the SLO miss "
                                                 "stays"], target.cost_per_hour, target.cost_per_hour))
        return out
    for victim in evict:
        adm = placer.admit(ctx, fixed, victim)
        if adm.placement is None:
            out.decisions.append(Decision("repair", ["drift"], "infeasible", drift_jobs,
                                          reasons + [f"cannot repair: {victim} cannot be placed again ({adm.reason}); the plan is kept "
                                                     "and the SLO miss stays until room frees up"], target.cost_per_hour,
                                          target.cost_per_hour))
            return out
        fixed = adm.placement
    fixed, _ = placer.evaluate(ctx, fixed)
    mig, moves, _ = gate.migration_usd(ctx, target, fixed)
    out.target = fixed
    out.decisions.append(Decision("repair", ["drift"], "changes-plan", sorted(set(drift_jobs) | set(evict)),
                                  reasons + [f"moved {', '.join(evict)} out of the broken group(s) and admitted them again"]
                                  + stay_note,
                                  target.cost_per_hour, fixed.cost_per_hour, None, mig))
    return out


# ---------------------------------------------------------------------------- c. admissions
def admissions(ctx: PlanningContext, placer: PlacementPlanner, target: Placement, jobs: dict[str, JobRecord], now: float,
               cfg: DaemonConfig) -> Outcome:
    out = Outcome(target)
    due = sorted((r for r in jobs.values() if r.state is JobState.PENDING and r.arrives_at <= now and r.cancel_requested_at is None),
                 key=lambda r: (r.arrives_at, r.seq))
    t0 = time.perf_counter()
    for r in due:
        adm = placer.admit(ctx, out.target, r.name)
        if adm.placement is not None:
            before = out.target.cost_per_hour
            reasons = [f"{r.name}: {adm.move}: {adm.reason}"]
            # a mandatory change, made whatever it costs; but an admission that grows or moves a running
            # member's nodes (extend-rollout-pool) costs that member a migration: logged, as the apply counts it
            placed = set(out.target.jobs()) & set(adm.placement.jobs())
            mig, moved, _ = gate.migration_usd(ctx, out.target, adm.placement) if all(j in ctx.jobs for j in placed) else (0.0, {}, {})
            if moved:
                reasons.append(f"migration {mig:.2f} $ for {len(moved)} job(s) whose nodes change: "
                               + ", ".join(f"{j} ({k})" for j, k in sorted(moved.items())))
            out.target = adm.placement
            out.moves.append(Move(r.name, JobState.ADMITTED, f"admitted ({adm.move}): {adm.reason}"))
            out.decisions.append(Decision("admit", ["arrival"], "changes-plan", [r.name], reasons,
                                          before, out.target.cost_per_hour, None, mig if moved else None))
        elif adm.permanent:
            out.moves.append(Move(r.name, JobState.REJECTED, f"rejected: {adm.reason}"))
            out.decisions.append(Decision("reject", ["arrival"], "rejected", [r.name], [f"{r.name}: {adm.reason}"]))
        elif cfg.admission_timeout_s is not None and now - r.arrives_at >= cfg.admission_timeout_s:
            out.moves.append(Move(r.name, JobState.REJECTED, f"rejected: waited {now - r.arrives_at:.0f} s for room "
                                                             f"(deadline {cfg.admission_timeout_s:.0f} s): {adm.reason}"))
            out.decisions.append(Decision("reject", ["admission-deadline"], "rejected", [r.name], [f"{r.name}: {adm.reason}"]))
        elif r.reason != f"waiting: {adm.reason}":
            out.decisions.append(Decision("wait", ["arrival"], "waiting", [r.name], [f"{r.name}: {adm.reason}"]))
            out.moves.append(Move(r.name, None, f"waiting: {adm.reason}"))
    if due:
        out.solve_s["admit"] = time.perf_counter() - t0
    return out


# ------------------------------------------------------------------------ d. re-optimisation
def reoptimise(ctx: PlanningContext, placer: PlacementPlanner, target: Placement, cfg: DaemonConfig, bucket: TokenBucket,
               now: float, triggers: list[str]) -> Outcome:
    out = Outcome(target)
    if not target.groups:
        return out
    ctx.move_price_per_job = gate.move_price_per_hour(ctx, target, amortise_s=cfg.amortise_s, margin=cfg.gain_margin)
    t0 = time.perf_counter()
    r = placer.reoptimise(ctx, target, cfg.reoptimise_time_limit_s)
    out.solve_s["reoptimise"] = time.perf_counter() - t0
    out.reoptimised = True
    cand, bad = placer.evaluate(ctx, r.placement)
    head: list[str] = []

    def decision(outcome: str, jobs: list[str], reasons: list[str], gain_usd: Optional[float] = None,
                 migration_usd: Optional[float] = None) -> Decision:
        return Decision("reoptimise", triggers, outcome, jobs, reasons, cost_before=target.cost_per_hour,
                        cost_after=cand.cost_per_hour, gain_usd=gain_usd, migration_usd=migration_usd, solver=r.solver)

    if bad or set(cand.jobs()) != set(target.jobs()):
        miss = sorted(set(target.jobs()) - set(cand.jobs()))
        why = [v.message for v in bad[:5]] + ([f"it leaves out {', '.join(miss)}"] if miss else [])
        ar = around.attempt(ctx, placer, target, cand, bad, cfg.reoptimise_time_limit_s)
        if ar is not None:
            out.solve_s["reoptimise"] += ar.solve_s
        if ar is None or not ar.valid:
            tried = [] if ar is None else [f"{ar.headline('re-optimising')} did not give a valid plan either: {ar.result.reason}"] + ar.problems
            d = decision("infeasible", [], [r.reason, "kept the current plan: the re-optimised plan is not valid"] + why + tried)
            # nothing changes: the cost after is the plan's (the invalid plan's, which leaves jobs out, read as a saving)
            d.cost_after = target.cost_per_hour
            out.decisions.append(d)
            return out
        head = [f"{ar.headline()}: the whole re-optimisation was not valid ({'; '.join(why[:3])})"] + ar.stays()
        r, cand = ar.result, ar.placement
    v = gate.judge(ctx, target, cand, amortise_s=cfg.amortise_s, margin=cfg.gain_margin)
    reasons = head + [r.reason] + v.reasons
    n_moved = sum(1 for k in v.moves.values() if k == "moved")
    if v.keep and not bucket.allows(n_moved, now):
        wait = bucket.wait_s(n_moved)
        when = (f"enough in {wait:.0f} s" if wait != float("inf") else
                f"never at this budget: it holds at most {bucket.capacity:g}; raise --max-moves-per-hour to allow it")
        reasons.append(f"rate-limited: {n_moved} move(s) exceed the churn budget ({bucket.tokens:.1f} of "
                       f"{cfg.max_moves_per_hour:g} per hour left; {when})")
        out.decisions.append(decision("rate-limited", sorted(v.moves), reasons, v.gain_usd, v.migration_usd))
        return out
    if v.keep:
        bucket.take(n_moved, now)
        out.target, out.moved_jobs = cand, n_moved
        out.decisions.append(decision("changes-plan", sorted(v.moves), reasons, v.gain_usd, v.migration_usd))
    else:
        out.decisions.append(decision("kept-current", sorted(v.moves), reasons, v.gain_usd, v.migration_usd))
    return out
