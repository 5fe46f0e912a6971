"""What a what-if run writes: the answer in words, the sweep table, CSV, Markdown and PNG plots."""

from __future__ import annotations

import csv
import io
import os
import platform
import time
from pathlib import Path
from typing import Optional

from formulation.capacity.plan import CapacityPlan

STYLE_LABEL = {"co-execution": "co-execution groups", "solo-disaggregated": "solo disaggregated (Solo-D)",
               "colocated": "colocated, one GPU type"}
SHORT = {"co-execution": "co-exec", "solo-disaggregated": "Solo-D", "colocated": "colocated"}


def fleet_text(fleet: dict[str, int]) -> str:
    parts = [f"{n} {t}" for t, n in sorted(fleet.items()) if n]
    return " + ".join(parts) if parts else "no nodes"


def answer_lines(plan: CapacityPlan, record: dict, styles=None) -> list[str]:
    """The answer a buyer reads: the fleet, its cost, how busy it is, what binds, the minimums.
    A type bought without limit (no ``max_nodes``) reads "no limit", not the compiler's bound."""
    lines = []
    gap = record.get("gap")
    bound = plan.lower_bound_per_hour
    proof = ("proven optimal" if record.get("status") == "optimal" else
             f"bound {bound:.2f} $/h, gap {100 * gap:.1f}%" if bound is not None and gap is not None else "no bound")
    buy = {f.gpu_type: f.new for f in plan.fleet if f.new}
    own = {f.gpu_type: f.owned for f in plan.fleet if f.owned}
    lines.append(f"{plan.instance}: {STYLE_LABEL.get(plan.style, plan.style)}, {plan.cost_per_hour:.2f} $/h for the fleet ({proof})")
    lines.append(f"  buy or rent: {fleet_text(buy)} ({plan.new_cost_per_hour:.2f} $/h)"
                 + (f"; owned: {fleet_text(own)} ({plan.owned_cost_per_hour:.2f} $/h)" if own else ""))
    if plan.budget_per_hour is not None:
        lines.append(f"  budget: {plan.budget_per_hour:.2f} $/h ({plan.budget_per_hour - plan.cost_per_hour:.2f} $/h left)")
    for f in plan.fleet:
        if f.total or f.owned:
            limit = "no limit" if f.limit is None else f"limit {f.limit}"
            lines.append(f"  {f.gpu_type}: {f.total} node(s) ({f.owned} owned + {f.new} new, {limit}), {f.total * f.gpus_per_node} GPUs, "
                         f"{f.cost_per_hour:.2f} $/h, {f.used} in use, GPUs busy {100 * f.busy:.0f}% of the time")
    if plan.placement is not None:
        lines.append(f"  {len(plan.placement.groups)} co-execution group(s) for {sum(len(g.members) for g in plan.placement.groups)} job(s)")
    if plan.binding:
        lines.append("  binding:")
        lines += [f"    {b.kind} [{b.where}]: {b.message}" for b in plan.binding]
    else:
        lines.append("  binding: nothing is tight (no SLO within 0.5%, no DRAM above 95%, no availability limit or budget reached)")
    if plan.minimums:
        lines.append("  minimums:")
        lines += [f"    {m.gpu_type}: {m.message}" for m in plan.minimums]
    if styles:
        lines.append("  deployment styles for the same forecast:")
        for s in styles:
            cost = f"{s.cost_per_hour:8.2f} $/h" if s.cost_per_hour is not None else "   cannot serve it"
            busy = f", busy {100 * s.busy:.0f}%" if s.busy is not None else ""
            lines.append(f"    {STYLE_LABEL.get(s.style, s.style):32s} {cost}  {fleet_text(s.fleet)} ({s.gpus} GPUs{busy})"
                         + (f"  [{s.note}]" if s.note else ""))
    return lines


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {"uname": " ".join(platform.uname()), "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in load],
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


# ---------------------------------------------------------------------------------- sweep tables
def columns(keys: list[str], types: list[str]) -> list[str]:
    return (["point"] + keys + ["style", "status", "cost_per_hour", "lower_bound_per_hour", "new_cost_per_hour", "gpus"]
            + [f"nodes_{t}" for t in types] + [f"used_{t}" for t in types] + [f"busy_{t}" for t in types]
            + ["n_jobs", "unplaced", "binding", "note", "wall_s", "warm_start"])


def rows(results, keys: list[str], types: list[str]) -> list[dict]:
    out = []
    for r in results:
        for s in r.styles:
            row = {"point": r.index, **{k: r.values.get(k) for k in keys}, "style": s.style, "status": s.status,
                   "cost_per_hour": s.cost_per_hour, "lower_bound_per_hour": s.lower_bound_per_hour,
                   "new_cost_per_hour": s.new_cost_per_hour, "gpus": s.gpus}
            for t in types:
                row[f"nodes_{t}"] = s.fleet.get(t, 0)
                row[f"used_{t}"] = s.used.get(t, 0)
                row[f"busy_{t}"] = round(s.busy.get(t, 0.0), 4)
            row.update({"n_jobs": r.jobs, "unplaced": ";".join(s.unplaced), "binding": ";".join(s.binding), "note": s.note,
                        "wall_s": round(s.wall_s, 3),
                        "warm_start": (r.record.get("warm_start") or "") if s.style == "co-execution" else ""})
            out.append(row)
    return out


def csv_text(results, keys: list[str], types: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns(keys, types), lineterminator="\n")
    w.writeheader()
    for row in rows(results, keys, types):
        w.writerow({k: ("" if v is None else f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return buf.getvalue()


def table_rows(results, keys: list[str], styles: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    head = ["#"] + keys + ["$/h", "bound", "fleet (co-execution)", "GPUs", "busy", "binding"]
    others = [s for s in styles if s != "co-execution"]
    head += [f"{SHORT.get(s, s)} $/h" for s in others] + ["s"]
    body = []
    for r in results:
        co = r.style("co-execution")
        busy = "" if co is None or not co.served else f"{100 * sum(co.busy.get(t, 0) * n for t, n in co.fleet.items()) / max(1, sum(co.fleet.values())):.0f}%"
        kinds = sorted({b.split(":")[0] for b in co.binding}) if co else []
        row = [str(r.index)] + [f"{r.values[k]:g}" for k in keys]
        if co is not None and co.served:
            row += [f"{co.cost_per_hour:.2f}", "" if co.lower_bound_per_hour is None else f"{co.lower_bound_per_hour:.2f}",
                    fleet_text(co.fleet), str(co.gpus), busy, ",".join(kinds)]
        else:
            row += ["-", "", "cannot serve: " + (co.note[:60] if co else ""), "", "", ""]
        for s in others:
            st = r.style(s)
            row.append(f"{st.cost_per_hour:.2f}" if st is not None and st.served else "-")
        row.append(f"{r.wall_s:.1f}")
        body.append(row)
    return head, body


def markdown(head: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in body]
    return "\n".join(out) + "\n"


def print_table(head: list[str], body: list[list[str]], console) -> None:
    from rich.table import Table

    t = Table(show_lines=False)
    for h in head:
        t.add_column(h, overflow="fold")
    for row in body:
        t.add_row(*row)
    console.print(t)


# ---------------------------------------------------------------------------------- plots
TYPE_COLORS = {"H20": "#4C9F70", "H800": "#3B6FB6", "H100": "#C9822B", "H200": "#8E4EA5"}
STYLE_STYLE = {"co-execution": ("-", "o"), "solo-disaggregated": ("--", "s"), "colocated": (":", "^")}


def axis_label(key: str) -> str:
    """A sweep key with its unit, for a plot's axis (``price.H100`` -> ``price.H100 ($ per GPU-hour)``)."""
    if key.startswith("price."):
        return f"{key} ($ per GPU-hour)"
    if key.startswith("max_nodes."):
        return f"{key} (nodes available)"
    return {"budget": "budget ($/h, most the fleet may cost)", "slo": "slo (factor on every job's SLO; < 1: tighter)",
            "jobs": "jobs (factor on the job mix)", "response": "response (factor on response lengths)"}.get(key, key)


def plot_cost(results, keys: list[str], styles: tuple[str, ...], path: Path) -> None:
    """$/h against the first swept key, one line per style (and per value of any other key)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key = keys[0]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    groups: dict[tuple, list] = {}
    for r in results:
        groups.setdefault(tuple(r.values[k] for k in keys[1:]), []).append(r)
    for other, rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r.values[x_key])
        suffix = "" if not other else " (" + ", ".join(f"{k}={v:g}" for k, v in zip(keys[1:], other)) + ")"
        for style in styles:
            xs, ys = [], []
            for r in rs:
                s = r.style(style)
                if s is not None and s.served:
                    xs.append(r.values[x_key])
                    ys.append(s.cost_per_hour)
            if xs:
                ls, mk = STYLE_STYLE.get(style, ("-", "o"))
                line, = ax.plot(xs, ys, linestyle=ls, marker=mk, label=STYLE_LABEL.get(style, style) + suffix)
            bx = [r.values[x_key] for r in rs if r.style(style) is not None and r.style(style).lower_bound_per_hour is not None]
            by = [r.style(style).lower_bound_per_hour for r in rs if r.style(style) is not None and r.style(style).lower_bound_per_hour is not None]
            if bx and style == "co-execution":
                ax.plot(bx, by, linestyle="none", marker="_", markersize=10, color=line.get_color() if xs else "grey",
                        label="certified lower bound" + suffix)
    ax.set_xlabel(axis_label(x_key))
    ax.set_ylabel("fleet cost ($/h)")
    ax.set_title(f"cheapest fleet against {x_key}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fleet(labels: list[str], fleets: list[dict[str, int]], types: list[str], path: Path, title: str, xlabel: str) -> None:
    """Nodes by GPU type as stacked bars, one bar per point (or per style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(labels) + 2), 4.5))
    bottom = [0] * len(labels)
    xs = list(range(len(labels)))
    for t in types:
        vals = [f.get(t, 0) for f in fleets]
        if not any(vals):
            continue
        ax.bar(xs, vals, bottom=bottom, label=t, color=TYPE_COLORS.get(t))
        bottom = [b + v for b, v in zip(bottom, vals)]
    for x, total in zip(xs, bottom):  # the total on each bar, inside the axes (headroom below)
        if total:
            ax.text(x, total, f"{total:g}", ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, max([1, *bottom]) * 1.12 + 0.5)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=45 if len(labels) > 6 else 0, ha="right" if len(labels) > 6 else "center", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("nodes")
    ax.set_title(title)
    ax.legend(fontsize=8, title="GPU type", title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside, never over bars
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_atomic(path: Path, text: str) -> None:
    from planner.safewrite import write_atomic as write

    write(path, text, where="--out")


def header(command: str, info: dict, extra: Optional[str] = None) -> str:
    load = ", ".join(f"{x:g}" for x in info["load_average"])
    lines = [f"Command: `{command}`", "", f"Machine: `{info['uname']}`, {info['cpus']} CPUs, load average at start {load}; {info['date']}."]
    if extra:
        lines += ["", extra]
    return "\n".join(lines) + "\n"
