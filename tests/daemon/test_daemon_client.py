"""planner/client.py against a loopback stand-in of the daemon's API, and
planner/telemetry_sglang.py against a loopback stand-in of SGLang's /metrics.

The stand-ins are real HTTP servers on 127.0.0.1 (ephemeral ports) that record what they were
sent; they answer as the daemon and SGLang do (error bodies with problems; Prometheus text)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from formulation.realloc.telemetry import TelemetrySnapshot
from planner.client import Client, DaemonError
from planner.errors import UserError
from planner.telemetry_sglang import Engine, collect, parse_metrics, snapshot, worker_sample


class _Server:
    def __init__(self, handle) -> None:
        seen = self.seen = []

        class H(BaseHTTPRequestHandler):
            def _do(self):
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                u = urlparse(self.path)
                seen.append((self.command, u.path, parse_qs(u.query), body))
                code, ctype, payload = handle(self.command, u.path, parse_qs(u.query), body)
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _do

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def server():
    made = []

    def make(handle):
        made.append(_Server(handle))
        return made[-1]
    yield make
    for s in made:
        s.close()


DECISIONS = [{"id": i, "kind": "realloc" if i % 2 else "admit", "job": "j"} for i in range(1, 8)]


def _daemon(method, path, q, body):
    J = "application/json"
    if path == "/v1/jobs" and method == "POST":
        if not body.get("name"):
            return 422, J, {"error": "invalid request", "problems": [{"where": "body.name", "message": "field required", "fix": "name the job"}]}
        return 201, J, {"name": body["name"], "state": "pending"}
    if path == "/v1/decisions":
        since, limit = int(q.get("since_id", ["0"])[0]), int(q.get("limit", ["100"])[0])
        rows = [d for d in DECISIONS if d["id"] > since and ("kind" not in q or d["kind"] == q["kind"][0])][:limit]
        return 200, J, {"decisions": rows, "next_since_id": rows[-1]["id"] if rows else since}
    if path == "/v1/telemetry":
        return 202, J, {"id": 1, "job": body["job"]}
    if path == "/v1/plan":
        return 404, J, {"error": "no plan yet: no job has been admitted", "problems": [{"where": "", "message": "no plan", "fix": "submit a job"}]}
    if path == "/v1/cluster":
        return 200, J, {"job": q.get("job", [None])[0], "components": []}
    return 404, J, {"error": "not found", "problems": []}


def test_client_speaks_the_daemon_api(server):
    s = server(_daemon)
    with Client(s.url) as c:
        assert c.submit_job({"name": "math"}) == {"name": "math", "state": "pending"}
        with pytest.raises(DaemonError, match=r"422.*body.name: field required \(fix: name the job\)") as e:
            c.submit_job({})
        assert e.value.status == 422 and e.value.problems[0]["where"] == "body.name"
        with pytest.raises(DaemonError, match="404"):
            c.plan()
        assert [d["id"] for d in c.iter_decisions(limit=2)] == [1, 2, 3, 4, 5, 6, 7]  # paged by next_since_id
        assert [d["id"] for d in c.iter_decisions(since_id=2, kind="realloc")] == [3, 5, 7]
        assert c.wait_for_decision(lambda d: d["id"] == 5, timeout_s=120, poll_s=0.01)["kind"] == "realloc"
        with pytest.raises(TimeoutError, match="kind admit"):
            c.wait_for_decision(lambda d: False, kind="admit", timeout_s=0.05, poll_s=0.01)
        assert c.cluster(job="math")["job"] == "math"
        assert c.post_telemetry({"job": "math"})["job"] == "math"
    assert ("GET", "/v1/cluster", {"job": ["math"]}, None) in s.seen


METRICS_TEXT = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 3.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="qwen"} 50000.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.25
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="qwen"} 812.5
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="qwen"} 0.5
"""


def test_sglang_metrics_become_a_valid_snapshot(server):
    texts = {"/metrics": METRICS_TEXT}
    s = server(lambda m, path, q, b: (200, "text/plain; version=0.0.4", texts[path]) if path in texts else (404, "text/plain", "no"))
    e = Engine(s.url, "r0", "rollout", "h20-0", "H20")
    w = collect([e])[0]
    assert (w["requests_in_flight"], w["queue_depth"], w["kv_used_tokens"], w["kv_capacity_tokens"], w["tokens_per_s"]) == \
        (12, 3, 50000.0, 200000.0, 812.5)  # capacity = used / usage
    snap = snapshot("math", 12.0, 3, [{"name": "rollout", "kind": "rollout", "progress": 0.4}], [e])
    TelemetrySnapshot.model_validate(snap)
    assert snap["workers"][0]["worker_id"] == "r0"
    declared = worker_sample(Engine(s.url, "r1", "rollout", "h20-0", "H20", kv_capacity_tokens=400000.0), METRICS_TEXT)
    assert declared["kv_capacity_tokens"] == 400000.0 and declared["kv_used_tokens"] == 50000.0
    two = METRICS_TEXT + 'sglang:num_running_reqs{model_name="other"} 1.0\n'
    assert parse_metrics(two.replace("# HELP sglang:num_queue_reqs", "# HELP sglang:num_queue_reqs"))["requests_in_flight"] == 13.0
    bare = "\n".join(x for x in METRICS_TEXT.splitlines() if "used_tokens" not in x and "token_usage" not in x) + "\n"
    with pytest.raises(UserError, match="enable-metrics"):
        worker_sample(e, bare)
    with pytest.raises(UserError, match="r9"):
        collect([Engine(s.url + "/nope", "r9", "rollout", "h20-0", "H20")])
