"""``planner plan --slo-curve``: the cost-SLO curve over phase-time estimates, printed and recorded.

The curve itself is :mod:`planner.sim.slo_curve` (plan on each estimate, simulate each plan).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Optional


def curve_record(sc, plot_path: Optional[str] = None) -> list[dict]:
    """Compute the curve for scenario ``sc``, print it on stderr, draw it when asked; its rows."""
    from planner.sim import slo_curve

    points = slo_curve.curve(sc)
    print(f"cost-SLO curve of {sc.name} (each estimate planned, then simulated on seeds the planner never saw):", file=sys.stderr)
    for line in slo_curve.table(points):
        print("  " + line, file=sys.stderr)
    if plot_path:
        slo_curve.plot(points, plot_path, f"{sc.name}: cost-SLO curve")
    return [asdict(p) for p in points]
