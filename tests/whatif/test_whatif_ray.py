"""A sweep's points as Ray tasks on a local Ray cluster give the answers the local workers give."""

from __future__ import annotations

import os

import pytest

from planner.schema import load_scenario
from planner.whatif import run as runner
from planner.whatif import sweep as sw
from tests.whatif.test_whatif_cli import scenario

pytestmark = pytest.mark.ray


def test_ray_chains_match_local_workers(tmp_path):
    pytest.importorskip("ray")
    sc = load_scenario(scenario(tmp_path))
    sweeps = sw.parse_all(["price.H800=1.5:3.5:4"], ["H100", "H20", "H800"])
    pts = sw.points(sweeps)
    ctx = runner.Context(scenario=sc, mode="conservative", styles=("co-execution", "solo-disaggregated"), time_limit_s=10, mip_gap=0.0)
    seen = []
    on_ray = runner.run_ray(ctx, pts, 2, "local", seen.append)
    here = runner.run_local(ctx, pts, 1, lambda r: None)
    assert sorted(r.index for r in seen) == list(range(len(pts)))
    assert all(r.worker.split(":")[1] != str(os.getpid()) for r in on_ray)  # solved in Ray worker processes
    for a, b in zip(on_ray, here):
        for style in ctx.styles:
            assert a.style(style).cost_per_hour == pytest.approx(b.style(style).cost_per_hour)
            assert a.style(style).status == b.style(style).status == "optimal"
    # the second point of each chain started from the first one's columns
    assert "columns from the neighbouring point" in on_ray[1].record["message"]
    assert "neighbouring" not in on_ray[0].record["message"]
