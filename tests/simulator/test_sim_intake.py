"""The trainer's intake: GRPO group gating and mini-batch gating against per-sample streaming."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.job import JobSim, intake_of
from simulator.metrics import job_metrics
from simulator.policies import Policy
from tests.simulator.test_sim_job import small_setup


def _pushes(setup, policy, seed=1):
    """Run one iteration; return the run, its requests by id, and each trainer intake (time, request)."""
    sim = JobSim(setup, policy, seed=seed, iterations=1)
    log = []
    orig = sim.trainer.push

    def push(sample, work):
        log.append((sim.loop.now, sample))
        orig(sample, work)

    sim.trainer.push = push
    res = sim.run()
    return res, log


def test_grpo_defaults_to_group_gating_ppo_to_samples():
    s = small_setup()
    assert intake_of(s, Policy("static")) == "group"
    assert intake_of(replace(s, algorithm="ppo"), Policy("static")) == "sample"
    assert intake_of(s, Policy("static", intake="sample")) == "sample"
    with pytest.raises(ValueError, match="intake"):
        Policy("static", intake="batched")


def test_group_gating_trains_a_sample_only_after_its_whole_group():
    s = small_setup(n_prompts=24, group=8)
    res, log = _pushes(s, Policy("static", intake="group"))
    assert len(log) == s.workload.n_requests  # exactly once
    last_done = {}
    for r in res.requests:
        last_done[r.group] = max(last_done.get(r.group, 0.0), r.done_s)
    first_push = {}
    for t, r in log:
        first_push.setdefault(r.group, t)
        assert t >= last_done[r.group] - 1e-9, "a sample reached the trainer before its group's last rollout finished"
    # a group enters at one instant
    by_group = {}
    for t, r in log:
        by_group.setdefault(r.group, set()).add(round(t, 9))
    assert all(len(ts) == 1 for ts in by_group.values())


def test_per_sample_intake_lets_samples_overtake_their_group():
    """The control: without gating some sample reaches the trainer before a sibling's rollout ends
    (so the gating test above could fail)."""
    s = small_setup(n_prompts=24, group=8)
    res, log = _pushes(s, Policy("static", intake="sample"))
    last_done = {}
    for r in res.requests:
        last_done[r.group] = max(last_done.get(r.group, 0.0), r.done_s)
    assert any(t < last_done[r.group] - 1e-6 for t, r in log)


def test_minibatch_gating_releases_whole_minibatches():
    s = small_setup(n_prompts=20, group=4)
    res, log = _pushes(s, Policy("static", intake="minibatch", minibatch_groups=6))
    sizes = {}
    for t, _ in log:
        sizes[round(t, 9)] = sizes.get(round(t, 9), 0) + 1
    counts = [sizes[k] for k in sorted(sizes)]
    assert sum(counts) == 80
    assert counts[:-1] == [24] * (len(counts) - 1) and counts[-1] == 80 - 24 * (len(counts) - 1)
    groups = [{r.group for t, r in log if round(t, 9) == k} for k in sorted(sizes)]
    assert all(len(g) * 4 == sizes[k] for g, k in zip(groups, sorted(sizes)))  # whole groups only


def test_gating_only_delays_training():
    s = small_setup(n_prompts=32, group=8)
    it = {name: job_metrics(JobSim(s, Policy("static", intake=name), seed=2, iterations=1).run())["mean_iteration_s"]
          for name in ("sample", "group", "minibatch")}
    assert it["sample"] <= it["group"] + 1e-6 <= it["minibatch"] + 2e-6, it


def test_infeasible_split_is_an_error_not_nan():
    """A training pool too small for log-prob inference plus one trainer replica (DynaRL 32B on 7+1
    nodes: trainer TP 8 on 8 GPUs) is refused with a message, instead of an iteration that never ends."""
    s = replace(small_setup(rollout_nodes=3, train_nodes=1, gpn=4), train_unit=4)
    with pytest.raises(ValueError, match="infeasible split.*at least 2 training node"):
        JobSim(s, Policy("static"), iterations=1)
