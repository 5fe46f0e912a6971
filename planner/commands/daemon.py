"""planner daemon: the long-running replanning service with its HTTP API."""

from __future__ import annotations

NAME = "daemon"
HELP = "run the replanning daemon: admit jobs, watch telemetry, replan and apply, serve the HTTP API"
DESCRIPTION = """Run the replanning daemon (see docs/daemon.md).

It keeps its state in SQLite (--state), serves an HTTP API on --listen (default 127.0.0.1:8765;
port 0 picks a free one; the address is printed and written to --ready-file), and runs a loop of
numbered phases every --period-s seconds: observe the backend, update the estimates from
telemetry, detect triggers (arrivals, departures, drift, donors), solve warm-started from the
current plan, keep a change only if its gain beats its migration cost, apply through the
executor, record the decision with its reasons.

The first start needs --scenario (a scenario file: GPU types, cluster, prices, solver options);
the state file remembers it. The API needs a token (STATE.token, created at the first start,
or --token-file); --insecure turns that off. Jobs in that file are submitted once, as a trace (with --clock
virtual they arrive at their arrival_s). Only one daemon applies to a state file: a second one
exits naming the holder, or waits with --standby. SIGTERM finishes the current step and exits 0.

Examples:
  planner daemon --scenario scenarios/weave-micro.yaml --state planner.sqlite
  planner daemon --state planner.sqlite --listen 0.0.0.0:8765 --period-s 30 --dry-run
  curl -H "Authorization: Bearer $(awk '/^admin/ {print $3}' planner.sqlite.token)" localhost:8765/v1/jobs
  planner daemon --scenario scenarios/weave-trace-60.yaml --state replay.sqlite --clock virtual --period-s 300 --until-idle"""


def _listen(text: str) -> tuple[str, int]:
    import argparse

    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, "8765"
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: the port must be a number from 0 to 65535 (HOST:PORT, e.g. 127.0.0.1:8765)")
    return host, int(port)


