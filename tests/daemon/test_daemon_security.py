"""The daemon is authenticated by default: tokens with scopes, Host allow-list, audit log, limits, TLS.

Real daemon processes on loopback. See docs/security.md for the threat model these tests pin.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from daemonproc import DaemonProc, job, query, wait_for, write_cluster

from tests.conftest import run_cli

TOKENS = {"admin": "admin-token-0123456789abcdef", "reader": "read-token-0123456789abcdef",
          "submitter": "submit-token-0123456789abcdef", "canceller": "cancel-token-0123456789abcdef",
          "quota": "quota-token-0123456789abcdef"}


def token_file(tmp: Path) -> Path:
    p = tmp / "tokens"
    p.write_text("# test tokens\n" + f"{TOKENS['admin']}\n" + f"reader read {TOKENS['reader']}\n"
                 f"submitter submit,read {TOKENS['submitter']}\n" + f"canceller cancel {TOKENS['canceller']}\n"
                 f"quota submit,read {TOKENS['quota']}\n")
    p.chmod(0o600)
    return p


def bearer(name: str, scheme: str = "Bearer") -> dict:
    return {"Authorization": f"{scheme} {TOKENS[name]}"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sec")
    d = DaemonProc(tmp, "--scenario", str(write_cluster(tmp)), "--period-s", "0.3", "--token-file", str(token_file(tmp)),
                   "--max-jobs-per-token", "2", "--rate-limit", "0")
    yield d
    assert d.stop() == 0, d.output()


def routes(url: str) -> list[tuple[str, str]]:
    doc = httpx.get(f"{url}/openapi.json", headers=bearer("reader"), timeout=30).json()
    return [(m.upper(), path.replace("{name}", "x")) for path, ops in doc["paths"].items() for m in ops]


def test_no_token_is_401_on_every_route_but_the_probes(daemon):
    seen = routes(daemon.url)
    assert len(seen) >= 10 and ("GET", "/metrics") in seen
    with httpx.Client(base_url=daemon.url, timeout=30) as c:
        for method, path in seen + [("GET", "/openapi.json"), ("GET", "/docs"), ("GET", "/nope"), ("PUT", "/v1/jobs")]:
            r = c.request(method, path, json={} if method in ("POST", "PUT") else None)
            if path in ("/healthz", "/readyz"):
                assert r.status_code in (200, 503), (method, path, r.status_code)
                continue
            assert r.status_code == 401, (method, path, r.status_code, r.text)
            assert r.headers["www-authenticate"] == "Bearer" and r.json()["problems"][0]["field"] == "Authorization"
            bad = c.request(method, path, headers={"Authorization": "Bearer " + TOKENS["admin"][:-1] + "X"})
            assert bad.status_code == 401, (method, path)
            assert c.request(method, path, headers={"Authorization": "Basic " + TOKENS["admin"]}).status_code == 401


def test_the_bearer_scheme_is_case_insensitive(daemon):
    for scheme in ("Bearer", "bearer", "BEARER"):
        assert httpx.get(f"{daemon.url}/v1/jobs", headers=bearer("reader", scheme), timeout=30).status_code == 200


def test_a_host_that_is_not_the_daemons_is_421_and_none_is_400(daemon):
    port = int(daemon.url.rsplit(":", 1)[1])
    with httpx.Client(base_url=daemon.url, timeout=30, headers=bearer("admin")) as c:
        for host in ("evil.example.com", f"evil.example.com:{port}", "127.0.0.1.nip.io", "localhost.evil.com"):
            r = c.get("/v1/jobs", headers={"Host": host})
            assert r.status_code == 421 and r.json()["problems"][0]["field"] == "Host", (host, r.text)
            assert c.post("/v1/jobs", json=job("rebound"), headers={"Host": host}).status_code == 421
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
            assert c.get("/v1/jobs", headers={"Host": host}).status_code == 200, host
        assert c.get("/healthz", headers={"Host": "evil.example.com"}).status_code == 200, "probes answer whatever the Host"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # HTTP/1.0 lets a client omit Host
        s.sendall(f"GET /v1/jobs HTTP/1.0\r\nAuthorization: Bearer {TOKENS['admin']}\r\n\r\n".encode())
        assert s.recv(4096).startswith(b"HTTP/1.1 400")
    assert query(daemon.state, "SELECT COUNT(*) AS n FROM jobs WHERE name='rebound'")[0]["n"] == 0


def test_scopes_a_read_token_cannot_submit_or_cancel(daemon):
    with daemon.client() as admin:
        assert admin.post("/v1/jobs", json=job("scoped-a")).status_code == 201
    with httpx.Client(base_url=daemon.url, timeout=30) as c:
        assert c.get("/v1/jobs", headers=bearer("reader")).status_code == 200
        assert c.get("/metrics", headers=bearer("reader")).status_code == 200
        r = c.post("/v1/jobs", json=job("by-reader"), headers=bearer("reader"))
        assert r.status_code == 403 and "submit" in r.json()["problems"][0]["fix"]
        assert c.delete("/v1/jobs/scoped-a", headers=bearer("reader")).status_code == 403
        assert c.post("/v1/telemetry", json={"job": "scoped-a"}, headers=bearer("reader")).status_code == 403
        assert c.get("/v1/audit", headers=bearer("reader")).status_code == 403, "the audit log is for admins"
        for who in ("reader", "submitter", "canceller"):  # a job's own end report takes the telemetry scope
            r = c.post("/v1/jobs/scoped-a/end", json={"outcome": "failed"}, headers=bearer(who))
            assert r.status_code == 403 and "telemetry" in r.json()["problems"][0]["fix"], (who, r.text)
        for who in ("reader", "submitter", "canceller"):  # returning a node to service is an operator's: admin
            r = c.post("/v1/nodes/h20-0/revive", headers=bearer(who))
            assert r.status_code == 403 and "admin" in r.json()["problems"][0]["fix"], (who, r.text)
        r = c.post("/v1/nodes/h20-0/revive", headers=bearer("admin"))
        assert r.status_code == 202 and r.json()["node"] == "h20-0", r.text
        r = c.post("/v1/nodes/h20-99/revive", headers=bearer("admin"))
        assert r.status_code == 404 and r.json()["problems"][0]["field"] == "name", r.text
        assert c.delete("/v1/jobs/scoped-a", headers=bearer("submitter")).status_code == 403
        assert c.get("/v1/jobs", headers=bearer("canceller")).status_code == 403
        assert c.delete("/v1/jobs/scoped-a", headers=bearer("canceller")).status_code == 202
    rows = query(daemon.state, "SELECT name, cancel_requested_at FROM jobs WHERE name IN ('scoped-a', 'by-reader')")
    assert [r["name"] for r in rows] == ["scoped-a"] and rows[0]["cancel_requested_at"] is not None


def test_live_jobs_per_token_are_limited(daemon):
    with httpx.Client(base_url=daemon.url, timeout=30, headers=bearer("quota")) as c:
        assert c.post("/v1/jobs", json=job("quota-1")).status_code == 201
        assert c.post("/v1/jobs", json=job("quota-2")).status_code == 201
        r = c.post("/v1/jobs", json=job("quota-3"))
        assert r.status_code == 429 and "--max-jobs-per-token" in r.json()["problems"][0]["fix"], r.text
    with httpx.Client(base_url=daemon.url, timeout=30, headers=bearer("submitter")) as c:  # another token has its own count
        assert c.post("/v1/jobs", json=job("quota-other")).status_code == 201
    with daemon.client() as admin:
        assert admin.delete("/v1/jobs/quota-1").status_code == 202
        wait_for(lambda: admin.get("/v1/jobs/quota-1").json()["state"] == "cancelled", what="quota-1 cancelled")
    with httpx.Client(base_url=daemon.url, timeout=30, headers=bearer("quota")) as c:
        assert c.post("/v1/jobs", json=job("quota-3")).status_code == 201, "an ended job frees its place"


def test_every_mutating_call_is_in_the_audit_log(daemon):
    with daemon.client() as admin:
        since = admin.get("/v1/audit", params={"limit": 1000}).json()["next_since_id"]
        while True:
            page = admin.get("/v1/audit", params={"since_id": since, "limit": 1000}).json()
            if not page["entries"]:
                break
            since = page["next_since_id"]
    calls = [("admin", "POST", "/v1/jobs", job("audited-a")), ("reader", "POST", "/v1/jobs", job("audited-b")),
             (None, "POST", "/v1/jobs", job("audited-c")), ("admin", "POST", "/v1/jobs", job("audited-a")),
             ("admin", "POST", "/v1/telemetry", {"job": "audited-a"}), ("submitter", "DELETE", "/v1/jobs/audited-a", None),
             ("canceller", "DELETE", "/v1/jobs/audited-a", None), ("admin", "DELETE", "/v1/jobs/no-such-job", None),
             ("admin", "PUT", "/v1/jobs", {}), ("admin", "GET", "/v1/jobs", None)]
    expect = []
    with httpx.Client(base_url=daemon.url, timeout=30) as c:
        for who, method, path, body in calls:
            r = c.request(method, path, json=body, headers=bearer(who) if who else {})
            if method != "GET":
                expect.append((who or "-", method, path, r.status_code))
    assert {s for *_, s in expect} >= {201, 403, 401, 409, 422, 202, 404, 405}, expect
    with daemon.client() as admin:
        got = admin.get("/v1/audit", params={"since_id": since, "limit": 1000}).json()["entries"]
    assert [(e["identity"], e["method"], e["path"], e["status"]) for e in got] == expect
    assert got[0]["job"] == "audited-a" and got[0]["client"] == "127.0.0.1"
    rows = query(daemon.state, "SELECT identity, method, path, status FROM audit WHERE id > ? ORDER BY id", (since,))
    assert [tuple(r.values()) for r in rows] == expect, "the audit log is in the state database"


def test_405_names_the_allowed_methods(daemon):
    r = httpx.put(f"{daemon.url}/v1/jobs", headers=bearer("admin"), timeout=30)
    assert r.status_code == 405 and set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}


def test_token_file_checks_and_the_generated_default(tmp_path):
    cluster = write_cluster(tmp_path)
    open_file = tmp_path / "open-tokens"
    open_file.write_text(TOKENS["admin"] + "\n")
    open_file.chmod(0o644)
    r = run_cli("daemon", "--scenario", str(cluster), "--state", str(tmp_path / "a.sqlite"), "--listen", "127.0.0.1:0",
                "--token-file", str(open_file))
    assert r.returncode == 2 and "chmod 600" in r.stderr and "Traceback" not in r.stderr, r.stderr
    from planner.daemon.auth import read_token_file
    from planner.errors import UserError

    bad = tmp_path / "bad"
    for text, says in (("ci read abc\n", "at least 16"), (f"ci read,root {TOKENS['admin']}\n", "root"),
                       (f"a b c {TOKENS['admin']}\n", "4 fields"), ("# nothing\n", "no token"),
                       (f"x read {TOKENS['admin']}\nx submit {TOKENS['reader']}\n", "twice"),
                       (f"x read {TOKENS['admin']}\ny admin {TOKENS['admin']}\n", "already given to another name"),
                       (f"ci submit,read {TOKENS['admin']}#q9x8c7v6b5n4m3\n", "inside the token")):
        bad.write_text(text)
        bad.chmod(0o600)
        with pytest.raises(UserError, match=says):
            read_token_file(bad)
    bad.write_text(f"# a comment line\nci read {TOKENS['admin']}  # a comment after a space\n")
    bad.chmod(0o600)
    assert len(read_token_file(bad)) == 1
    bad.unlink()
    bad.symlink_to(token_file(tmp_path))
    with pytest.raises(UserError, match="cannot read"):
        read_token_file(bad)
    # No --token-file: the daemon makes STATE.token (0600) with an admin token and prints it. This is the --help
    # example too (--listen 0.0.0.0 without a token): it serves, authenticated.
    d = DaemonProc(tmp_path, "--scenario", str(cluster), "--listen", "0.0.0.0:0", "--period-s", "0.3", name="gen")
    try:
        generated = d.state.with_name(d.state.name + ".token")
        assert generated.stat().st_mode & 0o777 == 0o600
        wait_for(lambda: str(generated) in d.output(), what="the generated token file named")
        assert d.token() not in d.output(), "the token itself is never printed (logs keep it)"
        port = int(d.url.rsplit(":", 1)[1])
        assert httpx.get(f"http://127.0.0.1:{port}/v1/jobs", timeout=30).status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/v1/jobs", headers=d.headers(), timeout=30).status_code == 200
    finally:
        assert d.stop() == 0
    first = generated.read_text()
    r = run_cli("daemon", "--state", str(d.state), "--listen", "127.0.0.1:0", "--clock", "virtual", "--max-cycles", "1")
    assert r.returncode == 0, r.stderr
    assert generated.read_text() == first and "API tokens from" in r.stdout, "a later start reuses the token file"
    assert d.token() not in r.stdout + r.stderr, "the token is printed only when it is generated"


def test_insecure_is_the_explicit_opt_out(tmp_path):
    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), "--period-s", "0.3", "--insecure")
    try:
        assert httpx.post(f"{d.url}/v1/jobs", json=job("open"), timeout=30).status_code == 201
        assert "--insecure" in d.output()
        assert not d.state.with_name(d.state.name + ".token").exists()
        assert query(d.state, "SELECT identity, status FROM audit") == [{"identity": "insecure", "status": 201}]
    finally:
        assert d.stop() == 0


# ---------------------------------------------------------------------------------------- limits
def _read_all(s: socket.socket, deadline: float) -> bytes:
    out = b""
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            return out
        except socket.timeout:
            continue
        if not chunk:
            return out
        out += chunk
    raise TimeoutError(f"the daemon did not close the connection in time (got {out[:80]!r})")


def test_connection_header_time_and_rate_limits_hold_under_a_bounded_load(tmp_path):
    d = DaemonProc(tmp_path, "--scenario", str(write_cluster(tmp_path)), "--period-s", "0.3", "--max-connections", "8",
                   "--header-timeout-s", "2", "--rate-limit", "5", "--rate-burst", "5")
    port = int(d.url.rsplit(":", 1)[1])
    socks: list[socket.socket] = []
    try:
        # 20 silent connections at once: 8 get the header timeout, the next 8 the busy timeout, and each of the last 4
        # makes room by closing the oldest silent one (httpserver.py): every one is cut, none is answered.
        socks += [socket.create_connection(("127.0.0.1", port), timeout=1) for _ in range(20)]
        got = [_read_all(s, time.monotonic() + 60) for s in socks]
        assert all(g == b"" or g.startswith(b"HTTP/1.1 503") for g in got), [g[:12] for g in got]
        # a client that dribbles its headers is cut too
        slow = socket.create_connection(("127.0.0.1", port), timeout=1)
        socks.append(slow)
        slow.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        cut = False
        for _ in range(600):
            try:
                slow.sendall(b"X-Slow: 1\r\n")
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            try:
                if slow.recv(4096) == b"":
                    cut = True
                    break
            except socket.timeout:
                pass
            except ConnectionResetError:
                cut = True
                break
        assert cut, "a request whose headers never end is cut"
        # With the connections gone, the server answers again; one token's rate is 5/s with a burst of 5.
        with d.client() as c:
            codes, t0 = [], time.monotonic()
            for _ in range(30):
                r = c.get("/v1/jobs")
                codes.append(r.status_code)
                if r.status_code == 429:
                    assert int(r.headers["retry-after"]) >= 1
            elapsed = time.monotonic() - t0
        ok = codes.count(200)
        assert set(codes) <= {200, 429} and ok <= 5 + 5 * elapsed + 1, (ok, elapsed)
        if elapsed < 3:
            assert codes.count(429) > 0
        # unauthenticated callers are limited per address too
        codes = [httpx.get(f"{d.url}/v1/jobs", timeout=30).status_code for _ in range(30)]
        assert set(codes) <= {401, 429}
        with d.client() as c:
            wait_for(lambda: c.get("/v1/health").status_code == 200, what="the bucket refilled")
    finally:
        for s in socks:
            s.close()
        assert d.stop() == 0, d.output()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls_when_given_a_certificate(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    cluster = write_cluster(tmp_path)
    from planner.daemon.service import Options, _tls
    from planner.errors import UserError

    with pytest.raises(UserError, match="--tls-key"):
        _tls(Options(state=tmp_path / "x", tls_cert=cert))
    with pytest.raises(UserError, match="cannot load"):
        _tls(Options(state=tmp_path / "x", tls_cert=cluster, tls_key=key))
    d = DaemonProc(tmp_path, "--scenario", str(cluster), "--period-s", "0.3", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert d.url.startswith("https://")
        import ssl

        with d.client(verify=ssl.create_default_context(cafile=str(cert))) as c:
            assert c.get("/v1/jobs").status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(d.url.replace("https://", "http://") + "/healthz", timeout=5)
    finally:
        assert d.stop() == 0


def test_token_files_are_not_world_readable_even_with_a_wide_umask(tmp_path):
    old = os.umask(0)
    try:
        from planner.daemon.auth import generate_token_file

        generate_token_file(tmp_path / "t")
    finally:
        os.umask(old)
    assert (tmp_path / "t").stat().st_mode & 0o777 == 0o600
