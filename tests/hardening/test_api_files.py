"""A submit-scope client cannot make the daemon read server files (issue 25, item 3).

The app in-process around a real :class:`planner.daemon.service.Service` (store, cluster, clock):
a job naming a trace file is refused (422 naming the field) unless the operator gave a data
folder, and then only a relative path to a regular file inside it is read; a value of the file is
never in the answer or the log; a decompression bomb or a 3 MB single line is refused quickly.
API bodies go through the strict JSON reader: duplicate keys and UTF-16 are refused.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import warnings

import pytest

from tests.hardening import corpus

SECRET = "hunter2-s3cr3t"


@pytest.fixture
def make_client(tmp_path):
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

    clients = []

    def make(data_dir=None):
        store = Store(tmp_path / f"s{len(clients)}.sqlite")
        cluster, _ = load_cluster(store, write_cluster(tmp_path))
        svc = Service(Options(state=tmp_path / "s.sqlite", data_dir=data_dir), store, cluster, ManualClock(0.0), DaemonMetrics(),
                      Lease(store, 60.0))
        c = TestClient(asgi_app(svc), raise_server_exceptions=False)  # behind the body limit and strict JSON, as served
        clients.append(c)
        return c.__enter__()

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def _job(name: str, spec: dict) -> dict:
    j = copy.deepcopy(corpus.BASE_SCENARIO["jobs"][0])
    j["name"] = name
    j["rollout"]["response_lengths"] = spec
    return j


def _refused(r, field: str) -> None:
    assert r.status_code == 422, (r.status_code, r.text[:500])
    assert field in r.text, r.text[:500]
    assert SECRET not in r.text and "root:" not in r.text, r.text[:500]


def test_no_data_dir_no_file_is_read(make_client, tmp_path, caplog):
    c = make_client()
    (tmp_path / "secret.csv").write_text(f"password\n{SECRET}\n{SECRET}\n")
    for path in ("/etc/passwd", str(tmp_path / "secret.csv"), "secret.csv"):
        with caplog.at_level(logging.DEBUG):
            r = c.post("/v1/jobs", json=_job("a", {"source": "trace", "path": path, "column": "password"}))
        _refused(r, "rollout.response_lengths.path")
    assert SECRET not in caplog.text and "root:" not in caplog.text


def test_data_dir_confines_and_never_echoes(make_client, tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret.csv").write_text(f"password\n{SECRET}\n{SECRET}\n")
    (data / "ok.csv").write_text("n\n" + "\n".join(str(100 + i) for i in range(50)) + "\n")
    (data / "out.csv").symlink_to("/etc/passwd")
    (tmp_path / "outside.csv").write_text("n\n1\n2\n")
    with gzip.open(data / "bomb.csv.gz", "wb", compresslevel=1) as f:  # one line of 6 MB: over the line cap
        f.write(b"n\n" + b"9" * (6 << 20))
    (data / "deep.jsonl").write_text("[" * 200000 + "]" * 200000 + "\n")
    c = make_client(data)
    with caplog.at_level(logging.DEBUG):
        for path, column in [("/etc/passwd", "n"), ("../outside.csv", "n"), ("out.csv", "n"), ("nope.csv", "n"),
                             ("secret.csv", "password"), ("bomb.csv.gz", "n"), ("deep.jsonl", "n")]:
            r = c.post("/v1/jobs", json=_job("a", {"source": "trace", "path": path, "column": column}))
            _refused(r, "rollout.response_lengths")
        r = c.post("/v1/jobs", json=_job("b", {"source": "trace", "path": "ok.csv", "column": "n"}))
    assert r.status_code == 201, r.text[:500]
    assert SECRET not in caplog.text and "root:" not in caplog.text


@pytest.mark.parametrize("body,field", [
    (b'{"name": "a", "name": "b"}', "duplicate"),
    (json.dumps(corpus.BASE_SCENARIO["jobs"][0]).encode("utf-16"), "UTF-8"),
    (json.dumps(corpus.BASE_SCENARIO["jobs"][0]).encode("utf-16-le"), "UTF-8"),
])
def test_api_bodies_are_strict_json(make_client, body, field):
    c = make_client()
    r = c.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code in (400, 413, 415, 422), (r.status_code, r.text[:300])
    assert field in r.text, r.text[:300]


def _model_job(name: str, model) -> dict:
    j = copy.deepcopy(corpus.BASE_SCENARIO["jobs"][0])
    j["name"] = name
    j["model"] = model
    return j


CONFIG = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
          "intermediate_size": 18944, "vocab_size": 152064, "_name_or_path": SECRET}


def test_a_model_path_reads_no_server_file_without_a_data_dir(make_client, tmp_path, caplog):
    """The audit of session 45: ``model`` was read as a local config.json from anywhere, its values echoed."""
    c = make_client()
    bad = dict(CONFIG, num_attention_heads=SECRET)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(bad))
    for path in ("/etc/passwd", str(tmp_path / "m" / "config.json"), str(tmp_path / "m"), "m/config.json", "../x.json"):
        with caplog.at_level(logging.DEBUG):
            r = c.post("/v1/jobs", json=_model_job("a", path))
        _refused(r, "model")
    assert SECRET not in caplog.text
    assert c.post("/v1/jobs", json=_model_job("p", "qwen2.5-7b")).status_code == 201  # a preset is no file


def test_an_unknown_model_name_is_said_to_be_no_preset_with_the_presets(make_client, tmp_path):
    """POST /v1/jobs with model: llama-9000 was refused with "this daemon reads no file named in a request": true,
    but the name was meant as a preset. The message now says it is no preset, the fix lists the presets."""
    c = make_client()
    r = c.post("/v1/jobs", json=_model_job("a", "llama-9000"))
    _refused(r, "model")
    (p,) = r.json()["problems"]
    assert p["field"] == "model" and p["message"].startswith("'llama-9000' is not a known model preset"), p
    assert "reads no" not in p["message"] and "qwen2.5-7b" in p["fix"] and "llama3.1-8b" in p["fix"] and "hidden_size" in p["fix"], p
    p = c.post("/v1/jobs", json=_model_job("a", "qwen2.5-7")).json()["problems"][0]
    assert "Did you mean 'qwen2.5-7b'?" in p["message"], p
    p = c.post("/v1/jobs", json=_model_job("a", "acme/Foo-7B")).json()["problems"][0]  # a hub id of no preset (or a path)
    assert "'acme/Foo-7B' is not a known model preset" in p["message"] and "reads no model file" in p["message"], p
    assert "qwen2.5-7b" in p["fix"] and "--data-dir" in p["fix"], p
    (tmp_path / "data").mkdir()
    c = make_client(data_dir=tmp_path / "data")
    p = c.post("/v1/jobs", json=_model_job("a", "llama-9000")).json()["problems"][0]
    assert "'llama-9000' is not a known model preset" in p["message"] and "nor a file or folder inside" in p["message"], p
    assert "qwen2.5-7b" in p["fix"], p


def test_a_model_file_inside_the_data_dir_is_read_once_and_kept_as_its_dimensions(make_client, tmp_path):
    data = tmp_path / "data"
    (data / "m7b").mkdir(parents=True)
    (data / "m7b" / "config.json").write_text(json.dumps(CONFIG))
    (data / "bad.json").write_text(json.dumps(dict(CONFIG, num_attention_heads=SECRET)))
    (tmp_path / "outside.json").write_text(json.dumps(CONFIG))
    (data / "link.json").symlink_to(tmp_path / "outside.json")
    c = make_client(data_dir=data)
    for path in ("bad.json", "link.json", "../outside.json", str(tmp_path / "outside.json"), "nope/config.json"):
        _refused(c.post("/v1/jobs", json=_model_job("a", path)), "model")
    r = c.post("/v1/jobs", json=_model_job("ok", "m7b"))
    assert r.status_code == 201, r.text[:500]
    (data / "m7b" / "config.json").unlink()  # read at submission: the stored job no longer names the file
    got = c.get("/v1/jobs/ok")
    assert got.status_code == 200, got.text[:300]
    model = got.json()["spec"]["model"] if "spec" in got.json() else got.json()["job"]["model"]
    assert model["hidden_size"] == 3584 and model["num_kv_heads"] == 4 and model["name"] == "m7b"
    assert SECRET not in got.text


def test_a_pattern_error_names_the_pattern_it_breaks(make_client):
    """``GET /v1/decisions?kind=../x`` advised names' letters, digits, '.', '_' and '-', which the kind refuses:
    the kind is now one of the decision kinds, and the answer lists them."""
    r = make_client().get("/v1/decisions", params={"kind": "../x"})
    assert r.status_code == 422 and "kind" in r.text and "'realloc' or 'restore'" in r.text, r.text[:400]