def _range(text: str) -> tuple[float, float]:
    import argparse

    lo, _, hi = text.partition(":")
    try:
        a, b = float(lo), float(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LO:HI, e.g. 0.9:1.2") from None
    if not 0 < a <= b <= 1e3:  # NaN and inf fail too
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 < LO <= HI <= 1000")
    return a, b


def add_arguments(p) -> None:
    from pathlib import Path

    from planner.commands import _args

    p.add_argument("--state", type=_args.file_path, default=Path("planner-state.sqlite"), help="SQLite state file (default ./planner-state.sqlite)")
    p.add_argument("--scenario", type=_args.file_path, help="cluster scenario (required the first time; its jobs are submitted as a trace)")
    p.add_argument("--backend", choices=["sim", "ray"], default="sim", help="where plans are applied (default sim)")
    p.add_argument("--ray-address", help="--backend ray: the Ray cluster (default: auto; 'local' starts one from the cluster's nodes)")
    p.add_argument("--placer", choices=["auto", "weave", "solo"], default="auto",
                   help="weave: co-execution groups (formulation.placement); solo: every job alone on its cheapest pools; "
                        "auto (default): weave when this build has the placement planner, else solo")
    p.add_argument("--listen", type=_listen, default=("127.0.0.1", 8765), metavar="HOST:PORT", help="HTTP address (default 127.0.0.1:8765)")
    p.add_argument("--period-s", type=_args.seconds(), default=10.0, help="seconds between cycles on the daemon's clock (default 10)")
    p.add_argument("--dry-run", action="store_true", help="decide and record, apply nothing")
    p.add_argument("--clock", choices=["wall", "virtual"], default="wall",
                   help="wall: real time; virtual: simulated time, each cycle advances it by --period-s (sim backend only)")
    p.add_argument("--pace-s", type=_args.seconds(3600.0, zero=True), default=0.0,
        help="virtual clock: wall seconds to wait per cycle (default 0: as fast as possible)")
    s = p.add_argument_group("security (docs/security.md)")
    s.add_argument("--token-file", type=_args.file_path,
                   help="API tokens, one per line: NAME SCOPES TOKEN (scopes read, submit, cancel, telemetry, admin) or a bare admin "
                        "TOKEN; mode 0600. Default STATE.token, created with one admin token at the first start. Every request "
                        "but /healthz and /readyz needs 'Authorization: Bearer <token>'")
    s.add_argument("--insecure", action="store_true", help="no authentication at all (only behind a proxy that authenticates)")
    s.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a Host name the API answers to besides loopback and the listen address (repeatable; '*': any); "
                        "others get 421 (DNS rebinding)")
    s.add_argument("--tls-cert", type=_args.file_path, help="serve HTTPS with this PEM certificate (chain); needs --tls-key")
    s.add_argument("--tls-key", type=_args.file_path, help="the certificate's PEM key")
    s.add_argument("--max-connections", type=_args.count(1, 65536), default=256,
                   help="connections served with the normal timeouts; as many more get --busy-timeout-s to send their request; "
                        "beyond twice this the oldest silent one is closed, or 503 (default 256)")
    s.add_argument("--max-connections-per-peer", type=_args.count(1, 65536), default=64,
                   help="connections of one client address with the normal timeouts; its others get --busy-timeout-s (default 64)")
    s.add_argument("--busy-timeout-s", type=_args.seconds(3600.0), default=0.5,
                   help="under pressure (over either limit): seconds a new connection has to deliver its request (default 0.5)")
    s.add_argument("--header-timeout-s", type=_args.seconds(3600.0), default=10.0,
                   help="seconds a client has to send a whole request after connecting or after the last answer (default 10)")
    s.add_argument("--idle-timeout-s", type=_args.seconds(3600.0), default=5.0, help="an idle keep-alive connection is closed after this (default 5)")
    s.add_argument("--rate-limit", type=_args.number(0.0, 1e6), default=200.0, help="requests per second per token, 429 beyond (0: none; default 200)")
    s.add_argument("--rate-burst", type=_args.number(1.0, 1e7), default=400.0, help="requests a token may send at once (default 400)")
    s.add_argument("--data-dir", type=_args.file_path, metavar="DIR",
                   help="trace files a submitted job may name (relative paths inside DIR); without it a job naming a file is refused")
    s.add_argument("--max-context-bytes", type=_args.count(1, 1 << 30), default=16 << 20,
                   help="largest POST /v1/jobs/{name}/realloc-context body (it lists the rollout's unfinished requests; "
                        "default 16 MiB; every other body: 1 MiB)")
    s.add_argument("--max-jobs-per-token", type=_args.count(1, 100000), default=256, help="live jobs one token may have submitted (default 256)")
    p.add_argument("--standby", action="store_true", help="when another daemon holds the lease, serve and wait for it instead of exiting")
    g = p.add_argument_group("replanning")
    g.add_argument("--no-reoptimise", action="store_true", help="admission and repair only (no periodic or departure re-optimisation)")
    g.add_argument("--reoptimise-every-s", type=_args.seconds(), default=3600.0, help="periodic re-optimisation interval (default 3600)")
    g.add_argument("--reoptimise-time-limit-s", type=_args.seconds(_args.TIME_LIMIT_S), default=10.0,
        help="wall-clock limit of one re-optimisation (default 10)")
    g.add_argument("--amortise-s", type=_args.seconds(), default=3600.0, help="horizon a $/h saving counts over against migration cost (default 3600)")
    g.add_argument("--gain-margin", type=_args.number(0.0, 1e3), default=0.10, help="keep a change if gain > (1 + margin) x migration cost (default 0.10)")
    g.add_argument("--max-moves-per-hour", type=_args.number(0.0, 1e6), default=30.0, help="churn budget: jobs moved by optional changes per hour (default 30)")
    g.add_argument("--drift-threshold", type=_args.number(0.0, 1e3, lo_open=True), default=0.10,
        help="relative change of measured/predicted that updates estimates (default 0.10)")
    g.add_argument("--admission-timeout-s", type=_args.seconds(), default=None, help="reject a job that waited this long for room (default: wait)")
    g.add_argument("--no-realloc", action="store_true", help="no reallocation inside iterations")
    g.add_argument("--realloc-decision", choices=["auto", "completion", "planner"], default="auto",
                   help="which decision reallocates inside iterations: completion (the one `planner simulate --policy dynamic` "
                        "and `planner realloc --decision completion` make, judged on the iteration's predicted completion time; "
                        "it reads the job's context, POST /v1/jobs/{name}/realloc-context), planner (the min-over-stages "
                        "throughput planner on telemetry alone), auto (default: completion where a fresh context is posted, "
                        "planner otherwise)")
    g.add_argument("--realloc-context-max-age-s", type=_args.seconds(zero=True), default=30.0,
                   help="a posted context is used for telemetry up to this many job seconds after its time_s (default 30)")
    h = p.add_argument_group("operation")
    h.add_argument("--lease-ttl-s", type=_args.seconds(3600.0), default=15.0, help="applier lease TTL in wall seconds (default 15)")
    h.add_argument("--until-idle", action="store_true", help="exit once every job has ended")
    h.add_argument("--max-cycles", type=_args.count(1, 10**9), default=None,
                   help="exit after this many cycles of this process (a restart counts afresh: to keep a replay's horizon "
                        "after a crash, give the cycles left, N less /v1/health's cycle)")
    h.add_argument("--ready-file", type=_args.path, help="write the served URL here once listening")
    h.add_argument("--sim-state", type=_args.file_path, help="simulated cluster's own state file (default STATE.sim)")
    h.add_argument("--sim-slowdown", type=_range, default=(1.0, 1.0), metavar="LO:HI",
                   help="simulated cluster: each job's true phase times are the estimates x a factor drawn from [LO, HI] (default 1:1)")
    h.add_argument("--sim-noise", type=_args.number(0.0, 1.0), default=0.0, help="simulated cluster: per-iteration noise, e.g. 0.03 for +-3%% (default 0)")
    h.add_argument("--sim-seed", type=_args.number(0, 2**31 - 1, kind=int), default=0, help="simulated cluster: seed of the factors and the noise")
    h.add_argument("--sim-step-delay-s", type=_args.seconds(3600.0, zero=True), default=0.0,
        help="simulated cluster: wall seconds each apply step takes (default 0)")
    h.add_argument("--sim-requests", type=_args.count(0, 1 << 20), default=0,
                   help="simulated cluster: rollout requests each job's engines get when it starts (default 0); they move with "
                        "every migration and finish exactly once")
    h.add_argument("--sim-telemetry", action="store_true",
                   help="simulated cluster: each running job reports telemetry every cycle, from the executor's state "
                        "(its rollout tail thins out as the iteration goes on: reallocations happen)")
    h.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")


