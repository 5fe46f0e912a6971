"""A Python client for the replanning daemon's HTTP API (``planner daemon --listen``).

    from planner.client import Client
    with Client("http://127.0.0.1:8765") as c:
        c.submit_job({...})                       # POST /v1/jobs (a JobSpec)
        c.post_telemetry(snapshot)                # POST /v1/telemetry (formulation/realloc/telemetry.py)
        for d in c.iter_decisions(kind="realloc"):
            ...                                   # GET /v1/decisions, paged by next_since_id
        c.plan(); c.cluster(job="math"); c.health()

Every non-2xx answer raises :class:`DaemonError` with the daemon's ``error`` and ``problems``
(each with where / message / fix). Uses httpx (imported when a client is made).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Optional


class DaemonError(RuntimeError):
    def __init__(self, status: int, error: str, problems: list[dict]) -> None:
        lines = [f"{p.get('where') or '-'}: {p.get('message')}" + (f" (fix: {p['fix']})" if p.get("fix") else "") for p in problems]
        super().__init__(f"daemon answered {status}: {error}" + ("; " + "; ".join(lines) if lines else ""))
        self.status, self.error, self.problems = status, error, problems


class Client:
    def __init__(self, base_url: str, *, timeout_s: float = 10.0, transport: Any = None) -> None:
        import httpx

        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s, transport=transport)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _req(self, method: str, path: str, *, json: Any = None, params: Optional[dict] = None) -> Any:
        r = self._http.request(method, path, json=json, params={k: v for k, v in (params or {}).items() if v is not None})
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = {"error": r.text[:200], "problems": []}
            raise DaemonError(r.status_code, body.get("error", ""), body.get("problems") or [])
        return r.json() if r.content else None

    # ---- jobs
    def submit_job(self, spec: dict) -> dict:
        return self._req("POST", "/v1/jobs", json=spec)

    def jobs(self, state: Optional[list[str]] = None, limit: int = 100, offset: int = 0) -> dict:
        return self._req("GET", "/v1/jobs", params={"state": state, "limit": limit, "offset": offset})

    def job(self, name: str) -> dict:
        return self._req("GET", f"/v1/jobs/{name}")

    def cancel_job(self, name: str) -> dict:
        return self._req("DELETE", f"/v1/jobs/{name}")

    # ---- telemetry
    def post_telemetry(self, snapshot: dict) -> dict:
        return self._req("POST", "/v1/telemetry", json=snapshot)

    # ---- plan and decisions
    def plan(self) -> dict:
        return self._req("GET", "/v1/plan")

    def cluster(self, job: Optional[str] = None) -> dict:
        return self._req("GET", "/v1/cluster", params={"job": job})

    def decisions(self, since_id: int = 0, limit: int = 100, kind: Optional[str] = None) -> dict:
        return self._req("GET", "/v1/decisions", params={"since_id": since_id, "limit": limit, "kind": kind})

    def iter_decisions(self, since_id: int = 0, kind: Optional[str] = None, limit: int = 100) -> Iterator[dict]:
        """Every decision after ``since_id``, page by page (``next_since_id``)."""
        while True:
            page = self.decisions(since_id, limit, kind)
            yield from page["decisions"]
            if not page["decisions"] or page["next_since_id"] == since_id:
                return
            since_id = page["next_since_id"]

    def wait_for_decision(self, match: Callable[[dict], bool], *, since_id: int = 0, kind: Optional[str] = None,
                          timeout_s: float = 60.0, poll_s: float = 1.0) -> dict:
        """Poll until a decision after ``since_id`` satisfies ``match``; raises TimeoutError naming what was awaited."""
        end = time.monotonic() + timeout_s
        while True:
            for d in self.iter_decisions(since_id, kind):
                since_id = max(since_id, d.get("id", since_id))
                if match(d):
                    return d
            if time.monotonic() >= end:
                raise TimeoutError(f"no matching decision{' of kind ' + kind if kind else ''} within {timeout_s:g} s "
                                   f"(last id seen {since_id})")
            time.sleep(poll_s)

    # ---- health
    def health(self) -> dict:
        return self._req("GET", "/v1/health")
