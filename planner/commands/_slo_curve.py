"""``planner plan --slo-curve``: the cost-SLO curve over phase-time estimates, printed and recorded.

The curve itself is :mod:`planner.sim.slo_curve` (plan on each estimate, simulate each plan).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any, Optional


def curve_record(sc, plot_path: Optional[str] = None, deadline: Optional[float] = None, given=None) -> list[dict]:
    """Compute the curve for scenario ``sc`` by ``deadline`` (a ``time.perf_counter`` value; ``given``:
    the command's own (instance, plan) on the scenario's estimate, :func:`planner.sim.slo_curve.curve`),
    print it on stderr, draw it when asked; its rows, a figure a point lacks as None."""
    import math

    from planner.sim import slo_curve

    points = slo_curve.curve(sc, deadline=deadline, given=given)
    print(f"cost-SLO curve of {sc.name} (each estimate planned, then simulated on seeds the planner never saw):", file=sys.stderr)
    for line in slo_curve.table(points):
        print("  " + line, file=sys.stderr)
    if plot_path:
        slo_curve.plot(points, plot_path, f"{sc.name}: cost-SLO curve")
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(p).items()} for p in points]


def plot_record(rows: list[dict], plot_path: str, name: str) -> None:
    """Draw the curve from :func:`curve_record`'s rows (a figure a point lacks: None) into ``plot_path``
    (``planner plan`` draws it once the plan is known to be written: a refused plan writes no file)."""
    from planner.sim import slo_curve

    nan = float("nan")
    fields: list[dict[str, Any]] = [{k: (nan if v is None else v) for k, v in r.items()} for r in rows]
    points = [slo_curve.CurvePoint(**f) for f in fields]
    slo_curve.plot(points, plot_path, f"{name}: cost-SLO curve")
