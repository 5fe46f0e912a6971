"""The daemon's answers never name a file of its data folder by its server path (an outside check:
a 422 on a trace that does not read, and the spec echoed back, held ``/srv/.../data/lengths.csv``).

A real daemon on loopback with ``--data-dir``: the refusal names the file as the client did, the
stored spec echoes the client's relative path (so it can be sent again as it is), and no answer
holds the folder's path. A failed job's reason and the decision log are checked the same way in
``test_daemon_cycle_faults.py`` (a restart; ``RL_PLANNER_SLOW=1``).
"""

from __future__ import annotations

import pytest
from daemonproc import DaemonProc, job, write_cluster

from planner.daemon.datafiles import public, public_text


def _traced(name: str, path: str, column: str = "n") -> dict:
    return job(name, rollout={"response_lengths": {"source": "trace", "path": path, "column": column}})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("data-paths")
    data = tmp / "data"
    (data / "traces").mkdir(parents=True)
    (data / "traces" / "ok.csv").write_text("n\n" + "\n".join(str(100 + i) for i in range(50)) + "\n")
    (data / "header.csv").write_text("x\n1\n2\n")
    d = DaemonProc(tmp, "--scenario", str(write_cluster(tmp)), "--data-dir", str(data), "--placer", "solo", "--period-s", "0.2")
    try:
        yield d, str(data.resolve())
    finally:
        rc = d.stop()
    assert rc == 0, d.output()


def test_a_trace_that_does_not_read_is_refused_naming_it_as_the_client_did(served):
    d, root = served
    with d.client() as c:
        r = c.post("/v1/jobs", json=_traced("bad-column", "header.csv"))
        assert r.status_code == 422, r.text
        assert root not in r.text and "/header.csv" not in r.text, r.text
        [p] = r.json()["problems"]
        assert p["field"] == "rollout.response_lengths" and p["message"].startswith("header.csv: no column 'n'"), p
        r = c.post("/v1/jobs", json=_traced("bad-column-2", "traces/ok.csv", column="nope"))
        assert r.status_code == 422 and root not in r.text and "traces/ok.csv: no column 'nope'" in r.text, r.text


def test_the_stored_spec_echoes_the_clients_path_and_can_be_sent_again(served):
    d, root = served
    with d.client() as c:
        r = c.post("/v1/jobs", json=_traced("echo", "traces/ok.csv"))
        assert r.status_code == 201, r.text
        answers = [r, c.get("/v1/jobs/echo"), c.get("/v1/jobs"), c.get("/v1/decisions"), c.get("/v1/health")]
        for a in answers:
            assert a.status_code == 200 or a is r, (a.request.url, a.status_code, a.text[:300])
            assert root not in a.text, (a.request.url, a.text[:2000])
        spec = answers[1].json()["spec"]
        assert spec["rollout"]["response_lengths"]["path"] == "traces/ok.csv"
        assert int(answers[0].headers["content-length"]) == len(answers[0].content)  # the rewritten body's own length
        again = c.post("/v1/jobs", json=dict(spec, name="echo-again"))  # what the daemon said, sent back as it is
        assert again.status_code == 201, again.text
        assert again.json()["spec"]["rollout"]["response_lengths"]["path"] == "traces/ok.csv"


def test_public_text_writes_paths_inside_the_folder_relative_and_leaves_others():
    root = "/srv/planner/data"
    assert public_text(f"trace file {root}/traces/a.csv not found", root) == "trace file traces/a.csv not found"
    assert public_text(f"{root} is gone", root) == "<data folder> is gone"
    assert public_text(f"{root}2/x.csv and {root}.old", root) == f"{root}2/x.csv and {root}.old"  # other folders: not this one
    assert public({"a": [f"{root}/x", 1, None], f"{root}/k": True}, root) == {"a": ["x", 1, None], "k": True}
