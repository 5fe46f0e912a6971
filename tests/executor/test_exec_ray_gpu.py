"""The Ray backend on a real GPU: a single-node Ray started on the machine (not the fake
multi-node cluster of ``test_exec_ray.py``), whose ``GPU`` resource and ``accelerator_type``
Ray detects itself. Skipped without CUDA; ``tests/executor/gpu_checks.sh`` runs it on a GPU
machine (results: ``results/executor/ray-gpu.md``).

What it checks:

* Ray detects the machine's GPUs (``GPU`` = ``torch.cuda.device_count()``) and their type
  (``accelerator_type:<type>``); the backend reads the node as a planner node of that type;
* the executor applies a plan whose trainer rank asks for one GPU (``num_gpus=1``): inside the
  worker actor Ray assigned GPU ``'0'``, ``CUDA_VISIBLE_DEVICES`` is ``0``, torch there sees
  exactly one CUDA device, the same physical GPU as the driver's device 0 (by UUID), and runs a
  matrix product on it;
* a **Reboot** migration (the one of the three that fits on one GPU: Workload and P2P start the
  new workers before the old ones stop, so they need a second GPU or node) moves the rank off the
  GPU and back onto it: the old actor stops (its GPU is free again), a new actor of the next
  generation gets GPU ``'0'``, restores the checkpoint, and its full trainer state (every
  parameter, gradient buffer and Adam moment) equals the state before, bit for bit; it then
  trains on. Run with the ``toy`` trainer and the ``tinylm`` one.

Honest limits: the ``toy`` and ``tinylm`` workers keep their tensors on the CPU of the worker's
process; the GPU part is Ray's assignment of the device to the actor, the process's view of it and
the probe's matrix product (``WorkerActor.cuda``), not the training itself.

``RL_PLANNER_RAY_GPU_DRYRUN=1`` runs the same on a machine without a GPU (Ray is told of one
fake GPU of type H100): everything but the CUDA checks, to try the test before spending GPU time.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

DRYRUN = os.environ.get("RL_PLANNER_RAY_GPU_DRYRUN") == "1"
pytestmark = [pytest.mark.ray, pytest.mark.skipif(
    not (torch.cuda.is_available() or DRYRUN),
    reason="needs a CUDA GPU (torch.cuda.is_available() is False): tests/executor/gpu_checks.sh runs it on a GPU machine "
           "(RL_PLANNER_RAY_GPU_DRYRUN=1 tries it on CPU with a fake GPU)")]
ray = pytest.importorskip("ray", reason="ray is not installed (the executor extra)")

from executor.backends.base import observe  # noqa: E402
from executor.controller import Executor  # noqa: E402
from executor.diff import diff  # noqa: E402
from executor.faultlib import MODEL, TRAINER, full_state, same_state, target  # noqa: E402
from executor.journal import Journal  # noqa: E402

NODE = "gpu0"
DRAM_GB = 64.0
DEADLINES = dict(start_s=180.0, call_s=120.0, reshard_s=120.0, stop_s=60.0)


@pytest.fixture(scope="module")
def gpu_ray(tmp_path_factory):
    """One real Ray node on this machine (a new one, ``address="local"``, whatever else runs here):
    its GPUs as Ray detects them, plus the executor's node name and DRAM resources
    (``executor/backends/ray/cluster.py``), no dashboard. The backend joins it (``RayBackend()`` with Ray already initialised). Shut down at the end."""
    from executor.backends.base import Deadlines
    from executor.backends.ray import RayBackend
    from executor.backends.ray import cluster as rc

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    resources = {f"{rc.NODE_PREFIX}{NODE}": 1.0, rc.DRAM: DRAM_GB}
    kw: dict = {}
    if DRYRUN:  # no GPU here: tell Ray of one, of a type, as a GPU node would advertise them
        kw["num_gpus"] = 1
        resources[f"{rc.ACCEL}H100"] = 1.0
    t0 = time.monotonic()
    ray.init(address="local", num_cpus=4, resources=resources, include_dashboard=False, namespace=rc.NAMESPACE, log_to_driver=False,
             object_store_memory=200 * 1024 * 1024, _node_ip_address="127.0.0.1", **kw)
    started = time.monotonic() - t0
    b = None
    try:
        b = RayBackend(deadlines=Deadlines(**DEADLINES), state_dir=str(tmp_path_factory.mktemp("coord")))
        print(f"\n[ray-gpu] ray {ray.__version__} started in {started:.1f} s; resources {ray.cluster_resources()}")
        yield b
        b.reset()
    finally:
        if b is not None:
            b.close()
        ray.shutdown()


def test_ray_detects_the_gpu_and_the_backend_reads_the_node(gpu_ray):
    res = ray.cluster_resources()
    want = 1 if DRYRUN else torch.cuda.device_count()
    assert res.get("GPU") == want, res
    accel = [k for k in res if k.startswith("accelerator_type:")]
    assert len(accel) == 1, f"Ray set no (or several) accelerator types: {res}"
    gtype = accel[0].split(":", 1)[1]
    if not DRYRUN:
        name = torch.cuda.get_device_name(0)
        assert gtype in name, (gtype, name)  # e.g. H100 in 'NVIDIA H100 80GB HBM3'
    nodes = gpu_ray.nodes()
    assert set(nodes) == {NODE}
    n = nodes[NODE]
    assert (n.gpu_type, n.gpus, n.dram_gb, n.alive) == (gtype, want, DRAM_GB, True)


def _body(b, impl: str, dram_gb: float) -> dict:
    n = b.nodes()[NODE]
    comp = {"name": TRAINER, "role": "trainer", "gpu_type": n.gpu_type, "gpus_per_worker": 1, "dram_gb_per_worker": dram_gb,
            "layout": {"tp": 1}, "placement": {NODE: 1}, "model": MODEL, "migration": "reboot"}
    if impl:
        comp["impl"] = impl
    return {"nodes": [{"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus, "dram_gb": n.dram_gb}], "components": [comp]}


def _check_gpu(b, wid: str) -> dict:
    """Inside the worker's actor: Ray's GPU '0', CUDA_VISIBLE_DEVICES to match, and torch's view."""
    g = b.worker_gpus(wid)
    assert g["gpu_ids"] == ["0"], (wid, g)
    assert g["cuda_visible_devices"] == "0", (wid, g)
    assert g["placement_group"], (wid, g)  # scheduled into its unit's reservation
    c = ray.get(b._handle(wid).cuda.remote(), timeout=b.deadlines.call_s)
    print(f"[ray-gpu] {wid}: ray gpu_ids {g['gpu_ids']}, CUDA_VISIBLE_DEVICES={g['cuda_visible_devices']}, torch {c}")
    assert c["cuda_visible_devices"] == "0", c
    if DRYRUN:
        assert c["available"] is False, c
        return c
    assert c["available"] is True and c["device_count"] == 1, c
    assert c["name"] == torch.cuda.get_device_name(0), c
    assert c["uuid"] == str(getattr(torch.cuda.get_device_properties(0), "uuid", "")), c  # the driver's device 0
    x = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    assert c["matmul_sum"] == float((x @ x).sum()) and c["device"] == "cuda:0", c
    return c


