"""A state file edited while the daemon runs: every kv read is checked, not only the one at open.

``Store.check_contents`` refuses a damaged file when a daemon opens it; a value edited in later (by
hand, or written by another daemon before a standby takes over) reaches ``Store.get_kv``, which now
checks it the same way: a StateFileError naming the key, the expected type and the fix, not a
TypeError in the loop or a 500 from the API (whose answer is a 503 without the server's paths).
"""

from __future__ import annotations

import sqlite3
import warnings

import pytest

from tests.hardening import corpus


def _edit(path, key: str, value: str) -> None:
    db = sqlite3.connect(path)
    try:
        db.execute("INSERT INTO kv(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))
        db.commit()
    finally:
        db.close()


def test_a_value_edited_after_open_is_refused_when_read(tmp_path):
    from planner.daemon.store import StateFileError, Store

    path = tmp_path / "s.sqlite"
    store = Store(path)
    with store.tx() as c:
        store.set_kv(c, "cycle", 3)
        store.set_kv(c, "cost_usd", 1.5)
    store.check_contents()
    assert store.get_kv("cycle") == 3 and store.get_kv("missing", 7) == 7
    for key, value, expected in (("cycle", '"abc"', "a whole number >= 0"), ("cost_usd", "NaN", "not valid JSON"),
                                 ("cost_usd", "true", "a number"), ("realloc_at", '{"j": "soon"}', "job name -> clock seconds")):
        _edit(path, key, value)
        with pytest.raises(StateFileError) as exc:
            store.get_kv(key)
        text = f"{exc.value} {exc.value.fix}"
        assert str(path) in text and f"kv value '{key}'" in text and expected in text, text
        assert f"DELETE FROM kv WHERE key='{key}'" in text, text
        _edit(path, key, "1")  # (the next case starts from a valid file)
    _edit(path, "someone-elses-key", '{"any": ["thing"]}')  # keys the daemon does not read are left alone
    assert store.get_kv("someone-elses-key") == {"any": ["thing"]}


@pytest.fixture
def client(tmp_path):
    import sys

    sys.path.insert(0, str(corpus.ROOT / "tests" / "daemon"))
    from daemonproc import write_cluster

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from planner.daemon.api import asgi_app
    from planner.daemon.clock import ManualClock
    from planner.daemon.lease import Lease
    from planner.daemon.metrics import DaemonMetrics
    from planner.daemon.service import Options, Service, load_cluster
    from planner.daemon.store import Store

    path = tmp_path / "s.sqlite"
    store = Store(path)
    cluster, _ = load_cluster(store, write_cluster(tmp_path))
    svc = Service(Options(state=path), store, cluster, ManualClock(0.0), DaemonMetrics(), Lease(store, 60.0))
    with TestClient(asgi_app(svc), raise_server_exceptions=False) as c:
        yield c, path


def test_the_api_answers_503_naming_the_value_without_the_servers_paths(client):
    c, path = client
    _edit(path, "cluster", '{"at": 0.0, "backend": "sim", "nodes": [], "components": []}')
    r = c.get("/v1/cluster")
    assert r.status_code == 200, r.text[:500]
    _edit(path, "cluster", '{"at": "yesterday", "backend": "sim", "nodes": [], "components": []}')
    r = c.get("/v1/cluster")
    assert r.status_code == 503, (r.status_code, r.text[:500])
    assert "kv value 'cluster'" in r.text and "operator" in r.text, r.text[:500]
    assert str(path.parent) not in r.text, r.text[:500]
