"""The planner refits a job's declared response lengths from what its rollouts generate
(:mod:`estimators.length_refit`, :meth:`CompletionPlannerDecision._observe_lengths`).

The truths here are distributions the refit was not written against (log-normal with other sigmas, a ServeGen
client stretched, a two-mode table); each is judged by fresh draws from the truth, never by the sample it was fitted on.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from estimators.length_refit import declared_lengths, lengths_differ, refit_lengths
from estimators.lengths import LengthDistribution, servegen_clients
from simulator.workload import WorkloadSpec
from tests.realloc.helpers import SMALL_MATH_SCENARIO

DECLARED = LengthDistribution("servegen", client="66", scale=0.75)


def _workload(lengths) -> WorkloadSpec:
    return WorkloadSpec(n_prompts=256, group_size=8, prompt_tokens=512, max_response_tokens=16384, lengths=lengths)


TRUTHS = {
    "heavy log-normal": LengthDistribution("lognormal", median_tokens=2000.0, sigma=1.5),
    "light log-normal": LengthDistribution("lognormal", median_tokens=2000.0, sigma=0.6),
    "ServeGen client x3": LengthDistribution("servegen", client=servegen_clients()[0], scale=3.0),
    "two modes": LengthDistribution("table", table=tuple(np.r_[np.linspace(200, 600, 100), np.linspace(5000, 12000, 101)])),
}


@pytest.mark.parametrize("name", sorted(TRUTHS))
def test_a_wrong_declaration_is_rejected_and_the_refit_is_not_told_apart_from_the_truth(name):
    w = _workload(DECLARED)
    truth = replace(w, lengths=TRUTHS[name])
    obs = declared_lengths(truth, 1, seed=11)  # one iteration's responses, rows are groups
    assert lengths_differ(obs, obs.shape[0], w)["differ"], name
    fit = replace(w, lengths=refit_lengths(obs, w.prompt_spread, w.max_response_tokens))
    fresh = declared_lengths(truth, 1, seed=12)
    res = lengths_differ(fresh, fresh.shape[0], fit)
    assert not res["differ"], (name, res)
    # the mean the refit generates (the work per sample follows the lengths), against the sample's: one iteration's
    # 256 correlated groups put the sample's own mean several percent off the truth's, which no refit can see
    m_fit, m_obs = declared_lengths(fit, 20_000, seed=13).mean(), obs.mean()
    assert abs(m_fit / m_obs - 1.0) < 0.04, (name, m_fit, m_obs)


def test_a_right_declaration_stands():
    w = _workload(DECLARED)
    for seed in range(1, 9):
        obs = declared_lengths(w, 1, seed=seed)
        assert not lengths_differ(obs, obs.shape[0], w)["differ"], seed


def test_refit_needs_lengths():
    with pytest.raises(ValueError, match="at least 2"):
        refit_lengths(np.array([5.0]), 0.5, 100.0)


SMALL = SMALL_MATH_SCENARIO


def _run(tmp_path, declared):
    from planner.instances.completion import CompletionPlannerDecision
    from planner.sim.repro_jobs import _setup
    from simulator.job import JobSim
    from simulator.policies import Policy

    scen = tmp_path / "small.yaml"
    scen.write_text(SMALL)
    sc, setup = _setup(scen)
    d = CompletionPlannerDecision(sc, start_search="static", declared_lengths=declared)
    res = JobSim(setup, Policy("dynamic", decision=d), seed=3, iterations=2).run()
    return d, res, setup


def test_the_decision_refits_a_wrong_declaration_at_the_next_boundary_and_plans_on_it(tmp_path):
    right, _, setup = _run(tmp_path, None)
    assert [r["refit"] for r in right.refits] == [False]  # iteration 1's test of iteration 0's lengths
    wrong, res, _ = _run(tmp_path, LengthDistribution("lognormal", median_tokens=60.0, sigma=0.3))
    assert [r["refit"] for r in wrong.refits] == [True], wrong.refits
    rec = wrong.refits[0]
    truth = declared_lengths(setup.workload, 20_000).mean()
    assert rec["declared_mean"] < 0.2 * truth  # what the job declared
    assert abs(rec["observed_mean"] / truth - 1.0) < 0.25
    model = declared_lengths(wrong.setup.workload, 20_000).mean()  # what the decision plans on from iteration 1
    assert abs(model / truth - 1.0) < 0.25, (model, truth)
    # iteration 0 ran on the start searched on the declared lengths, iteration 1 on the one searched on the refit
    # (what that is worth on 7B-64 set-ups: python -m benchmarks.realloc.length_refit)
    assert wrong.starts[0] != wrong.starts[1] and rec["start"] == wrong.starts[1]
    assert wrong.starts[0]["rollout"] < right.starts[0]["rollout"]  # short declared lengths: too small a rollout


def test_the_boundary_context_carries_the_last_iterations_lengths_and_they_travel_as_json(tmp_path):
    import json

    from planner.instances.completion_io import ContextError, context_from_data, context_to_data
    from planner.sim.repro_jobs import _setup
    from simulator.job import JobSim
    from simulator.policies import Policy

    scen = tmp_path / "small.yaml"
    scen.write_text(SMALL)
    _, setup = _setup(scen)
    seen = []

    def spy(snap, ctx):
        if ctx.at_boundary:
            seen.append(ctx)
        return None

    res = JobSim(setup, Policy("dynamic", rollout_gpus=16, reference_gpus=6, trainer_gpus=10, decision=spy), seed=4,
                 iterations=3).run()
    n = setup.workload.n_requests
    assert [c.iteration for c in seen] == [1, 2]
    for k, c in enumerate(seen):
        want = sorted(float(sum(r.turn_tokens)) for r in res.requests[k * n:(k + 1) * n])
        assert sorted(c.last_lengths.tolist()) == want and c.last_groups == setup.workload.n_prompts
    d = json.loads(json.dumps(context_to_data(seen[0])))
    back = context_from_data(d)
    assert back.last_lengths.tolist() == seen[0].last_lengths.tolist() and back.last_groups == seen[0].last_groups
    for bad, field in (({"last_groups": None}, "context.last_groups"), ({"last_lengths": [1.0, -2.0]}, "context.last_lengths[1]"),
                       ({"last_groups": 10**9}, "context.last_groups"), ({"lastlengths": [1.0]}, "context.lastlengths")):
        dd = {**d, **bad}
        if bad.get("last_groups", 0) is None:
            del dd["last_groups"]
        with pytest.raises(ContextError) as exc:
            context_from_data(dd, where="context")
        assert exc.value.field == field, (bad, exc.value)


def test_simulate_reports_the_start_per_iteration_and_the_length_tests(tmp_path, capsys):
    """``planner simulate --policy dynamic`` with its defaults, as a newcomer runs it: the summary names the start split
    of every iteration and each boundary's test of the planned lengths."""
    import json

    from planner.cli import main as cli_main

    scen = tmp_path / "small.yaml"
    scen.write_text(SMALL)
    assert cli_main(["simulate", str(scen), "--policy", "dynamic", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["metrics"]
    assert sorted(m["start_split"]) == ["0", "1"]  # the default: 2 iterations
    assert all(sum(v.values()) == 32 for v in m["start_split"].values())
    assert [r["iteration"] for r in m["length_refits"]] == [1] and m["length_refits"][0]["refit"] is False
    assert cli_main(["simulate", str(scen), "--policy", "dynamic"]) == 0
    text = capsys.readouterr().out
    assert "start split" in text and "as planned (KS" in text
