"""Load test of the daemon on loopback: the telemetry endpoint's sustained rate, with the loop's period.

    python -m planner.daemon.bench [--duration-s 20] [--clients 4] [--period-s 1] [--out results/daemon]

Starts a real daemon process (wall clock, simulated cluster, ``scenarios/weave-micro.yaml``: six
running jobs), waits for the jobs to run, then ``--clients`` client *processes* (at most one per job:
each alone posts its jobs' snapshots, in time order) post valid ``TelemetrySnapshot`` documents for those jobs over keep-alive HTTP connections as fast as the
server answers (closed loop; ``--rate`` caps each client instead) for ``--duration-s`` seconds.
Reported: requests answered per second (all must be 202), latency percentiles, and from the
daemon's own metrics over the same window the cycles it ran against the ``duration / period`` it
owed, how late any cycle started (max, p99 bucket), overruns, and how many snapshots the loop
consumed. Client and server share the machine's cores: the figures are for this machine, with its
load average recorded at the start and the end. Writes ``<tag>.md`` and ``<tag>.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def snapshot(job: str, i: int) -> dict:
    """A realistic snapshot: 8 rollout engines thinning out, a reference model, a trainer."""
    progress = (i % 100) / 100.0
    workers = [{"worker_id": f"r{k}", "component": "rollout", "node": f"h20-{k // 8}", "gpu_type": "H20",
                "kv_used_tokens": 400000 * (1 - progress) * (k + 1) / 8, "kv_capacity_tokens": 400000,
                "queue_depth": 0, "tokens_per_s": 300.0 * (1 - progress), "requests_in_flight": 8 - k % 8}
               for k in range(8)]
    workers += [{"worker_id": "ref0", "component": "ref", "node": "h800-0", "gpu_type": "H800"},
                {"worker_id": "t0", "component": "actor", "node": "h800-0", "gpu_type": "H800", "gpus": 4}]
    return {"job": job, "time_s": float(i % 100), "iteration": i // 100,
            "components": [{"name": "rollout", "kind": "rollout", "progress": progress},
                           {"name": "ref", "kind": "reference", "progress": 0.0},
                           {"name": "actor", "kind": "trainer", "progress": 0.0, "interruptible": False}],
            "workers": workers}


def client(url: str, jobs: list[str], duration_s: float, rate: float, seed: int, out: "mp.Queue", auth: dict | None = None) -> None:
    import httpx

    lat: list[float] = []
    codes: dict[int, int] = {}
    errors = 0
    i = 0  # this client alone posts for its jobs, each job's snapshots in time order (the daemon refuses older ones: 409)
    with httpx.Client(base_url=url, timeout=30.0, headers={"content-type": "application/json", **(auth or {})}) as c:
        t_end = time.perf_counter() + duration_s
        next_at = time.perf_counter()
        while True:
            now = time.perf_counter()
            if now >= t_end:
                break
            if rate > 0:
                if now < next_at:
                    time.sleep(next_at - now)
                next_at += 1.0 / rate
            t0 = time.perf_counter()
            try:
                r = c.post("/v1/telemetry", content=json.dumps(snapshot(jobs[i % len(jobs)], i // len(jobs))).encode())
                codes[r.status_code] = codes.get(r.status_code, 0) + 1
            except httpx.HTTPError:
                errors += 1
            lat.append(time.perf_counter() - t0)
            i += 1
    out.put({"lat": lat, "codes": codes, "errors": errors})


def metrics(url: str, auth: dict | None = None) -> dict:
    import httpx

    text = httpx.get(f"{url}/metrics", headers=auth or {}, timeout=30).text
    out: dict = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def _le(key: str) -> float:
    """The upper bound of a histogram bucket's metric key, ``name_bucket{le="0.5"}``."""
    m = re.search(r'le="([^"]+)"', key)
    if m is None:
        raise ValueError(f"metric {key!r} is a histogram bucket without an le label")
    return float(m.group(1))


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds a process has used (Linux /proc), None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100.0 * len(s)))]