def _trainer_ids(b) -> list[str]:
    return sorted(r["id"] for r in b.coord("records") if r["component"] == TRAINER)


@pytest.mark.parametrize("impl", ["", "tinylm"], ids=["toy", "tinylm"])
def test_reboot_moves_a_one_gpu_trainer_rank_off_the_gpu_and_back_bit_identically(gpu_ray, impl):
    b = gpu_ray
    b.reset()
    j = Journal(":memory:")
    t0 = time.monotonic()
    res = Executor(b, j).apply(diff(observe(b), target(_body(b, impl, 16.0))).steps, "base")
    assert res.status == "done", res.message
    t_base = time.monotonic() - t0
    (old,) = _trainer_ids(b)
    _check_gpu(b, old)
    for s in range(2):
        assert all(b.train_step(TRAINER, s))
    before, step, lost = full_state(b, [old])
    assert lost == [] and step >= 2 and before
    devices = {str(t.device) for t in before.values()}
    print(f"[ray-gpu] {impl or 'toy'}: the trainer state arrives on {devices} ({len(before)} tensors, step {step})")

    # The reboot: only the worker's DRAM changes (16 -> 24 GB), so the plan restarts it in place.
    steps = diff(observe(b), target(_body(b, impl, 24.0))).steps
    kinds = [s.kind for s in steps]
    assert "save" in kinds and "stop" in kinds and "create" in kinds, kinds
    assert kinds.index("stop") < kinds.index("create"), kinds  # the old rank gives the GPU back first
    t0 = time.monotonic()
    res = Executor(b, j).apply(steps, "reboot")
    t_reboot = time.monotonic() - t0
    assert res.status == "done", res.message
    (new,) = _trainer_ids(b)
    assert new != old and not b.worker_alive(old)
    _check_gpu(b, new)
    after, step_after, lost = full_state(b, [new])
    assert lost == [] and step_after == step
    assert same_state(before, after) == []
    assert all(b.train_step(TRAINER, step))  # the restarted rank trains on
    later, step_later, _ = full_state(b, [new])
    assert step_later == step + 1 and same_state(before, later) != []
    assert b.coord("illegal_transitions") == []
    assert b.leaks() == []
    print(f"[ray-gpu] {impl or 'toy'}: base apply {t_base:.1f} s, reboot apply {t_reboot:.1f} s ({len(steps)} steps: {kinds}); "
          f"state equal bit for bit ({len(before)} tensors)")
