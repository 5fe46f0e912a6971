"""Reproductions that re-run: ``python -m planner.sim.reproduce ... --check`` re-computes the
committed figures and fails on any difference; independent simulations run side by side."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from planner.sim import parallel, repro_weave, reproduce
from tests.conftest import ROOT

COMMITTED = ROOT / "results" / "reproductions"


# The cheapest simulations (by recorded wall time) of three reproductions: both kinds of task (a job's
# iterations, a trace), 11 simulations, about 9 CPU s. The recorded wall times come from one process
# running them in turn with warm caches, so ``all --budget-s 6`` picked simulations costing 39 CPU s alone.
SUBSET = (("sweep", "3"), ("agentic", "3"), ("weave-equal-cost", "0.3"))


@pytest.mark.parametrize("name,budget", SUBSET, ids=[n for n, _ in SUBSET])
def test_committed_reproductions_recompute_within_budget(name, budget, capsys):
    """The cheapest committed simulations of a reproduction give the committed figures again;
    ``python -m planner.sim.reproduce all --check`` does all of them."""
    rc = reproduce.main([name, "--check", "--budget-s", budget, "--workers", "1", "--out", str(COMMITTED)])
    said = capsys.readouterr().out
    assert rc == 0, said
    assert "all match" in said and "checked 0 " not in said


@pytest.fixture
def sync_copy(tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    for f in ("sync.json", "sync.md"):
        shutil.copy(COMMITTED / f, out / f)
    return out


def test_check_fails_on_a_changed_figure(sync_copy, capsys):
    assert reproduce.main(["sync", "--check", "--workers", "1", "--out", str(sync_copy)]) == 0
    doc = json.loads((sync_copy / "sync.json").read_text())
    task = next(iter(doc["tasks"].values()))
    task["result"][0]["flat_s"] *= 1.01
    (sync_copy / "sync.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert reproduce.main(["sync", "--check", "--workers", "1", "--out", str(sync_copy)]) == 1
    assert "flat_s" in capsys.readouterr().out


def test_check_fails_on_a_hand_edited_report(sync_copy, capsys):
    md = (sync_copy / "sync.md").read_text()
    (sync_copy / "sync.md").write_text(md.replace("The speed-up of the sync", "Hand-edited: the speed-up of the sync"))
    assert reproduce.main(["sync", "--check", "--workers", "1", "--out", str(sync_copy)]) == 1
    assert "sync.md differs" in capsys.readouterr().out


def test_generator_never_claims_the_new_group_regression():
    text = "\n".join(repro_weave.WEAVE_WHY)
    assert "suspected regression" not in text and "new group for every job" not in text
    committed = (COMMITTED / "weave-equal-cost.md").read_text()
    assert "suspected regression" not in committed


def _square(x):
    return {"x": x, "sq": x * x}


def test_parallel_runner_matches_serial_and_times_each_task():
    reg = {"sq": _square}
    tasks = [parallel.Task("sq", {"x": i}) for i in range(5)] + [parallel.Task("sq", {"x": 2})]  # a duplicate runs once
    serial = parallel.run_tasks(reg, tasks, workers=1)
    side = parallel.run_tasks(reg, tasks, workers=2)
    assert set(serial) == set(side) and len(serial) == 5
    for k in serial:
        assert serial[k]["result"] == side[k]["result"]
        assert side[k]["wall_s"] >= 0.0
    assert serial[parallel.Task("sq", {"x": 3}).key]["result"] == {"sq": 9, "x": 3}


@pytest.mark.ray
@pytest.mark.skipif(os.environ.get("RL_PLANNER_SLOW") != "1", reason="starts a Ray cluster: set RL_PLANNER_SLOW=1")
def test_ray_tasks_match_local_workers():
    """The reproductions' simulations as Ray tasks on a local cluster give the local results."""
    pytest.importorskip("ray")
    tasks = [parallel.Task("sync", {})]
    on_ray = parallel.run_tasks(reproduce.TASKS, tasks, workers=2, ray_address="local")
    here = parallel.run_tasks(reproduce.TASKS, tasks, workers=1)
    assert on_ray.keys() == here.keys()
    for k in here:
        assert reproduce.diff(on_ray[k]["result"], here[k]["result"]) == []


def test_check_compares_the_model_not_the_machines_clock():
    """``--check`` found every oracle 'different' on its search's wall seconds: those are the machine's, not the
    model's, and are not compared; every other number still is."""
    from planner.sim.reproduce import diff

    committed = {"oracle_s": 629.2, "simulations": 314, "search_s": 171.0}
    assert diff({**committed, "search_s": 52.5}, committed) == []
    assert diff({**committed, "oracle_s": 640.0}, committed) != []
