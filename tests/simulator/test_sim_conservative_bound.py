"""The conservative phase-time estimate is Weave's bound: every response at its ``max_response_tokens``
limit (docs/placement.md, the plan summary's "the planned cycles bound the response lengths").

Before the fix the bound's workload kept the per-prompt difficulty factor (log-space spread 0.5):
the factor, divided by its median, scaled half of the prompts' responses below the limit (tiny-2jobs:
responses of 697-2048 tokens, a quarter under 1,600, on a 2,048-token limit), so a conservative plan's
training and rollout times were not the bound they claim to be.
"""

from __future__ import annotations

import numpy as np

from tests.conftest import SCENARIOS


def _conservative_requests(scenario: str, job_index: int, seed: int):
    from planner.instances.common import job_profile
    from planner.instances.simulate import cluster_view
    from planner.schema import load_scenario
    from simulator.core import EventLoop
    from simulator.phasetimes import setup_for
    from simulator.workload import make_requests

    sc = load_scenario(SCENARIOS / scenario)
    view = cluster_view(sc)
    job = sc.jobs[job_index]
    rt = (job.rollout.gpu_types or list(view.gpu_types))[0]
    setup = setup_for(job_profile(job, 0), view.pool(rt, 1), view.pool(rt, 1), conservative=True)
    return setup.workload.max_response_tokens, make_requests(setup.workload, EventLoop(seed).rng)


def test_every_single_turn_response_of_the_conservative_estimate_is_at_its_limit():
    for idx in (0, 1):
        for seed in (0, 1, 2):
            limit, reqs = _conservative_requests("ci/tiny-2jobs.yaml", idx, seed)
            lengths = np.array([sum(r.turn_tokens) for r in reqs])
            assert lengths.size > 0
            assert lengths.min() == limit and lengths.max() == limit, (idx, seed, limit, lengths.min(), np.median(lengths))


def test_a_multi_turn_conservative_response_totals_its_limit():
    """Split over turns (each turn rounded), a request's turns add up to the limit within a token a turn."""
    limit, reqs = _conservative_requests("agentic-7b.yaml", 0, 0)
    totals = np.array([sum(r.turn_tokens) for r in reqs])
    turns = max(len(r.turn_tokens) for r in reqs)
    assert turns > 1
    assert np.all(np.abs(totals - limit) <= turns), (limit, totals.min(), totals.max())
