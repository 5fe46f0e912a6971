"""``planner apply`` killed at every point of the very first apply — before the simulated cluster
was ever saved — recovers (issue 25, item 2): applying the plan again resumes it, or
``--rollback`` undoes it and a later apply starts clean; either way the cluster ends as a clean
apply leaves it, each step done once, no worker left over. (It used to wedge: "the simulated
cluster is gone" on every later apply and rollback.)

The kill is the controller's own crash point (:class:`executor.faults.ControllerCrash`, which no
handler catches) in-process for every (step, point); one real ``SIGKILL``-like exit (137) in a
subprocess checks the same through the real entry point."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hardening import corpus

TARGET = """\
kind: ExecutorTarget
version: 1
solver: {backend: manual, status: feasible}
body:
  nodes:
    - {name: n0, gpu_type: H20, gpus: 8, dram_gb: 512}
  components:
    - {name: job/rollout, role: rollout, gpu_type: H20, placement: {n0: 2}, dram_gb_per_worker: 20}
    - {name: job/trainer, role: trainer, gpu_type: H20, placement: {n0: 1}, model: {hidden: 16, ffn: 32, layers: 2, vocab: 32}}
"""


def _points() -> list[tuple[str, int, str]]:
    """(step kind, nth step of that kind, point) for every step of the first apply."""
    import yaml

    from executor.diff import diff
    from executor.faults import POINTS
    from executor.state import ClusterState
    from executor.target import ExecutorTarget, to_state

    target = to_state(ExecutorTarget.model_validate(yaml.safe_load(TARGET)["body"]))
    steps = diff(ClusterState(nodes=dict(target.nodes)), target).steps
    seen: dict[str, int] = {}
    out = []
    for s in steps:
        nth = seen.get(s.kind, 0)
        seen[s.kind] = nth + 1
        out += [(s.kind, nth, p) for p in POINTS]
    return out


POINTS = _points()


def run(argv: list[str]) -> tuple[int, str]:
    from planner.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = main(argv)
    return rc, out.getvalue()


def _cluster(args: list[str]) -> dict:
    rc, out = run(["status", "--json", *args])
    assert rc == 0, out
    st = json.loads(out)["state"]
    return {c["name"]: sorted(w["node"] for w in c["workers"] if w.get("status", "running") != "dead") for c in st["components"]}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("clean")
    (d / "t.yaml").write_text(TARGET)
    args = ["--sim-state", str(d / "s.db")]
    assert run(["apply", str(d / "t.yaml"), *args])[0] == 0
    return _cluster(args)


def _crash(monkeypatch, kind: str, nth: int, point: str):
    from executor import session
    from executor.faults import Fault, FaultPlan

    monkeypatch.setattr(session, "crash_hook_from_env", lambda: FaultPlan([Fault(kind, point, "crash", nth=nth)]))


@pytest.mark.parametrize("kind,nth,point", POINTS, ids=[f"{k}{n}:{p}" for k, n, p in POINTS])
def test_a_kill_in_the_first_apply_resumes(tmp_path: Path, monkeypatch, clean, kind, nth, point):
    from executor.faults import ControllerCrash

    (tmp_path / "t.yaml").write_text(TARGET)
    args = ["--sim-state", str(tmp_path / "s.db")]
    _crash(monkeypatch, kind, nth, point)
    with pytest.raises(ControllerCrash):
        run(["apply", str(tmp_path / "t.yaml"), *args])
    monkeypatch.undo()
    rc, out = run(["apply", str(tmp_path / "t.yaml"), *args])
    assert rc == 0 and "(resumed)" in out, out
    assert _cluster(args) == clean, "the resumed apply ends where a clean one does"
    import sqlite3

    db = sqlite3.connect(tmp_path / "s.db.journal")
    try:
        rows = db.execute("SELECT status, attempts FROM steps").fetchall()
    finally:
        db.close()
    assert rows and all(s == "done" for s, _ in rows) and all(n <= 2 for _, n in rows), rows


@pytest.mark.parametrize("kind,nth,point", [p for p in POINTS if p[2] != "mid"][:4])
def test_a_kill_in_the_first_apply_rolls_back_then_applies(tmp_path: Path, monkeypatch, clean, kind, nth, point):
    from executor.faults import ControllerCrash

    (tmp_path / "t.yaml").write_text(TARGET)
    args = ["--sim-state", str(tmp_path / "s.db")]
    _crash(monkeypatch, kind, nth, point)
    with pytest.raises(ControllerCrash):
        run(["apply", str(tmp_path / "t.yaml"), *args])
    monkeypatch.undo()
    rc, out = run(["apply", "--rollback", *args])
    assert rc == 0, out
    rc, out = run(["apply", str(tmp_path / "t.yaml"), *args])
    assert rc == 0, out
    assert _cluster(args) == clean


def test_a_real_kill_before_the_first_save(tmp_path: Path):
    """RL_PLANNER_EXECUTOR_CRASH_AT=create:before: the process exits 137 before any step was done."""
    (tmp_path / "t.yaml").write_text(TARGET)
    env = dict(os.environ, PYTHONPATH=str(corpus.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               RL_PLANNER_EXECUTOR_CRASH_AT="create:before")
    r = subprocess.run([sys.executable, "-m", "planner", "apply", str(tmp_path / "t.yaml"), "--sim-state", str(tmp_path / "s.db")],
                       cwd=corpus.ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 137, r.stderr[-2000:]
    rc, out = run(["apply", str(tmp_path / "t.yaml"), "--sim-state", str(tmp_path / "s.db")])
    assert rc == 0 and "(resumed)" in out, out
