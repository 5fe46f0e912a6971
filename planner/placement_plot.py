"""Timeline of one steady-state meta-iteration per group: a rollout lane and a training lane.

Start times come from running the group's schedule (:func:`formulation.placement.cycle.schedule`)
until it is periodic; the window shown starts at the first member's rollout of a late
meta-iteration and lasts one cycle time, so idle gaps on a lane are the bubbles left.
"""

from __future__ import annotations

from pathlib import Path

from formulation.placement.cycle import schedule
from formulation.placement.plan import PlacementPlan, members_of

MAX_GROUPS = 40


def plot_plan(plan: PlacementPlan, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = plan.groups[:MAX_GROUPS]
    fig, axes = plt.subplots(max(1, len(groups)), 1, figsize=(12, 1.0 + 1.3 * max(1, len(groups))), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, g in zip(axes[:, 0], groups):
        mem = members_of(g)
        iters = 40 + 4 * len(mem)
        x = schedule(mem, iters)
        k = iters - 3
        t0 = x[k, 0]
        period = g.cycle_time_s
        for i, m in enumerate(mem):
            color = cmap(i % 10)
            for kk in (k - 1, k, k + 1):  # phases that overlap the window
                r0, tr0 = x[kk, 2 * i] - t0, x[kk, 2 * i + 1] - t0
                ax.broken_barh([(r0, m.rollout_s)], (10, 8), facecolors=color, edgecolor="black", linewidth=0.4)
                ax.broken_barh([(tr0, m.train_s)], (0, 8), facecolors=color, edgecolor="black", linewidth=0.4)
                ax.broken_barh([(tr0 + m.train_s, m.sync_s)], (0, 8), facecolors="white", edgecolor=color, hatch="///", linewidth=0.4)
                if kk == k:
                    ax.text(r0 + m.rollout_s / 2, 14, m.name, ha="center", va="center", fontsize=6, clip_on=True)
                    ax.text(tr0 + m.train_s / 2, 4, m.name, ha="center", va="center", fontsize=6, clip_on=True)
        ax.set_xlim(0, period)
        ax.set_ylim(-1, 19)
        ax.set_yticks([4, 14])
        ax.set_yticklabels([f"train {g.train_pool.size}x{g.train_pool.gpu_type}", f"rollout {g.rollout_pool.size}x{g.rollout_pool.gpu_type}"],
                           fontsize=7)
        ax.set_title(f"{g.id}: cycle {period:.1f} s, {g.cost_per_hour:.1f} $/h, rollout busy {100 * g.rollout_busy:.0f}%, "
                     f"training busy {100 * g.train_busy:.0f}% (hatched: weight sync)", fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel("seconds into one meta-iteration (steady state)")
    more = f"; first {MAX_GROUPS} of {len(plan.groups)} groups" if len(plan.groups) > MAX_GROUPS else ""
    fig.suptitle(f"{plan.instance}: {plan.cost_per_hour:.1f} $/h, {len(plan.groups)} group(s){more}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_size_inches()[1]))
    from planner.safewrite import replacing

    try:
        with replacing(Path(path), where="--plot", suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
