"""The SQLite journal: intent before acting, outcome after, resume, refusal, one holder."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from executor.journal import Journal
from executor.steps import IllegalTransition, Step
from planner.errors import UserError


def _steps(n=3):
    return [Step(i + 1, f"c/add/create:w{i}", "create", "c", "c/add", f"because {i}", {"i": i}) for i in range(n)]


def test_intent_then_outcome_is_durable(tmp_path):
    j = Journal(tmp_path / "j.db")
    aid, steps, resumed = j.open_apply("d1", "p", "sim", _steps())
    assert not resumed
    j.intent(aid, steps[0])
    j.done(aid, steps[0], {"worker": "w0"})
    j.intent(aid, steps[1])
    j.close()
    # another connection (a new process after a crash) sees exactly that
    raw = sqlite3.connect(tmp_path / "j.db")
    rows = raw.execute("SELECT seq, status, attempts FROM steps ORDER BY seq").fetchall()
    assert rows == [(1, "done", 1), (2, "intent", 1), (3, "planned", 0)]
    j2 = Journal(tmp_path / "j.db")
    aid2, steps2, resumed2 = j2.open_apply("d1", "p", "sim", _steps())
    assert resumed2 and aid2 == aid and [s.id for s in steps2] == [s.id for s in steps]
    j2.intent(aid2, steps2[1])  # retried after the crash
    assert j2.attempts(aid2, 2) == 2


def test_another_plan_is_refused_while_one_is_unfinished(tmp_path):
    j = Journal(tmp_path / "j.db")
    j.open_apply("d1", "first", "sim", _steps())
    with pytest.raises(UserError) as e:
        j.open_apply("d2", "second", "sim", _steps())
    assert "'first'" in e.value.render() and "--rollback" in e.value.render()


def test_illegal_step_transition_is_refused(tmp_path):
    j = Journal(tmp_path / "j.db")
    aid, steps, _ = j.open_apply("d1", "p", "sim", _steps())
    with pytest.raises(IllegalTransition):
        j.done(aid, steps[0])  # never journaled an intent


def _hold(path, q):
    j = Journal(path)
    j.acquire("other apply")
    q.put("held")
    q.get()  # hold until told


def test_only_one_holder_at_a_time(tmp_path):
    path = tmp_path / "j.db"
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_hold, args=(path, q))
    p.start()
    try:
        assert q.get(timeout=120) == "held", "the other process did not take the journal within 120 s"
        with pytest.raises(UserError, match="holds"):
            Journal(path).acquire("me")
    finally:
        q.put("go")
        p.join(120)  # a deadline: it exits at once when told
        if p.is_alive():  # never left behind, also when a check above failed
            p.kill()
            p.join()
    assert p.exitcode == 0, f"the holder did not exit by itself within 120 s of being told (exit {p.exitcode})"
    Journal(path).acquire("me")  # the holder is gone: free again
