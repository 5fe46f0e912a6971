"""``planner plan --slo-curve``: the cost-SLO curve over phase-time estimates, printed and recorded.

The curve itself is :mod:`planner.sim.slo_curve` (plan on each estimate, simulate each plan).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Optional


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
