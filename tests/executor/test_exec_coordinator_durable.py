"""The coordinator's durable state (no Ray): a new coordinator on the same directory, as Ray's
restart of a dead coordinator actor makes, carries on with everything the old one acknowledged."""

from __future__ import annotations

import os

import pytest
import torch

from executor.workers.coordinator import Coordinator
from executor.workers.coordinator_store import MARKER, PAYLOAD


def _busy(d) -> Coordinator:
    c = Coordinator(state_dir=str(d))
    e0, e1 = c.grant("w0"), c.grant("w1")
    for w, _e in (("w0", e0), ("w1", e1)):
        c.register({"id": w, "component": "j/r", "node": "a", "gpus": 1, "dram_gb": 1, "index": int(w[1]), "role": "rollout",
                    "status": "starting"})
        c.set_status(w, "running")
    c.switch("j/r", ["w0", "w1"], [], 1)
    c.submit([{"id": f"r{i}", "component": "j/r"} for i in range(4)], ["w0", "w1", "w0", "w1"])
    assert c.progress("w0", e0, {"r0": [1, 2], "r2": [7]})
    assert c.complete("w1", e1, "r1", [3, 4, 5])
    c.transfer({"r3": "w0"}, {"r3": [9]})
    assert not c.complete("w1", e1, "r3", [9, 9])  # no longer the owner: refused, and the refusal is kept
    state = {"shards": {"embed": {"param": torch.randn(5, 3), "exp_avg": torch.arange(6.0)}}, "step": 4}
    assert c.put_checkpoint("w0", e0, "ck/j/t/g1/rank0", state)
    c.park("j/t", {"checkpoint": "ck/j/t/g1"})
    c.mark_node_dead("b", "no answer")
    c.set_placement_group("rlp-pg-x", {"bundles": [{"node": "a", "resources": {"GPU": 2.0}}], "workers": {"w0": {"bundle": 0}}})
    return c


def test_a_new_coordinator_on_the_same_directory_has_everything_the_old_one_acknowledged(tmp_path):
    old = _busy(tmp_path)
    new = Coordinator(state_dir=str(tmp_path))  # the old process "died": nothing is read from it
    assert new.durable()["restarts"] == 1
    assert new.request_records() == old.request_records()
    assert new.records() == old.records()
    assert new.ledger_summary() == old.ledger_summary()
    assert new.rejected_effects() == old.rejected_effects() and len(new.rejected_effects()) == 1
    assert new.active_set("j/r") == ["w0", "w1"] and new.generations() == {"j/r": 1}
    assert new.parked_components() == {"j/t": {"checkpoint": "ck/j/t/g1"}}
    assert new.dead_node_list() == {"b": "no answer"}
    assert new.placement_groups() == old.placement_groups()
    got, want = new.get_checkpoint("ck/j/t/g1/rank0"), old.get_checkpoint("ck/j/t/g1/rank0")
    assert got["step"] == 4
    for k in ("param", "exp_avg"):
        assert torch.equal(got["shards"]["embed"][k], want["shards"]["embed"][k])  # bit for bit
    # Fencing holds across the restart: epochs go on growing, the old leases still act, a stale one never.
    e0 = old.lease("w0")
    assert new.lease("w0") == e0
    assert new.grant("w2") > max(old.leases.values())
    assert new.progress("w0", e0, {"r2": [7, 8]})
    assert not new.progress("w0", e0 - 100, {"r2": [7, 8, 9]})
    # A completion retried after the restart is acknowledged once, not counted twice.
    assert new.complete("w1", old.lease("w1"), "r1", [3, 4, 5])
    assert new.ledger_summary()["done"] == 1


