"""Helpers of the daemon tests: a cluster file, job specs, a real daemon process on loopback."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]

# Waits on events (a daemon serving, a job running, a number of cycles) get generous deadlines: on a
# loaded 2-core machine a daemon start alone (imports, first solve) has taken tens of seconds. A
# deadline that passes fails with a message saying what was awaited.
DEADLINE_S = float(os.environ.get("RL_PLANNER_TEST_DEADLINE_S", "300"))

CLUSTER_YAML = """\
name: daemon-test-cluster
gpu_types:
  H20: {price_per_gpu_hour: 1.0}
  H800: {price_per_gpu_hour: 2.0}
cluster:
  clusters: [{name: a, inter_cluster_bw_gb_per_s: 50}, {name: b, inter_cluster_bw_gb_per_s: 50}]
  node_groups:
    - {name: h20, gpu_type: H20, count: 4, gpus_per_node: 8, host_dram_gb: 2048, cluster: a}
    - {name: h800, gpu_type: H800, count: 4, gpus_per_node: 8, host_dram_gb: 2048, cluster: b}
solver: {time_limit_s: 5}
"""


def write_cluster(tmp: Path, text: str = CLUSTER_YAML, jobs: list[dict] | None = None) -> Path:
    """The test cluster as a scenario file; ``jobs`` (submitted at the daemon's first start) make it a trace."""
    import yaml

    p = tmp / ("trace.yaml" if jobs else "cluster.yaml")
    if jobs:
        text = text + yaml.safe_dump({"jobs": jobs}, sort_keys=False)
    p.write_text(text)
    return p


def job(name: str, model: str = "qwen2.5-1.5b", **over: Any) -> dict:
    """A small GRPO job that fits the test cluster (H20 rollout, H800 training)."""
    spec = {"name": name, "model": model,
            "rollout": {"batch_prompts": 32, "group_size": 4, "max_response_tokens": 2048, "gpu_types": ["H20"]},
            "trainer": {"gpu_types": ["H800"]}, "slo": {"ratio_to_solo": 2.0}}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(spec.get(k), dict):
            spec[k] = {**spec[k], **v}
        else:
            spec[k] = v
    return spec


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


class DaemonProc:
    """``python -m planner daemon ...`` as a real process, serving on a free loopback port."""

    def __init__(self, tmp: Path, *args: str, state: Path | None = None, wait: bool = True, name: str = "d",
                 launcher: tuple[str, ...] = ("-m", "planner"), extra_env: dict | None = None) -> None:
        """``launcher``: what the interpreter runs instead of ``-m planner`` (a script that patches the
        daemon before running the CLI, e.g. to kill it at a chosen point); ``extra_env``: for that script."""
        self.tmp = tmp
        self.state = state or tmp / "state.sqlite"
        self.ready = tmp / f"{name}.url"
        self.ready.unlink(missing_ok=True)
        self.log = open(tmp / f"{name}.log", "a+")
        cmd = [sys.executable, *launcher, "daemon", "--state", str(self.state), "--listen", "127.0.0.1:0",
               "--ready-file", str(self.ready), "--log-level", "warning", *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**env(), **(extra_env or {})}, stdout=self.log, stderr=subprocess.STDOUT,
                                     text=True)
        STARTED.append(self)
        self.url = ""
        self.insecure = "--insecure" in args
        self.token_file = Path(args[list(args).index("--token-file") + 1]) if "--token-file" in args else \
            self.state.with_name(self.state.name + ".token")
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.kill()  # never leave a daemon behind that a failed start would orphan
                raise

    def wait_ready(self, timeout: float = DEADLINE_S) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready.exists():
                self.url = self.ready.read_text().strip()
                return self.url
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode} before serving:\n{self.output()}")
            time.sleep(0.05)
        raise TimeoutError(f"daemon did not write its ready file {self.ready} (serving) within {timeout} s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def token(self, name: str = "admin") -> str:
        """A token of the daemon's token file (the admin one it generated at its first start, by default)."""
        from planner.daemon.auth import token_of

        return token_of(self.token_file, name)

    def headers(self, name: str = "admin") -> dict:
        return {} if self.insecure else {"Authorization": f"Bearer {self.token(name)}"}

    def client(self, name: str = "admin", **kw: Any) -> httpx.Client:
        """An HTTP client of the daemon that sends the token ``name`` (none with --insecure)."""
        return httpx.Client(base_url=self.url, timeout=30.0, headers=self.headers(name), **kw)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = DEADLINE_S, what: str = "the daemon to exit") -> int:
        """The exit status; fails, saying what it waited for and with the daemon's log, past ``timeout``."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}:\n{self.output()[-4000:]}") from None

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def running(self) -> bool:
        return self.proc.poll() is None


# Every daemon a test started, so that tests/daemon/conftest.py ends those still running when a test
# (or a module's fixture) is over, also when it failed: a failed test leaves no orphan daemon behind.
STARTED: list[DaemonProc] = []


def end_started(since: int = 0) -> list[str]:
    """End the daemons started since ``STARTED[since]`` that still run (SIGTERM, then SIGKILL); their names."""
    ended = []
    for d in STARTED[since:]:
        if d.running():
            ended.append(d.ready.stem)
            try:
                d.stop()
            except Exception:  # noqa: BLE001 - a cleanup must reach every daemon
                d.kill()
    del STARTED[since:]
    return ended


def serve(tmp_path_factory, name: str, *args: str):
    """A module fixture's body: a daemon on the test cluster for the whole module, stopped cleanly after."""
    tmp = tmp_path_factory.mktemp(name)
    d = DaemonProc(tmp, "--scenario", str(write_cluster(tmp)), *args)
    try:
        yield d
    finally:
        rc = d.stop()
    assert rc == 0, d.output()


def query(path: Path, sql: str, args: tuple = ()) -> list[dict]:
    """Read the state file the way an operator would (a separate read-only connection)."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    c.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in c.execute(sql, args)]
    finally:
        c.close()


def step_delay() -> str:
    """Wall seconds per apply step that leave a test time to interrupt an apply: the executor takes
    about eight steps per solo job, the simulated cluster alone one."""
    import importlib.util

    return "0.25" if importlib.util.find_spec("executor") is not None else "1.0"


def applied_steps(state: Path) -> list[dict]:
    """The apply steps done so far, from the executor's journal when the executor applies, else the simulated cluster's."""
    journal = state.with_name(state.name + ".journal")
    if journal.exists():
        return query(journal, "SELECT apply_id, seq, step_id AS step, kind AS action, attempts FROM steps WHERE status='done' ORDER BY apply_id, seq")
    sim = state.with_name(state.name + ".sim")
    if not sim.exists():
        return []
    return query(sim, "SELECT plan_id AS apply_id, step AS seq, action || ':' || job AS step, action, 1 AS attempts FROM sim_journal ORDER BY id")


SLOW_LOOP = "the loop falls behind its period"  # planner.daemon.service.Service.slow_problem


def healthy(h: dict) -> bool:
    """A /v1/health answer with no problem but, perhaps, a loop slower than its period (cycles of a test's 0.2 s
    period overrun it on a busy machine: the tests do not depend on the machine's speed), and ready."""
    return h["ready"] and h["status"] in ("ok", "degraded") and all(p.startswith(SLOW_LOOP) for p in h["problems"])


def wait_for(pred, timeout: float = DEADLINE_S, every: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def kv(path: Path, key: str, default: Any = None) -> Any:
    rows = query(path, "SELECT value FROM kv WHERE key=?", (key,))
    return json.loads(rows[0]["value"]) if rows else default
