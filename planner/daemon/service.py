"""The daemon process: state, lease, loop, heartbeat, HTTP server and signals, put together.

Threads: the **main thread** runs the loop (cycles at the period on the injected clock) and owns
the signal handlers; the **HTTP server** (uvicorn) runs in a thread of its own, its handlers in
a thread pool, each with its own SQLite connection; the **heartbeat** renews the applier lease
every third of its TTL while the loop keeps making progress (a cycle ends, its wait ticks, an
executor step completes; a wedged loop lets the lease lapse, so a standby can take over).

SIGTERM or SIGINT: the loop stops starting cycles; a cycle in progress finishes its current
step (the executor checks between steps; an apply stopped there stays journaled and ``applying``,
and the next start resumes it), then the HTTP server drains, the lease is released and the
process exits 0. A second signal exits at once (status 130).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sqlite3
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from planner import __version__
from planner.daemon.auth import Limits
from planner.daemon.clock import Clock, VirtualClock, WallClock
from planner.daemon.config import DaemonConfig
from planner.daemon.cycle import LeaseLost, Loop
from planner.daemon.lease import Lease
from planner.daemon.metrics import DaemonMetrics
from planner.daemon.sqlitedb import busy_timeout_s, is_locked
from planner.daemon.ports import Executor, Placement, Reallocator
from planner.daemon.store import Conflict, JobRecord, NotFound, StateFileError, Store
from planner.errors import Problem, UserError
from planner.schema.scenario import JobSpec, Scenario

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("planner.daemon")

MAX_FAILED_CYCLES = 5  # consecutive failed cycles before the daemon gives up (exit 1) for a supervisor to restart it


@dataclass
class Options:
    state: Path
    scenario: Optional[Path] = None
    backend: str = "sim"
    placer: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8765
    cfg: DaemonConfig = field(default_factory=DaemonConfig)
    standby: bool = False
    wall_s_per_cycle: float = 0.0  # virtual clock: pace the replay
    sim_state: Optional[Path] = None
    sim_truth: Optional[dict] = None  # Truth fields for the simulated cluster
    sim_step_delay_s: float = 0.0
    sim_requests: int = 0  # requests each job's rollout engines get when it starts (executor's simulated backend)
    sim_telemetry: bool = False  # the simulated cluster posts each running job's telemetry every cycle
    ready_file: Optional[Path] = None
    token_file: Optional[Path] = None
    ray_address: Optional[str] = None
    insecure: bool = False
    allow_hosts: tuple = ()  # Host names the API answers besides loopback and the listen address ('*': any)
    tls_cert: Optional[Path] = None
    tls_key: Optional[Path] = None
    limits: Limits = field(default_factory=Limits)
    data_dir: Optional[Path] = None  # trace files a submitted job may name (planner.daemon.datafiles); None: none

    def beside(self, suffix: str) -> Path:
        """A file the daemon keeps next to its state: ``STATE.journal`` and ``STATE.executor-sim`` (the
        executor's journal and simulated cluster), ``STATE.sim``."""
        return self.state.with_name(self.state.name + suffix)

    @property
    def sim_file(self) -> Path:
        """The simulated cluster's own file: ``--sim-state``, by default ``STATE.sim``."""
        return self.sim_state or self.beside(".sim")


# --------------------------------------------------------------------------------- cluster
def _cluster_of(sc: Scenario) -> Scenario:
    return sc.model_copy(update={"jobs": []})


def load_cluster(store: Store, scenario_path: Optional[Path]) -> tuple[Scenario, list[JobSpec]]:
    """The cluster the state file belongs to, and the scenario's jobs (a trace to submit)."""
    from planner.plandoc import scenario_digest
    from planner.schema import load_scenario

    stored = store.get_meta("cluster")
    if scenario_path is None:
        if stored is None:
            raise UserError(Problem("--scenario", f"the state file {store.path} is new and knows no cluster",
                                    "pass --scenario CLUSTER.yaml (a scenario: gpu_types, cluster, solver; its jobs, if any, are submitted)"))
        return Scenario.model_validate(stored), []
    sc = load_scenario(scenario_path)
    cluster = _cluster_of(sc)
    digest = scenario_digest(cluster)
    if stored is not None and store.get_meta("cluster_digest") != digest:
        raise UserError(Problem("--scenario", f"{scenario_path} describes a different cluster (digest {digest}) from the one the state "
                                f"file {store.path} was created for ('{stored.get('name')}', digest {store.get_meta('cluster_digest')})",
                                "pass the same cluster (fleet, prices, solver options), or use a new --state file"))
    if stored is None:
        with store.tx() as c:
            row = c.execute("SELECT value FROM meta WHERE key='cluster_digest'").fetchone()  # a daemon started beside this one
            if row is None:
                store.set_meta(c, "cluster", cluster.model_dump(mode="json"))
                store.set_meta(c, "cluster_digest", digest)
                store.set_meta(c, "created_at", time.time())
        if store.get_meta("cluster_digest") != digest:
            raise UserError(Problem("--scenario", f"{scenario_path} describes a different cluster (digest {digest}) from the one a daemon "
                                    f"started at the same time wrote into the new state file {store.path} (digest "
                                    f"{store.get_meta('cluster_digest')})", "pass the same cluster, or use another --state file"))
    return cluster, list(sc.jobs)


def check_job(cluster: Scenario, job: JobSpec) -> float:
    """Cross-check a submitted job against the cluster like a scenario file; its SLO in seconds."""
    from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types
    from planner.schema.checks import check_scenario

    from estimators.traces import TraceError
    from planner.schema.workload import QuantileTable, TraceColumn, default_prompt_tokens, table_of, tool_latency_too_long

    r = job.rollout
    for where, spec in (("rollout.response_lengths", r.response_lengths), ("rollout.prompt_lengths", r.prompt_lengths),
                        ("rollout.tools.latency", r.tools.latency if r.tools is not None else None)):
        if not isinstance(spec, (TraceColumn, QuantileTable)):
            continue
        try:  # a trace is read (bounded) here, so that a bad file is a 422 naming the field
            table = table_of(spec)
        except TraceError as exc:
            raise UserError(Problem(where, exc.message, exc.fix), title=f"job '{job.name}' cannot run on this cluster") from None
        # prompt_tokens defaults to the prompts' mean as in a scenario file (resolve_workloads): before, a
        # submitted job kept 512 and was checked and estimated at that length (an outside audit)
        bad = default_prompt_tokens(r, table) if spec is r.prompt_lengths else \
            tool_latency_too_long(table, quote=isinstance(spec, QuantileTable)) if where == "rollout.tools.latency" else None
        # (as resolve_workloads; a trace file's value is not quoted, planner.daemon.datafiles)
        if bad is not None:
            raise UserError(Problem(where, *bad), title=f"job '{job.name}' cannot run on this cluster")
    sc = cluster.model_copy(update={"jobs": [job]})
    try:
        check_scenario(sc)
    except UserError as exc:
        for p in exc.problems:
            if p.where.startswith("jobs[0]."):
                p.where = p.where[len("jobs[0]."):]
            elif p.where == "jobs[0]":
                p.where = ""
        raise UserError(exc.problems, title=f"job '{job.name}' cannot run on this cluster") from None
    est = estimate_job(job, ClusterView(sc, resolve_gpu_types(sc)), cluster.solver.phase_time_estimate)
    return float(est.slo_s)


# --------------------------------------------------------------------------------- service
class Service:
    """What the HTTP API and the main loop share."""

    def __init__(self, opts: Options, store: Store, cluster: Scenario, clock: Clock, metrics: DaemonMetrics, lease: Lease) -> None:
        self.opts, self.cfg = opts, opts.cfg
        self.store, self.cluster, self.clock, self.metrics, self.lease = store, cluster, clock, metrics, lease
        self.loop: Optional[Loop] = None
        self.stopping = False
        self.beat = time.monotonic()
        self.last_cycle_wall: Optional[float] = None
        self.placer_name = opts.placer
        self.role = "starting"
        from planner.daemon.ingest import TelemetryIngest

        self.ingest = TelemetryIngest(store, metrics)
        self.lateness_max = 0.0
        self.cycle_walls: deque[float] = deque(maxlen=SLOW_CYCLES)  # the last cycles' wall seconds (wall clock; note_cycle)
        self.last_error: Optional[str] = None
        self.heartbeat_error: Optional[str] = None  # the heartbeat's last renewal failed (a locked state file): why

    # ---- API side
    def now(self) -> float:
        """The daemon's time. A standby's virtual clock does not tick (its loop waits for the lease): the
        applier's loop saves its clock with every cycle, so the standby reads it from the store, and a job
        submitted through it arrives (and ``/v1/health`` says it is) at the applier's time, not at the time
        the standby started."""
        if self.role == "standby" and self.clock.kind == "virtual":
            t = self.store.get_kv("clock_s")
            if t is not None:
                self.clock.advance_to(t)
        return self.clock.now()

    def submit(self, job: JobSpec, *, arrives_at: float | None = None, by: str | None = None) -> JobRecord:
        if self.store.job_state(job.name) is not None:
            raise Conflict(f"a job named '{job.name}' already exists", "name", "job names are unique: choose another name")
        from planner.daemon.datafiles import confine

        job = confine(job, self.opts.data_dir)
        from planner.schema.workload import TraceColumn

        # prompt_tokens the trace's mean (set by check_job): read again from the file with it (datafiles.job_spec)
        from_trace = isinstance(job.rollout.prompt_lengths, TraceColumn) and "prompt_tokens" not in job.rollout.model_fields_set
        slo = check_job(self.cluster, job)
        now = self.now()
        if arrives_at is None:
            arrives_at = max(job.arrival_s, now) if self.clock.kind != "wall" else now
        return self.store.submit_job(job.name, job.model_dump(mode="json"), now, arrives_at, slo, by=by,
                                     max_live=self.opts.limits.max_jobs_per_token if by is not None else None,
                                     prompt_tokens_from_trace=from_trace)

    def submit_trace(self, trace: list[JobSpec]) -> None:
        """Submit the ``--scenario`` file's jobs, once: a job that exists (an earlier start, or a daemon
        started beside this one) is skipped. On a virtual clock a job arrives at its ``arrival_s``, or now
        when the clock has passed it (a job added to the file before a later start): an arrival in the
        past counted as time spent waiting, and such a job was rejected at its first cycle as having
        waited past ``--admission-timeout-s``. On the wall clock it arrives now."""
        for job in trace:
            if self.store.job_state(job.name) is None:
                try:
                    self.submit(job)
                except Conflict:  # the other daemon submitted it between the check and the insert
                    pass
            else:
                changed = self.changed_fields(job)
                if changed:
                    rec = self.store.get_job(job.name)
                    log.warning("--scenario: job %s differs from the job of that name submitted at %.0f s (%s: %s); the daemon "
                                "keeps the submitted one (state %s): to run the new one, cancel %s and submit it under "
                                "another name", job.name, rec.submitted_at, "fields" if len(changed) > 1 else "field",
                                ", ".join(changed[:6]) + (", ..." if len(changed) > 6 else ""), rec.state.value, job.name)

    def changed_fields(self, job: JobSpec) -> list[str]:
        """The fields (dotted paths) in which a ``--scenario`` job differs from the stored job of its name,
        both as a submission stores them (paths confined, a model file read into its dimensions, a
        ``prompt_tokens`` not given defaulted to its distribution's mean as :func:`check_job` does, without
        its estimate; one that is its trace's mean left out); ``[]`` when they agree or the file's job cannot
        be compared (a refusal it would get is the submission's, not this check's)."""
        from estimators.traces import TraceError
        from planner.daemon.datafiles import confine
        from planner.schema.workload import QuantileTable, TraceColumn, default_prompt_tokens, table_of

        rec = self.store.get_job(job.name)
        try:
            mine = confine(job, self.opts.data_dir)
            if isinstance(mine.rollout.prompt_lengths, (TraceColumn, QuantileTable)):
                default_prompt_tokens(mine.rollout, table_of(mine.rollout.prompt_lengths))
            new = mine.model_dump(mode="json")
        except (UserError, TraceError):
            return []
        old = dict(rec.spec)
        if rec.prompt_tokens_from_trace:
            for d in (new, old):
                d["rollout"] = {k: v for k, v in (d.get("rollout") or {}).items() if k != "prompt_tokens"}
        out: list[str] = []

        def walk(a, b, path: str) -> None:
            if isinstance(a, dict) and isinstance(b, dict):
                for k in sorted(set(a) | set(b)):
                    walk(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
            elif a != b:
                out.append(path or "(the job)")

        walk(old, new, "")
        return out

    def group_of(self, name: str) -> Optional[dict]:
        p = self.store.current_plan()
        if p is None:
            return None
        g = Placement.from_dict(p.placement).job_groups().get(name)
        return g.as_dict() if g else None

    def status(self) -> dict:
        holder = self.lease.holder()
        problems = []
        lag = None
        if self.last_cycle_wall is not None:
            lag = time.time() - self.last_cycle_wall
        stall = self.stall_s()
        if self.role in ("applier", "dry-run") and time.monotonic() - self.beat > stall:
            problems.append(f"the loop has made no progress for {time.monotonic() - self.beat:.0f} s (limit {stall:.0f} s)")
        if self.role in ("applier", "dry-run") and not self.lease.held:
            problems.append("this daemon no longer holds the applier lease")
        if self.role == "standby":
            problems.append("standby: another daemon holds the applier lease")
        if self.heartbeat_error:
            problems.append(self.heartbeat_error)
        if (self.role in ("applier", "dry-run") and holder is not None and holder.holder == self.lease.id
                and holder.expires_at < time.time()):
            problems.append(f"this daemon's applier lease expired {time.time() - holder.expires_at:.0f} s ago without being renewed")
        if self.last_error:
            problems.append(self.last_error)
        if self.loop is not None and self.role in ("applier", "dry-run"):
            problems += self.loop.problems()  # a stuck apply; jobs failed for files that no longer read
        ready = not problems and not self.stopping  # /readyz: a slow loop still makes progress, so it stays ready
        slow = self.slow_problem(lag, stall)
        if slow is not None:
            problems.append(slow)
        p = self.store.current_plan()
        status = "stopping" if self.stopping else ("degraded" if problems else "ok")
        return {"status": status, "version": __version__, "role": self.role, "backend": self.opts.backend, "placer": self.placer_name,
                "clock": self.clock.kind, "clock_s": self.now(), "period_s": self.cfg.period_s,
                "cycle": self.loop.cycle_no if self.loop else int(self.store.get_kv("cycle", 0)), "last_cycle_wall": self.last_cycle_wall,
                "loop_lag_s": lag, "lease": holder.as_dict() if holder else None,
                "lease_holder": holder.describe() if holder else "nobody", "plan_id": p.id if p else None,
                "plan_cost_per_hour": p.cost_per_hour if p else 0.0, "jobs": self.store.count_jobs(), "problems": problems,
                "ready": ready}

    def note_cycle(self, wall_s: float) -> None:
        """A cycle of the loop ended after ``wall_s`` seconds (its :attr:`CycleReport.wall_s`)."""
        self.cycle_walls.append(float(wall_s))

    def slow_problem(self, lag: Optional[float], stall: float) -> Optional[str]:
        """The problem of a loop that cannot keep its period (wall clock): each of its last
        :data:`SLOW_CYCLES` cycles took longer than ``--period-s`` (short of the stall limit, which
        :meth:`status` reports on its own). One slow cycle (a placement solved on an arrival) is none.
        Not a readiness problem: the loop makes progress, later than its period says."""
        walls = list(self.cycle_walls)
        period = self.cfg.period_s
        if (self.clock.kind != "wall" or self.role not in ("applier", "dry-run") or len(walls) < SLOW_CYCLES
                or min(walls) <= period):
            return None
        def s(x: float) -> str:  # (two decimals hid cycles of milliseconds: "0.00 s took longer than the period of 0.001 s")
            return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"

        took = ", ".join(s(w) for w in walls)
        behind = f"; loop lag {lag:.1f} s" if lag is not None else ""
        return (f"the loop falls behind its period: each of its last {len(walls)} cycles took longer than the period of "
                f"{period:g} s ({took} s), the last {s(walls[-1] - period)} s over{behind} (stalled after {stall:.0f} s "
                "without progress); raise --period-s or lower --reoptimise-time-limit-s")

    def refresh_metrics(self) -> None:
        """The gauges that describe the shared state, set from the store (what /v1/health and /v1/plan read):
        the plan in force and its cost, jobs per state, the cost so far. Every scrape sets them, on a
        standby and on a daemon whose first cycle has not ended as well, so /metrics never contradicts the API."""
        self.metrics.export_state(self.store)

    def stall_s(self) -> float:
        """Seconds the loop may go without progress (a cycle's end or wait, an executor step) before the
        applier lets its lease lapse: three periods, or three re-optimisations and STALL_FLOOR_S."""
        per = self.cfg.period_s if self.clock.kind == "wall" else max(self.opts.wall_s_per_cycle, 1.0)
        return max(3 * per, 3 * self.cfg.reoptimise_time_limit_s + stall_floor_s())


STALL_FLOOR_S = 30.0
SLOW_CYCLES = 3  # /v1/health is degraded when this many cycles in a row each took longer than the period (wall clock)


def stall_floor_s() -> float:
    """:data:`STALL_FLOOR_S`, or ``$RL_PLANNER_STALL_FLOOR_S`` when it is a number in [1, 3600] (the tests of
    the lease under long applies use a few seconds; any other value is ignored)."""
    try:
        v = float(os.environ.get("RL_PLANNER_STALL_FLOOR_S", ""))
    except ValueError:
        return STALL_FLOOR_S
    return v if 1.0 <= v <= 3600.0 else STALL_FLOOR_S


# ---------------------------------------------------------------------------- construction
def _placer(name: str, cluster: Scenario):
    if name == "auto":
        from planner.daemon.adapters import placement

        name = "weave" if placement.available() is None else "solo"
        if name == "solo":
            log.warning("%s: placing every job alone (--placer solo)", placement.available())
    if name == "solo":
        from planner.daemon.adapters.solo import SoloPlacer

        return SoloPlacer(cluster)
    if name == "weave":
        from planner.daemon.adapters import placement

        why = placement.available()
        if why:
            raise UserError(Problem("--placer", why, "use --placer solo"))
        return placement.WeavePlacer(cluster)
    raise UserError(Problem("--placer", f"unknown placer {name!r}", "use weave or solo"))


def _executor(opts: Options, cluster: Scenario, store: Store) -> Executor:
    """The executor (issue 6) when it is in this build; before that, the simulated cluster applies by itself."""
    from planner.daemon.adapters import executor as ex
    from planner.daemon.adapters.simcluster import SimCluster, Truth

    def spec_of(name: str) -> Optional[JobSpec]:
        from planner.daemon.datafiles import job_spec

        try:
            return job_spec(store.get_job(name))
        except NotFound:
            return None

    world = None
    executor_here = ex.available() is None
    if opts.backend == "sim":
        world = SimCluster(opts.sim_file, cluster, spec_of, Truth(**(opts.sim_truth or {})),
                           step_delay_s=0.0 if executor_here else opts.sim_step_delay_s)
    if executor_here:
        from planner.instances.common import ClusterView, estimate_job, resolve_gpu_types

        view = ClusterView(cluster, resolve_gpu_types(cluster))
        dram: dict[str, tuple[float, float]] = {}

        def dram_of(name: str) -> tuple[float, float]:
            if name not in dram:
                spec = spec_of(name)
                if spec is None:
                    raise NotFound(f"no job named '{name}'")
                est = estimate_job(spec, view, cluster.solver.phase_time_estimate)
                dram[name] = (est.dram_rollout_node_gb, est.dram_train_node_gb)
            return dram[name]

        return ex.ExecutorApplier(opts.backend, cluster, opts.beside(".journal"), dram_of,
                                  sim_state=opts.beside(".executor-sim"), address=opts.ray_address,
                                  world=world, step_delay_s=opts.sim_step_delay_s, spec_of=spec_of,
                                  requests_per_job=opts.sim_requests if opts.backend == "sim" else 0,
                                  telemetry=opts.sim_telemetry and world is not None)
    if world is not None:
        return world
    raise UserError(Problem("--backend", f"the {opts.backend!r} backend needs the executor: {ex.available()}", "use --backend sim"))


def _tls(o: Options):
    """Check --tls-cert/--tls-key once at start (a bad pair is exit 2, not a failing server thread)."""
    if (o.tls_cert is None) != (o.tls_key is None):
        raise UserError(Problem("--tls-cert" if o.tls_cert is None else "--tls-key", "TLS needs both a certificate and its key",
                                "pass --tls-cert CERT.pem --tls-key KEY.pem"))
    if o.tls_cert is None:
        return
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(str(o.tls_cert), str(o.tls_key))
    except (OSError, ssl.SSLError) as exc:
        raise UserError(Problem("--tls-cert", f"cannot load {o.tls_cert} with key {o.tls_key}: {exc}",
                                "pass a PEM certificate (chain) and its unencrypted PEM key")) from None


def check_state_writable(state: Path) -> None:
    """Before SQLite opens it: the state file, its folder and its -wal and -shm files (when there) are
    writable. SQLite would open a read-only file read-only, make its -wal and -shm with the file's
    mode (0400: every later start fails, the file intact) and fail at the first write."""
    from planner.safewrite import check_sqlite_writable

    check_sqlite_writable(state, "--state", "state", who="the user the daemon runs as")


def check_cluster_files_writable(o: Options) -> None:
    """Before the daemon creates anything: the files it keeps beside the state and writes at each
    apply -- the executor's journal (``STATE.journal``), its simulated cluster
    (``STATE.executor-sim``) and the simulated cluster's own file (``--sim-state``, by default
    ``STATE.sim``) -- each with its folder and its ``-wal`` and ``-shm`` files, are writable
    (:func:`planner.safewrite.check_sqlite_writable`, as the state file and ``planner apply``).
    SQLite would open a read-only one read-only, and every apply would raise at its first step and
    be retried each cycle. A file that turns read-only after this check is still met that way."""
    from planner.daemon.adapters import executor as ex
    from planner.safewrite import check_sqlite_writable

    who = "the user the daemon runs as"
    if o.backend == "sim":
        check_sqlite_writable(o.sim_file, "--sim-state" if o.sim_state else "--state", "simulated cluster's state", who=who)
    if ex.available() is None:  # the executor applies: its journal, and with the simulated backend its cluster file
        check_sqlite_writable(o.beside(".journal"), "--state", "executor's journal", who=who)
        if o.backend == "sim":
            check_sqlite_writable(o.beside(".executor-sim"), "--state", "executor's simulated cluster",
                                  who=who)


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UserError(Problem("--listen", f"cannot resolve host {host!r}: {exc}", "use an address such as 127.0.0.1:8765")) from None
    fam, _, proto, _, addr = infos[0]
    # The protocol must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted connections only
    # then, and without it every response waits out the client's delayed ACK (40 ms on Linux).
    sock = socket.socket(fam, socket.SOCK_STREAM, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise UserError(Problem("--listen", f"cannot listen on {host}:{port}: {exc.strerror}",
                                "choose another port (0 picks a free one) or stop what uses it")) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _locked_problem(state: Path, doing: str, exc: BaseException) -> Problem:
    return Problem("--state", f"the state file {state} stayed locked by another process for over {busy_timeout_s():.0f} s while "
                              f"{doing} ({exc})",
                   "stop the process that holds it in a write transaction (an sqlite3 shell, a backup), then start the daemon again")


class Daemon:
    """Build with :meth:`open`, then :meth:`run` (blocks until stopped; returns the exit status)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.cfg = opts.cfg
        self.server: Optional[uvicorn.Server] = None
        self.sock: Optional[socket.socket] = None
        self._threads: list[threading.Thread] = []
        self._hb_stop = threading.Event()
        self._signals = 0
        self._loop_stop = threading.Event()
        self.reallocator: Optional[Reallocator] = None
        self.executor: Optional[Executor] = None
        self.exit_message = ""

    def open(self) -> "Daemon":
        """Check the inputs, then create or open the state (and the token file, the simulated cluster).
        Bad input is refused before the state file or the token file is created; the listening
        socket is closed if anything after it fails."""
        self._check_inputs()
        try:
            return self._open()
        except sqlite3.OperationalError as exc:
            self._hb_stop.set()
            if self.sock is not None:
                self.sock.close()
            if is_locked(exc):
                raise UserError(_locked_problem(self.opts.state, "starting", exc)) from None
            raise
        except BaseException:
            self._hb_stop.set()
            if self.sock is not None:
                self.sock.close()
            raise

    def _check_inputs(self) -> None:
        """Everything that can be checked without the state file, checked before it is created."""
        from planner.daemon.adapters.simcluster import check_sqlite_path, check_state_file
        from planner.daemon.auth import default_token_file, load_tokens

        o = self.opts
        if self.cfg.clock == "virtual" and o.backend != "sim":
            raise UserError(Problem("--clock", "a virtual clock only makes sense with the simulated cluster", "use --backend sim or --clock wall"))
        if o.scenario is None and not o.state.exists():
            raise UserError(Problem("--scenario", f"the state file {o.state} is new and knows no cluster",
                                    "pass --scenario CLUSTER.yaml (a scenario: gpu_types, cluster, solver; its jobs, if any, are submitted)"))
        check_sqlite_path(o.state, "--state", "a daemon's state file", "pass another --state path (a new one is created)")
        check_state_writable(o.state)
        if o.backend == "sim":
            check_state_file(o.sim_file, "--sim-state")
        for suffix in (".executor-sim", ".journal"):  # the executor's files next to the state, if there
            f = o.beside(suffix)
            if os.path.lexists(f):
                check_sqlite_path(f, "--state", f"the executor's {suffix[1:]} file of {o.state}",
                                  f"move {f} away (it is not one), or pass another --state path")
        check_cluster_files_writable(o)
        o.limits.check()
        _tls(o)
        self._tokens: Optional[tuple] = None
        if o.insecure or o.token_file is not None or os.path.lexists(default_token_file(o.state)):
            self._tokens = load_tokens(o.token_file, o.state, o.insecure)  # nothing to create: read (and check) it now
        self.sock = _bind(o.host, o.port)

    def _open(self) -> "Daemon":
        o = self.opts
        try:
            self.store = Store(o.state)
            self.store.check_contents()
        except StateFileError as exc:
            raise UserError(Problem("--state", str(exc), exc.fix or "restore the state file from a copy, or pass another --state "
                                                                    "path (a new one is created)")) from None
        except OSError as exc:
            raise UserError(Problem("--state", f"cannot open {o.state}: {exc}", "check the path and its permissions")) from None
        self.cluster, trace = load_cluster(self.store, o.scenario)
        self.clock: Clock = WallClock() if self.cfg.clock == "wall" else VirtualClock(0.0, o.wall_s_per_cycle)
        if self.cfg.clock == "virtual" and o.backend != "sim":
            raise UserError(Problem("--clock", "a virtual clock only makes sense with the simulated cluster", "use --backend sim or --clock wall"))
        self.metrics = DaemonMetrics()
        from planner.daemon.auth import allowed_hosts, load_tokens

        self.tokens, self.token_file, self.token_created = self._tokens or load_tokens(o.token_file, o.state, o.insecure)
        self.hosts = allowed_hosts(o.host, tuple(o.allow_hosts))
        assert self.sock is not None
        host, port = self.sock.getsockname()[:2]
        self.url = f"{'https' if o.tls_cert else 'http'}://{host if ':' not in host else f'[{host}]'}:{port}"
        self.lease = Lease(self.store, self.cfg.lease_ttl_s, self.url)
        self.service = Service(o, self.store, self.cluster, self.clock, self.metrics, self.lease)
        if self.store.get_kv("clock_s") is not None:
            self.clock.advance_to(self.store.get_kv("clock_s"))
        taken, holder = self.lease.try_acquire()
        if not taken and not o.standby:
            self.sock.close()
            raise UserError(Problem("--state", f"another daemon applies to {o.state}: {holder.describe() if holder else 'unknown'}",
                                    "stop that daemon first, use another --state, or pass --standby to wait for the lease"))
        self.service.role = ("dry-run" if self.cfg.dry_run else "applier") if taken else "standby"
        # renewing from now on: the rest of the start (executor, the trace's jobs, the HTTP server) can outlast a short TTL
        hb = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        hb.start()
        self._threads.append(hb)
        self.metrics.lease_held.set(1 if taken else 0)
        self.service.refresh_metrics()
        self.service.submit_trace(trace)
        self.placer = _placer(o.placer, self.cluster)
        self.service.placer_name = o.placer = self.placer.name
        # A standby builds its executor (and loads the cluster files) only when it takes the lease: what it
        # loaded now would be stale by then, and it must never save a view of the cluster it does not own.
        self.executor = self._make_executor() if taken else None
        if self.cfg.realloc:
            from planner.daemon.adapters import completion, realloc

            if realloc.available() is None:
                self.reallocator = completion.make_reallocator(self.cluster, self.cfg.realloc_decision, self.store.realloc_context,
                                                            max_age_s=self.cfg.realloc_context_max_age_s)
            else:
                log.warning("%s: no reallocation inside iterations", realloc.available())
        return self

    def _make_executor(self) -> Executor:
        from planner.daemon.adapters.executor import ExecutorApplier

        ex = _executor(self.opts, self.cluster, self.store)
        if isinstance(ex, ExecutorApplier):  # every executor step checks that this daemon still holds the lease (epoch fencing)
            ex.fence = self.lease.lost
            ex.fence_epoch = lambda: self.lease.epoch
        if hasattr(ex, "on_progress"):  # every step an apply completes (or resumes, or undoes) is the loop's progress
            ex.on_progress = self._progress
        return ex

    def _reopen_executor(self) -> Executor:
        """The executor built again from its files, as a restart builds it: after an apply or resume
        raised, the simulated backend's memory may be ahead of its file (or its file was opened
        read-only). With --backend ray the cluster itself is the state: the executor is kept."""
        if self.executor is None:
            raise RuntimeError("the executor is built again only by a daemon that has built it (it holds the applier lease)")
        if self.opts.backend != "sim":
            return self.executor
        from planner.daemon.adapters.executor import ExecutorApplier

        try:
            if isinstance(self.executor, ExecutorApplier):
                self.executor.close(save=False)  # what it holds unsaved is what the journal redoes
            else:
                self.executor.close()
        except Exception as exc:  # noqa: BLE001 - the new one reads the files whatever the old one left
            log.warning("closing the executor before building it again: %s: %s", type(exc).__name__, exc)
        self.executor = self._make_executor()
        return self.executor

    def _progress(self) -> None:
        """The loop moved on (a cycle ended, a wait ticked, an executor step completed): the heartbeat keeps renewing the lease."""
        self.service.beat = time.monotonic()

    # ------------------------------------------------------------------ threads
    def _start_http(self) -> None:
        import uvicorn

        from planner.daemon.api import asgi_app
        from planner.daemon.audit import AuditLog
        from planner.daemon.auth import RateLimiter
        from planner.daemon.httpserver import protocol_class

        lim = self.opts.limits
        self.audit = AuditLog(self.store)
        app = asgi_app(self.service, max_context_bytes=lim.max_context_bytes,
                       guard={"tokens": self.tokens, "hosts": self.hosts, "limiter": RateLimiter(lim.rate_per_s, lim.rate_burst),
                              "audit": self.audit})
        tls = self.opts.tls_cert is not None
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=5,
                                http=protocol_class(lim),
                                # uvicorn annotates int but hands the seconds to asyncio's call_later: a fraction works
                                timeout_keep_alive=lim.idle_timeout_s,  # type: ignore[arg-type]
                                ssl_certfile=str(self.opts.tls_cert) if tls else None, ssl_keyfile=str(self.opts.tls_key) if tls else None)
        server = self.server = uvicorn.Server(config)
        t = threading.Thread(target=server.run, kwargs={"sockets": [self.sock]}, name="http", daemon=True)
        t.start()
        self._threads.append(t)
        deadline = time.monotonic() + 30
        while not server.started and t.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)

    def _heartbeat(self) -> None:
        """Renew the lease every third of its TTL. A renewal that fails (the state file locked by another
        process past the heartbeat's busy timeout, a sixth of the TTL) is retried at once, reported by
        /v1/health meanwhile; one that has not succeeded when the lease expires steps down: the loop
        stops, the lease is not used again (epoch fencing), exit 1 with the reason."""
        every = self.cfg.lease_ttl_s / 3.0
        wait = every
        try:
            self.store.set_busy_timeout(min(busy_timeout_s(), self.cfg.lease_ttl_s / 6.0))
        except sqlite3.Error as exc:  # (setting it needs no lock; a failure is the renewal's, next)
            log.warning("heartbeat: %s", exc)
        failing_since: Optional[float] = None
        while not self._hb_stop.wait(wait):
            wait = every
            if self.service.role == "standby":
                continue
            if time.monotonic() - self.service.beat > self.service.stall_s():
                log.warning("the loop made no progress for %.0f s: not renewing the lease", time.monotonic() - self.service.beat)
                continue
            try:
                renewed = self.lease.renew()
            except Exception as exc:  # noqa: BLE001 - the heartbeat never dies: it retries until the lease expires
                now = time.time()
                failing_since = failing_since or now
                why = (f"the state file {self.opts.state} is locked by another process" if is_locked(exc)
                       else f"{type(exc).__name__}: {exc}")
                left = self.lease.expires_at - now
                if left <= 0 or self.lease.epoch is None:
                    self.exit_message = (f"stepping down: the applier lease expired before the heartbeat could renew it ({why}; "
                                         f"failing for {now - failing_since:.0f} s); the loop stopped, a standby or a restart takes over")
                    log.error(self.exit_message)
                    self.service.heartbeat_error = self.exit_message
                    self.lease.epoch = None  # fenced: no executor step or loop write uses the lapsed lease again
                    self.metrics.lease_held.set(0)
                    self._loop_stop.set()
                    return
                self.service.heartbeat_error = (f"the heartbeat cannot renew the applier lease ({why}), failing for "
                                                f"{now - failing_since:.0f} s; it expires in {left:.0f} s")
                log.warning("%s; retrying", self.service.heartbeat_error)
                wait = min(every, 0.5)
                continue
            if failing_since is not None:
                log.warning("the heartbeat renewed the applier lease again after %.0f s of failures", time.time() - failing_since)
            failing_since = None
            self.service.heartbeat_error = None
            if not renewed:
                try:
                    h = self.lease.holder()
                    who = h.describe() if h else "nobody"
                except Exception:  # noqa: BLE001 - the exit reason names the holder when it can be read
                    who = "another daemon"
                self.exit_message = f"lost the applier lease to {who}"
                log.error(self.exit_message)
                self.metrics.lease_held.set(0)
                self._loop_stop.set()
                return

    def _on_signal(self, signum, frame) -> None:
        self._signals += 1
        if self._signals > 1:
            os._exit(130)
        log.info("signal %d: finishing the current step, then stopping", signum)
        self.service.stopping = True
        self._stop.set()
        self._loop_stop.set()

    # ------------------------------------------------------------------ main
    def run(self) -> int:
        self._stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        self._start_http()
        self._announce()
        rc = 0
        try:
            if self.service.role == "standby" and not self._wait_for_lease():
                return 0
            rc = self._run_loop()
        except LeaseLost as exc:
            self.exit_message = self.exit_message or str(exc)  # (the heartbeat's step-down says why the lease was let go)
            rc = 1
        except StateFileError as exc:  # (a value edited in since the file was opened, met when the loop reads it)
            self.exit_message = f"--state: {exc}; {exc.fix or 'restore the state file from a copy'}"
            rc = 2
        finally:
            self._shutdown()
        if self.exit_message:
            print(f"planner daemon: {self.exit_message}", file=sys.stderr)
            rc = rc or 1
        return rc

    def _announce(self) -> None:
        line = (f"planner daemon: serving {self.url} (state {self.opts.state}, backend {self.opts.backend}, placer {self.opts.placer}, "
                f"clock {self.cfg.clock}, role {self.service.role})")
        print(line, flush=True)
        if self.token_created is not None:
            # the token itself is never printed (logs keep what a daemon prints): where to read it is
            print(f"planner daemon: generated the API token file {self.token_file} (mode 0600) with one admin token; clients send "
                  f"'Authorization: Bearer TOKEN' with TOKEN from that file, e.g. "
                  f"$(awk '/^admin/ {{print $3}}' {self.token_file})", flush=True)
        elif self.tokens is None:
            print("planner daemon: --insecure: the API takes requests from anyone who can reach it", flush=True)
        else:
            print(f"planner daemon: API tokens from {self.token_file}", flush=True)
        if self.opts.ready_file:
            from planner.safewrite import write_atomic

            write_atomic(self.opts.ready_file, self.url + "\n", where="--ready-file")

    def _wait_for_lease(self) -> bool:
        holder = self.lease.holder()
        print(f"planner daemon: standby: {holder.describe() if holder else 'nobody'} holds the applier lease", flush=True)
        while not self._stop.wait(self.cfg.lease_ttl_s / 3.0):
            try:
                taken, _ = self.lease.try_acquire()
            except sqlite3.OperationalError as exc:
                if not is_locked(exc):
                    raise
                log.warning("standby: the state file %s is locked by another process; trying again", self.opts.state)
                continue
            if taken:
                self.executor = self._make_executor()  # the world as it is now, loaded after taking the lease
                self._progress()  # the loop starts now: the time spent waiting as a standby is no stall
                self.service.role = "dry-run" if self.cfg.dry_run else "applier"
                self.metrics.lease_held.set(1)
                print(f"planner daemon: took the applier lease (epoch {self.lease.epoch})", flush=True)
                return True
        return False

    def _new_loop(self) -> Loop:
        """A loop whose state is what the store says (at start, and after a failed cycle)."""
        if self.executor is None:
            raise RuntimeError("the loop needs the executor, which a daemon builds when it takes the applier lease")
        loop = Loop(self.store, self.cluster, self.placer, self.executor, self.clock, self.cfg, self.lease, self.metrics,
                    self.reallocator, stop=self._loop_stop, reopen=self._reopen_executor)
        self.service.loop = loop
        return loop

    def _run_loop(self) -> int:
        loop = self._new_loop()
        try:
            resumed = loop.recover()
        except sqlite3.OperationalError as exc:
            if not is_locked(exc):
                raise
            raise UserError(_locked_problem(self.opts.state, "resuming what the last daemon left unfinished", exc)) from None
        for msg in resumed:
            print(f"planner daemon: {msg}", flush=True)
        period = self.cfg.period_s
        next_t = self.clock.now() if loop.last_at is None else loop.last_at + period
        cycles = failures = 0
        while not loop.stop.is_set():
            if not self._wait(next_t, loop.stop):
                break
            if self.clock.kind == "wall":
                late = max(0.0, self.clock.now() - next_t)
                self.metrics.cycle_lateness.observe(late)
                self.service.lateness_max = max(self.service.lateness_max, late)
                self.metrics.cycle_lateness_max.set(self.service.lateness_max)
            try:
                rep = loop.run_cycle()
            except LeaseLost:
                raise
            except Exception as exc:  # noqa: BLE001 - a failed cycle is logged and retried with the state as stored
                failures += 1
                self.metrics.cycle_errors.inc()
                self.service.last_error = f"cycle {loop.cycle_no + 1} failed: {type(exc).__name__}: {exc}"
                if is_locked(exc):  # another process holds the state file's write lock: said, without a traceback
                    self.service.last_error += f" (the state file {self.opts.state} is locked by another process)"
                    log.error("%s (%d in a row)", self.service.last_error, failures)
                else:
                    log.exception("%s (%d in a row)", self.service.last_error, failures)
                if failures >= MAX_FAILED_CYCLES:
                    self.exit_message = f"{failures} cycles in a row failed; the last: {self.service.last_error}"
                    return 1
                try:  # from the executor's files, as a restart would: the failure may have left its memory ahead of them
                    self._reopen_executor()
                except Exception:  # noqa: BLE001 - counted as the same failure; the next round retries
                    log.exception("building the executor again after the failed cycle failed")
                loop = self._new_loop()
                try:  # an apply the failure interrupted is finished before the next cycle (one that fails again: retried by each cycle)
                    for msg in loop.recover():
                        print(f"planner daemon: {msg}", flush=True)
                except LeaseLost:
                    raise
                except Exception:  # noqa: BLE001 - counted as the same failure; the next round retries
                    log.exception("resuming after the failed cycle failed too")
                next_t += self.cfg.period_s
                continue
            failures = 0
            self.service.last_error = None
            cycles += 1
            self._progress()
            self.service.last_cycle_wall = time.time()
            self.service.note_cycle(rep.wall_s)
            if rep.decisions or rep.apply:
                log.info("cycle %d at %.0f: %s; %d decision(s), apply %s, %.3f s", rep.cycle, rep.at, ", ".join(rep.triggers) or "-",
                         rep.decisions, rep.apply or "-", rep.wall_s)
            next_t += period
            if self.clock.kind == "wall" and next_t < self.clock.now():
                next_t = self.clock.now()
            if self.cfg.max_cycles is not None and cycles >= self.cfg.max_cycles:
                break
            if self.cfg.until_idle and loop.idle():
                print(f"planner daemon: idle after cycle {rep.cycle} (clock {rep.at:.0f} s): every job has ended", flush=True)
                break
        return 0

    def _wait(self, t: float, stop: threading.Event) -> bool:
        if self.clock.kind != "wall":
            return self.clock.wait_until(t, stop)
        while True:
            left = t - self.clock.now()
            if left <= 0:
                return not stop.is_set()
            if stop.wait(min(left, 1.0)):
                return False
            self._progress()

    def _shutdown(self) -> None:
        held = self.lease.held and self.lease.lost() is None  # only the lease holder may save its view of the cluster
        self.service.stopping = True
        self._hb_stop.set()
        if self.server is not None:
            self.server.should_exit = True
        for t in self._threads:
            t.join(timeout=10)
        try:
            self.lease.release()
        except Exception as exc:  # noqa: BLE001 - a lease that expires on its own is fine
            log.warning("could not release the lease: %s", exc)
        self.metrics.lease_held.set(0)
        self.service.ingest.close()
        if getattr(self, "audit", None) is not None:
            self.audit.close()
        try:
            if self.executor is not None:
                from planner.daemon.adapters.executor import ExecutorApplier

                if isinstance(self.executor, ExecutorApplier):
                    self.executor.close(save=held)
                else:  # the simulated cluster alone keeps no unsaved view
                    self.executor.close()
        except Exception:  # noqa: BLE001
            pass
        self.store.close()