def _cpu(res: dict) -> str:
    if res["daemon_cpu_s"] is None:
        return "not measured (no /proc)"
    per = res["daemon_cpu_us_per_snapshot"]
    return (f"{res['daemon_cpu_s']:.1f} CPU-s = {per:.0f} us per snapshot (HTTP, validation, SQLite, loop), "
            f"so one core serves about {1e6 / per:.0f}/s once clients run elsewhere")


def machine() -> dict:
    return {"uname": " ".join(platform.uname()), "cpus": os.cpu_count(), "python": sys.version.split()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m planner.daemon.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rate", type=float, default=0.0, help="requests per second per client (0: as fast as answered)")
    ap.add_argument("--period-s", type=float, default=1.0)
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "weave-micro.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "daemon")
    ap.add_argument("--tag", default="telemetry_load", help="file name stem of the results (default telemetry_load)")
    args = ap.parse_args(argv)
    cmd_line = "python -m planner.daemon.bench " + " ".join(sys.argv[1:] if argv is None else argv)
    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="planner-bench-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ready = tmp / "url"
    log = open(tmp / "daemon.log", "w")
    daemon = subprocess.Popen([sys.executable, "-m", "planner", "daemon", "--scenario", str(args.scenario), "--state", str(tmp / "s.sqlite"),
                               "--listen", "127.0.0.1:0", "--ready-file", str(ready), "--period-s", str(args.period_s), "--log-level", "warning",
                               "--rate-limit", "0"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the daemon did not start: {(tmp / 'daemon.log').read_text()}")
            time.sleep(0.05)
        url = ready.read_text().strip()
        import httpx

        from planner.daemon.auth import token_of

        auth = {"Authorization": f"Bearer {token_of(tmp / 's.sqlite.token')}"}

        while True:
            listing = httpx.get(f"{url}/v1/jobs", params={"state": "running"}, headers=auth, timeout=30).json()
            if listing["jobs"]:
                break
            time.sleep(0.2)
        jobs = [j["name"] for j in listing["jobs"]]
        time.sleep(2 * args.period_s)
        m0 = metrics(url, auth)
        cpu0 = cpu_s(daemon.pid)
        q: mp.Queue = mp.Queue()
        n = min(args.clients, len(jobs))  # one client per job at most: two posting one job's snapshots would race back in time
        procs = [mp.Process(target=client, args=(url, jobs[k::n], args.duration_s, args.rate, k, q, auth)) for k in range(n)]
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        results = [q.get() for _ in procs]
        for p in procs:
            p.join()
        wall = time.perf_counter() - t0
        cpu1 = cpu_s(daemon.pid)
        time.sleep(args.period_s)
        m1 = metrics(url, auth)
        health = httpx.get(f"{url}/v1/health", headers=auth, timeout=30).json()
    finally:
        daemon.terminate()
        rc = daemon.wait(60)
        log.close()
    load1 = os.getloadavg()
    lat = [x for r in results for x in r["lat"]]
    codes: dict[str, int] = {}
    for r in results:
        for k, v in r["codes"].items():
            codes[str(k)] = codes.get(str(k), 0) + v
    errors = sum(r["errors"] for r in results)
    ok = codes.get("202", 0)
    d = lambda k: m1.get(k, 0.0) - m0.get(k, 0.0)  # noqa: E731
    cycles = d("planner_cycles_total")
    owed = (wall + args.period_s) / args.period_s
    late_buckets = {_le(k): d(k) for k in m1 if k.startswith("planner_cycle_lateness_seconds_bucket")}
    n_late = d("planner_cycle_lateness_seconds_count")
    p99_late = next((b for b, c in sorted(late_buckets.items()) if n_late and c >= 0.99 * n_late), float("nan"))
    cyc_buckets = {_le(k): d(k) for k in m1 if k.startswith("planner_cycle_seconds_bucket")}
    p99_cycle = next((b for b, c in sorted(cyc_buckets.items()) if cycles and c >= 0.99 * cycles), float("nan"))
    res = {
        "command": cmd_line, "machine": machine(), "load_average_start": load0, "load_average_end": load1,
        "daemon_exit_status": rc, "duration_s": wall, "clients": len(procs), "rate_cap_per_client": args.rate, "jobs": jobs,
        "requests": len(lat), "accepted_202": ok, "status_codes": codes, "transport_errors": errors,
        "sustained_rate_per_s": ok / wall if wall > 0 else 0.0,
        "daemon_cpu_s": (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None,
        "daemon_cpu_us_per_snapshot": (1e6 * (cpu1 - cpu0) / ok) if cpu0 is not None and cpu1 is not None and ok else None,
        "latency_ms": {"p50": 1e3 * pct(lat, 50), "p90": 1e3 * pct(lat, 90), "p99": 1e3 * pct(lat, 99), "max": 1e3 * max(lat or [0])},
        "loop": {"period_s": args.period_s, "cycles_run": cycles, "cycles_owed": owed, "overruns": d("planner_cycle_overrun_total"),
                 "lateness_max_s": m1.get("planner_cycle_lateness_max_seconds", float("nan")), "lateness_p99_bucket_s": p99_late,
                 "cycle_mean_s": (d("planner_cycle_seconds_sum") / cycles) if cycles else float("nan"), "cycle_p99_bucket_s": p99_cycle,
                 "snapshots_counted_by_daemon": d("planner_telemetry_received_total"), "health_status_after": health["status"]},
    }
    meets = cycles >= owed - 2 and res["loop"]["lateness_max_s"] < args.period_s and res["loop"]["overruns"] == 0
    res["loop"]["meets_period"] = bool(meets)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.tag}.json").write_text(json.dumps(res, indent=2) + "\n")
    L = res["loop"]
    lms = res["latency_ms"]
    md = f"""# Daemon telemetry load test

Command: `{cmd_line}`

Machine: {res['machine']['uname']}; {res['machine']['cpus']} CPUs; Python {res['machine']['python']}.
Load average at start {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f}, at end {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f}
(1 / 5 / 15 min). Clients and daemon share these cores; other engineers' work shares them too.

Set-up: a real `planner daemon` process (wall clock, `--period-s {args.period_s}`, simulated cluster, `{args.scenario.name}`: {len(jobs)} running
jobs) on 127.0.0.1; {len(procs)} client processes (each the only poster of its jobs,
in time order) post valid `TelemetrySnapshot` JSON ({len(json.dumps(snapshot('j', 1)))} bytes, 10 workers)
over keep-alive connections, {'as fast as answered' if not args.rate else f'at most {args.rate:g}/s each'}, for {wall:.1f} s.

| figure | value |
|---|---|
| telemetry accepted (202) | {ok} of {len(lat)} requests ({', '.join(f'{k}: {v}' for k, v in sorted(codes.items()))}; transport errors {errors}) |
| **sustained rate** | **{res['sustained_rate_per_s']:.0f} snapshots/s** |
| daemon CPU during the window | {_cpu(res)} |
| latency p50 / p90 / p99 / max | {lms['p50']:.1f} / {lms['p90']:.1f} / {lms['p99']:.1f} / {lms['max']:.1f} ms |
| snapshots the daemon counted | {L['snapshots_counted_by_daemon']:.0f} |
| loop cycles run / owed (window / period) | {L['cycles_run']:.0f} / {L['cycles_owed']:.1f} |
| latest cycle start after its schedule | {L['lateness_max_s'] * 1e3:.1f} ms (p99 bucket <= {L['lateness_p99_bucket_s'] * 1e3:.0f} ms) |
| cycle wall time mean (p99 bucket) | {L['cycle_mean_s'] * 1e3:.1f} ms (<= {L['cycle_p99_bucket_s'] * 1e3:.0f} ms) |
| cycles longer than the period | {L['overruns']:.0f} |
| **loop met its period** | **{'yes' if meets else 'no'}** (every owed cycle ran, none started a period late, none overran) |
| daemon health after / exit status | {L['health_status_after']} / {rc} |
"""
    (args.out / f"{args.tag}.md").write_text(md)
    print(md)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok == len(lat) and not errors and meets else 1


if __name__ == "__main__":
    raise SystemExit(main())
