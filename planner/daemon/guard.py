"""The API's gate (pure ASGI, in front of the app): Host allow-list, token, rate, scope, audit.

Order for every request but the probes: ``Host`` (missing 400, not allowed 421: against DNS
rebinding), ``Authorization: Bearer <token>`` (scheme case-insensitive; 401), the caller's rate
(429 with ``Retry-After``), the route's scope (403). Mutating calls are written to the audit log
(:mod:`planner.daemon.audit`) with their final status before the answer goes out. The principal
is left in ``scope["rlp.principal"]`` (the submit handler counts live jobs per token with it);
handlers put the job a call names in ``scope["rlp.job"]`` for the audit row.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from typing import Optional

from planner.daemon.audit import AuditEntry, AuditLog
from planner.daemon.auth import ANONYMOUS_ADMIN, MUTATING, PROBES, Principal, RateLimiter, _digest, host_name, required_scope
from planner.daemon.sqlitedb import busy_timeout_s, is_locked

log = logging.getLogger("planner.daemon.guard")
LOCKED_RETRY_S = 5  # the Retry-After of a request that met a state file locked by another process (503)


def _body(error: str, field: str, message: str, fix: str) -> bytes:
    return json.dumps({"error": error, "problems": [{"field": field, "message": message, "fix": fix}]}).encode()


class Guard:
    def __init__(self, app, *, tokens: Optional[dict[str, Principal]], hosts: Optional[frozenset], limiter: RateLimiter,
                 audit: Optional[AuditLog]) -> None:
        self.app, self.tokens, self.hosts, self.limiter, self.audit = app, tokens, hosts, limiter, audit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") in PROBES:
            return await self.app(scope, receive, send)
        method, path = scope.get("method", ""), scope.get("path", "")
        headers = dict(scope.get("headers") or [])
        client = scope.get("client") or ("-", 0)
        addr = str(client[0])
        if method in MUTATING and self.audit is not None:
            send = self._audited(scope, send, method, path, addr)
        host = headers.get(b"host")
        if host is None:
            return await self._refuse(send, 400, "bad request", "Host", "the request has no Host header", "send HTTP/1.1 with a Host header")
        if self.hosts is not None and host_name(host) not in self.hosts:
            return await self._refuse(send, 421, "misdirected request", "Host",
                                      f"Host {host.decode('latin-1')!r} is not a name of this daemon",
                                      "call it by an allowed name (loopback, its listen address), or start it with --allow-host NAME")
        principal = self._principal(headers.get(b"authorization"))
        if principal is None:
            wait = self.limiter.take(f"unauthenticated@{addr}")
            if wait > 0:
                return await self._refuse(send, 429, "too many requests", "", "too many unauthenticated requests from this address",
                                          f"retry in {wait:.1f} s with a token", retry=wait)
            return await self._refuse(send, 401, "unauthorized", "Authorization", "missing or wrong bearer token",
                                      "send 'Authorization: Bearer <token>' with a token of the daemon's token file "
                                      "(STATE.token unless --token-file)", extra=[(b"www-authenticate", b"Bearer")])
        scope["rlp.principal"] = principal
        wait = self.limiter.take(principal.name if self.tokens is not None else f"insecure@{addr}")  # --insecure: per address
        if wait > 0:
            return await self._refuse(send, 429, "too many requests", "", f"token '{principal.name}' is over its request rate",
                                      f"retry in {wait:.1f} s, or raise the daemon's --rate-limit", retry=wait)
        need = required_scope(method, path)
        if need is not None and not principal.may(need):
            return await self._refuse(send, 403, "forbidden", "Authorization",
                                      f"token '{principal.name}' (scopes {', '.join(sorted(principal.scopes))}) may not {method} {path}",
                                      f"use a token with the '{need}' scope")
        return await self.app(scope, receive, send)

    def _principal(self, auth: Optional[bytes]) -> Optional[Principal]:
        if self.tokens is None:
            return ANONYMOUS_ADMIN
        if not auth:
            return None
        scheme, _, token = auth.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return None
        return self.tokens.get(_digest(token.strip()))

    def _audited(self, scope, send, method: str, path: str, addr: str):
        audit = self.audit
        replaced = False

        async def wrapped(message):
            nonlocal replaced
            if replaced:  # the original answer's body: a 503 went out in its place
                return
            if message["type"] == "http.response.start":
                p = scope.get("rlp.principal")
                job = scope.get("rlp.job")
                if job is None and method == "DELETE" and path.startswith("/v1/jobs/"):
                    job = path[len("/v1/jobs/"):]
                status = int(message["status"])
                try:
                    await audit.record(AuditEntry(time.time(), p.name if p else "-", addr, method, path[:500], status,
                                                  job[:200] if isinstance(job, str) else None))
                except sqlite3.OperationalError as exc:
                    if not is_locked(exc):
                        raise
                    if scope.get("rlp.locked"):  # the call met the lock itself: its 503 says so (nothing was done)
                        log.warning("%s %s: no audit row (the state file is locked); answered 503", method, path[:200])
                        await send(message)
                        return
                    # no answer goes out without its audit row: a locked state file is a 503 that says what happened
                    replaced = True
                    log.warning("%s %s answered %d: its audit row could not be written (the state file is locked): answered 503",
                                method, path[:200], status)
                    took = ("the call itself took effect (check it with a GET before sending it again)" if status < 400 else
                            "the call itself was not carried out")
                    await self._refuse(send, 503, "service unavailable: the state database is locked", "",
                                       f"the call's audit row could not be written: another process held the daemon's state file "
                                       f"locked for over {busy_timeout_s():.0f} s (database is locked); {took}",
                                       f"retry in {LOCKED_RETRY_S} s; if it persists, the operator stops the process that holds the "
                                       "state file in a write transaction (an sqlite3 shell, a backup)", retry=LOCKED_RETRY_S)
                    return
            await send(message)

        return wrapped

    @staticmethod
    async def _refuse(send, status: int, error: str, field: str, message: str, fix: str, retry: float | None = None,
                      extra: list | None = None) -> None:
        data = _body(error, field, message, fix)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *(extra or [])]
        if retry is not None:
            headers.append((b"retry-after", str(max(1, int(retry + 0.999))).encode()))
        if status in (400, 421):
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
