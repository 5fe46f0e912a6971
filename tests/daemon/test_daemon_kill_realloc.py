"""A daemon SIGKILLed while it applies a reallocation inside an iteration (a journaled apply of its
own, "daemon realloc ..."): the restart settles it from the executor's journal before its first
cycle (the unit in flight rolled back, or forward when it had passed its commit point, as
``planner apply --rollback`` does), records how the decision ended, and later applies proceed.

Before, the restart resumed only plans left ``applying``: the unfinished reallocation stayed in the
journal, every later placement apply failed on it, an arriving job stayed pending and the
decision stayed ``applying`` for ever.

Real processes: the first daemon runs through a launcher script that SIGKILLs its own process right
after the chosen step of a reallocation's apply is journaled done; the second is a plain daemon on
the same files. Virtual clock: the replay runs as fast as it computes.
"""

from __future__ import annotations

import os

import json
import signal

import pytest
from daemonproc import DaemonProc, job, query, write_cluster

KILLER = """\
import os, signal, sys

import executor.journal as J

KIND = os.environ["KILL_AFTER_REALLOC_STEP"]
_set = J.Journal._set


def killing_set(self, apply_id, step, new, *a, **k):
    out = _set(self, apply_id, step, new, *a, **k)
    if new == "done" and step.kind == KIND:
        name = self.db.execute("SELECT plan_name FROM applies WHERE id=?", (apply_id,)).fetchone()[0]
        if name.startswith("daemon realloc "):
            print(f"killing myself after {step.id} of {name!r} was journaled done", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    return out


J.Journal._set = killing_set
from planner.cli import entry

sys.argv = ["planner", *sys.argv[1:]]
raise SystemExit(entry())
"""

COMMON = ("--placer", "solo", "--clock", "virtual", "--period-s", "15", "--sim-telemetry", "--sim-requests", "32")


def tail_job() -> dict:
    # the reallocation test's job: its rollout tail thins out, so reallocations are committed (a Workload migration of the
    # rollout, then log-prob inference and a P2P of the trainer)
    return job("tail", model="qwen2.5-7b", rollout={"batch_prompts": 256, "group_size": 8, "max_response_tokens": 8192,
                                                    "gpu_types": ["H800"]}, trainer={"tp": 2})


@pytest.mark.parametrize("kill_after, way", [
    ("drain", "back"),
    pytest.param("handoff", "forward", marks=pytest.mark.skipif(
        os.environ.get("RL_PLANNER_SLOW") != "1", reason="a second real daemon killed mid-reallocation, about 15 s: set RL_PLANNER_SLOW=1")),
])
def test_sigkill_mid_reallocation_is_settled_at_restart_and_later_applies_proceed(tmp_path, kill_after, way):
    from executor.backends.sim import SimBackend
    from executor.workers.engine import expected_output

    trace = write_cluster(tmp_path, jobs=[tail_job(), job("late", arrival_s=300, duration_s=600)])
    killer = tmp_path / "killer.py"
    killer.write_text(KILLER)
    first = DaemonProc(tmp_path, "--scenario", str(trace), *COMMON, "--max-cycles", "60", name="first", launcher=(str(killer),),
                       extra_env={"KILL_AFTER_REALLOC_STEP": kill_after})
    assert first.wait(what="the daemon to kill itself mid-reallocation") == -signal.SIGKILL, first.output()
    assert "killing myself" in first.output()
    journal = first.state.with_name(first.state.name + ".journal")
    cut = query(journal, "SELECT id, plan_name FROM applies WHERE status='running'")
    assert len(cut) == 1 and cut[0]["plan_name"].startswith("daemon realloc tail"), cut
    pending = query(first.state, "SELECT id FROM decisions WHERE kind='realloc' AND outcome='applying'")
    assert len(pending) == 1, pending

    again = DaemonProc(tmp_path, *COMMON, "--max-cycles", "30", name="again")
    assert again.wait(what="the restarted daemon to run its 30 cycles") == 0, again.output()
    out = again.output()
    assert "Traceback" not in out, out

    # the reallocation's apply is ended in the journal: its unit in flight undone, or finished past its commit point
    runs = {r["id"]: r for r in query(journal, "SELECT id, plan_name, status, message FROM applies")}
    assert runs[cut[0]["id"]]["status"] == "rolled_back", runs[cut[0]["id"]]
    assert not [r for r in runs.values() if r["status"] == "running"], runs
    steps = query(journal, "SELECT unit, kind, status FROM steps WHERE apply_id=? ORDER BY seq", (cut[0]["id"],))
    rollout = [s["status"] for s in steps if s["unit"] == "tail/rollout/workload"]
    later = [s["status"] for s in steps if s["unit"] != "tail/rollout/workload"]
    if way == "back":  # the drain had not handed anything over: the engines serve again
        assert "compensated" in rollout and "done" not in rollout, steps
    else:  # past the handoff (the workload unit's commit point) the unit is finished, the units after it not started
        assert set(rollout) == {"done"}, steps
    assert later and set(later) == {"planned"}, steps

    # the decision has its final outcome, with what happened
    d = query(first.state, "SELECT outcome, reasons FROM decisions WHERE id=?", (pending[0]["id"],))[0]
    assert d["outcome"] == "rolled-back", d
    note = json.loads(d["reasons"])[-1]
    assert "settled from the executor's journal" in note and ("rolled forward" in note) == (way == "forward"), note
    assert not query(first.state, "SELECT id FROM decisions WHERE outcome='applying'")
    # the iteration it was for is gone: the first cycle lays the job out as planned again (units done before stood)
    back = [r for r in query(first.state, "SELECT outcome, jobs, reasons FROM decisions WHERE kind='restore'")
            if f"(decision {pending[0]['id']})" in r["reasons"]]
    assert back and back[0]["outcome"] == "applied" and json.loads(back[0]["jobs"]) == ["tail"], back

    # later applies proceed: the late job is admitted and runs, no plan failed, later reallocations are applied
    assert query(first.state, "SELECT state FROM jobs WHERE name='late'")[0]["state"] == "running"
    assert not query(first.state, "SELECT id FROM plans WHERE status='failed'")
    assert not [r for r in query(first.state, "SELECT reasons FROM decisions") if "is not finished" in r["reasons"]]
    after = [r for r in runs.values() if r["id"] > cut[0]["id"]]
    assert after and {r["status"] for r in after} == {"done"}, after
    assert any(r["plan_name"].startswith("daemon plan") for r in after), "the late job's placement was applied"
    assert "settled the unfinished reallocation of tail" in out, out

    # every request of the job is accounted for once, with its uninterrupted output
    b = SimBackend([], state_path=first.state.with_name(first.state.name + ".executor-sim"))
    try:
        reqs = [r for r in b.coordinator.request_records() if r["component"] == "tail/rollout"]
        assert len(reqs) == 32 and len({r["id"] for r in reqs}) == 32
        live = {r["id"] for r in b.coordinator.records() if r["component"] == "tail/rollout" and r.get("status") == "running"}
        for r in reqs:
            if r["done"]:
                assert r["output"] == expected_output(r), r["id"]
            else:
                assert r["owner"] in live and r["output"] == expected_output(r)[: len(r["output"])], r["id"]
        assert b.coordinator.illegal_transitions() == [] and b.leaks() == []
    finally:
        b.close(save=False)