def run(args) -> int:
    import logging
    from pathlib import Path

    from planner.daemon.auth import Limits
    from planner.daemon.config import DaemonConfig
    from planner.daemon.service import Daemon, Options

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = DaemonConfig(period_s=args.period_s, dry_run=args.dry_run, clock=args.clock, reoptimise=not args.no_reoptimise,
                       reoptimise_every_s=args.reoptimise_every_s, reoptimise_time_limit_s=args.reoptimise_time_limit_s,
                       amortise_s=args.amortise_s, gain_margin=args.gain_margin, max_moves_per_hour=args.max_moves_per_hour,
                       drift_threshold=args.drift_threshold, admission_timeout_s=args.admission_timeout_s, realloc=not args.no_realloc,
                       realloc_decision=args.realloc_decision, realloc_context_max_age_s=args.realloc_context_max_age_s,
                       lease_ttl_s=args.lease_ttl_s, until_idle=args.until_idle, max_cycles=args.max_cycles)
    from planner.errors import Problem, UserError

    for flag, v in (("--pace-s", args.pace_s), ("--sim-noise", args.sim_noise), ("--sim-step-delay-s", args.sim_step_delay_s),
                    ("--sim-requests", args.sim_requests)):
        if not v >= 0:
            raise UserError(Problem(flag, f"must be >= 0, got {v}"))
    from planner.commands._args import check_backend_flags

    check_backend_flags(args, "--ray-address")
    for flag, on in (("--sim-requests", args.sim_requests > 0), ("--sim-telemetry", args.sim_telemetry)):
        if on and args.backend != "sim":
            raise UserError(Problem(flag, f"simulates work on the simulated cluster; the {args.backend} backend runs real work",
                                    "drop it, or use --backend sim"))
    if args.ready_file:  # refused before the daemon starts, not after it serves
        from planner.safewrite import target_kind

        target_kind(args.ready_file, "--ready-file")
    if args.scenario:  # a bad scenario is refused before the state file is created
        from planner.schema import load_scenario

        sc = load_scenario(args.scenario)
        if args.until_idle and args.max_cycles is None:
            _refuse_endless(sc, args.scenario)
    from planner.daemon.datafiles import check_data_dir

    host, port = args.listen
    truth = {"slow_lo": args.sim_slowdown[0], "slow_hi": args.sim_slowdown[1], "noise": args.sim_noise, "seed": args.sim_seed}
    opts = Options(state=args.state, scenario=args.scenario, backend=args.backend, placer=args.placer, host=host, port=port, cfg=cfg,
                   standby=args.standby, wall_s_per_cycle=args.pace_s, sim_state=args.sim_state, sim_truth=truth,
                   ready_file=Path(args.ready_file) if args.ready_file else None,
                   sim_step_delay_s=args.sim_step_delay_s, sim_requests=args.sim_requests, sim_telemetry=args.sim_telemetry,
                   token_file=args.token_file, insecure=args.insecure, allow_hosts=tuple(args.allow_host), tls_cert=args.tls_cert,
                   tls_key=args.tls_key,
                   limits=Limits(max_connections=args.max_connections, header_timeout_s=args.header_timeout_s,
                                 max_per_peer=args.max_connections_per_peer, busy_timeout_s=args.busy_timeout_s,
                                 idle_timeout_s=args.idle_timeout_s, rate_per_s=args.rate_limit, rate_burst=args.rate_burst,
                                 max_jobs_per_token=args.max_jobs_per_token, max_context_bytes=args.max_context_bytes),
                   ray_address=args.ray_address, data_dir=check_data_dir(args.data_dir))
    return Daemon(opts).open().run()


def _refuse_endless(sc, path) -> None:
    """``--until-idle`` ends when every job has ended: a job without ``duration_s`` runs until it is
    cancelled, so the daemon would never be idle. Refused before anything starts, with the fix."""
    from planner.errors import Problem, UserError

    endless = [f"jobs[{i}] ({j.name})" for i, j in enumerate(sc.jobs) if j.duration_s is None]
    if endless:
        shown = ", ".join(endless[:5]) + (f" and {len(endless) - 5} more" if len(endless) > 5 else "")
        raise UserError(Problem("--until-idle", f"{path}: {shown} ha{'s' if len(endless) == 1 else 've'} no duration_s: "
                                f"{'it runs' if len(endless) == 1 else 'they run'} until cancelled, so the daemon would never be idle",
                                "give every job a duration_s, or stop at a stated horizon with --max-cycles N "
                                "(N x --period-s seconds of the daemon's clock)"))
