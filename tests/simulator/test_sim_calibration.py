"""Calibration against published rollout behaviour (DynaRL's 1.5B math set-up; Seer).

Set-up: DeepSeek-R1-Distill-Qwen-1.5B, 512 prompts x 16 responses, max 28,672 tokens, 64 engines
of one H100 each (``scenarios/dynarl/math-1.5b-64gpu.yaml`` run colocated: every GPU generates),
engine step = kernels + ``estimators.rollout.ENGINE_STEP_OVERHEAD_MS``, lengths = ServeGen client 66
x ``MATH_RL_LENGTH_SCALE``. Published: longest decode about 260 s with about 95% of the queries done
by 150 s; at mid-generation fewer than 30% of the queries still run while almost all 64 engines
are held (DynaRL); the last 10% of the requests take up to half of the rollout (Seer).

Tolerances (stated per check, over seeds 0-2):
  * longest decode 260 s +/- 15% (221-299 s);
  * fraction done by 150 s in [0.92, 0.98] (published "about 95%");
  * at mid-generation: < 30% of requests running, and at least 85% of the engines (54 of 64)
    still holding one ("almost all"; seeds 0-5 give 54-62 engines and 5-10% of requests);
  * the last 10% of requests take 40-65% of the rollout (Seer: "up to 50%"; DynaRL's two figures
    imply at least (260 - 150) / 260 = 42%).
"""

from __future__ import annotations

import numpy as np
import pytest

from estimators import gpus, models, rollout
from estimators.lengths import LengthDistribution
from simulator.core import EventLoop
from simulator.models import engine_model
from simulator.rollout import EngineSlot, RolloutStage
from simulator.workload import WorkloadSpec, make_requests


def _rollout(seed: int):
    m = models.preset("deepseek-r1-distill-qwen-1.5b")
    em = engine_model(m, gpus.get("H100"), 1)
    loop = EventLoop(seed)
    dist = LengthDistribution("servegen", client=rollout.MATH_RL_SERVEGEN_CLIENT, scale=rollout.MATH_RL_LENGTH_SCALE)
    reqs = make_requests(WorkloadSpec(512, 16, 512, 28672, dist), loop.rng)
    stage = RolloutStage(loop, em, [EngineSlot(f"h100-{i // 8}", "H100", 1) for i in range(64)])
    stage.start(reqs)
    loop.run()
    ct = np.sort([r.done_s for r in reqs])
    T = ct[-1]
    mid = T / 2
    still = [r for r in reqs if r.done_s > mid]
    return {"T": T, "f150": float(np.mean(ct <= 150.0)), "share": (T - np.quantile(ct, 0.9)) / T,
            "running_mid": len(still) / len(reqs), "engines_mid": len({r.engine for r in still})}


@pytest.fixture(scope="module")
def runs():
    return [_rollout(s) for s in range(3)]


def test_longest_decode_about_260s(runs):
    for r in runs:
        assert 221.0 <= r["T"] <= 299.0, r


def test_about_95_percent_done_by_150s(runs):
    for r in runs:
        assert 0.92 <= r["f150"] <= 0.98, r


def test_mid_generation_few_requests_but_almost_all_engines(runs):
    for r in runs:
        assert r["running_mid"] < 0.30, r
        assert r["engines_mid"] >= 54, r


def test_last_tenth_of_requests_takes_about_half_the_rollout(runs):
    for r in runs:
        assert 0.40 <= r["share"] <= 0.65, r


def test_overhead_is_what_makes_the_tail():
    """Kernel time alone cannot produce the published tail: without the overhead the longest decode
    is far below 260 s, so the calibrated term carries the published behaviour."""
    m = models.preset("deepseek-r1-distill-qwen-1.5b")
    em = engine_model(m, gpus.get("H100"), 1, overhead_ms=0.0)
    loop = EventLoop(0)
    dist = LengthDistribution("servegen", client=rollout.MATH_RL_SERVEGEN_CLIENT, scale=rollout.MATH_RL_LENGTH_SCALE)
    reqs = make_requests(WorkloadSpec(512, 16, 512, 28672, dist), loop.rng)
    stage = RolloutStage(loop, em, [EngineSlot(f"h100-{i // 8}", "H100", 1) for i in range(64)])
    stage.start(reqs)
    loop.run()
    assert max(r.done_s for r in reqs) < 200.0
    assert rollout.engine_step_ms(m, gpus.get("H100"), 1, 1, 1000) == pytest.approx(
        rollout.decode_step_ms(m, gpus.get("H100"), 1, 1, 1000) + rollout.ENGINE_STEP_OVERHEAD_MS)
