"""What "optimal" and the bound cover: the group shapes the optimisers build, not every valid plan.

An outside check (session 49) enumerated every partition and configuration of small instances and judged each
group with the solver-free checker: on 13 of 72 instances a valid plan cost less than every backend's "optimal"
one, through shapes no optimiser builds (a pinned member on more than PINNED_MAX_ROLLOUT_NODES rollout nodes of
its own, members with different rollout node counts in one group). Until the optimisers build those shapes, every
optimal plan says what its claim covers. ``data/min-dram.yaml`` (2 jobs) is the smallest case: every backend
proves 240 $/h, and ``data/min-dram.witness.yaml`` is a valid 168 $/h plan (one group, each member on 3 rollout
nodes of its own, sharing 4 training nodes)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import run_cli

DATA = Path(__file__).parent / "data"


def test_an_optimal_plan_says_which_group_shapes_its_claim_covers(tmp_path):
    inst, witness = DATA / "min-dram.yaml", DATA / "min-dram.witness.yaml"
    v = run_cli("validate-plan", str(inst), str(witness))
    assert v.returncode == 0 and "168.00 $/h" in v.stdout, (v.stdout, v.stderr)
    out = tmp_path / "p.yaml"
    r = run_cli("plan", str(inst), "--backend", "colgen", "--time-limit", "20", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    doc = yaml.safe_load(out.read_text())
    cost = doc["body"]["cost_per_hour"]
    assert cost > 168.0  # (the known gap: the witness's shape is outside the modelled ones; this fails once it is not)
    assert doc["solver"]["status"] == "optimal"
    msg = doc["solver"]["message"]
    assert "optimal among the configurations the optimisers build" in msg and "not covered" in msg, msg
    assert "proven cheapest of the modelled group shapes" in r.stderr, r.stderr[-2000:]
