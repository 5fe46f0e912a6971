"""Who may call the daemon's API, and how much: tokens with scopes, the Host allow-list, rate limits.

The daemon is authenticated by default, also on loopback (any local user or process, or a web page
through DNS rebinding, could otherwise submit and cancel jobs). ``--insecure`` is the explicit
opt-out (an authenticating proxy in front). See docs/security.md for the threat model.

**Token file** (``--token-file``, default ``STATE.token`` beside the state file, generated with
one admin token at the first start, mode 0600, and printed once): one token per line, ``NAME
SCOPES TOKEN`` (scopes comma-separated) or a bare ``TOKEN`` (name ``admin``, scope ``admin``);
``#`` at the start of a line or after a space starts a comment; a token holding ``#`` is refused.
A file that others may read or write, or that another user owns, is refused. Tokens have at least
16 characters; the daemon keeps only their SHA-256.

==========  ======================================================================
scope       allows
==========  ======================================================================
read        every ``GET`` (jobs, plan, cluster, decisions, health, metrics, OpenAPI)
submit      ``POST /v1/jobs`` (at most ``--max-jobs-per-token`` live jobs per token)
cancel      ``DELETE /v1/jobs/{name}``
telemetry   ``POST /v1/telemetry``, ``POST /v1/jobs/{name}/realloc-context`` (they can trigger GPU migrations)
            and ``POST /v1/jobs/{name}/end`` (the job's own report that it completed or failed)
admin       all of the above, ``GET /v1/audit``, and anything added later
==========  ======================================================================

The probes ``/healthz`` and ``/readyz`` are open (and exempt from the Host check: a kubelet sends
the pod's address). Every other request: ``Host`` in the allow-list (missing: 400, another: 421),
then the token (401), then the per-token rate (429 with ``Retry-After``), then the scope (403).
Every mutating call (``POST``/``PUT``/``PATCH``/``DELETE``), refused or not, is written to the
``audit`` table of the state database, with who, from where, what and the status, before the
client sees the answer (:mod:`planner.daemon.audit`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import secrets
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from planner.errors import Problem, UserError

SCOPES = ("read", "submit", "cancel", "telemetry", "admin")
PROBES = ("/healthz", "/readyz")
MUTATING = ("POST", "PUT", "PATCH", "DELETE")
MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Principal:
    """Who made a request: the token's name and its scopes."""

    name: str
    scopes: frozenset

    def may(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes


ANONYMOUS_ADMIN = Principal("insecure", frozenset({"admin"}))


@dataclass(frozen=True)
class Limits:
    """Connection, time and rate limits of the API server (each a flag of ``planner daemon``)."""

    max_connections: int = 256  # connections served with the normal timeouts; up to as many more under --busy-timeout-s
    max_per_peer: int = 64  # connections of one client address with the normal timeouts; its others under --busy-timeout-s
    busy_timeout_s: float = 0.5  # under pressure (over either limit): time a new connection has to deliver its request
    max_header_bytes: int = 64 << 10  # request line and headers of one request; more is answered 431
    header_timeout_s: float = 10.0  # from connecting (or the previous answer) to a complete request: slow headers or bodies are cut
    idle_timeout_s: float = 5.0  # an idle keep-alive connection is closed after this
    rate_per_s: float = 200.0  # requests per second per token (0: no limit); unauthenticated callers per client address
    rate_burst: float = 400.0  # the bucket's size
    max_jobs_per_token: int = 256  # live (not ended) jobs submitted through the API by one token
    max_context_bytes: int = 16 << 20  # a POST /v1/jobs/{name}/realloc-context body (per-request arrays of the rollout)

    def check(self) -> None:
        bad = []
        for name in ("header_timeout_s", "idle_timeout_s", "busy_timeout_s"):
            v = getattr(self, name)
            if not (v > 0 and v <= 3600):
                bad.append(Problem(f"--{name.replace('_', '-')}", f"must be in (0, 3600], got {v}"))
        if not 1 <= self.max_connections <= 65536:
            bad.append(Problem("--max-connections", f"must be in [1, 65536], got {self.max_connections}"))
        if not 1 <= self.max_per_peer <= 65536:
            bad.append(Problem("--max-connections-per-peer", f"must be in [1, 65536], got {self.max_per_peer}"))
        if not 0 <= self.rate_per_s <= 1e6:
            bad.append(Problem("--rate-limit", f"must be in [0, 1e6] requests per second, got {self.rate_per_s}"))
        if not 1 <= self.rate_burst <= 1e7:
            bad.append(Problem("--rate-burst", f"must be in [1, 1e7], got {self.rate_burst}"))
        if not 1 <= self.max_jobs_per_token <= 10**6:
            bad.append(Problem("--max-jobs-per-token", f"must be in [1, 1e6], got {self.max_jobs_per_token}"))
        if not 1 <= self.max_context_bytes <= 1 << 30:
            bad.append(Problem("--max-context-bytes", f"must be in [1, 2^30], got {self.max_context_bytes}"))
        if bad:
            raise UserError(bad, title="invalid daemon limits")


# ----------------------------------------------------------------------------- token file
def default_token_file(state: Path) -> Path:
    return state.with_name(state.name + ".token")


def _digest(token: str | bytes) -> str:
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).hexdigest()


