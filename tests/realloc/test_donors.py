"""Donor detection on synthetic telemetry streams."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.realloc.donors import DonorConfig, DonorDetector
from tests.realloc.helpers import rollout_snapshot, worker

HIGH, LOW = 0.7, 0.05


def _stream(det, profile, n=8, dt=0.5):
    """profile(t) -> utilisation of every engine; returns (t, donor?) per snapshot."""
    out = []
    t = 0.0
    while t <= 20.0 + 1e-9:
        ev = det.observe(rollout_snapshot(t, [profile(t)] * n))
        out.append((t, ev[0].donor, ev[0]))
        t += dt
    return out


def test_sustained_drop_triggers_after_T_not_before():
    det = DonorDetector(DonorConfig(theta=0.5, u_low=0.2, hold_s=4.0))
    res = _stream(det, lambda t: HIGH if t < 6.0 else LOW)
    first = min(t for t, d, _ in res if d)
    assert first == pytest.approx(10.0)  # low from t=6, held for 4 s
    assert all(not d for t, d, _ in res if t < 10.0)
    assert all(d for t, d, _ in res if t >= 10.0)
    ev = next(e for t, d, e in res if d)
    assert ev.low_since_s == pytest.approx(6.0) and ev.engines_low_held == 8 and ev.u_low_source == "fixed"
    assert "below U_low=0.200 for at least T=4 s" in ev.cause


def test_short_dip_does_not_trigger():
    det = DonorDetector(DonorConfig(theta=0.5, u_low=0.2, hold_s=4.0))
    res = _stream(det, lambda t: LOW if 5.0 <= t < 8.5 else HIGH)  # a 3.5 s dip
    assert not any(d for _, d, _ in res)
    waiting = [e for t, d, e in res if 5.0 <= t < 8.5]
    assert all("transient dip does not trigger" in e.cause for e in waiting[1:])


def test_repeated_short_dips_do_not_add_up():
    det = DonorDetector(DonorConfig(theta=0.5, u_low=0.2, hold_s=3.0))
    res = _stream(det, lambda t: LOW if (t % 4.0) < 2.5 else HIGH)  # low 2.5 s of every 4 s
    assert not any(d for _, d, _ in res)


def test_theta_is_strict():
    """Exactly theta of the engines low is not enough: more than theta is."""
    det = DonorDetector(DonorConfig(theta=0.5, u_low=0.2, hold_s=1.0))
    for t in (0.0, 1.0, 2.0):
        ev = det.observe(rollout_snapshot(t, [LOW] * 4 + [HIGH] * 4))[0]
    assert ev.engines_low_held == 4 and not ev.donor
    det = DonorDetector(DonorConfig(theta=0.5, u_low=0.2, hold_s=1.0))
    for t in (0.0, 1.0, 2.0):
        ev = det.observe(rollout_snapshot(t, [LOW] * 5 + [HIGH] * 3))[0]
    assert ev.donor and ev.fraction_held == pytest.approx(5 / 8)


def test_percentile_threshold_from_own_history():
    """U_low as the 10th percentile of the component's history: engines that sit at 0.30 with a
    history between 0.35 and 0.9 are low relative to it, although above a fixed 0.2."""
    cfg = DonorConfig(theta=0.5, u_low=0.2, hold_s=2.0, u_low_percentile=10, min_history=16)
    det = DonorDetector(cfg)
    t = 0.0
    for k in range(20):
        det.observe(rollout_snapshot(t, [0.35 + 0.55 * ((k + i) % 10) / 9 for i in range(8)]))
        t += 1.0
    evs = [det.observe(rollout_snapshot(t + i, [0.30] * 8))[0] for i in range(4)]
    assert evs[-1].donor and evs[-1].u_low_source.startswith("p10 of")
    assert 0.35 <= evs[-1].u_low < 0.5
    fixed = DonorDetector(DonorConfig(theta=0.5, u_low=0.2, hold_s=2.0))
    assert not any(fixed.observe(rollout_snapshot(i, [0.30] * 8))[0].donor for i in range(6))


def test_new_iteration_resets_and_time_must_not_go_back():
    det = DonorDetector(DonorConfig(hold_s=2.0))
    for t in (0.0, 1.0, 2.0, 3.0):
        ev = det.observe(rollout_snapshot(t, [LOW] * 8, iteration=1))[0]
    assert ev.donor
    ev = det.observe(rollout_snapshot(0.5, [LOW] * 8, iteration=2))[0]  # next iteration: clocks restart
    assert not ev.donor and ev.engines_low_held == 0
    with pytest.raises(ValueError, match="time order"):
        det.observe(rollout_snapshot(0.1, [LOW] * 8, iteration=2))
    with pytest.raises(ValueError, match="one detector per job"):
        det.observe(rollout_snapshot(5.0, [LOW] * 8, iteration=2, job="other"))


def test_gap_in_telemetry_restarts_the_clock():
    det = DonorDetector(DonorConfig(hold_s=3.0, max_gap_s=2.0))
    det.observe(rollout_snapshot(0.0, [LOW] * 8))
    ev = det.observe(rollout_snapshot(5.0, [LOW] * 8))[0]  # 5 s gap: nothing shows they stayed low
    assert not ev.donor
    ev = det.observe(rollout_snapshot(8.0, [LOW] * 8))[0]  # wait: 8 - 5 = 3 s of evidence... but 3 s gap > 2 s too
    assert not ev.donor
    ev = det.observe(rollout_snapshot(9.5, [LOW] * 8))[0]
    ev = det.observe(rollout_snapshot(11.0, [LOW] * 8))[0]
    assert ev.donor and ev.low_since_s == pytest.approx(8.0)


def test_only_judged_kinds_and_engines_that_leave():
    comps = [{"name": "rollout", "kind": "rollout"}, {"name": "actor", "kind": "trainer"}]
    det = DonorDetector(DonorConfig(hold_s=1.0))
    extra = [worker("t0", "actor", "n9", gpus=8)]
    evs = det.observe(rollout_snapshot(0.0, [LOW] * 4, components=comps, extra_workers=extra))
    assert [e.component for e in evs] == ["rollout"]  # a trainer holds no KV cache: not judged
    # engines r2, r3 leave (migrated): the verdict is over the engines that remain
    det.observe(rollout_snapshot(1.0, [LOW] * 4, components=comps, extra_workers=extra))
    ev = det.observe(rollout_snapshot(2.0, [LOW, HIGH], components=comps, extra_workers=extra))[0]
    assert ev.engines == 2 and ev.engines_low_held == 1 and not ev.donor


@settings(max_examples=60, deadline=None)
@given(hold=st.floats(1.0, 8.0), dips=st.lists(st.tuples(st.floats(0.5, 10.0), st.floats(0.05, 0.999)), min_size=1, max_size=6),
       dt=st.sampled_from([0.25, 0.5, 1.0]))
def test_dips_shorter_than_T_never_trigger(hold, dips, dt):
    """Any sequence of dips, each shorter than T (as seen at the sampling times), separated by
    high stretches, never makes a donor; a final dip longer than T always does."""
    det = DonorDetector(DonorConfig(theta=0.5, u_low=0.2, hold_s=hold))
    t = 0.0
    for gap, frac in dips:
        for _ in range(max(1, int(gap / dt))):
            assert not det.observe(rollout_snapshot(t, [HIGH] * 8))[0].donor
            t += dt
        n_low = int(frac * hold / dt)  # samples spanning strictly less than hold
        if (n_low - 1) * dt >= hold:
            n_low -= 1
        for _ in range(n_low):
            assert not det.observe(rollout_snapshot(t, [LOW] * 8))[0].donor
            t += dt
    assert not det.observe(rollout_snapshot(t, [HIGH] * 8))[0].donor  # the dip before ends
    t += dt
    start = t
    while t - start < hold:  # the same arithmetic as the detector: now - first-low >= hold
        assert not det.observe(rollout_snapshot(t, [LOW] * 8))[0].donor
        t += dt
    assert det.observe(rollout_snapshot(t, [LOW] * 8))[0].donor
