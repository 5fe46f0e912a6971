"""Timeline of one steady-state meta-iteration per group: rollout lanes and a training lane.

One rollout lane per set of rollout nodes members are pinned to: the whole pool, or (pinned
groups) one lane per member's own rollout nodes.

Start times come from running the group's schedule (:func:`formulation.placement.cycle.schedule`)
until it is periodic; the window shown starts at the first member's rollout of a late
meta-iteration and lasts one cycle time, so idle gaps on a lane are the bubbles left.
"""

from __future__ import annotations

from pathlib import Path

from formulation.placement.cycle import schedule
from formulation.placement.plan import PlacementPlan, members_of

MAX_GROUPS = 40


SYNC_MIN_FRACTION = 0.006  # weight sync is drawn at least this share of the cycle wide (it is often < 0.1%)


def _pool_label(role: str, pool) -> str:
    nodes = f"{pool.size} {pool.gpu_type} node{'s' if pool.size != 1 else ''}"
    return f"{role}\n{nodes} ({pool.gpus} GPUs)"


def _label(ax, a: float, width: float, y: float, text: str, period: float) -> None:
    """The job's name on the part of a bar inside the window [0, period], where it is wide enough."""
    lo, hi = max(0.0, a), min(period, a + width)
    if hi - lo >= 0.06 * period:
        ax.text((lo + hi) / 2, y, text, ha="center", va="center", fontsize=6, clip_on=True)


def plot_plan(plan: PlacementPlan, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups = plan.groups[:MAX_GROUPS]
    heights = [1 + len({frozenset(m.rollout_nodes) for m in g.members}) for g in groups] or [2]
    fig, axes = plt.subplots(max(1, len(groups)), 1, figsize=(12, 1.6 + 0.7 * sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    cmap = plt.get_cmap("tab20")
    jobs = [m.job for g in groups for m in g.members]
    color_of = {j: cmap(i % 20) for i, j in enumerate(jobs)}  # one color per job across the figure
    for ax, g in zip(axes[:, 0], groups):
        mem = members_of(g)
        iters = 40 + 4 * len(mem)
        x = schedule(mem, iters)
        k = iters - 3
        t0 = x[k, 0]
        period = g.cycle_time_s
        lanes: list = []  # distinct rollout pin sets, in order of first member
        for m in mem:
            if m.rollout_nodes not in lanes:
                lanes.append(m.rollout_nodes)
        for i, m in enumerate(mem):
            color = color_of.get(m.name, cmap(i % 20))
            sync_w = max(m.sync_s, SYNC_MIN_FRACTION * period)
            y = 10 + 10 * lanes.index(m.rollout_nodes)
            for kk in (k - 1, k, k + 1):  # phases that overlap the window, a bar cut at its edge included
                r0, tr0 = x[kk, 2 * i] - t0, x[kk, 2 * i + 1] - t0
                ax.broken_barh([(r0, m.rollout_s)], (y, 8), facecolors=color, edgecolor="black", linewidth=0.4)
                ax.broken_barh([(tr0, m.train_s)], (0, 8), facecolors=color, edgecolor="black", linewidth=0.4)
                ax.broken_barh([(tr0 + m.train_s, sync_w)], (0, 8), facecolors="black", edgecolor="black", linewidth=0.4)
                _label(ax, r0, m.rollout_s, y + 4, m.name, period)
                _label(ax, tr0, m.train_s, 4, m.name, period)
        ax.set_xlim(0, period)
        ax.set_ylim(-1, 9 + 10 * len(lanes))
        ax.set_yticks([4] + [14 + 10 * i for i in range(len(lanes))])
        if len(lanes) == 1:
            r_labels = [_pool_label("rollout", g.rollout_pool)]
        else:
            per = g.rollout_pool.gpus_per_node
            r_labels = [f"rollout\n{len(ln)} {g.rollout_pool.gpu_type} node{'s' if len(ln) != 1 else ''} ({len(ln) * per} GPUs)"
                        for ln in lanes]
        ax.set_yticklabels([_pool_label("training", g.train_pool)] + r_labels, fontsize=7)
        ax.set_title(f"{g.id}: cycle {period:.1f} s, {g.cost_per_hour:.1f} $/h, rollout busy {100 * g.rollout_busy:.0f}%, "
                     f"training busy {100 * g.train_busy:.0f}%", fontsize=8, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel("seconds into one steady-state meta-iteration (a bar cut at the right edge continues at the left)")
    more = f"; first {MAX_GROUPS} of {len(plan.groups)} groups" if len(plan.groups) > MAX_GROUPS else ""
    fig.suptitle(f"{plan.instance}: {plan.cost_per_hour:.1f} $/h, {len(plan.groups)} group(s){more}", fontsize=10)
    handles = [Patch(facecolor=color_of[j], edgecolor="black", linewidth=0.4, label=j) for j in jobs[:20]]
    handles.append(Patch(facecolor="black", label=f"weight sync (drawn at least {100 * SYNC_MIN_FRACTION:.1f}% of the cycle wide)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), fontsize=7, frameon=False)
    rows = (len(handles) + 3) // 4
    h = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, (0.25 + 0.2 * rows) / h, 1, 1 - 0.5 / h))
    from planner.safewrite import replacing

    try:
        with replacing(Path(path), where="--plot", suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
