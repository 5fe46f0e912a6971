"""The completion decision is one function: the simulator's dynamic policy and ``planner realloc --decision
completion`` give the same decision on the same telemetry and context."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.cli import main as cli_main
from planner.instances.completion_io import ContextError, context_from_data, context_to_data
from tests.realloc.helpers import SMALL_MATH_SCENARIO as SCENARIO



class _Fired(Exception):
    pass


def _first_solve(scen: Path):
    """Simulate the 1.5B job on a fixed start up to the completion decision's first solve; returns the iteration's
    snapshots, the context of that step, and the simulator's decision record and Reallocation."""
    from planner.instances.completion_io import make_decision
    from planner.sim.repro_jobs import _setup
    from simulator.job import JobSim
    from simulator.policies import Policy

    sc, setup = _setup(scen)
    dec = make_decision(setup, sc)
    seen: dict = {"snaps": []}

    def spy(snap, ctx):
        if not ctx.at_boundary:
            seen["snaps"].append(snap)
        n = len(dec.records)
        out = dec(snap, ctx)
        if len(dec.records) > n:
            seen.update(ctx=ctx, record=dec.records[-1], out=out)
            raise _Fired
        return out

    spy.wants_remaining_tokens = True  # type: ignore[attr-defined]  # as the decision asks: the requests one by one
    pol = Policy("dynamic", rollout_gpus=28, reference_gpus=1, trainer_gpus=3, decision=spy)
    with pytest.raises(_Fired):
        JobSim(setup, pol, seed=5, iterations=1).run()
    seen["scenario"] = scen
    return seen


def first_solve_in(tmp: Path) -> dict:
    """:func:`_first_solve` on the small scenario written to ``tmp``/small.yaml (its path under "scenario")."""
    scen = tmp / "small.yaml"
    scen.write_text(SCENARIO)
    return _first_solve(scen)


@pytest.fixture(scope="module")
def fired(tmp_path_factory):
    return first_solve_in(tmp_path_factory.mktemp("paths"))


