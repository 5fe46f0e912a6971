"""Components whose every worker is dead (their processes gone, still registered, on live nodes).

The diff migrated from them: a reboot saved the state of dead workers, a P2P copied from dead
ranks, a workload migration drained dead engines; the apply rolled back (``WorkerLost``) every
time, so such a component never came back (the daemon's restore of a job whose workers died
retried for ever). Now the dead workers are reaped and new ones take their place (a ``replace``
unit); what the dead ones held is gone, and the plan's notes say where the new ones start from: a
rollout's unfinished requests wait in the ledger and finish on the new engines, a trainer starts
from its initial state only if it never committed an optimizer step, else it is refused with the
way out (the executor keeps no checkpoint of a running trainer), and a parked trainer comes back
from its checkpoint."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from executor.backends.base import observe  # noqa: E402
from executor.backends.sim import SimBackend  # noqa: E402
from executor.controller import Executor  # noqa: E402
from executor.diff import LOST_FIX, Unreachable, diff  # noqa: E402
from executor.faultlib import NODES, ROLLOUT, TRAINER, base_body, expected, target  # noqa: E402
from executor.journal import Journal  # noqa: E402
from executor.state import Component, Layout, Node, with_status  # noqa: E402
from executor import router  # noqa: E402
from tests.executor.helpers import observed  # noqa: E402

MIGRATING = ("save", "drain", "handoff", "reshard")  # steps that read from the workers they move away from


def _running(trained_steps: int = 0):
    b = SimBackend(NODES, ticks_per_call=1)
    j = Journal(":memory:")
    assert Executor(b, j).apply(diff(observe(b), target(base_body())).steps, "base").status == "done"
    for s in range(trained_steps):
        assert all(b.train_step(TRAINER, s))
    return b, j


def _kill(b, *components):
    ids = [r["id"] for r in b.coord("records") if r["component"] in components]
    for wid in ids:
        b.kill(wid)
    return ids


def test_every_worker_dead_is_replaced_not_migrated_from_and_no_request_is_lost():
    b, j = _running()
    reqs = router.make_requests(ROLLOUT, 30, prompts=6, prompt_len=16, min_len=4, max_len=24, seed=5)
    router.submit(b, ROLLOUT, reqs)
    b.tick(3)  # requests in flight on the engines that die
    dead = _kill(b, ROLLOUT, TRAINER)
    plan = diff(observe(b), target(base_body()))
    assert {u.component: u.kind for u in plan.units} == {ROLLOUT: "replace", TRAINER: "replace"}
    assert not [s.id for s in plan.steps if s.kind in MIGRATING], plan.describe()
    assert [s.args["worker"]["id"] for s in plan.steps if s.kind == "stop"] and \
        {s.args["worker"]["id"] for s in plan.steps if s.kind == "stop"} == set(dead)
    assert any(f"{TRAINER}: every worker was dead" in n and "initial state" in n for n in plan.notes), plan.notes
    assert any(f"{ROLLOUT}: every worker was dead" in n and "ledger" in n for n in plan.notes), plan.notes
    res = Executor(b, j).apply(plan.steps, "replace")
    assert res.status == "done", res.message
    recs = [r for r in b.coord("records") if r["component"] in (ROLLOUT, TRAINER)]
    assert recs and all(r["status"] == "running" and r["id"] not in dead and b.worker_alive(r["id"]) for r in recs)
    assert sorted(r["index"] for r in recs if r["component"] == TRAINER) == [0, 1]
    assert b.leaks() == []
    assert all(b.train_step(TRAINER, 0)), "the new ranks form a training group and step"
    assert diff(observe(b), target(base_body())).steps == [], "applied: nothing left to do"
    for _ in range(200):
        if all(r["done"] for r in b.coord("request_records")):
            break
        b.tick(20)
    done = b.coord("request_records")
    ref = expected("")
    assert len(done) == len(reqs) and all(r["done"] for r in done)
    assert [r["id"] for r in done if r["output"] != ref(r)[0]] == [], "a moved request ends with its uninterrupted output"


def test_a_dead_trainer_that_committed_steps_is_refused_with_the_way_out_and_the_way_out_works():
    b, j = _running(trained_steps=2)
    _kill(b, TRAINER)
    with pytest.raises(Unreachable) as err:
        diff(observe(b), target(base_body()))
    text = str(err.value)
    assert f"every rank of {TRAINER} is dead" in text and "committed 2 optimizer step(s)" in text, text
    assert "keeps no checkpoint of a running trainer" in text and LOST_FIX in text
    body = base_body()
    body["components"] = [c for c in body["components"] if c["name"] != TRAINER]
    assert Executor(b, j).apply(diff(observe(b), target(body)).steps, "drop").status == "done"
    assert Executor(b, j).apply(diff(observe(b), target(base_body())).steps, "add").status == "done"
    assert all(b.train_step(TRAINER, 0)) and b.leaks() == []


def test_dead_services_are_replaced_empty():
    b, j = _running()
    body = base_body()
    body["components"].append({"name": "job/reward", "role": "service", "gpu_type": "H20", "placement": {"a": 1}})
    assert Executor(b, j).apply(diff(observe(b), target(body)).steps, "reward").status == "done"
    (wid,) = _kill(b, "job/reward")
    plan = diff(observe(b), target(body))
    assert [(u.component, u.kind) for u in plan.units] == [("job/reward", "replace")]
    assert [s.kind for s in plan.steps] == ["stop", "create", "switch"], plan.describe()
    assert Executor(b, j).apply(plan.steps, "again").status == "done"
    (rec,) = [r for r in b.coord("records") if r["component"] == "job/reward"]
    assert rec["id"] != wid and b.worker_alive(rec["id"]) and b.leaks() == []


def test_a_parked_trainer_whose_ranks_are_dead_comes_back_from_its_checkpoint():
    nodes = [Node("t", "H100", 8, 1000.0)]
    obs = observed(nodes, [Component(TRAINER, "job", "trainer", "H100", Layout(2, 1, 1), placement={"t": 2})])
    c = obs.components[TRAINER]
    c.workers = [with_status(w, "dead") for w in c.workers]
    obs.parked[TRAINER] = {"checkpoint": f"{TRAINER}@g2", "layout": {"tp": 2, "pp": 1, "dp": 1}, "count": 2, "generation": 2,
                           "role": "trainer"}
    obs.trained[TRAINER] = 5  # it trained, and its state is in the checkpoint: not refused
    tgt = observed(nodes, [])
    tgt.components[TRAINER] = Component(TRAINER, "job", "trainer", "H100", Layout(2, 1, 1), placement={"t": 2})
    plan = diff(obs, tgt)
    assert [(u.component, u.kind) for u in plan.units] == [(TRAINER, "restore")]
    assert [s.kind for s in plan.steps] == ["stop", "stop", "create", "create", "switch"], plan.describe()
    assert all(s.args.get("restore") == f"{TRAINER}@g2" for s in plan.steps if s.kind == "create")
    assert any("checkpoint" in n and "parked" in n for n in plan.notes), plan.notes


def test_a_trainer_with_one_dead_rank_restarts_whole_if_it_never_trained_else_is_refused():
    """A P2P copy (and a reboot) reads every rank's shards: from a trainer with one dead rank it rolled
    back (exit 1). Untrained, the trainer restarts whole (its live rank held its initial state only);
    trained, it is refused naming the dead rank (exit 2) with the way out."""
    b, j = _running()
    ranks = sorted(r["id"] for r in b.coord("records") if r["component"] == TRAINER)
    b.kill(ranks[0])
    plan = diff(observe(b), target(base_body()))
    assert [(u.component, u.kind) for u in plan.units] == [(TRAINER, "replace")]
    assert {s.args["worker"]["id"] for s in plan.steps if s.kind == "stop"} == set(ranks)
    assert any("some ranks were dead" in n and "initial state" in n for n in plan.notes), plan.notes
    assert Executor(b, j).apply(plan.steps, "again").status == "done"
    now = [r for r in b.coord("records") if r["component"] == TRAINER]
    assert len(now) == 2 and not {r["id"] for r in now} & set(ranks) and b.leaks() == []
    assert all(b.train_step(TRAINER, 0))
    b.kill(now[1]["id"])
    with pytest.raises(Unreachable) as err:
        diff(observe(b), target(base_body()))
    text = str(err.value)
    assert f"rank(s) {now[1]['id']} of {TRAINER} are dead" in text and "committed 1 optimizer step(s)" in text, text


def test_some_dead_engines_are_released_by_the_workload_migration_and_no_request_is_lost():
    """(A rollout that still runs an engine keeps its migration: the live engines stay, the dead are released.)"""
    b, j = _running()
    router.submit(b, ROLLOUT, router.make_requests(ROLLOUT, 20, prompts=4, prompt_len=8, seed=1))
    b.tick(2)
    engines = sorted(r["id"] for r in b.coord("records") if r["component"] == ROLLOUT)
    for wid in engines[:2]:
        b.kill(wid)
    plan = diff(observe(b), target(base_body()))
    assert [(u.component, u.kind) for u in plan.units] == [(ROLLOUT, "workload")]
    kinds = [(s.kind, s.args.get("worker", {}).get("id")) for s in plan.steps]
    assert kinds[:2] == [("stop", engines[0]), ("stop", engines[1])], "the dead are reaped first: their room is free at once"
    assert not [s.id for s in plan.steps if s.kind in ("drain", "handoff")], "nothing to drain or hand off from the dead"
    assert Executor(b, j).apply(plan.steps, "again").status == "done"
    now = {r["id"] for r in b.coord("records") if r["component"] == ROLLOUT}
    assert engines[2] in now and not now & set(engines[:2]) and len(now) == 3 and b.leaks() == []
    _every_request_done_as_expected(b)


def test_a_rollout_reboot_with_a_dead_engine_saves_the_live_ones_and_loses_no_request():
    """A reboot (and a staged park, the same save) drained and exported every engine, the dead one
    too: WorkerLost, rolled back on every try. The dead engine has nothing to save: its requests wait
    in the ledger with the output it last reported and finish on the restarted engines."""
    b = SimBackend(NODES, ticks_per_call=1)
    j = Journal(":memory:")
    body = base_body()
    body["components"][0]["migration"] = "reboot"
    assert Executor(b, j).apply(diff(observe(b), target(body)).steps, "base").status == "done"
    router.submit(b, ROLLOUT, router.make_requests(ROLLOUT, 20, prompts=4, prompt_len=8, seed=1))
    b.tick(2)
    engines = sorted(r["id"] for r in b.coord("records") if r["component"] == ROLLOUT)
    b.kill(engines[0])
    body["components"][0]["placement"] = {"a": 2, "b": 1}
    plan = diff(observe(b), target(body))
    assert [(u.component, u.kind) for u in plan.units] == [(ROLLOUT, "reboot")]
    (save,) = [s for s in plan.steps if s.kind == "save"]
    assert engines[0] not in save.args["workers"]
    res = Executor(b, j).apply(plan.steps, "move")
    assert res.status == "done", res.message
    assert not {r["id"] for r in b.coord("records")} & set(engines) and b.leaks() == []
    _every_request_done_as_expected(b)


def _every_request_done_as_expected(b) -> None:
    """The 20 requests finish (ticking the engines, 200 rounds at most), each with the output the
    stand-in engine gives it: none lost or garbled by the dead engines."""
    for _ in range(200):
        if all(r["done"] for r in b.coord("request_records")):
            break
        b.tick(20)
    ref = expected("")
    done = b.coord("request_records")
    assert len(done) == 20 and all(r["done"] and r["output"] == ref(r)[0] for r in done)