def test_a_checkpoint_is_there_only_once_its_commit_marker_is(tmp_path):
    c = Coordinator(state_dir=str(tmp_path))
    e = c.grant("w")
    assert c.put_checkpoint("w", e, "ck/a", {"x": torch.ones(3)})
    assert c.put_checkpoint("w", e, "ck/b", {"x": torch.zeros(3)})
    d = tmp_path / "checkpoints"
    (d / "ck%2Fb" / MARKER).unlink()  # a crash after the payload, before the marker
    os.makedirs(d / "ck%2Fc")  # a crash before anything was written
    new = Coordinator(state_dir=str(tmp_path))
    assert new.checkpoint_keys() == ["ck/a"]
    assert sorted(os.listdir(d)) == ["ck%2Fa"]  # the incomplete writes are cleaned up


def test_a_committed_checkpoint_damaged_since_is_refused_and_kept(tmp_path):
    """A payload changed after its marker was written (the marker comes last, so no crash does that: the disk or a
    hand edit) may be a parked component's only copy: the load is refused naming it, and nothing is removed; moved
    out of the folder, the rest loads (before, it was deleted in silence)."""
    from executor.workers.coordinator_store import DamagedState

    c = Coordinator(state_dir=str(tmp_path))
    e = c.grant("w")
    assert c.put_checkpoint("w", e, "ck/a", {"x": torch.ones(3)})
    assert c.put_checkpoint("w", e, "ck/b", {"x": torch.zeros(3)})
    d = tmp_path / "checkpoints"
    with open(d / "ck%2Fa" / PAYLOAD, "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.write(b"torn")
    before = (d / "ck%2Fa" / PAYLOAD).read_bytes()
    with pytest.raises(DamagedState) as err:
        Coordinator(state_dir=str(tmp_path))
    assert "ck%2Fa" in str(err.value) and "'ck/a'" in str(err.value) and "does not match" in str(err.value)
    assert "restore that folder" in str(err.value)
    assert (d / "ck%2Fa" / PAYLOAD).read_bytes() == before and (d / "ck%2Fa" / MARKER).exists()
    os.rename(d / "ck%2Fa", tmp_path / "aside")
    assert Coordinator(state_dir=str(tmp_path)).checkpoint_keys() == ["ck/b"]


def test_dropped_checkpoints_stay_dropped(tmp_path):
    c = Coordinator(state_dir=str(tmp_path))
    e = c.grant("w")
    for k in ("ck/a/rank0", "ck/a/rank1", "ck/b/rank0"):
        assert c.put_checkpoint("w", e, k, {"k": k})
    c.drop_checkpoints("ck/a")
    assert Coordinator(state_dir=str(tmp_path)).checkpoint_keys() == ["ck/b/rank0"]


@pytest.mark.parametrize("bad", ["EXTRA"])
def test_store_refuses_an_unknown_sync_mode(tmp_path, bad):
    from executor.workers.coordinator_store import CoordinatorStore

    with pytest.raises(ValueError, match="FULL or NORMAL"):
        CoordinatorStore(tmp_path, synchronous=bad)


def _sql(d, statement: str) -> None:
    import sqlite3

    db = sqlite3.connect(str(d / "coordinator.sqlite"))
    db.execute(statement)
    db.commit()
    db.close()


@pytest.mark.parametrize("statement, names", [
    ("UPDATE kv SET json = '{broken' WHERE name = 'leases'", "kv record 'leases' is damaged"),
    ("UPDATE kv SET json = '[1, 2]' WHERE name = 'registry'", "kv record 'registry' holds a list, not a dict"),
    ("UPDATE kv SET json = '\"seven\"' WHERE name = 'next_epoch'", "kv record 'next_epoch' holds a str, not a int"),
    ("UPDATE requests SET json = 'null' WHERE id = 'r0'", "requests record 'r0' holds a NoneType, not a dict"),
    ("INSERT INTO events(kind, json) VALUES ('commit', '{\"component\": \"j/t\"}')", "an event or restart record is damaged"),
])
def test_damaged_saved_state_is_refused_whole_naming_the_record(tmp_path, statement, names):
    """A damaged record was a JSONDecodeError (or a KeyError later, mid-apply) out of the coordinator
    actor's constructor: on Ray a dead actor, retried calls and a traceback. It is refused at load,
    naming the file and the record, and the store is left closed (the file not held)."""
    from executor.workers.coordinator_store import DamagedState

    _busy(tmp_path)
    _sql(tmp_path, statement)
    with pytest.raises(DamagedState) as err:
        Coordinator(state_dir=str(tmp_path))
    assert names in err.value.what and str(tmp_path / "coordinator.sqlite") in err.value.what
    assert "restore the folder" in err.value.fix
    assert "Fix: restore" in str(err.value)


def test_a_state_file_that_is_not_sqlite_is_refused(tmp_path):
    from executor.workers.coordinator_store import DamagedState

    (tmp_path / "coordinator.sqlite").write_bytes(b"not a database at all, " * 100)
    with pytest.raises(DamagedState, match="not a usable SQLite file"):
        Coordinator(state_dir=str(tmp_path))


def test_the_coordinator_actor_answers_damage_and_recovers_once_the_folder_is_restored(tmp_path):
    """On Ray: the actor is not failed at creation; each call reads the state again until it loads."""
    import pickle

    pytest.importorskip("ray")
    from executor.backends.ray.actors import CoordinatorActor
    from executor.workers.coordinator_store import DamagedState

    _busy(tmp_path)
    _sql(tmp_path, "UPDATE kv SET json = '{broken' WHERE name = 'leases'")
    actor = CoordinatorActor.__new__(CoordinatorActor)  # (its constructor names the Ray cluster's folder)
    actor._dir, actor.c = str(tmp_path), None
    assert isinstance(actor._load(), DamagedState)
    with pytest.raises(DamagedState) as err:
        actor.invoke("ping")
    again = pickle.loads(pickle.dumps(err.value))  # what Ray does with it: both fields survive
    assert (again.what, again.fix) == (err.value.what, err.value.fix)
    _sql(tmp_path, "UPDATE kv SET json = '{\"w0\": 1, \"w1\": 2}' WHERE name = 'leases'")
    actor.invoke("ping")
    assert actor.invoke("durable")["restarts"] == 1


def test_ray_backend_refuses_a_damaged_coordinator_state_as_bad_input(monkeypatch):
    """The driver's side: the coordinator's answer to its first call becomes a one-line UserError
    (exit status 2), not 'a bug in rl-planner' with Ray's traceback."""
    pytest.importorskip("ray")
    from estimators.errors import UserError
    from executor.backends.base import Deadlines
    from executor.backends.ray import backend as rb
    from executor.workers.coordinator_store import DamagedState

    class Handle:
        class invoke:
            @staticmethod
            def remote(*a):
                return "ref"

    class Cls:
        @staticmethod
        def options(**k):
            return Cls

        @staticmethod
        def remote(*a):
            return Handle()

    def get(ref, timeout=None):
        raise DamagedState("the coordinator's state /x/coordinator.sqlite: kv record 'leases' is damaged (bad)")

    monkeypatch.setattr(rb, "CoordinatorActorClass", Cls)
    monkeypatch.setattr(rb.ray, "get", get)
    b = rb.RayBackend.__new__(rb.RayBackend)
    b.deadlines, b.namespace, b.state_dir = Deadlines(), "rl-planner", "/x"
    with pytest.raises(UserError) as err:
        b._start_coordinator()
    text = str(err.value)
    assert "kv record 'leases' is damaged" in text and "Fix: restore the folder" in text


def test_a_state_folder_that_cannot_be_made_is_refused_with_the_setting_to_change(tmp_path):
    """A file where the folder should be (or one the coordinator may not write) was an OSError out of
    the actor's constructor (on Ray: a dead actor, 'a bug in rl-planner')."""
    from executor.workers.coordinator_store import DamagedState

    (tmp_path / "taken").write_text("a file, not a folder")
    with pytest.raises(DamagedState) as err:
        Coordinator(state_dir=str(tmp_path / "taken" / "cluster-x"))
    assert "cannot be used" in err.value.what and "RL_PLANNER_RAY_STATE_DIR" in err.value.fix