def test_planner_realloc_makes_the_simulators_decision(fired, tmp_path, capsys):
    snaps = tmp_path / "snaps.jsonl"
    snaps.write_text("".join(json.dumps(s.model_dump(mode="json")) + "\n" for s in fired["snaps"]))
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps(context_to_data(fired["ctx"])))
    rc = cli_main(["realloc", str(snaps), "--decision", "completion", "--scenario", str(fired["scenario"]), "--context", str(ctx),
                   "--hold-s", "4", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    sim = fired["record"]
    assert doc["fired"], "the trigger fired in the simulator on the same snapshots"
    rec = doc["record"]
    assert rec["current"] == list(sim["current"]) and rec["target"] == list(sim["target"])
    assert rec["committed"] == sim["committed"]
    assert rec["completion_keep_s"] == pytest.approx(sim["completion_keep_s"], rel=1e-9)
    assert rec["completion_s"] == pytest.approx(sim["completion_s"], rel=1e-9)
    if fired["out"] is not None:
        assert doc["target"] == fired["out"].target


def test_planner_realloc_with_its_defaults_makes_the_simulators_decision(fired, tmp_path, capsys):
    """No --hold-s: the trigger's window is the simulator's (simulator.defaults.WINDOW_S), so the trigger fires on the
    snapshot the simulator's fired on, with the same decision (a window of 5 s fired a second later, or not at all)."""
    from planner.instances.completion import CompletionPlannerDecision, TailDetector
    from simulator.defaults import WINDOW_S

    assert TailDetector().hold_s == WINDOW_S
    assert CompletionPlannerDecision(choose_start=False).detector.hold_s == WINDOW_S
    snaps = tmp_path / "snaps.jsonl"
    snaps.write_text("".join(json.dumps(s.model_dump(mode="json")) + "\n" for s in fired["snaps"]))
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps(context_to_data(fired["ctx"])))
    rc = cli_main(["realloc", str(snaps), "--decision", "completion", "--scenario", str(fired["scenario"]), "--context", str(ctx),
                   "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    sim = fired["record"]
    assert doc["fired"], "the trigger fired in the simulator on the same snapshots, with its default window"
    assert doc["record"]["target"] == list(sim["target"]) and doc["record"]["committed"] == sim["committed"]
    assert doc["committed"] == (fired["out"] is not None)


def test_simulate_and_realloc_share_the_window_default():
    import argparse

    from planner.commands import realloc, simulate
    from simulator.defaults import WINDOW_S

    for mod, flag, says in ((simulate, "--window-s", f"default {WINDOW_S:g})"),
                            (realloc, "--hold-s", f"default {WINDOW_S:g} with --decision completion")):
        p = argparse.ArgumentParser()
        mod.add_arguments(p)
        action = next(a for a in p._actions if flag in a.option_strings)
        assert says in action.help and action.default in (WINDOW_S, None)
    args = argparse.Namespace(decision="completion", hold_s=None, margin=0.05, candidates=8, theta=0.5, u_low=0.2,
                              u_low_percentile=None, time_limit_s=5.0, horizon_s=None, backend="bnb", force=False)
    realloc._options(args)
    assert args.hold_s == WINDOW_S
    from formulation.realloc.donors import DonorConfig

    args.decision, args.hold_s = "planner", None
    realloc._options(args)
    assert args.hold_s == realloc.PLANNER_HOLD_S == DonorConfig().hold_s  # the planner keeps the donor detector's T


def test_the_context_round_trips(fired):
    back = context_from_data(json.loads(json.dumps(context_to_data(fired["ctx"]))))
    a, b = fired["ctx"].components["rollout"], back.components["rollout"]
    assert a.requests is not None and b.requests is not None
    assert (a.gpus, a.pending, a.groups_left) == (b.gpus, b.pending, b.groups_left)
    for k, v in a.requests.items():
        assert np.array_equal(np.asarray(v), b.requests[k]), k


@pytest.mark.parametrize("path, value, field", [
    (("components", "trainer", "gpus"), -2, "context.components.trainer.gpus"),
    (("components", "rollout", "requests", "engine"), "x", "context.components.rollout.requests.engine"),
    (("total_gpus",), True, "context.total_gpus"),
    (("intake",), "batch", "context.intake"),
])
def test_a_bad_context_field_is_named(fired, path, value, field):
    d = context_to_data(fired["ctx"])
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(ContextError) as exc:
        context_from_data(d)
    assert exc.value.field == field


def test_planner_realloc_completion_needs_its_context(fired, tmp_path, capsys):
    snaps = tmp_path / "snaps.jsonl"
    snaps.write_text(json.dumps(fired["snaps"][-1].model_dump(mode="json")) + "\n")
    rc = cli_main(["realloc", str(snaps), "--decision", "completion", "--scenario", str(fired["scenario"])])
    assert rc == 2
    assert "--context" in capsys.readouterr().err
    bad = tmp_path / "ctx.json"
    d = context_to_data(fired["ctx"])
    del d["components"]["reference"]["pending"]
    bad.write_text(json.dumps(d))
    rc = cli_main(["realloc", str(snaps), "--decision", "completion", "--scenario", str(fired["scenario"]), "--context", str(bad)])
    assert rc == 2
    assert "components.reference.pending" in capsys.readouterr().err


def _completion(fired, tmp_path, capsys, snaps: list, scenario=None) -> tuple[int, str, str]:
    f = tmp_path / "snaps.jsonl"
    f.write_text("".join(json.dumps(s) + "\n" for s in snaps))
    ctx = tmp_path / "ctx.json"
    ctx.write_text(json.dumps(context_to_data(fired["ctx"])))
    out = tmp_path / "decision.json"
    out.unlink(missing_ok=True)
    capsys.readouterr()
    rc = cli_main(["realloc", str(f), "--decision", "completion", "--scenario", str(scenario or fired["scenario"]), "--context", str(ctx),
                   "--hold-s", "4", "--json", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc != 0 or out.exists()
    assert rc == 0 or not out.exists(), "nothing written on a refusal"
    return rc, cap.out, cap.err


def _renamed(snap: dict, old: str, new: str) -> dict:
    for n in snap["nodes"]:
        if n["node"] == old:
            n["node"] = new
    for w in snap["workers"]:
        if w["node"] == old:
            w["node"] = new
    return snap


def _nodes_gpus(snap: dict, gpus: int) -> dict:
    snap["nodes"][0]["gpus"] = gpus
    return snap


@pytest.mark.parametrize("mutate,field,said", [
    (lambda s: _nodes_gpus(s, 64), "nodes[0].gpus", "the snapshot declares 64 GPUs on node 'h100-0'; the scenario 'paths' gives it 8"),
    (lambda s: _renamed(s, "h100-3", "h100-9"), "nodes[3].node", "node 'h100-9' is not among the nodes of the scenario 'paths'"),
    (lambda s: _renamed(s, "h100-3", "a100-0"), "nodes[3].node", "node 'a100-0' is not among the nodes"),
], ids=["declared-64-gpus", "node-the-scenario-lacks", "node-of-another-cluster"])
def test_completion_refuses_snapshot_nodes_the_scenario_lacks(fired, tmp_path, capsys, mutate, field, said):
    """``--decision completion`` read no node of the snapshot: a snapshot of another cluster (a node the scenario lacks, 64
    GPUs on an 8-GPU node) was decided on. Now exit 2 naming the field, as ``planner realloc --scenario`` does."""
    snaps = [s.model_dump(mode="json") for s in fired["snaps"]]
    snaps[-1] = mutate(snaps[-1])
    rc, out, err = _completion(fired, tmp_path, capsys, snaps)
    assert rc == 2 and out == "", err
    prefix = f"snapshots[{len(snaps) - 1}]." if len(snaps) > 1 else ""
    assert f"{prefix}{field}: {said}" in err, err
    assert "Fix:" in err and "Traceback" not in err


def test_completion_takes_the_simulators_node_names_and_the_scenarios(fired, tmp_path, capsys):
    """The simulator names a job's nodes after the GPU type (h100-0 ..), the scenario after the node group: the same names
    only when the group is named after its type. Under a group named 'pool' both the simulator's snapshots and ones named
    pool-0 .. pool-3 are decided on, the same decision; a snapshot naming nodes both ways is refused."""
    snaps = [s.model_dump(mode="json") for s in fired["snaps"]]
    rc, want, err = _completion(fired, tmp_path, capsys, snaps)
    assert rc == 0, err
    pool = tmp_path / "pool.yaml"
    pool.write_text(SCENARIO.replace("{name: h100,", "{name: pool,"))
    rc, out, err = _completion(fired, tmp_path, capsys, snaps, pool)
    assert rc == 0, err
    assert json.loads(out) == json.loads(want)
    named = [s.model_dump(mode="json") for s in fired["snaps"]]
    for s in named:
        for i in range(4):
            _renamed(s, f"h100-{i}", f"pool-{i}")
    rc, out, err = _completion(fired, tmp_path, capsys, named, pool)
    assert rc == 0, err
    assert json.loads(out) == json.loads(want)
    snaps[-1] = _renamed(snaps[-1], "h100-3", "pool-3")
    rc, out, err = _completion(fired, tmp_path, capsys, snaps, pool)
    assert rc == 2 and out == "", err
    assert (f"snapshots[{len(snaps) - 1}].nodes[3].node: node 'pool-3' is named as the scenario names nodes (<node group>-<i>), "
            "the snapshot's other nodes as the simulator names them") in " ".join(err.split()), err


def test_a_trainer_the_nodes_could_not_hold_is_not_asked_for_again(fired):
    """After a move asked for more trainer GPUs than it got, the rest of the iteration keeps the trainer at most
    where it is (the 32B-64 oscillation: the next solve asked again, the extra went to log-prob inference again)."""
    from planner.instances.completion_io import decide_stream, make_decision
    from planner.sim.repro_jobs import _setup

    sc, setup = _setup(fired["scenario"])
    ctx, snaps = fired["ctx"], fired["snaps"]
    free = make_decision(setup, sc)
    _, rec = decide_stream(free, snaps, ctx)
    cur_t = ctx.components["trainer"].gpus
    assert rec is not None and rec["target"][2] > cur_t, "without the cap this state grows the trainer"
    capped = make_decision(setup, sc, trainer_cap=True)
    r, f, t = (ctx.components[c].gpus for c in ("rollout", "reference", "trainer"))
    capped._asked[ctx.iteration] = (r - 8, f, t + 8)  # the last move asked for 8 more trainer GPUs than it got
    _, rec = decide_stream(capped, snaps, ctx)
    assert rec is not None and rec["target"][2] <= cur_t


def test_the_start_search_scores_a_start_by_its_move_point(fired, monkeypatch):
    """A start the policy moves away from scores the simulated seconds to its first committed move plus the
    decision's predicted rest; a start it never moves from scores its simulated static iteration; the search
    simulates only the planner's own seeds."""
    import simulator.job as job
    from planner.instances import completion as C
    from planner.sim.repro_jobs import _setup

    sc, setup = _setup(fired["scenario"])
    seeds: list = []
    real = job.JobSim

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **kw):
            seeds.append(kw.get("seed"))
            super().__init__(*a, **kw)

    monkeypatch.setattr(job, "JobSim", Spy)
    probes: list = []

    def make(margin=0.05):
        p = C._StartProbe(sc, choose_start=False, setup=setup, margin=margin)
        probes.append(p)
        return p

    a = (28, 1, 3)
    moved = C._dynamic_time(setup, a, 1, make)
    rec = probes[-1].records[-1]
    assert rec["committed"]
    assert moved == pytest.approx(rec["time_s"] + rec["completion_s"], rel=1e-12)
    static = C._static_time(setup, a, 1)
    assert static is not None and moved < static
    kept = C._dynamic_time(setup, a, 1, lambda: make(margin=0.999))
    assert not any(r["committed"] for r in probes[-1].records)
    assert kept == pytest.approx(static, rel=0.02)
    assert seeds and all(s >= C.PLAN_SEED_BASE for s in seeds), seeds


def test_the_start_is_the_fastest_finalist_simulated_whole(fired, monkeypatch):
    """The screen's best starts and the best static split are simulated whole under the policy; the start chosen is
    the fastest of those simulations, whatever the screen promised."""
    from planner.instances import completion as C
    from planner.sim.repro_jobs import _setup

    sc, setup = _setup(fired["scenario"])
    whole: dict = {}
    real = C._full_time

    def spy(setup_, a, seeds, make):
        whole[a] = real(setup_, a, seeds, make)
        return whole[a]

    monkeypatch.setattr(C, "_full_time", spy)
    monkeypatch.setattr(C, "_START_CACHE", {})
    dec = C.CompletionPlannerDecision(sc, start_search="dynamic")
    start = dec.start_split(setup)
    static_best = C.search_start_split(setup)[0]
    assert (static_best["rollout"], static_best["reference"], static_best["trainer"]) in whole
    assert 2 <= len(whole) <= 1 + C.FINALISTS
    best = min(whole, key=lambda a: whole[a])
    assert (start["rollout"], start["reference"], start["trainer"]) == best
    table = dict(dec.start_table)
    assert all(table[a] == pytest.approx(v, rel=1e-12) for a, v in whole.items())


@pytest.mark.parametrize("turns, want", [(1, "dynamic"), (3, "static")])
def test_the_default_start_search_is_the_dynamic_one_on_single_turn_rollouts(monkeypatch, turns, want):
    """``simulate --policy dynamic`` with its defaults searches the start for the dynamic policy itself on a
    single-turn rollout (measured: results/realloc/dynamic-start-search.md) and the best static split on a
    multi-turn one (whose prediction after a move is aggregate)."""
    import argparse
    from dataclasses import replace

    from planner.commands.simulate import decision_function
    from planner.instances import completion as C
    from planner.sim.repro_jobs import _setup

    sc, setup = _setup(Path(__file__).resolve().parents[2] / "scenarios" / "ci" / "tiny-1job.yaml")
    setup = replace(setup, workload=replace(setup.workload, turns=turns))
    called: list = []
    split = {"rollout": 8, "reference": 4, "trainer": 4}
    monkeypatch.setattr(C, "search_start_split", lambda s, seeds=1: called.append("static") or (split, []))
    monkeypatch.setattr(C, "search_dynamic_start", lambda s, make, full, seeds=1: called.append("dynamic") or (split, []))
    monkeypatch.setattr(C.CompletionPlannerDecision, "_state_tables", lambda self: None)
    args = argparse.Namespace(decision="completion", u_low=0.2, window_s=4.0, theta=0.5)  # as the reproduction builds it
    dec = decision_function(args, sc)
    assert dec.start_search == "auto"
    assert dec.start_split(setup) == split
    assert called == [want]
    assert decision_function(argparse.Namespace(**vars(args), start_search="static"), sc).start_search == "static"
