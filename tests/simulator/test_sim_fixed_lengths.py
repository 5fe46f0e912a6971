"""``response_lengths: {source: fixed, tokens: N}`` is "every response has the same length" (the schema's
description): the simulator's requests, hence the sampled phase times a plan is made on and the rollouts
``planner simulate --plan`` runs, have that length.

Before the fix the per-prompt difficulty factor (log-space spread 0.5) scaled the fixed length too: 697
declared tokens gave responses of about 250 to 2,400 tokens, and one iteration's rollout makespan
12-27 s on the audit's scenario, so a "fixed" job's plan and its simulation differed by up to 14% per
group on seed noise alone.
"""

from __future__ import annotations

import numpy as np
import yaml

from tests.conftest import SCENARIOS


def _fixed_setup(tmp_path, tokens: int, turns: int = 1):
    from planner.instances.common import job_profile
    from planner.instances.simulate import cluster_view
    from planner.schema import load_scenario
    from simulator.phasetimes import setup_for

    doc = yaml.safe_load((SCENARIOS / "ci" / "tiny-2jobs.yaml").read_text())
    doc["jobs"][0]["rollout"]["response_lengths"] = {"source": "fixed", "tokens": tokens}
    if turns > 1:
        doc["jobs"][0]["rollout"].update(turns=turns, tools={"latency": "fixed", "fixed_latency_s": 0.5})
    p = tmp_path / "fixed.yaml"
    p.write_text(yaml.safe_dump(doc))
    sc = load_scenario(p)
    view = cluster_view(sc)
    return setup_for(job_profile(sc.jobs[0], 0), view.pool("H20", 1), view.pool("H800", 1))


def _lengths(setup, seed: int) -> np.ndarray:
    from simulator.core import EventLoop
    from simulator.workload import make_requests

    return np.array([sum(r.turn_tokens) for r in make_requests(setup.workload, EventLoop(seed).rng)])


def test_fixed_response_lengths_are_fixed_in_the_simulator(tmp_path):
    setup = _fixed_setup(tmp_path, 700)
    for seed in (0, 1, 10_000):
        lengths = _lengths(setup, seed)
        assert lengths.size == 32 * 4
        assert lengths.min() == 700 and lengths.max() == 700, (seed, lengths.min(), lengths.max())


def test_fixed_multi_turn_lengths_total_the_declared_length(tmp_path):
    """Split over turns (each rounded), a request's turns add up to it within a token a turn."""
    lengths = _lengths(_fixed_setup(tmp_path, 900, turns=3), 0)
    assert np.all(np.abs(lengths - 900) <= 3), (lengths.min(), lengths.max())
