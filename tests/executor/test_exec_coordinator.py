"""The coordinator's ledger and leases against a model (hypothesis state machine)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from executor.workers.coordinator import Coordinator

WORKERS = ["w0", "w1", "w2"]
REQS = [f"r{i}" for i in range(6)]


class LedgerModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.c = Coordinator()
        self.lease = {w: self.c.grant(w) for w in WORKERS}  # what each worker believes its epoch is
        self.valid = {w: True for w in WORKERS}
        self.c.submit([{"id": r, "component": "x", "prompt": [], "seed": 0, "target_len": 1} for r in REQS],
                      [WORKERS[i % 3] for i in range(len(REQS))])
        self.owner = {r: WORKERS[i % 3] for i, r in enumerate(REQS)}
        self.done: dict[str, str] = {}
        self.accepted = 0

    @rule(w=st.sampled_from(WORKERS), r=st.sampled_from(REQS))
    def complete(self, w, r):
        ok = self.c.complete(w, self.lease[w], r, [1])
        # the same completion again (same worker, same lease, same output: a call Ray retried after a
        # coordinator restart) is acknowledged, but completes nothing a second time
        again = self.done.get(r) == (w, self.lease[w])
        expect = self.valid[w] and self.owner[r] == w and (r not in self.done or again)
        assert ok == expect
        if ok and not again:
            self.done[r] = (w, self.lease[w])
            self.accepted += 1

    @rule(w=st.sampled_from(WORKERS))
    def revoke(self, w):
        self.c.revoke(w)
        self.valid[w] = False

    @rule(w=st.sampled_from(WORKERS))
    def regrant(self, w):  # a new lease: the old epoch must stay dead
        stale = self.lease[w]
        self.lease[w] = self.c.grant(w)
        self.valid[w] = True
        assert not self.c.complete(w, stale, REQS[0], [1]) or False

    @rule(r=st.sampled_from(REQS), to=st.sampled_from(WORKERS))
    def transfer(self, r, to):
        self.c.transfer({r: to}, {})
        if r not in self.done:
            self.owner[r] = to

    @invariant()
    def each_request_done_at_most_once(self):
        recs = {x["id"]: x for x in self.c.request_records()}
        assert {r for r, x in recs.items() if x["done"]} == set(self.done)
        assert all(recs[r]["finished_by"] == w for r, (w, _) in self.done.items())
        assert self.accepted == len(self.done)

    @invariant()
    def epochs_only_grow(self):
        assert len(set(self.lease.values())) == len(WORKERS)


TestLedger = LedgerModel.TestCase
TestLedger.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_trainer_commit_needs_lease_and_active_set():
    c = Coordinator()
    e0, e1 = c.grant("old"), c.grant("new")
    c.switch("t", ["old"], [], 1)
    assert c.commit_step("old", e0, "t", 0)
    assert not c.commit_step("new", e1, "t", 0)  # leased but not active yet
    c.switch("t", ["new"], ["old"], 2)
    assert c.commit_step("new", e1, "t", 1)
    assert not c.commit_step("old", e0, "t", 1)  # retired: its lease is gone
    assert [x["worker"] for x in c.commits["t"]] == ["old", "new"]
    assert len(c.rejected_effects()) == 2


def test_worker_lifecycle_follows_the_transition_table():
    c = Coordinator()
    c.register({"id": "w", "status": "starting"})
    for s in ("running", "draining", "running", "stopping", "running", "dead"):
        c.set_status("w", s)
    assert c.illegal_transitions() == []
    c.set_status("w", "running")  # a dead worker never comes back
    c.register({"id": "v", "status": "starting"})
    c.set_status("v", "failed")
    c.set_status("v", "running")  # neither does a failed start
    assert c.illegal_transitions() == ["w: dead -> running", "v: failed -> running"]


def test_a_fenced_service_refuses_writes_and_keeps_its_state():
    from executor.workers.service import ServiceWorker

    c = Coordinator()
    e = c.grant("s")
    w = ServiceWorker("s", e, lambda m, *a: getattr(c, m)(*a))
    assert w.serve("k", 1)
    c.revoke("s")
    assert not w.serve("k", 2)
    assert w.state() == {"kv": {"k": 1}, "served": 1}
    assert c.rejected_effects()[-1]["what"] == "write k"


def test_checkpoints_survive_pickling_bit_for_bit():
    """The sim backend pickles the coordinator on every save: a parked trainer's checkpoint comes
    back with the same tensors (dtype, shape, bytes) and the same plain fields."""
    import pickle

    import torch

    c = Coordinator()
    e = c.grant("w0")
    g = torch.Generator().manual_seed(3)
    blob = {"rank": 0, "step": 7, "shards": {"w": {"param": torch.randn(3, 5, generator=g), "grad": torch.zeros(0, 2)},
                                            "h": {"param": torch.arange(4, dtype=torch.float64)}}, "requests": [("r1", [1, 2])]}
    assert c.put_checkpoint("w0", e, "ck/rank0", blob)
    back = pickle.loads(pickle.dumps(c)).get_checkpoint("ck/rank0")
    assert back["rank"] == 0 and back["step"] == 7 and back["requests"] == [("r1", [1, 2])]
    for n, sh in blob["shards"].items():
        for k, t in sh.items():
            u = back["shards"][n][k]
            assert u.dtype == t.dtype and u.shape == t.shape and torch.equal(u, t), (n, k)
    back["shards"]["w"]["param"].add_(1)  # writable, and not the original's memory
    assert not torch.equal(back["shards"]["w"]["param"], blob["shards"]["w"]["param"])
    # a key saved again (a later reboot) is encoded again, not served from the previous pickle
    blob2 = {"rank": 0, "step": 8, "shards": {"w": {"param": torch.ones(2)}}}
    assert c.put_checkpoint("w0", e, "ck/rank0", blob2)
    again = pickle.loads(pickle.dumps(c))
    assert again.get_checkpoint("ck/rank0")["step"] == 8 and torch.equal(again.get_checkpoint("ck/rank0")["shards"]["w"]["param"], torch.ones(2))
    c.drop_checkpoints("ck/")
    assert pickle.loads(pickle.dumps(c)).checkpoint_keys() == []
