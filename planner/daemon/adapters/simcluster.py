"""A simulated cluster for ``--backend sim``: applies placements with a journal, runs the jobs.

What it models (enough to close the loop, nothing more):

* **what runs where**: groups with their pinned nodes and members, in its own SQLite file (a
  different system from the daemon's state, as a real cluster is);
* **apply**: the steps from what runs to the target -- stop each job that leaves or whose pins
  change, then start each job that arrives or moved -- each step journaled and carried out in one
  transaction with its journal row, so a daemon killed mid-apply resumes with the remaining steps
  and never repeats one; ``should_stop`` is checked between steps (SIGTERM);
* **the jobs' real speed**: a job's true phase times are the estimators' on its group's pools
  times a hidden per-job factor drawn once from ``[slow_lo, slow_hi]`` (seeded by job name), times
  a per-iteration noise of ``±noise``. "The estimators'" are exactly the figures the daemon predicts
  a member's phases with (``predict`` of its placer): in the cluster's ``solver.phase_time_estimate``
  (``Truth.mode`` only overrides it), the rollout on the member's own rollout node count, training
  on the group's training pool, and the weight sync the planner's table holds for the pool-type
  pair (at the job's own node counts). So the ratio the daemon measures, measured / predicted, is
  the job's factor (times the noise) on every pool it is moved to. (The truth was computed in the
  ``conservative`` mode whatever the cluster's: on the ``sampled`` weave-trace-60 that made the
  ratio 1.1-1.9x on rollout and ~3.4x on training for one job, depending on the pools, and a job
  moved to cheaper pools at its factor in force missed there and was moved back.) Members of a group iterate once per
  round-robin cycle, whose period is ``max(Σ rollout, Σ train+sync, max_j rollout_j + train_j)``
  (the cycle time of :doc:`DESIGN.md §4`); ``observe`` reports the last few iterations of each
  job with their measured phase times;
* **departures**: a job finishes after ``duration_s`` seconds of running (jobs without one run
  until cancelled); a job whose true times cannot be computed any more (a file its spec names was
  deleted or damaged) is reported failed, and its group's other members run without it.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from simulator import phasetimes as phases  # the one phase-time model (what the planners assume)
from planner.daemon.sqlitedb import SQLiteFile
from planner.errors import Problem, UserError
from planner.daemon.ports import ApplyResult, Group, IterationSample, Observation, Placement
from planner.instances.common import ClusterView, job_profile, resolve_gpu_types
from planner.schema.scenario import JobSpec, Scenario

DDL = """
CREATE TABLE IF NOT EXISTS sim_groups (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sim_jobs (job TEXT PRIMARY KEY, grp TEXT, run_s REAL NOT NULL DEFAULT 0, progress REAL NOT NULL DEFAULT 0,
    last_obs REAL NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sim_journal (id INTEGER PRIMARY KEY, plan_id INTEGER NOT NULL, step INTEGER NOT NULL, action TEXT NOT NULL,
    job TEXT NOT NULL, grp TEXT NOT NULL, at REAL NOT NULL, UNIQUE(plan_id, step));
CREATE TABLE IF NOT EXISTS sim_realloc (id INTEGER PRIMARY KEY, job TEXT NOT NULL, at REAL NOT NULL, body TEXT NOT NULL);
"""

SAMPLES_PER_OBSERVE = 3
TABLES = {"sim_groups": "table", "sim_jobs": "table", "sim_journal": "table", "sim_realloc": "table"}
SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_path(path: Path, flag: str, what: str, fix: str) -> None:
    """Before anything is created: ``path`` is a new file in an existing folder, or an existing
    regular file that is empty or a SQLite database (a folder or a text file is refused)."""
    import os
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UserError(Problem(flag, f"{path} is a link to nothing", fix)) from None
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise UserError(Problem(flag, f"the folder {parent} of {path} does not exist", f"create it first, or {fix}")) from None
        return
    except OSError as exc:
        raise UserError(Problem(flag, f"cannot read {path}: {exc.strerror}", fix)) from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(Problem(flag, f"{path} is a folder, not {what}", fix))
    if not stat.S_ISREG(st.st_mode):
        raise UserError(Problem(flag, f"{path} is not a regular file, so not {what}", fix))
    if st.st_size == 0:
        return
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise UserError(Problem(flag, f"cannot read {path}: {exc.strerror}", fix)) from None
    if head != SQLITE_HEADER:
        raise UserError(Problem(flag, f"{path} is not {what} (not a SQLite file)", fix))


def check_state_file(path: Path, flag: str = "--sim-state") -> None:
    """The simulated cluster's file, checked before the daemon creates anything: absent (it is
    created), empty, or a SQLite file holding only this cluster's tables; opened read-only."""
    from urllib.parse import quote

    from executor.dbschema import verify

    fix = f"pass a {flag} path that does not exist yet (it is created) or that a daemon's simulated cluster wrote"
    check_sqlite_path(path, flag, "a simulated cluster's state file", fix)
    if not path.exists() or path.stat().st_size == 0:
        return
    # Without a -wal file the main file is the whole database: opened immutable, SQLite creates no -wal or -shm beside it.
    wal = path.with_name(path.name + "-wal").exists()
    try:
        c = sqlite3.connect(f"file:{quote(str(path.resolve()))}?{'mode=ro' if wal else 'immutable=1'}", uri=True,
                            isolation_level=None, timeout=30)
    except sqlite3.DatabaseError as exc:
        raise UserError(Problem(flag, f"{path} is not a simulated cluster's state file ({exc})", fix)) from None
    try:
        verify(c, path, TABLES, flag, fix, what="simulated cluster's state file")
    finally:
        c.close()


@dataclass(frozen=True)
class Truth:
    mode: Optional[str] = None  # None: the cluster's solver.phase_time_estimate, the mode the daemon's estimates are in
    slow_lo: float = 1.0
    slow_hi: float = 1.0
    noise: float = 0.0
    seed: int = 0

    def factor(self, job: str) -> float:
        u = _unit(f"{self.seed}:{job}")
        return self.slow_lo + (self.slow_hi - self.slow_lo) * u

    def jitter(self, job: str, iteration: int) -> float:
        return 1.0 + self.noise * (2.0 * _unit(f"{self.seed}:{job}:{iteration}") - 1.0)


def _unit(key: str) -> float:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0**64


@dataclass(frozen=True)
class Step:
    action: str  # stop | start
    job: str
    group: str


def diff(running: dict[str, Group], target: Placement) -> list[Step]:
    """Steps from what runs (job -> its group) to the target: stops first, then starts; each with its group."""
    want = target.job_groups()
    stops = [Step("stop", j, g.id) for j, g in sorted(running.items()) if j not in want or want[j].pins(j) != g.pins(j)]
    starts = [Step("start", j, g.id) for j, g in sorted(want.items()) if j not in running or running[j].pins(j) != g.pins(j)]
    return stops + starts


class SimCluster:
    name = "sim"

    def __init__(self, path: str | Path, cluster: Scenario, spec_of: Callable[[str], Optional[JobSpec]], truth: Truth = Truth(),
                 step_delay_s: float = 0.0) -> None:
        self.path = Path(path)
        self.step_delay_s = step_delay_s  # wall seconds each step takes (a real start takes minutes; tests need a window)
        self.on_progress: Callable[[], None] = lambda: None  # set by the daemon: called after each step (the loop's progress)
        self.cluster = cluster
        self.view = ClusterView(cluster, resolve_gpu_types(cluster))
        self.spec_of = spec_of
        self.truth = truth
        self.mode = truth.mode or cluster.solver.phase_time_estimate
        self._times: dict[tuple, tuple[float, float]] = {}
        self.db = SQLiteFile(self.path)
        from executor.dbschema import verify

        fix = "pass a --sim-state path that does not exist yet (it is created) or that a daemon's simulated cluster wrote"
        try:
            verify(self.db.conn(), self.path, TABLES, "--sim-state", fix, what="simulated cluster's state file")
            with self.db.tx() as c:
                self.db.run_ddl(c, DDL)
        except (sqlite3.DatabaseError, UserError) as exc:
            self.db.close()
            if isinstance(exc, UserError):
                raise
            raise UserError(Problem("--sim-state", f"{self.path} is not a simulated cluster's state file ({exc})", fix)) from None

    # ------------------------------------------------------------------ storage
    def _conn(self) -> sqlite3.Connection:
        return self.db.conn()

    def _tx(self):
        return self.db.tx()

    def close(self) -> None:
        self.db.close()

    def _running(self, c: sqlite3.Connection) -> dict[str, Group]:
        groups = {r["id"]: Group.from_dict(json.loads(r["data"])) for r in c.execute("SELECT * FROM sim_groups")}
        return {r["job"]: groups[r["grp"]] for r in c.execute("SELECT job, grp FROM sim_jobs WHERE state='running'")}

    def running_groups(self) -> dict[str, Group]:
        return self._running(self._conn())

    # ------------------------------------------------------------------ truth
    def _true_times(self, job: str, g: Group) -> tuple[float, float]:
        n_r = len(g.rollout_of(job))
        key = (job, g.rollout_type, n_r, g.train_type, len(g.train_nodes))
        if key not in self._times:
            spec = self.spec_of(job)
            if spec is None:
                raise RuntimeError(f"the simulated cluster runs job '{job}', which the daemon's store does not know "
                                   "(state files of two different daemons?)")
            prof = job_profile(spec)
            rp, tp = self.view.pool(g.rollout_type, n_r), self.view.pool(g.train_type, len(g.train_nodes))
            a = phases.rollout_s(prof, rp, self.mode)
            # the weight sync as the planner tables it: one figure per pool-type pair, at the job's own node counts
            sync = phases.sync_s(prof, self.view.pool(g.rollout_type, spec.rollout.nodes), self.view.pool(g.train_type, spec.trainer.nodes),
                                 self.view.inter_cluster_bw(g.rollout_type, g.train_type))
            b = phases.train_s(prof, tp, self.mode) + sync
            f = self.truth.factor(job)
            self._times[key] = (a * f, b * f)
        return self._times[key]

    def _cycle(self, g: Group, members: list[str], iteration: int | None = None) -> tuple[float, dict[str, tuple[float, float]]]:
        per = {}
        for m in members:
            a, b = self._true_times(m, g)
            j = self.truth.jitter(m, iteration) if iteration is not None else 1.0
            per[m] = (a * j, b * j)
        # every member shares the training pool; a rollout node's ring holds the members pinned to it
        # (all of them on a whole-pool group, one each on a pinned one)
        ring: dict[str, float] = {}
        for m in members:
            for n in g.rollout_of(m):
                ring[n] = ring.get(n, 0.0) + per[m][0]
        cycle = max(max(ring.values(), default=0.0), sum(b for _, b in per.values()), max(a + b for a, b in per.values()))
        return cycle, per

    # ------------------------------------------------------------------ the port
    def _advance(self, r: sqlite3.Row, cycle: float, spec: Optional[JobSpec], now: float) -> tuple[float, float, bool]:
        """(run_s, progress) of a running job at ``now`` and whether it has finished; reads nothing else."""
        dt = max(0.0, now - r["last_obs"])
        if spec is not None and spec.duration_s is not None:
            dt = min(dt, max(0.0, spec.duration_s - r["run_s"]))
        run_s = r["run_s"] + dt
        progress = r["progress"] + (dt / cycle if cycle > 0 else 0.0)
        finished = spec is not None and spec.duration_s is not None and run_s >= spec.duration_s - 1e-9
        return run_s, progress, finished

    def _members(self, c: sqlite3.Connection) -> tuple[dict[str, Group], dict[str, list[str]], list[sqlite3.Row], dict[str, str]]:
        """Groups, running members per group, their rows, and the running jobs left out because
        their true times cannot be computed (job -> why: a file their spec names no longer reads)."""
        groups = {r["id"]: Group.from_dict(json.loads(r["data"])) for r in c.execute("SELECT * FROM sim_groups")}
        rows = list(c.execute("SELECT * FROM sim_jobs WHERE state='running' ORDER BY job"))
        members: dict[str, list[str]] = {}
        broken: dict[str, str] = {}
        for r in rows:
            g = groups.get(r["grp"])
            if g is not None:
                try:
                    self._true_times(r["job"], g)
                except ValueError as exc:  # TraceError, HFConfigError: the spec's files no longer read
                    broken[r["job"]] = f"the simulated cluster cannot time it any more: {type(exc).__name__}"
                    continue
            members.setdefault(r["grp"], []).append(r["job"])
        return groups, members, [r for r in rows if r["job"] not in broken], broken

    def observe(self, now: float) -> Observation:
        """What runs, what finished, the last few iterations: a pure read (observing twice at the same
        time gives the same answer, so a daemon that crashes after observing loses nothing)."""
        obs = Observation()
        c = self._conn()
        groups, members, rows, broken = self._members(c)
        obs.failed.update(broken)
        for r in rows:
            job, g = r["job"], groups.get(r["grp"])
            if g is None:
                continue
            spec = self.spec_of(job)
            cycle, _ = self._cycle(g, members[g.id])
            _, progress, finished = self._advance(r, cycle, spec, now)
            done = int(math.floor(progress + 1e-9))
            obs.iterations[job] = done
            for k in range(max(1, done - SAMPLES_PER_OBSERVE + 1), done + 1):
                cyc_k, per = self._cycle(g, members[g.id], k)
                a, b = per[job]
                obs.samples.append(IterationSample(job, k, a, b, cyc_k))
            if finished:
                assert spec is not None and spec.duration_s is not None  # _advance finishes only jobs with a duration
                obs.finished[job] = f"finished after {spec.duration_s:.0f} s of running"
            else:
                obs.running[job] = g.id
        return obs

    def phase(self, job: str, now: float) -> Optional[tuple[int, float, float, float]]:
        """Where a running job is in its iteration at ``now``: (iteration, fraction of it done, share
        of the iteration its rollout takes, iteration seconds); None when it does not run here."""
        c = self._conn()
        groups, members, rows, _ = self._members(c)
        r = next((r for r in rows if r["job"] == job), None)
        if r is None:
            return None
        g = groups.get(r["grp"])
        if g is None:
            return None
        cycle, per = self._cycle(g, members[g.id])
        _, progress, _ = self._advance(r, cycle, self.spec_of(job), now)
        a, b = per[job]
        return int(progress), progress - int(progress), a / (a + b) if a + b > 0 else 0.5, cycle

    def _settle(self, c: sqlite3.Connection, now: float) -> None:
        """Bring every running job's progress up to ``now`` before the groups change (idempotent at one time)."""
        groups, members, rows, _ = self._members(c)
        for r in rows:
            g = groups.get(r["grp"])
            if g is None or r["last_obs"] >= now:
                continue
            cycle, _ = self._cycle(g, members[g.id])
            run_s, progress, _ = self._advance(r, cycle, self.spec_of(r["job"]), now)
            c.execute("UPDATE sim_jobs SET run_s=?, progress=?, last_obs=? WHERE job=?", (run_s, progress, now, r["job"]))

    def apply(self, target: Placement, *, plan_id: int, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        return self._carry_out(target, plan_id, now, should_stop)

    def resume(self, plan_id: int, target: Placement, *, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        return self._carry_out(target, plan_id, now, should_stop)

    def _carry_out(self, target: Placement, plan_id: int, now: float, should_stop: Callable[[], bool]) -> ApplyResult:
        c = self._conn()
        steps = diff(self._running(c), target)
        done_before = c.execute("SELECT COUNT(*) FROM sim_journal WHERE plan_id=?", (plan_id,)).fetchone()[0]
        total = done_before + len(steps)
        by_id = {g.id: g for g in target.groups}
        for i, st in enumerate(steps):
            if should_stop():
                return ApplyResult(False, done_before + i, total, f"stopped between steps ({done_before + i}/{total} done); "
                                   "the journal resumes it", interrupted=True)
            if self.step_delay_s > 0:
                time.sleep(self.step_delay_s)
            with self._tx() as c:
                self._settle(c, now)
                step_no = c.execute("SELECT COALESCE(MAX(step), 0) + 1 FROM sim_journal WHERE plan_id=?", (plan_id,)).fetchone()[0]
                if st.action == "stop":
                    c.execute("UPDATE sim_jobs SET state='stopped', grp=NULL WHERE job=? AND state='running'", (st.job,))
                else:
                    g = by_id[st.group]
                    c.execute("INSERT INTO sim_groups(id, data) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET data=excluded.data",
                              (g.id, json.dumps(g.as_dict(), sort_keys=True)))
                    c.execute("INSERT INTO sim_jobs(job, grp, last_obs, state) VALUES (?, ?, ?, 'running') ON CONFLICT(job) DO UPDATE SET "
                              "grp=excluded.grp, last_obs=excluded.last_obs, state='running'", (st.job, g.id, now))
                c.execute("INSERT INTO sim_journal(plan_id, step, action, job, grp, at) VALUES (?,?,?,?,?,?)",
                          (plan_id, step_no, st.action, st.job, st.group, now))
            self.on_progress()
        with self._tx() as c:  # groups now: what the target says (pools resized, emptied groups gone)
            self._settle(c, now)
            live = {r["grp"] for r in c.execute("SELECT DISTINCT grp FROM sim_jobs WHERE state='running'")}
            c.execute("DELETE FROM sim_groups")
            for g in target.groups:
                if g.id in live:
                    c.execute("INSERT INTO sim_groups(id, data) VALUES (?, ?)", (g.id, json.dumps(g.as_dict(), sort_keys=True)))
        running = frozenset(self._running(self._conn()))
        return ApplyResult(True, total, total, f"{len(steps)} step(s) carried out" + (f", {done_before} already done before" if done_before else ""),
                           running=running)

    def apply_realloc(self, job: str, body: dict, *, now: float, decision_id: Optional[int] = None) -> ApplyResult:
        with self._tx() as c:
            c.execute("INSERT INTO sim_realloc(job, at, body) VALUES (?,?,?)", (job, now, json.dumps(body, sort_keys=True, default=str)))
        return ApplyResult(True, 1, 1, "reallocation recorded by the simulated cluster")

    def journal(self) -> list[dict]:
        return [dict(r) for r in self._conn().execute("SELECT plan_id, step, action, job, grp, at FROM sim_journal ORDER BY id")]