def generate_token_file(path: Path) -> str:
    """Create ``path`` (mode 0600, never over an existing file) with one admin token; the token.
    Written whole beside it first and linked into place, so that a daemon started at the same time
    never reads it half-written (it finds the file there and reads it: ``FileExistsError`` here)."""
    token = secrets.token_urlsafe(32)
    text = ("# rl-planner daemon API tokens, one per line: NAME SCOPES TOKEN (scopes, comma-separated: "
            f"{', '.join(SCOPES)}); keep this file mode 0600\nadmin admin {token}\n")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    _write_new(tmp, text)
    try:
        os.link(tmp, path)  # atomic, and never over an existing file
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: created in place (O_EXCL: still never over an existing file)
        _write_new(path, text)
    finally:
        os.unlink(tmp)
    return token


def _write_new(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse(path: Path, text: str) -> list[tuple[str, frozenset, str]]:
    out: list[tuple[str, frozenset, str]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.split(r"(?:^|\s)#", raw, maxsplit=1)[0].strip()  # a comment: '#' at the start or after a space
        if not line:
            continue
        parts = line.split()
        if "#" in parts[-1]:  # 'tok#en' was read as 'tok' before: a token weaker than written
            raise UserError(Problem(f"{path}:{n}", "a '#' inside the token (it starts a comment only at the start of a line "
                                    "or after a space)", "use a token without '#', e.g. python -c 'import secrets; "
                                    "print(secrets.token_urlsafe(32))'"))
        if len(parts) == 1:
            name, scopes, token = "admin", frozenset({"admin"}), parts[0]
        elif len(parts) == 3:
            name, token = parts[0], parts[2]
            scopes = frozenset(s for s in parts[1].split(",") if s)
            unknown = sorted(scopes - set(SCOPES))
            if unknown or not scopes:
                raise UserError(Problem(f"{path}:{n}", f"unknown scope(s) {', '.join(unknown) or '(none)'}",
                                        f"use NAME SCOPES TOKEN with SCOPES among {', '.join(SCOPES)}, comma-separated"))
        else:
            raise UserError(Problem(f"{path}:{n}", f"a token line has {len(parts)} fields",
                                    "write NAME SCOPES TOKEN (e.g. 'ci read,submit <token>') or a bare TOKEN"))
        if len(token) < MIN_TOKEN_CHARS:
            raise UserError(Problem(f"{path}:{n}", f"the token has {len(token)} characters; use at least {MIN_TOKEN_CHARS}",
                                    "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"))
        if any(name == o[0] for o in out):
            raise UserError(Problem(f"{path}:{n}", f"the name {name!r} appears twice", "give every token its own name"))
        if any(token == o[2] for o in out):  # (which name and scopes would a request with it get?)
            raise UserError(Problem(f"{path}:{n}", "this token is already given to another name",
                                    "give every name its own token (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"))
        out.append((name, scopes, token))
    if not out:
        raise UserError(Problem(str(path), "the token file holds no token", "write one token per line: NAME SCOPES TOKEN"))
    return out


def read_token_file(path: Path, *, check_mode: bool = True) -> dict[str, Principal]:
    """SHA-256 of each token → its principal; a file others can read or write is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise UserError(Problem("--token-file", f"cannot read {path}: {exc.strerror}",
                                "check the path (without --token-file the daemon creates STATE.token at its first start)")) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(Problem("--token-file", f"{path} is not a regular file", "point --token-file at a file"))
        if check_mode and os.name == "posix":
            if st.st_mode & 0o077:
                raise UserError(Problem("--token-file", f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: other users can read or change the tokens",
                                        f"chmod 600 {path}"))
            if hasattr(os, "getuid") and st.st_uid != os.getuid():
                raise UserError(Problem("--token-file", f"{path} belongs to uid {st.st_uid}, not to this user ({os.getuid()})",
                                        "chown it to the user that runs the daemon, or use a token file of your own"))
        if st.st_size > 1 << 20:
            raise UserError(Problem("--token-file", f"{path} has {st.st_size} bytes", "a token file holds a few lines"))
        data = os.read(fd, (1 << 20) + 1)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(Problem("--token-file", f"{path} is not UTF-8 text", "write one token per line: NAME SCOPES TOKEN")) from None
    return {_digest(tok): Principal(name, scopes) for name, scopes, tok in _parse(path, text)}


def token_of(path: Path, name: str = "admin") -> str:
    """The token named ``name`` in a token file (clients and tests)."""
    for n, _, tok in _parse(path, Path(path).read_text()):
        if n == name:
            return tok
    raise KeyError(f"no token named {name!r} in {path}")


def load_tokens(token_file: Optional[Path], state: Path, insecure: bool) -> tuple[Optional[dict[str, Principal]], Optional[Path], Optional[str]]:
    """(tokens, their file, a token generated now) for the daemon's options; ``None`` tokens with --insecure."""
    if insecure:
        if token_file is not None:
            raise UserError(Problem("--insecure", "--insecure turns authentication off, --token-file turns it on", "pass one of them"))
        return None, None, None
    created = None
    path = token_file or default_token_file(state)
    if token_file is None and not os.path.lexists(path):
        try:
            created = generate_token_file(path)
        except FileExistsError:  # a daemon started at the same time on the same state made it: read it
            created = None
        except OSError as exc:
            raise UserError(Problem("--token-file", f"cannot create {path}: {exc.strerror}",
                                    "pass --token-file in a writable folder")) from None
    return read_token_file(path), path, created


# ------------------------------------------------------------------------------ scopes
def required_scope(method: str, path: str) -> Optional[str]:
    """The scope a request needs; ``None`` for the open probes."""
    if path in PROBES:
        return None
    if path == "/v1/audit" or path.startswith("/v1/audit/"):
        return "admin"
    if method in ("GET", "HEAD"):
        return "read"
    if method == "POST" and path == "/v1/jobs":
        return "submit"
    if method == "DELETE" and path.startswith("/v1/jobs/"):
        return "cancel"
    if method == "POST" and path == "/v1/telemetry":
        return "telemetry"
    if method == "POST" and path.startswith("/v1/jobs/") and path.endswith(("/realloc-context", "/end")) and path.count("/") == 4:
        return "telemetry"
    return "admin"


# --------------------------------------------------------------------------- Host check
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def allowed_hosts(listen_host: str, extra: tuple[str, ...] = ()) -> Optional[frozenset]:
    """Host names (without port) a request may name; ``None``: any (``--allow-host '*'``).

    Loopback names always; the listen address; beyond loopback also this machine's names and
    addresses. Anything else, e.g. a DNS-rebinding page's own domain resolving to 127.0.0.1, is 421.
    """
    if "*" in extra:
        return None
    names = {*LOOPBACK_NAMES, listen_host.lower().strip("[]"), *(e.lower().strip("[]") for e in extra)}
    wildcard = listen_host in ("0.0.0.0", "::", "")
    try:
        loopback = listen_host == "localhost" or ipaddress.ip_address(listen_host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        for n in (socket.gethostname(), socket.getfqdn()):
            if n:
                names.add(n.lower())
        if wildcard:
            try:
                for info in socket.getaddrinfo(socket.gethostname(), None):
                    names.add(str(info[4][0]).lower())
            except OSError:
                pass
    names.discard("0.0.0.0")
    names.discard("::")
    return frozenset(n for n in names if n)


def host_name(value: bytes) -> str:
    """The name part of a Host header (``[::1]:8765`` → ``::1``, ``Example.org:80`` → ``example.org``)."""
    v = value.decode("latin-1").strip().lower()
    if v.startswith("["):
        return v[1:v.find("]")] if "]" in v else v
    return v.rsplit(":", 1)[0] if v.count(":") == 1 else v


# ------------------------------------------------------------------------------ rate limit
@dataclass
class RateLimiter:
    """One token bucket per key (a token's name, or an unauthenticated caller's address), monotonic time."""

    rate: float
    burst: float
    buckets: dict = field(default_factory=dict)

    def take(self, key: str, now: Optional[float] = None) -> float:
        """0 when allowed (one request taken), else the seconds until one would be."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        if len(self.buckets) > 100_000:  # many distinct unauthenticated addresses: forget the buckets that are full again
            full_after = self.burst / self.rate
            self.buckets = {k: v for k, v in self.buckets.items() if now - v[1] < full_after}
        tokens, last = self.buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens >= 1.0:
            self.buckets[key] = (tokens - 1.0, now)
            return 0.0
        self.buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.rate
