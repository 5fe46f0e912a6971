"""A reallocation stays on the job's nodes in the plan, whatever nodes its telemetry declares free.

Found driving the daemon by hand (2026-12-07): telemetry that declared two more nodes of the cluster (free, in no
group) besides the job's group's had the committed reallocation start 16 GPUs of the job's workers there (log-prob
inference and trainer ranks on h800-2 and h800-3), outside every reservation of the plan: the placement planner
still counted them free, the plan's cost did not include them. The loop now cuts the nodes a snapshot declares to
the job's nodes in the plan (its group's rollout nodes and training pool, and those its workers are on).

In process on a manual clock, the executor on its simulated backend (as test_daemon_realloc_next_iteration.py).
"""

from __future__ import annotations

import pytest

from planner.daemon.adapters import executor as ex
from tests.daemon.test_daemon_realloc import JOB, snapshots, state_of
from tests.daemon.test_daemon_realloc_next_iteration import running_on_executor

pytestmark = pytest.mark.skipif(ex.available() is not None, reason=f"the executor cannot apply here: {ex.available()}")


def test_a_reallocation_stays_on_the_jobs_nodes_when_its_telemetry_declares_others_free(tmp_path):
    w = running_on_executor(tmp_path)
    (group,) = w.store.current_plan().placement["groups"]
    mine = set(group["rollout_nodes"]) | set(group["train_nodes"])
    others = sorted({n["node"] for n in w.sim.describe()["nodes"] if n["gpu_type"] == "H800"} - mine)
    assert len(others) >= 2, others
    for s in snapshots(state_of(w.sim.describe())):
        s["nodes"] += [{"node": n, "gpu_type": "H800", "gpus": 8} for n in others]
        w.store.add_telemetry(JOB, 0.0, s["time_s"], s["iteration"], s)
    w.cycle(60.0)
    (d,) = w.decisions("realloc")
    assert d["outcome"] == "applied", d
    used = {n for c in w.sim.describe()["components"] if c["name"].startswith(JOB + "/") for n in c["placement"]}
    assert used <= mine, f"workers of {JOB} on {sorted(used - mine)}, outside its group's nodes {sorted(mine)}"
    w.sim.close()
