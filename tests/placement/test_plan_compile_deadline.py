"""`planner plan SCENARIO --time-limit T`: estimating the scenario's phase times (a simulated rollout
per job and pool size, planner/instances/placement.py) counts against T and stops at its deadline.
Estimates that cannot finish are refused (exit 2, the least --time-limit that would do, nothing
written); those finished are kept per job in the cache, and a later run estimates only the others.

Time is a fake clock that only simulated iterations move (each one ``step`` seconds), read by the
command, the compile and the summary alike: nothing here depends on how fast the machine is."""

from __future__ import annotations

import re

import pytest

import planner.commands.plan as plan_cmd
import planner.instances.placement as placement
import simulator.phasetimes as pt
from planner.instances import cache
from planner.schema import load_scenario
from tests.conftest import SCENARIOS

MICRO = str(SCENARIOS / "weave-micro.yaml")  # 6 jobs of distinct specs, every one placeable alone


class FakeTime:
    """A clock at ``now``; every simulated iteration (rollout or training sample) starts at the
    current time (recorded in ``draws``) and moves it on by ``step`` seconds."""

    def __init__(self, monkeypatch, step: float):
        self.now, self.step, self.draws = 1000.0, step, []
        monkeypatch.setattr(plan_cmd, "_clock", self)
        monkeypatch.setattr(placement, "clock", self, raising=False)
        for name in ("_rollout_sample", "_train_sample"):
            monkeypatch.setattr(pt, name, self._timed(getattr(pt, name)))
        monkeypatch.setenv("RL_PLANNER_WORKERS", "1")  # in process: the draws are seen here

    def __call__(self) -> float:
        return self.now

    def _timed(self, real):
        def sample(setup, seed):
            self.draws.append(self.now)
            self.now += self.step
            return real(setup, seed)

        return sample


def _least(err: str) -> int:
    m = re.search(r"pass --time-limit (\d+) or more", err)
    assert m, err
    return int(m.group(1))


