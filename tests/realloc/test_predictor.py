"""The online throughput predictor: refinement from observations, error log, hindsight regret."""

from __future__ import annotations

import numpy as np
import pytest

from estimators.predictor import ThroughputPredictor
from tests.realloc.helpers import rollout_snapshot


def test_rls_moves_towards_what_is_observed_and_logs_error():
    pred = ThroughputPredictor(forgetting=0.95)
    pred.set_prior("rollout", "H100", [(8, 800.0), (16, 1200.0), (32, 1400.0)])
    truth = {8: 600.0, 16: 900.0, 32: 1050.0}  # the real engines are 25% slower
    rng = np.random.default_rng(0)
    errs = []
    for k in range(60):
        g = int(rng.choice([8, 16, 32]))
        p = pred.observe("rollout", "H100", g, truth[g], time_s=k)
        errs.append(abs(p - truth[g]) / truth[g])
    assert np.mean(errs[:5]) > 0.2 and np.mean(errs[-10:]) < 0.02
    assert pred.curve("rollout", "H100").is_concave()
    rep = pred.report()
    assert rep["observations"] == 60 and rep["curves"]["rollout@H100"]["observations"] == 60
    assert rep["curve_mape"] == pytest.approx(np.mean(errs))


def test_observe_snapshot_aggregates_per_component_and_type():
    pred = ThroughputPredictor()
    pred.set_prior("rollout", "H100", [(4, 400.0), (8, 600.0)])
    snap = rollout_snapshot(1.0, [0.5] * 8)  # 8 engines x 50 tok/s on one node
    assert pred.observe_snapshot(snap) == 1
    t, comp, gtype, g, p, o = pred.log[-1]
    assert (comp, gtype, g, o) == ("rollout", "H100", 8.0, 400.0) and p == pytest.approx(600.0)
    assert pred.observe("unknown", "H100", 4, 1.0) is None


def test_regret_is_zero_when_the_applied_allocation_stays_best_and_positive_otherwise():
    pred = ThroughputPredictor(forgetting=0.9)
    pred.set_prior("rollout", "H100", [(4, 400.0), (8, 500.0)])
    pred.set_prior("actor", "H100", [(4, 200.0), (8, 400.0)], linear=True)
    keep = {"rollout": {"H100": 8}, "actor": {"H100": 4}}
    moved = {"rollout": {"H100": 4}, "actor": {"H100": 8}}
    # predicted: keep -> min(500, 200) = 200; moved -> min(400, 400) - 10 = 390: moving was chosen
    rec = pred.record_decision("d1", 10.0, 390.0, moved, [(keep, 0.0)], applied_cost=10.0)
    assert pred.regret(rec) == 0.0
    # reality: the rollout on 4 GPUs only makes 150 tok/s; refined, keeping would have been better
    for _ in range(30):
        pred.observe("rollout", "H100", 4, 150.0)
        pred.observe("rollout", "H100", 8, 220.0)
    pred.realise("d1", 150.0)
    assert pred.regret(rec) == pytest.approx(200.0 - (150.0 - 10.0), rel=0.05)  # keep: min(220, 200); moved: 150 - 10
    rep = pred.report()
    assert rep["decision_mape"] == pytest.approx(abs(390 - 150) / 150) and rep["mean_regret"] > 0
    with pytest.raises(KeyError):
        pred.realise("nope", 1.0)
