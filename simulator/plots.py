"""PNG plots: GPU ownership over time per component (as DynaRL's Figure 13) and group Gantt charts."""

from __future__ import annotations

from pathlib import Path

import numpy as np

COLORS = {"rollout": "#4C72B0", "reference": "#55A868", "trainer": "#C44E52", "free": "#BBBBBB"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ownership_png(res, path: Path, points: int = 600) -> Path:
    """Stacked GPUs held per component over time, with the requests still in the rollout below."""
    plt = _plt()
    ts, series = res.ledger.series(res.end_s, points)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]})
    comps = [c for c in ("rollout", "reference", "trainer") if c in series]
    ax.stackplot(ts, *[series[c] for c in comps], labels=comps, colors=[COLORS[c] for c in comps], alpha=0.9, step="post")
    total = sum(res.cluster_gpus.values())
    ax.axhline(total, color="k", lw=0.8, ls="--", label=f"cluster ({total} GPUs)")
    for n, it in enumerate(res.iterations):
        ax.axvline(it.start_s, color="k", lw=0.5, alpha=0.4, label="iteration starts" if n == 0 else None)
    for n, (t, _, _) in enumerate(res.decisions):
        ax.axvline(t, color="orange", lw=0.6, alpha=0.6, label="reallocation decisions" if n == 0 else None)
    ax.set_ylim(0, total * 1.05)
    ax.set_ylabel("GPUs held")
    ax.set_title(f"{res.setup.name}: GPU ownership per component ({res.policy.name}"
                 f"{', priority' if res.policy.queue == 'priority' else ''}"
                 f"{', consolidation' if res.policy.consolidate_at else ''})")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)  # beside the stack, not over it
    done = np.sort(np.array([r.done_s for r in res.requests if r.done_s is not None]))
    starts = np.array([it.start_s for it in res.iterations])
    n = res.setup.workload.n_requests
    running = []
    for t in ts:
        k = int(np.searchsorted(starts, t, side="right")) - 1
        finished_this = np.searchsorted(done, t, side="right") - k * n
        running.append(max(0, n - finished_this) if k >= 0 else 0)
    ax2.plot(ts, running, color=COLORS["rollout"])
    ax2.set_ylabel("requests\nnot done")
    ax2.set_xlabel("time (s)")
    fig.set_size_inches(10.5, 5.5)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


def gantt_png(lanes: list, path: Path, title: str, t_max: float | None = None) -> Path:
    """``lanes``: [(lane label, [(start, end, label, kind)])] with kind rollout | tail | train | switch."""
    plt = _plt()
    kinds = {"rollout": COLORS["rollout"], "tail": "#A6C8E8", "train": COLORS["trainer"], "switch": "#CCB974"}
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(lanes) + 1.5))
    span = t_max if t_max is not None else max([b for _, bars in lanes for _, b, _, _ in bars] or [1.0])
    labels = []
    for i, (name, bars) in enumerate(lanes):
        jobs = sorted({lab for _, _, lab, _ in bars if lab})
        labels.append(f"{name}: {', '.join(jobs[:4])}{f' +{len(jobs) - 4}' if len(jobs) > 4 else ''}" if jobs else name)
        for (a, b, lab, kind) in bars:
            if t_max is not None and a > t_max:
                continue
            ax.barh(i, b - a, left=a, color=kinds.get(kind, "#999999"), edgecolor="white", lw=0.3)
            if lab and (min(b, span) - a) >= 0.05 * span:  # the job's name on bars wide enough to hold it
                ax.text((a + min(b, span)) / 2, i, lab, ha="center", va="center", fontsize=6, clip_on=True)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(title)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=k) for k, c in kinds.items()], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)  # beside the lanes, not over them
    if t_max is not None:
        ax.set_xlim(0, t_max)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path