def test_estimates_that_cannot_finish_in_the_limit_stop_at_its_deadline_and_are_refused(tmp_path, monkeypatch, capsys):
    """The regression: the estimates ran to the end whatever the limit (a 1 s limit took 8 s on
    weave-like-60) and the plan came after them. Now no iteration starts past the compile's
    deadline, and the command exits 2 naming --time-limit and a longer limit, writing nothing."""
    from planner.cli import main

    clock = FakeTime(monkeypatch, step=1.0)  # every simulated iteration "takes" 1 s: 80 of them, 80 s
    out = tmp_path / "p.yaml"
    rc = main(["plan", MICRO, "--time-limit", "5", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists(), err
    assert clock.draws and max(clock.draws) < 1000.0 + 5.0 and len(clock.draws) <= 5  # of the 80 the tables need
    assert max(clock.draws) <= plan_cmd.compile_deadline(1000.0, 5.0, 6, json_out=False)  # none started after it
    assert "--time-limit" in err and "did not finish" in err and "no plan written" in err and "Traceback" not in err
    assert _least(err) > 5


def test_estimates_that_cannot_fit_are_refused_before_any_is_run(tmp_path, monkeypatch, capsys):
    from planner.cli import main

    clock = FakeTime(monkeypatch, step=1.0)
    monkeypatch.setattr(placement, "FAST_S_PER_UNIT", 1.0, raising=False)  # a machine that could not finish in time
    out = tmp_path / "p.yaml"
    rc = main(["plan", MICRO, "--time-limit", "5", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and clock.draws == [], err
    assert "nothing was estimated" in err and "--time-limit" in err and "Traceback" not in err
    assert _least(err) > 5 and not out.exists()


def test_the_solver_gets_what_the_estimates_leave_of_the_limit(tmp_path, monkeypatch, capsys):
    from formulation.placement import solve as solve_mod
    from planner.cli import main
    from planner.commands import _plan_summary

    clock = FakeTime(monkeypatch, step=0.05)
    given = []
    real = solve_mod.solve
    monkeypatch.setattr(solve_mod, "solve", lambda inst, opts, *a, **k: given.append(opts.time_limit_s) or real(inst, opts, *a, **k))
    monkeypatch.setattr(_plan_summary, "expected_cycles", lambda *a, **k: {})
    out = tmp_path / "p.yaml"
    rc = main(["plan", MICRO, "--time-limit", "10", "-o", str(out)])
    assert rc == 0 and out.exists(), capsys.readouterr().err
    spent = 0.05 * len(clock.draws)
    assert spent > 1.0  # the estimates ran (on the fake clock)
    assert given == [pytest.approx(plan_cmd.solver_share(10.0, spent, 6, False)[0])]
    assert given[0] < 10.0 - spent


def test_a_cut_compile_keeps_what_it_estimated_and_the_next_one_estimates_only_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("RL_PLANNER_CACHE", "1")
    monkeypatch.setenv("RL_PLANNER_CACHE_DIR", str(tmp_path / "cache"))
    sc = load_scenario(MICRO)
    ref = cache.referenced_digest(sc)
    clock = FakeTime(monkeypatch, step=1.0)
    compiled = []
    real_job = placement.compile_job
    monkeypatch.setattr(placement, "compile_job", lambda job, *a, **k: compiled.append(job.name) or real_job(job, *a, **k))

    def compile_until(deadline):
        return cache.jobs(sc, ref, "conservative", 0.0,
                          lambda known: placement.compile_scenario(sc, "conservative", deadline=deadline, known=known))

    with pytest.raises(placement.CompileCut) as cut:
        compile_until(clock.now + 20.5)  # 21 of the 80 iterations
    got = cut.value
    assert 0 < len(got.compiled) < 6 and got.missing == 6 - len(got.compiled) and got.measured and got.rest_s > 0
    assert len(list((tmp_path / "cache" / "jobs").iterdir())) == len(got.compiled)
    compiled.clear()
    inst = compile_until(None)
    assert sorted(compiled) == sorted(j.name for k, j in enumerate(sc.jobs) if k not in got.compiled)
    monkeypatch.setenv("RL_PLANNER_CACHE", "0")
    assert inst.model_dump() == placement.compile_scenario(sc, "conservative").model_dump()
    # keyed by content: a job whose spec changed is estimated again, the others are read
    monkeypatch.setenv("RL_PLANNER_CACHE", "1")
    changed = sc.model_copy(deep=True)
    changed.jobs[0].rollout.max_response_tokens //= 2
    compiled.clear()
    cache.jobs(changed, ref, "conservative", 0.0, lambda known: placement.compile_scenario(changed, "conservative", known=known))
    assert compiled == [changed.jobs[0].name]
    compiled.clear()
    cache.jobs(sc, ref, "sampled", 0.0, lambda known: placement.compile_scenario(sc, "sampled", known=known))
    assert len(compiled) == 6  # another estimate: other entries


def test_the_expected_cycles_stop_at_the_deadline_between_iterations(monkeypatch):
    from formulation.placement.solve import solve
    from formulation.common import SolveOptions
    from planner.commands._plan_summary import TABLE_GROUPS, expected_cycles

    sc = load_scenario(MICRO)
    plan = solve(placement.compile_scenario(sc, "conservative"), SolveOptions(time_limit_s=5.0), "greedy").plan
    assert any(len(g.members) > 1 for g in plan.groups)
    clock = FakeTime(monkeypatch, step=1.0)
    full = expected_cycles(sc, plan)
    assert len(full) == min(len(plan.groups), TABLE_GROUPS) and len(clock.draws) > 8
    clock.draws.clear()
    deadline = clock.now + 5.5  # inside the first group's members' iterations (4 rollout + 4 training each)
    cut = expected_cycles(sc, plan, deadline=deadline, clock=clock)
    assert max(clock.draws) <= deadline and len(clock.draws) == 6
    assert cut == {}  # the first group was not done


def test_a_long_simulation_stops_inside_once_the_deadline_passes():
    """One simulated iteration of a large job runs for seconds (a 512 x 16 batch of 32K-token responses on
    slow GPUs: over 6 s): the event loop asks the caller's stop() every STOP_EVERY events."""
    from simulator import core

    loop = core.EventLoop()

    def tick():
        loop.after(1.0, tick)

    loop.at(0.0, tick)
    asked = []
    with pytest.raises(core.PastDeadline), core.watching(lambda: asked.append(1) or len(asked) >= 3):
        loop.run()
    assert loop.events_run == 3 * core.STOP_EVERY
    assert loop.run(until=loop.now + 10.0) > 0  # no watch outside the block: runs to its horizon
    # an estimate stopped inside its simulation is not memoised: asked again without a deadline it is computed
    sc = load_scenario(MICRO)
    view = placement.ClusterView(sc, placement.resolve_gpu_types(sc))
    from dataclasses import replace

    prof = placement.estimate_job(sc.jobs[0], view, phase_times=False).profile
    prof = replace(prof, batch_prompts=4 * prof.batch_prompts)  # a rollout of over 2 x STOP_EVERY events
    pool = view.pool(view.types()[0], 1)
    pt.cache_clear()
    calls = []
    with pytest.raises(pt.PastDeadline):
        pt.rollout_s(prof, pool, "conservative", stop=lambda: calls.append(1) or len(calls) > 1)  # true inside the run
    assert len(calls) >= 2 and pt._rollout_sample.cache_info().currsize == 0
    assert pt.rollout_s(prof, pool, "conservative") > 0


def test_the_least_limit_named_covers_what_a_second_run_must_estimate(monkeypatch):
    """With the cache, a second run estimates only the jobs not kept; without it, all of them again."""
    cut = placement.CompileCut({}, total=60, missing=41, rest_s=9.6, measured=True, before=False, elapsed_s=4.1)
    monkeypatch.setenv("RL_PLANNER_CACHE", "1")
    err = str(plan_cmd._compile_refusal(cut, 5.0, True, spent_s=4.5, json_out=False))
    assert "19 estimated (kept in the cache" in err and "--time-limit 5 left" in err
    with_cache = _least(err)
    assert with_cache == int(-(-(0.4 + plan_cmd.PROJECTION_MARGIN * 9.6 + plan_cmd.AFTER_COMPILE_S
                                 + plan_cmd._write_s(1e9, 60, False)) // 1))
    monkeypatch.setenv("RL_PLANNER_CACHE", "0")
    err = str(plan_cmd._compile_refusal(cut, 5.0, False, spent_s=4.5, json_out=False))
    assert "kept in the cache" not in err and "solver.time_limit_s (5 s)" in err
    assert _least(err) >= with_cache + int(plan_cmd.PROJECTION_MARGIN * 4.1)
