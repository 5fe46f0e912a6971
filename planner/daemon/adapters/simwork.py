"""What the simulated cluster's jobs do on the executor's simulated backend: requests and telemetry.

* **Requests** (``--sim-requests N``): when a job starts running, ``N`` rollout requests (GRPO
  groups sharing prompts) go to its rollout engines through the executor's router; the engines
  decode them as the backend is called, and every migration hands them over by the ledger, so a
  test can check each one finishes exactly once with its uninterrupted output.
* **Telemetry** (``--sim-telemetry``): each cycle, one snapshot per running job, written from the
  executor's state (:func:`planner.apply.telemetry.job_snapshot`: the job's components, its
  workers by their executor ids, its group's nodes) at the job's place in its iteration as the
  simulated cluster times it (:meth:`planner.daemon.adapters.simcluster.SimCluster.phase`): the
  rollout's share of the iteration runs its requests down (:func:`planner.apply.telemetry.tail_loads`:
  the long tail thins out), the reference follows the rollout a little behind, the trainer runs
  after it.
"""

from __future__ import annotations

from typing import Any, Optional

from executor.state import ClusterState

from planner.apply.telemetry import job_snapshot, tail_loads


def submit_requests(backend: Any, job: str, n: int, seed: int = 0) -> int:
    """``n`` requests to ``job``'s rollout engines (idempotent: ids are per job); how many were new."""
    from executor import router

    comp = f"{job}/rollout"
    have = {r["id"] for r in backend.coord("request_records") if r.get("component") == comp}
    reqs = [r for r in router.make_requests(comp, n, prompts=max(1, n // 4), min_len=200, max_len=400, seed=seed, prefix=f"{job}-")
            if r["id"] not in have]
    if reqs:
        router.submit(backend, comp, reqs)
    return len(reqs)


def progress_at(frac: float, rollout_share: float) -> dict[str, float]:
    """Each component's progress at ``frac`` of the iteration (the rollout takes ``rollout_share`` of it)."""
    r = min(1.0, frac / rollout_share) if rollout_share > 0 else 1.0
    after = max(0.0, (frac - rollout_share) / (1.0 - rollout_share)) if rollout_share < 1 else 0.0
    return {"rollout": r, "reference": min(1.0, 0.9 * r + after), "critic": min(1.0, 0.9 * r + after), "trainer": min(1.0, after)}


def snapshot(st: ClusterState, job: str, phase: tuple[int, float, float, float]) -> Optional[dict]:
    """The job's snapshot at ``phase`` (from :meth:`SimCluster.phase`); None when nothing of it runs."""
    iteration, frac, share, iteration_s = phase
    engines = [w.id for w in sorted(st.components[f"{job}/rollout"].live_workers(), key=lambda w: w.index)] \
        if f"{job}/rollout" in st.components else []
    prog = progress_at(frac, share)
    snap = job_snapshot(st, job, time_s=frac * iteration_s, iteration=iteration, progress=prog,
                        loads=tail_loads(engines, prog["rollout"]))
    return snap if snap["components"] else None
