"""The ``sync`` reproduction: topology-aware weight sync (scatter across clusters, broadcast inside)
against flat.

Registered in :mod:`planner.sim.reproduce` (the driver); never imports it back.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner.sim.parallel import Task
from planner.sim.repro_common import SC
from planner.sim.repro_common import header as _header


def sync_task() -> list:
    """The weight-sync table's rows (cheap: no simulation beyond one phase profile per job shape)."""
    from planner.instances.simulate import cluster_view, job_setup
    from planner.schema import load_scenario
    from simulator.job import weight_sync_time_s
    from simulator.profiles import phase_profile

    rows = []
    for name in ("weave-micro.yaml", "weave-trace-60.yaml"):
        sc = load_scenario(SC / name)
        view = cluster_view(sc)
        seen = set()
        for i, job in enumerate(sc.jobs):
            key = (job.model, job.rollout.tp, job.rollout.nodes, job.trainer.nodes)
            if key in seen:
                continue
            seen.add(key)
            s0 = job_setup(sc, i, job, view)
            prof = phase_profile(s0, consolidate_at=None)
            base = float(np.mean(prof.rollout_s) + np.mean(prof.train_s))
            for link in (s0.inter_cluster_gb_per_s, 12.5):  # the scenario's link, and a 100 Gb/s one
                s = replace(s0, inter_cluster_gb_per_s=link)
                r_gpus, t_gpus = s.rollout_nodes * s.gpus_per_node, s.train_nodes * s.gpus_per_node
                flat = weight_sync_time_s(replace(s, weight_sync="flat"), s.rollout_gpu, s.train_gpu, r_gpus, t_gpus, False)
                topo = weight_sync_time_s(replace(s, weight_sync="scatter_broadcast"), s.rollout_gpu, s.train_gpu, r_gpus, t_gpus, False)
                rows.append({"scenario": name, "job": job.name, "link_gb_per_s": link, "engines": r_gpus // s.rollout_tp,
                             "flat_s": flat, "topo_s": topo, "iter_flat_s": base + flat, "iter_topo_s": base + topo})
    return rows


def sync_tasks(args) -> list[Task]:
    return [Task("sync", {})]


def sync(args, cmd, R):
    L = _header("Topology-aware weight sync: scatter across clusters, broadcast inside", cmd,
                "Weave sends the new weights across the cluster boundary once (scattered over the rollout nodes) and "
                "broadcasts inside the rollout cluster, instead of every engine pulling a full copy; the brief quotes no "
                "speed-up figure for it, so the table shows ours.")
    L += ["Weight-sync seconds per iteration (`estimators.comm.weight_sync_s`) for each job's own pools, and the iteration "
          "time it gives with the simulated phase times.", "",
          "| scenario | job | inter-cluster link (GB/s) | rollout engines | flat (s) | scatter + broadcast (s) | **sync speed-up** | "
          "iteration flat (s) | iteration topology-aware (s) |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows = R("sync")
    for r in rows:
        L.append(f"| {r['scenario']} | {r['job']} | {r['link_gb_per_s']:g} | {r['engines']} | {r['flat_s']:.2f} | {r['topo_s']:.2f} | "
                 f"**{r['flat_s'] / r['topo_s']:.1f}x** | {r['iter_flat_s']:.1f} | {r['iter_topo_s']:.1f} |")
    L += ["", "The speed-up of the sync itself grows with the engines that would each pull a full copy; its share of the "
          "iteration stays small at these link speeds because rollout and training take minutes.", ""]
    return L, rows
