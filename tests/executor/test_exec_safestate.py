"""The simulated backend's state file cannot run code: typed JSON + raw bytes, versioned, checksummed, 0600."""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import struct

import pytest

from executor import safestate
from tests.executor.helpers import write_target
from tests.conftest import run_cli


class _Evil:
    """Unpickling this makes a directory: proof that the reader ran code named by the file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _plan(tmp_path):
    body = {"nodes": [{"name": "h20-0", "gpu_type": "H20", "gpus": 8, "dram_gb": 512},
                      {"name": "h100-0", "gpu_type": "H100", "gpus": 8, "dram_gb": 1024}],
            "components": [{"name": "job/rollout", "role": "rollout", "gpu_type": "H20", "placement": {"h20-0": 2}, "dram_gb_per_worker": 20},
                           {"name": "job/trainer", "role": "trainer", "gpu_type": "H100", "layout": {"tp": 2}, "placement": {"h100-0": 2},
                            "model": {"hidden": 16, "ffn": 32, "layers": 2, "vocab": 32}}]}
    return write_target(tmp_path / "p.yaml", body)


def _old_format(path, payload: bytes) -> None:
    c = sqlite3.connect(path)
    c.execute("CREATE TABLE world (key TEXT PRIMARY KEY, blob BLOB NOT NULL)")
    c.execute("CREATE TABLE workers (id TEXT PRIMARY KEY, blob BLOB NOT NULL)")
    c.execute("INSERT INTO world VALUES ('nodes', ?)", (payload,))
    c.execute("INSERT INTO world VALUES ('coordinator', ?)", (payload,))
    c.commit()
    c.close()


def test_a_crafted_pickle_state_file_cannot_run_code(tmp_path, capsys):
    from planner.cli import main

    marker = tmp_path / "pwned"
    evil = tmp_path / "old.sqlite"
    _old_format(evil, pickle.dumps(_Evil(str(marker))))
    r = run_cli("status", "--sim-state", str(evil), "--journal", str(tmp_path / "j.db"))  # a real `planner status`
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "pickle" in r.stderr and "--sim-state" in r.stderr and "Traceback" not in r.stderr
    assert not marker.exists(), "reading the state file ran code it named"
    assert main(["apply", str(_plan(tmp_path)), "--sim-state", str(evil), "--journal", str(tmp_path / "j.db")]) == 2
    assert "pickle" in capsys.readouterr().err and not marker.exists()


def test_a_saved_state_names_only_allowed_types(tmp_path):
    def blob(doc) -> bytes:
        body = struct.pack("<Q", len(json.dumps(doc))) + json.dumps(doc).encode()
        import hashlib

        return safestate.MAGIC + hashlib.sha256(body).digest() + body

    for doc, says in (({"$obj": "system", "ref": 0, "state": {}}, "may not hold"),
                      ({"$obj": "posix.system", "ref": 0, "state": ["echo"]}, "may not hold"),
                      ({"$ref": 3}, "before it is defined"), ({"$b": 0}, "not in the file"),
                      ({"$nd": {"dtype": "O", "shape": [1], "blob": 0}}, "Python objects"), ({"$what": 1}, "unknown tag")):
        with pytest.raises(safestate.BadState, match=says):
            safestate.loads(blob(doc))
    good = safestate.dumps({"a": (1, 2.5, float("inf")), "b": {3, 4}, 5: b"xyz"})
    assert safestate.loads(good) == {"a": (1, 2.5, float("inf")), "b": {3, 4}, 5: b"xyz"}
    with pytest.raises(safestate.BadState, match="checksum"):
        safestate.loads(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(safestate.BadState, match="pickle"):
        safestate.loads(pickle.dumps({"a": 1}))
    with pytest.raises(safestate.BadState, match="not among"):
        safestate.dumps(_Evil("x"))


def test_state_round_trips_bit_for_bit_and_is_private_and_damage_is_exit_2(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from executor.backends.sim import SimBackend
    from planner.cli import main

    st = tmp_path / "sim.sqlite"
    a = ["--sim-state", str(st), "--journal", str(tmp_path / "j.db")]
    assert main(["apply", str(_plan(tmp_path)), *a]) == 0
    assert st.stat().st_mode & 0o777 == 0o600
    b1 = SimBackend([], state_path=st)
    b1.tick(5)
    b1.save()
    b1.close()
    b2 = SimBackend([], state_path=st)
    assert set(b1.workers) == set(b2.workers) and b1.workers
    for wid, w in b1.workers.items():
        o1, o2 = w.obj, b2.workers[wid].obj
        if w.args["role"] == "trainer":
            for n, sh in o1.shards.items():
                for k, t in sh.items():
                    assert torch.equal(t, o2.shards[n][k]) and t.dtype == o2.shards[n][k].dtype, (wid, n, k)
            assert o2.params[n].data_ptr() == o2.shards[n]["param"].data_ptr(), "the autograd leaf and the shard stay one tensor"
        else:
            assert [r.as_dict() for r in o1.pending] == [r.as_dict() for r in o2.pending]
            assert {k: v.as_dict() for k, v in o1.running.items()} == {k: v.as_dict() for k, v in o2.running.items()}
            assert list(o1.cache) == list(o2.cache)
    assert b1.coordinator.leases == b2.coordinator.leases and b1.coordinator.requests == b2.coordinator.requests
    b2.close()
    c = sqlite3.connect(st)
    blob = c.execute("SELECT blob FROM world WHERE key='coordinator'").fetchone()[0]
    c.execute("UPDATE world SET blob=? WHERE key='coordinator'", (blob[:-3] + b"zzz",))
    c.commit()
    c.close()
    capsys.readouterr()
    assert main(["status", *a]) == 2
    err = capsys.readouterr().err
    assert "checksum" in err and "Traceback" not in err, err
