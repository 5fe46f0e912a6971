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
    with open(d / "ck%2Fa" / PAYLOAD, "r+b") as f:  # and a payload torn after its marker was written
        f.seek(0, os.SEEK_END)
        f.write(b"torn")
    os.makedirs(d / "ck%2Fc")  # a crash before anything was written
    new = Coordinator(state_dir=str(tmp_path))
    assert new.checkpoint_keys() == []
    assert sorted(os.listdir(d)) == []  # the incomplete writes are cleaned up


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
