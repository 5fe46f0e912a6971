"""Why a job cannot be placed, and what would fix it.

Checked in this order, the first that applies is the reason:

* ``no-pool``: the job has no rollout or no training table (no GPU type fits it);
* ``dram``: no node of an allowed type has host DRAM for its resident state, even alone;
* ``slo``: its SLO is below its solo cycle time (rollout + training + sync) on every pool
  configuration it may use, by how much (the best configuration is named);
* ``dram`` again: it meets its SLO only on pools where its host DRAM does not fit (and fits only
  on pools too slow for its SLO);
* ``capacity``: it fits alone on some configuration, but the fleet has too few nodes: short by
  ``N`` nodes of type ``T`` (against the whole fleet, or against the nodes the plan leaves free).
  Never a shortage of nothing: callers try the free nodes first (:func:`formulation.placement.solve.place_leftovers`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from formulation.placement.dramfit import dram_short
from formulation.placement.evaluate import Index
from formulation.placement.plan import Unplaced


def placeable_alone(idx: Index) -> np.ndarray:
    """Per job: some configuration the fleet can hold meets its SLO and fits its DRAM with the job
    alone. A job without one is unplaceable whatever the other jobs do (proven: no plan places it)."""
    return idx.ok.any(axis=0) if idx.n else np.zeros(0, dtype=bool)


def explain(idx: Index, j: int, free: Optional[dict[str, int]] = None) -> Unplaced:
    inst = idx.inst
    job = inst.jobs[j]
    if not job.rollout_s or not job.train_s:
        side = "rollout" if not job.rollout_s else "training"
        what = ("its model" if side == "rollout" else
                "its model's training state with its trainer replicas (tp x pp x dp) and its reference engine beside them")
        return Unplaced(job=job.name, reason="no-pool",
                        message=f"no GPU type can run its {side} (its {side} table is empty: no pool of an allowed type holds {what})",
                        fix=(f"allow a GPU type with more memory for its {side}, or raise its tensor/pipeline parallelism"
                             + ("" if side == "rollout" else ", or give it more training nodes (trainer.nodes) or a smaller trainer.dp")))
    pools = inst.pool_types
    unfit = dram_short(job.dram_rollout_node_gb, job.train_state_gb, job.rollout_s, job.train_s,
                        {t: p.dram_gb for t, p in pools.items()}, {t: p.count for t, p in pools.items()})
    if unfit is not None and unfit.side == "rollout":
        return Unplaced(job=job.name, reason="dram",
                        message=f"needs {unfit.need_gb:.1f} GB of host DRAM on each rollout node but the largest "
                                f"rollout node has {unfit.have_gb:.1f} GB", fix="use rollout nodes with more host DRAM or a smaller model")
    if unfit is not None:
        return Unplaced(job=job.name, reason="dram",
                        message=f"its training state ({unfit.state_gb:.1f} GB) needs {unfit.need_gb:.1f} GB of host DRAM "
                                f"per node even on {unfit.nodes} {unfit.gpu_type} node(s), which have {unfit.have_gb:.1f} GB",
                        fix="allow a larger training pool, nodes with more host DRAM, or a smaller model")
    # best solo cycle over every configuration its tables allow, ignoring the fleet's size
    best = None
    for p, rrow in job.rollout_s.items():
        for nr, a in rrow.items():
            for q, trow in job.train_s.items():
                for nt, b in trow.items():
                    tot = a + b + job.sync(p, q)
                    if best is None or tot < best[0]:
                        best = (tot, p, nr, q, nt)
    assert best is not None  # every job has a rollout and a training table (the instance's validator)
    tot, p, nr, q, nt = best
    if tot > job.slo_s * (1 + 1e-9):
        return Unplaced(job=job.name, reason="slo",
                        message=f"its SLO {job.slo_s:.1f} s is below its solo iteration time {tot:.1f} s even on its fastest pools "
                                f"({nr} {p} rollout + {nt} {q} training nodes), by {tot - job.slo_s:.1f} s",
                        fix=f"raise its SLO to at least {np.ceil(tot):.0f} s, or allow larger or faster pools")
    # configurations where it meets its SLO alone, and those where its DRAM fits too
    slo_ok, both_ok, fits_dram = [], [], []
    for p, rrow in job.rollout_s.items():
        for nr, a in rrow.items():
            for q, trow in job.train_s.items():
                for nt, b in trow.items():
                    tot = a + b + job.sync(p, q)
                    dram = job.train_state_gb / nt <= inst.pool_types[q].dram_gb and job.dram_rollout_node_gb <= inst.pool_types[p].dram_gb
                    if dram:
                        fits_dram.append((tot, p, nr, q, nt))
                    if tot <= job.slo_s * (1 + 1e-9):
                        slo_ok.append((tot, p, nr, q, nt))
                        if dram:
                            both_ok.append((p, nr, q, nt))
    if not both_ok:
        # it meets its SLO somewhere, and its DRAM fits somewhere, but never on the same pools
        tot, p, nr, q, nt = min(slo_ok)
        need_r, need_t = job.dram_rollout_node_gb, job.train_state_gb / nt
        have_r, have_t = inst.pool_types[p].dram_gb, inst.pool_types[q].dram_gb
        what = (f"{need_r:.1f} GB per {p} rollout node (has {have_r:.1f} GB)" if need_r > have_r else
                f"{need_t:.1f} GB per {q} training node (has {have_t:.1f} GB)")
        fix = "use nodes with more host DRAM"
        if fits_dram:
            ft = min(fits_dram)
            fix += (f", or raise its SLO to at least {np.ceil(ft[0]):.0f} s (its fastest pools where its DRAM fits: "
                    f"{ft[2]} {ft[1]} rollout + {ft[4]} {ft[3]} training nodes)")
        return Unplaced(job=job.name, reason="dram",
                        message=f"it meets its SLO only on pools where its host DRAM does not fit: on its fastest "
                                f"({nr} {p} rollout + {nt} {q} training nodes, {tot:.1f} s) it needs {what}",
                        fix=fix)
    # capacity: the cheapest configuration on which it meets its SLO alone
    free = free if free is not None else dict(idx.capacity)
    opts = []
    for p, nr, q, nt in both_ok:
        need = {p: nr}
        need[q] = need.get(q, 0) + nt
        short_fleet = {t: n - inst.pool_types[t].count for t, n in need.items() if n > inst.pool_types[t].count}
        short_free = {t: n - free.get(t, 0) for t, n in need.items() if n > free.get(t, 0)}
        pr, pt = inst.pool_types[p], inst.pool_types[q]
        cost = nr * pr.gpus_per_node * pr.price_per_gpu_hour + nt * pt.gpus_per_node * pt.price_per_gpu_hour
        opts.append((sum(short_fleet.values()), sum(short_free.values()), cost, short_fleet, short_free, (p, nr, q, nt)))
    opts.sort(key=lambda o: (o[0], o[1], o[2]))
    _, _, _, short_fleet, short_free, (p, nr, q, nt) = opts[0]
    short = short_fleet or short_free
    if not short:
        # never a shortage of nothing: the callers try the nodes left free before explaining, so this
        # is only reached when a solver stopped before trying it
        return Unplaced(job=job.name, reason="capacity",
                        message=f"alone it fits the nodes the plan leaves free ({nr} {p} rollout + {nt} {q} training node(s)) "
                                "but the solve stopped before placing it",
                        fix="re-run `planner plan` with a longer --time-limit, or admit it with `planner admit`")
    what = ", ".join(f"{n} node(s) of {t}" for t, n in sorted(short.items()))
    scope = "the fleet is" if short_fleet else "the nodes the other groups leave free are"
    return Unplaced(job=job.name, reason="capacity",
                    message=f"alone it needs {nr} {p} rollout + {nt} {q} training node(s); {scope} short by {what}",
                    fix=f"add {what} to the cluster" + ("" if short_fleet else ", or move or remove other jobs"))
