"""The HTTP API (FastAPI): jobs, telemetry, the plan, the decision log, health, metrics.

======  ========================  =============================================================
verb    path                      what
======  ========================  =============================================================
POST    /v1/jobs                  submit a job (the scenario schema's ``JobSpec``), checked against
                                  the cluster like a scenario file: 201, 409 (name taken), 422
GET     /v1/jobs                  list jobs, filter by ``state``, page with ``limit``/``offset``
GET     /v1/jobs/{name}           one job with its lifecycle events: 200, 404
DELETE  /v1/jobs/{name}           request a cancel (the loop carries it out): 202, 404, 409
POST    /v1/jobs/{name}/end       the job's own report that it ended (``{"outcome": "completed" | "failed",
                                  "message": ...}``, empty body: completed); the loop's next cycle
                                  moves it to that state and out of the plan, whatever the backend:
                                  202, 404, 409 (not running, or already ended), 422
POST    /v1/telemetry             a ``TelemetrySnapshot`` of a placed job: 202, 404, 409, 422
POST    /v1/jobs/{name}/          the job's reallocation context (``planner.instances.completion_io``
        realloc-context           JSON: what the completion decision reads besides telemetry); the
                                  latest per job is kept: 202, 404, 409, 413, 422
GET     /v1/plan                  the plan in force (placement and plan document): 200, 404
GET     /v1/cluster               what the executor runs (per component its workers, per node its
                                  use, the request ledger), as of the loop's last cycle: 200, 404
                                  (also for a ``job`` filter naming no job of this daemon)
GET     /v1/decisions             the decision log with reasons, ``since_id``/``limit``/``kind``
                                  (a kind not in ``DecisionKind``: 422)
GET     /v1/audit                 every mutating call: who, from where, what, status (admin scope)
GET     /v1/health                role, lease holder, loop progress, job counts
GET     /healthz, /readyz         liveness; readiness (503 while the loop is stalled, stopping or has a problem;
                                  a loop slower than its period is degraded in /v1/health but ready)
GET     /metrics                  Prometheus text format
======  ========================  =============================================================

Every refusal is a JSON ``{"error": ..., "problems": [{"field", "message", "fix"}]}`` whose
``field`` is the path inside the request (``rollout.max_response_tokens``), never a traceback.
No answer names a file of the daemon's data folder by its server path (:class:`PublicPaths`).
Requests over 1 MiB get 413 (:class:`BodyLimit`), except a reallocation context (the rollout's
unfinished requests one by one), which may have up to ``--max-context-bytes`` (16 MiB). Nothing reaches the state before it validated.
In front of it all, :class:`planner.daemon.guard.Guard`: Host allow-list, bearer token, rate,
scope, audit (:mod:`planner.daemon.auth`).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from typing import Any, Literal, Optional, get_args

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from pydantic import BaseModel, ConfigDict, Field, field_validator

from formulation.realloc.telemetry import TelemetrySnapshot
from planner import __version__
from planner.daemon.guard import LOCKED_RETRY_S
from planner.daemon.lifecycle import JobState
from planner.daemon.sqlitedb import busy_timeout_s, is_locked
from planner.daemon.store import DecisionKind, NotFound, StateFileError, StoreError
from estimators.errors import MAX_FIELD, MAX_MESSAGE, MAX_PROBLEMS, safe_text
from planner.errors import Problem, UserError
from planner.schema.scenario import JobSpec

log = logging.getLogger("planner.daemon.api")

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


# ------------------------------------------------------------------------------- responses
class ProblemView(BaseModel):
    """One problem of a refused request; its texts as docs/inputs.md promises: control characters and
    lone surrogates escaped (a key of the body is echoed here), the message cut at 2,000 characters
    and the field and fix at 500."""

    field: str = Field(description="path inside the request, e.g. rollout.max_response_tokens ('' for the whole body)")
    message: str
    fix: str = ""

    @field_validator("field", "fix")
    @classmethod
    def _short(cls, v: str) -> str:
        return safe_text(v, MAX_FIELD)

    @field_validator("message")
    @classmethod
    def _message(cls, v: str) -> str:
        return safe_text(v, MAX_MESSAGE)


class ErrorBody(BaseModel):
    """A refusal: at most 50 problems, then one that counts the rest."""

    error: str
    problems: list[ProblemView] = Field(default_factory=list)

    @field_validator("error")
    @classmethod
    def _error(cls, v: str) -> str:
        return safe_text(v, MAX_MESSAGE)

    @field_validator("problems")
    @classmethod
    def _few(cls, v: list[ProblemView]) -> list[ProblemView]:
        if len(v) <= MAX_PROBLEMS:
            return v
        return v[:MAX_PROBLEMS] + [ProblemView(field="", message=f"... and {len(v) - MAX_PROBLEMS} more problem(s) of the same request",
                                               fix="fix the problems above and send it again")]


class JobView(BaseModel):
    name: str
    state: JobState
    submitted_at: float
    arrives_at: float
    admitted_at: Optional[float] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    slo_s: Optional[float] = None
    reason: str
    cancel_requested: bool
    iterations: int
    last_iteration_s: Optional[float] = None
    slo_misses: int
    spec: dict[str, Any]
    end_reported: Optional[dict[str, Any]] = Field(None, description="the job's own report of its end (outcome, message, at), "
                                                   "until the loop acts on it; null when none")


class EndReport(BaseModel):
    """A job's report of its own end (``POST /v1/jobs/{name}/end``)."""

    model_config = ConfigDict(extra="forbid")
    outcome: Literal["completed", "failed"] = Field("completed", description="how the job ended")
    message: str = Field("", max_length=500, description="why, in a line (shown in the job's reason and events)")

    @field_validator("message")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in v):
            raise ValueError("the message is one line of printable text (no control characters or line breaks)")
        return v.strip()


class JobEvent(BaseModel):
    at: float
    from_state: Optional[str] = None
    to_state: str
    reason: str


class JobDetail(JobView):
    events: list[JobEvent]
    group: Optional[dict[str, Any]] = None


class JobList(BaseModel):
    jobs: list[JobView]
    total: int
    counts: dict[str, int]


class Accepted(BaseModel):
    id: int
    job: str


class ReviveAccepted(BaseModel):
    node: str
    requested_at: float = Field(description="the daemon's clock when asked; the loop acts at its next cycle")
    dead_as_of_last_cycle: Optional[bool] = Field(None, description="what the last recorded cluster view said of the node "
                                                                     "(null: no view recorded yet)")


class ContextAccepted(BaseModel):
    job: str
    iteration: int
    time_s: float
    requests: int = Field(description="the rollout's unfinished requests the context lists (0: none listed)")


class PlanView(BaseModel):
    id: int
    status: str
    cycle: int
    created_at: float
    cost_per_hour: float
    placement: dict[str, Any]
    document: dict[str, Any]


class ClusterView(BaseModel):
    at: float = Field(description="the daemon's clock when the loop recorded it")
    backend: str
    nodes: list[dict[str, Any]]
    components: list[dict[str, Any]] = Field(description="per component: role, group, layout, placement and workers (id, node, GPUs)")
    parked: dict[str, Any] = Field(default_factory=dict)
    ledger: dict[str, Any] = Field(default_factory=dict, description="rollout requests: submitted, done, handed off, refused effects")


class DecisionView(BaseModel):
    id: int
    cycle: int
    at: float
    kind: str
    triggers: list[str]
    outcome: str
    jobs: list[str]
    cost_before: Optional[float] = None
    cost_after: Optional[float] = None
    gain_usd: Optional[float] = None
    migration_usd: Optional[float] = None
    solver: dict[str, Any]
    reasons: list[str]
    plan_id: Optional[int] = None
    dry_run: bool


class DecisionList(BaseModel):
    decisions: list[DecisionView]
    next_since_id: int


class AuditView(BaseModel):
    id: int
    at: float
    identity: str = Field(description="the token's name ('-': no valid token)")
    client: str
    method: str
    path: str
    job: Optional[str] = None
    status: int


class AuditList(BaseModel):
    entries: list[AuditView]
    next_since_id: int


class Health(BaseModel):
    status: Literal["ok", "degraded", "stopping"]
    version: str
    role: str
    backend: str
    placer: str
    clock: str
    clock_s: float
    period_s: float
    cycle: int
    last_cycle_wall: Optional[float] = None
    loop_lag_s: Optional[float] = None
    lease: Optional[dict[str, Any]] = None
    lease_holder: str
    plan_id: Optional[int] = None
    plan_cost_per_hour: float
    jobs: dict[str, int]
    problems: list[str]
    ready: bool = Field(True, description="what /readyz answers (200): false while the loop is stalled, stopping or holds "
                                          "another problem; a loop slower than its period is degraded but ready")


def _err(status: int, error: str, problems: list[Problem]) -> JSONResponse:
    body = ErrorBody(error=error, problems=[ProblemView(field=p.where, message=p.message, fix=p.fix) for p in problems])
    return JSONResponse(body.model_dump(), status_code=status)


E = {404: {"model": ErrorBody, "description": "no such object"}, 409: {"model": ErrorBody, "description": "conflicts with the state"},
     413: {"model": ErrorBody, "description": "request body too large"}, 422: {"model": ErrorBody, "description": "invalid request"}}


def _resp(*codes: int) -> dict:
    return {c: E[c] for c in codes}


def _problems(errors: list[dict], body: Any, root: type[BaseModel] | None) -> list[Problem]:
    from planner.schema.errors import fix_for, problems_from_errors
    from planner.schema.loader import Document, _fmt

    body_errs = [dict(e, loc=tuple(e["loc"][1:])) for e in errors if e["loc"] and e["loc"][0] == "body"]
    other = [e for e in errors if not (e["loc"] and e["loc"][0] == "body")]
    out: list[Problem] = []
    for e in body_errs:
        if e["type"] == "json_invalid":
            return [Problem("", f"the body is not valid JSON: {e.get('ctx', {}).get('error', e['msg'])}", "send a JSON object")]
        if e["type"] == "missing" and not e["loc"]:
            return [Problem("", "a JSON body is required", "send a JSON object")]
    if body_errs and root is not None and isinstance(body, dict):
        try:
            out += problems_from_errors(body_errs, Document(body, {}, "<request>"), root=root)
        except Exception:  # noqa: BLE001 - fall back to pydantic's own wording
            out += [Problem(".".join(str(x) for x in e["loc"]), e["msg"]) for e in body_errs]
    else:
        for e in body_errs:
            where = _fmt(tuple(e["loc"]))
            msg = e["msg"][len("Value error, "):] if e["msg"].startswith("Value error, ") else e["msg"]
            out.append(Problem(where, msg, "send a JSON object with the documented fields" if not e["loc"] else ""))
    for e in other:  # query and path parameters: loc is ("query", name, index...)
        where = _fmt(tuple(e["loc"][1:])) or str(e["loc"][0])
        got = e.get("input")
        out.append(Problem(where, e["msg"] + (f" (got {got!r})" if isinstance(got, (str, int, float)) else ""),
                           fix_for(e["type"], e.get("ctx") or {}) or "see the parameter's range in /docs"))
    for p in out:
        p.source = ""
    return out


# ------------------------------------------------------------------------------ body limit
class BodyLimit:
    """Pure ASGI: refuse bodies over ``limit`` bytes with 413 before the app reads them.

    A declared ``content-length`` is checked at once; a chunked body is read (up to the limit) and
    handed to the app whole. Outside the app, so no handler ever sees an oversized body.
    """

    def __init__(self, app, limit: int, routes: tuple = ()) -> None:
        self.app, self.limit = app, limit
        self.routes = tuple((re.compile(pattern), n) for pattern, n in routes)  # (path regex, limit): larger bodies on these paths

    def limit_of(self, path: str) -> int:
        return next((n for rx, n in self.routes if rx.fullmatch(path)), self.limit)

    async def _refuse(self, send, size: str, limit: Optional[int] = None) -> None:
        body = ErrorBody(error="request body too large", problems=[ProblemView(
            field="", message=f"the body is {size} bytes; the limit is {limit or self.limit}", fix="send one job or one snapshot per request")])
        data = body.model_dump_json().encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    async def _strict(self, send, problem: str, fix: str, field: str = "") -> None:
        body = ErrorBody(error="invalid request", problems=[ProblemView(field=field, message=problem, fix=fix)])
        data = body.model_dump_json().encode()
        await send({"type": "http.response.start", "status": 422,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    @staticmethod
    def strict_json(whole: bytes) -> Optional[tuple[str, str, str]]:
        """(problem, fix, field) when a JSON body is not what docs/inputs.md allows: UTF-8 only (JSON's
        UTF-16/32 detection is not used), each key once per object, nesting bounded, no control
        characters (ESC, NUL, C1 codes) in any string, nor line breaks or tabs in keys and names."""
        from planner.safeload import Document, check_depth, check_text, decode, json_text_clean

        try:
            text = decode(whole, "the body")
        except UserError as exc:
            p = exc.problems[0]
            return f"{p.message}", "send UTF-8 JSON", ""
        try:
            data = json.loads(text, object_pairs_hook=_strict_pairs)
        except RecursionError:
            return "the body is nested too deeply", "send a JSON object with the documented fields", ""
        except _DuplicateKey as exc:
            return str(exc), "give each key once per object", ""
        except ValueError:
            return None  # not JSON at all: the app's own parser says where
        try:
            check_depth(data, "the body")
            if not json_text_clean(text):
                check_text(Document(data, {}, "the body"))
        except UserError as exc:
            p = exc.problems[0]
            return p.message, p.fix or "send a JSON object with the documented fields", p.where
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        limit = self.limit_of(scope.get("path", ""))
        size = headers.get(b"content-length")
        if size is not None and (not size.isdigit() or int(size) > limit):
            return await self._refuse(send, size.decode("latin-1"), limit)
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        chunks, total, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                return
            chunk = msg.get("body", b"")
            total += len(chunk)
            if total > limit:
                return await self._refuse(send, f"more than {limit}", limit)
            chunks.append(chunk)
            more = msg.get("more_body", False)
        whole, given = b"".join(chunks), False
        if whole and b"json" in headers.get(b"content-type", b"application/json").lower():
            bad = self.strict_json(whole)
            if bad is not None:
                return await self._strict(send, *bad)

        async def replay():
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


class _DuplicateKey(ValueError):
    pass


def _strict_pairs(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(f"duplicate key {k[:100]!r} in one object (JSON readers would silently keep one of them)")
            seen.add(k)
    return out


CONTEXT_PATH = r"/v1/jobs/[^/]+/realloc-context"


class PublicPaths:
    """Pure ASGI: no JSON answer names a file of the daemon's data folder by its server path.

    A job names its trace files by their resolved paths inside ``--data-dir`` (what the daemon reads);
    they reached clients in the echoed spec, in a 422 on a trace that does not read, in a failed job's
    reason and in the decision log. Every JSON answer that holds the folder's path (its bytes as JSON
    writes them) is read and written again with :func:`planner.daemon.datafiles.public` applied: a
    path inside the folder relative to it (as the client named it), the folder as ``<data folder>``.
    Answers that name no such path (nearly all) pass through untouched; other content types too."""

    def __init__(self, app, data_dir) -> None:
        from planner.daemon.datafiles import public_root

        self.app = app
        self.root = public_root(data_dir)
        if self.root is not None:
            self.needles = {self.root.encode(), json.dumps(self.root)[1:-1].encode(), json.dumps(self.root, ensure_ascii=False)[1:-1].encode()}

    def scrub(self, body: bytes) -> bytes:
        from planner.daemon.datafiles import public, public_text

        assert self.root is not None
        if not any(n in body for n in self.needles):
            return body
        try:
            data = json.loads(body)
        except ValueError:  # (not JSON after all) the text itself
            return public_text(body.decode("utf-8", "replace"), self.root).encode()
        return json.dumps(public(data, self.root), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.root is None:
            return await self.app(scope, receive, send)
        start: Optional[dict] = None
        chunks: list[bytes] = []

        async def filtered(msg):
            nonlocal start
            if msg["type"] == "http.response.start":
                ctype = dict(msg.get("headers") or []).get(b"content-type", b"")
                if b"json" in ctype.lower():
                    start = msg  # held until the whole body is in
                    return
            elif msg["type"] == "http.response.body" and start is not None:
                chunks.append(msg.get("body", b""))
                if msg.get("more_body", False):
                    return
                body = self.scrub(b"".join(chunks))
                headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
                await send(dict(start, headers=headers + [(b"content-length", str(len(body)).encode())]))
                start = None
                return await send({"type": "http.response.body", "body": body, "more_body": False})
            await send(msg)

        return await self.app(scope, receive, filtered)


class TelemetryRefusals:
    """Pure ASGI: count the telemetry posts refused before the ingest sees them, by the answer's status
    (``planner_telemetry_rejected_total``: 422 ``invalid``, 413 ``too-large``; the ingest counts its own
    404 ``unknown-job``, 409 ``not-placed`` and ``out-of-order``). Whichever layer refuses (the body limit, the strict
    JSON reader, the schema), the count follows the status the client got."""

    REASONS = {422: "invalid", 413: "too-large"}

    def __init__(self, app, metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") != "/v1/telemetry" or scope.get("method") != "POST" or self.metrics is None:
            return await self.app(scope, receive, send)

        async def counting(msg):
            if msg["type"] == "http.response.start" and msg["status"] in self.REASONS:
                self.metrics.telemetry_rejected.labels(self.REASONS[msg["status"]]).inc()
            await send(msg)

        return await self.app(scope, receive, counting)


def asgi_app(service, *, max_body_bytes: int = 1 << 20, max_context_bytes: int = 16 << 20, guard: Optional[dict] = None):
    """What the server runs: the app behind the body limit (``max_context_bytes`` for a reallocation context), behind
    the gate (:class:`planner.daemon.guard.Guard`: Host, token, rate, scope, audit) when ``guard`` gives its arguments."""
    inner = PublicPaths(create_app(service), getattr(getattr(service, "opts", None), "data_dir", None))
    app = TelemetryRefusals(BodyLimit(inner, max_body_bytes, routes=((CONTEXT_PATH, max_context_bytes),)), service.metrics)
    if guard is None:
        return app
    from planner.daemon.guard import Guard

    return Guard(app, **guard)


def locked_body() -> dict:
    """What a request that met a locked state file is answered (503, ``Retry-After``): nothing of it was stored."""
    return {"error": "service unavailable: the state database is locked",
            "problems": [{"field": "", "message": f"another process held the daemon's state file locked for over {busy_timeout_s():.0f} s "
                                                  "(database is locked); this request was not carried out",
                          "fix": f"retry in {LOCKED_RETRY_S} s; if it persists, the operator stops the process that holds the state "
                                 "file in a write transaction (an sqlite3 shell, a backup)"}]}


def locked_response() -> JSONResponse:
    return JSONResponse(locked_body(), status_code=503, headers={"retry-after": str(LOCKED_RETRY_S)})


# ------------------------------------------------------------------------------------- app
KIND_HELP = "only decisions of this kind (422 for any other): " + ", ".join(get_args(DecisionKind))


def create_app(service) -> FastAPI:
    """The app around a :class:`planner.daemon.service.Service` (its store, metrics and status)."""
    app = FastAPI(title="rl-planner daemon", version=__version__, docs_url=None, redoc_url=None,  # /docs: docs_ui (no CDN)
                  description="Admits RL post-training jobs, watches their telemetry, replans and applies. See docs/daemon.md.")
    from planner.daemon.docs_ui import mount_docs

    mount_docs(app)
    store, metrics = service.store, service.metrics
    roots: dict[str, type[BaseModel]] = {"/v1/jobs": JobSpec, "/v1/telemetry": TelemetrySnapshot}

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError):
        root = roots.get(request.url.path)
        ctype = request.headers.get("content-type", "")
        if request.method in ("POST", "PUT", "PATCH") and ctype and "json" not in ctype.lower() \
                and any(e["loc"][:1] == ("body",) for e in exc.errors()):
            return _err(422, "invalid request", [Problem("", f"the body was sent as {ctype[:80]!r}; the API reads JSON bodies only",
                                                         "send it with the header Content-Type: application/json")])
        body = getattr(exc, "body", None)
        if request.method in ("POST", "PUT", "PATCH") and not ctype and isinstance(body, (bytes, str)) and body \
                and any(e["loc"][:1] == ("body",) for e in exc.errors()):  # (FastAPI parses JSON only under a JSON type)
            return _err(422, "invalid request", [Problem("", "the body was sent without a Content-Type header, so it was not "
                                                             "read as JSON", "send it with the header Content-Type: application/json")])
        return _err(422, "invalid request", _problems(list(exc.errors()), body, root))

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400:  # the body could not be read as JSON at all (e.g. not UTF-8)
            return _err(422, "invalid request", [Problem("", f"the body is not valid JSON: {exc.detail}", "send a UTF-8 JSON object")])
        resp = _err(exc.status_code, str(exc.detail), [])
        for k, v in (getattr(exc, "headers", None) or {}).items():
            resp.headers[k] = v
        if exc.status_code == 405:  # Allow: the methods of every route of this path (Starlette names only the first's)
            allowed = {m for r in app.routes if isinstance(r, Route) and r.methods and r.path_regex.match(request.url.path)
                       for m in r.methods}
            resp.headers["allow"] = ", ".join(sorted(allowed))
        return resp

    @app.exception_handler(StoreError)
    async def on_store(request: Request, exc: StoreError):
        return _err(exc.status, exc.message, [Problem(exc.where, exc.message, exc.fix)])

    @app.exception_handler(StateFileError)
    async def on_state_file(request: Request, exc: StateFileError):
        # a value edited into the state file while the daemon runs: said to the operator in the log (the
        # file's path and the fix), to the client as the service's fault, without the server's paths
        log.error("%s %s: %s; %s", request.method, request.url.path, exc, exc.fix)
        text = str(exc)
        what = text[text.find("its kv value"):] if "its kv value" in text else "a value in it"
        return _err(503, "the daemon's state file holds a value it cannot use",
                    [Problem("", what[:200], "ask the daemon's operator: its log names the file and how to fix it")])

    @app.exception_handler(UserError)
    async def on_user(request: Request, exc: UserError):
        return _err(422, exc.title or "invalid request", exc.problems)

    @app.exception_handler(sqlite3.OperationalError)
    async def on_sqlite(request: Request, exc: sqlite3.OperationalError):
        if not is_locked(exc):
            return await on_internal(request, exc)
        log.warning("%s %s: the state file is locked by another process (%s): answered 503", request.method, request.url.path, exc)
        request.scope["rlp.locked"] = True  # (the gate sends this answer even when its audit row cannot be written either)
        return locked_response()

    @app.exception_handler(Exception)
    async def on_internal(request: Request, exc: Exception):  # pragma: no cover - the fuzz test asserts it never happens
        log.exception("internal error serving %s %s", request.method, request.url.path)
        return JSONResponse({"error": f"internal error: {type(exc).__name__}", "problems": []}, status_code=500)

    # ---- jobs
    @app.post("/v1/jobs", status_code=201, response_model=JobView, responses=_resp(409, 413, 422), tags=["jobs"],
              summary="Submit a job")
    def submit_job(job: JobSpec, request: Request) -> JobView:
        request.scope["rlp.job"] = job.name
        principal = request.scope.get("rlp.principal")
        rec = service.submit(job, by=principal.name if principal is not None else None)
        return JobView(**rec.as_dict())

    @app.get("/v1/jobs", response_model=JobList, responses=_resp(422), tags=["jobs"], summary="List jobs")
    def list_jobs(state: Optional[list[JobState]] = Query(None, description="only jobs in these states (repeatable)"),
                  limit: int = Query(100, ge=1, le=1000), offset: int = Query(0, ge=0, le=2**62)) -> JobList:
        states = [s.value for s in state] if state else None
        recs = store.list_jobs(states, limit=limit, offset=offset)
        counts = store.count_jobs()
        total = sum(counts[s] for s in (states or counts))
        return JobList(jobs=[JobView(**r.as_dict()) for r in recs], total=total, counts=counts)

    @app.get("/v1/jobs/{name}", response_model=JobDetail, responses=_resp(404, 422), tags=["jobs"], summary="One job and its events")
    def get_job(name: str = Path(..., pattern=NAME_PATTERN, max_length=200)) -> JobDetail:
        rec = store.get_job(name)
        group = service.group_of(name)
        return JobDetail(**rec.as_dict(), events=[JobEvent(**e) for e in store.job_events(name)], group=group)

    @app.delete("/v1/jobs/{name}", status_code=202, response_model=JobView, responses=_resp(404, 409, 422), tags=["jobs"],
                summary="Cancel a job (the loop removes it from the plan)")
    def cancel_job(name: str = Path(..., pattern=NAME_PATTERN, max_length=200)) -> JobView:
        rec = store.request_cancel(name, service.now())
        return JobView(**rec.as_dict())

    @app.post("/v1/jobs/{name}/end", status_code=202, response_model=JobView, responses=_resp(404, 409, 413, 422), tags=["jobs"],
              summary="Report the job's own end (completed or failed); the loop takes it out of the plan")
    def report_end(request: Request, name: str = Path(..., pattern=NAME_PATTERN, max_length=200),
                   report: Optional[EndReport] = Body(None)) -> JobView:
        request.scope["rlp.job"] = name
        report = report or EndReport()
        principal = request.scope.get("rlp.principal")
        rec = store.report_end(name, report.outcome, report.message, service.now(), by=principal.name if principal is not None else None)
        return JobView(**rec.as_dict())

    @app.post("/v1/nodes/{name}/revive", status_code=202, response_model=ReviveAccepted, responses=_resp(404, 422), tags=["plan"],
              summary="An operator says a node the executor declared dead is repaired: the loop clears that record")
    def revive_node(name: str = Path(..., pattern=NAME_PATTERN, max_length=200)) -> ReviveAccepted:
        from planner.daemon.adapters.solo import node_names

        known = [n for t in sorted({g.gpu_type for g in service.cluster.cluster.node_groups}) for n in node_names(service.cluster, t)]
        if name not in known:
            raise NotFound(f"this daemon's cluster has no node named '{name}'", "name",
                           "name a node of the cluster (GET /v1/cluster lists them)")
        view = store.get_kv("cluster")
        dead = None
        if view is not None:
            row = next((n for n in view.get("nodes", []) if isinstance(n, dict) and n.get("node") == name), None)
            dead = None if row is None else not bool(row.get("alive", True))
        now = service.now()
        store.request_revive(name, now)
        return ReviveAccepted(node=name, requested_at=now, dead_as_of_last_cycle=dead)

    # ---- telemetry
    nodes: list[dict] = []  # the cluster's nodes by name (planner.instances.realloc.node_index), built at the first post

    @app.post("/v1/telemetry", status_code=202, response_model=Accepted, responses=_resp(404, 409, 413, 422), tags=["telemetry"],
              summary="Post a telemetry snapshot of a placed job")
    async def post_telemetry(snapshot: TelemetrySnapshot, request: Request) -> Accepted:
        request.scope["rlp.job"] = snapshot.job
        from planner.instances.realloc import node_index, scenario_node_problems

        # its nodes must be the cluster's (names, GPU type, at most the GPUs a node has): the reallocation
        # planner builds its pools from them, so a node the cluster lacks would get GPUs allocated
        if not nodes:
            nodes.append(node_index(service.cluster))
        bad = scenario_node_problems(snapshot, service.cluster, index=nodes[0], where="this daemon's cluster",
                                     fix="or post the telemetry to the daemon whose cluster runs the job")
        if bad:
            for p in bad:
                p.source = ""
            raise UserError(bad, title="telemetry of nodes this daemon's cluster does not have")
        return Accepted(id=await service.ingest.submit(snapshot), job=snapshot.job)

    # ---- reallocation context
    @app.post("/v1/jobs/{name}/realloc-context", status_code=202, response_model=ContextAccepted, responses=_resp(404, 409, 413, 422),
              tags=["telemetry"], summary="Post a job's reallocation context (what the completion decision reads besides telemetry)")
    def post_realloc_context(request: Request, name: str = Path(..., pattern=NAME_PATTERN, max_length=200),
                             context: dict[str, Any] = Body(..., description="planner.instances.completion_io.context_to_data's "
                                                                               "JSON: version, time_s, iteration, total_gpus, "
                                                                               "free_gpus, initial, intake, components")) -> ContextAccepted:
        import time

        from planner.instances.completion_io import ContextError, context_from_data, context_to_data

        request.scope["rlp.job"] = name
        try:
            ctx = context_from_data(context, where="context")
        except ContextError as exc:
            field = exc.field[len("context."):] if exc.field.startswith("context.") else ("" if exc.field == "context" else exc.field)
            raise UserError(Problem(field, exc.message, exc.fix), title="invalid reallocation context") from None
        except (ValueError, TypeError, OverflowError) as exc:  # numbers past what the arrays hold (e.g. a 400-digit integer)
            raise UserError(Problem("", f"the context cannot be read: {str(exc)[:200]}", "send finite numbers of ordinary size"),
                            title="invalid reallocation context") from None
        # stored as the validated context written back (known fields only, finite numbers): JSON text, never pickle
        store.put_realloc_context(name, time.time(), float(ctx.time_s), int(ctx.iteration),
                                  json.dumps(context_to_data(ctx), separators=(",", ":"), allow_nan=False))
        reqs = ctx.components["rollout"].requests
        return ContextAccepted(job=name, iteration=int(ctx.iteration), time_s=float(ctx.time_s),
                               requests=int(reqs["engine"].size) if reqs is not None else 0)

    # ---- plan and decisions
    @app.get("/v1/plan", response_model=PlanView, responses=_resp(404), tags=["plan"], summary="The plan in force")
    def get_plan() -> PlanView:
        p = store.current_plan()
        if p is None:
            raise NotFound("no plan yet: no job has been admitted", "", "submit a job with POST /v1/jobs")
        return PlanView(id=p.id, status=p.status, cycle=p.cycle, created_at=p.created_at, cost_per_hour=p.cost_per_hour,
                        placement=p.placement, document=p.doc)

    @app.get("/v1/cluster", response_model=ClusterView, responses=_resp(404, 422), tags=["plan"],
             summary="What the executor runs, as of the last cycle")
    def get_cluster(job: Optional[str] = Query(None, pattern=NAME_PATTERN, max_length=200,
                                               description="only this job's components (404 for a job this daemon does not know, "
                                                           "as GET /v1/jobs/{name})")) -> ClusterView:
        if job is not None and store.job_state(job) is None:  # (a known job with nothing running: 200, no components)
            raise NotFound(f"no job named '{job}'", "job", "list jobs with GET /v1/jobs, or leave job out for every component")
        c = store.get_kv("cluster")
        if c is None:
            raise NotFound("the executor has reported nothing yet", "", "wait for the loop's next cycle (or run with an executor)")
        if job is not None:
            c = dict(c, components=[x for x in c["components"] if x.get("job") == job])
        return ClusterView(**c)

    @app.get("/v1/decisions", response_model=DecisionList, responses=_resp(422), tags=["plan"], summary="The decision log")
    def decisions(since_id: int = Query(0, ge=0, le=2**62), limit: int = Query(100, ge=1, le=1000),
                  kind: Optional[DecisionKind] = Query(None, description=KIND_HELP)) -> DecisionList:
        rows = store.decisions(since_id, limit, kind)
        return DecisionList(decisions=[DecisionView(**r) for r in rows], next_since_id=rows[-1]["id"] if rows else since_id)

    @app.get("/v1/audit", response_model=AuditList, responses=_resp(422), tags=["plan"],
             summary="The audit log: every mutating call (admin tokens only)")
    def audit(since_id: int = Query(0, ge=0, le=2**62), limit: int = Query(100, ge=1, le=1000)) -> AuditList:
        rows = store.audit(since_id, limit)
        return AuditList(entries=[AuditView(**r) for r in rows], next_since_id=rows[-1]["id"] if rows else since_id)

    # ---- health and metrics
    @app.get("/v1/health", response_model=Health, tags=["health"], summary="Role, lease, loop progress, job counts")
    def health() -> Health:
        return Health(**service.status())

    @app.get("/healthz", tags=["health"], summary="Liveness: the process serves")
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Readiness: the loop makes progress",
             responses={503: {"model": ErrorBody, "description": "the loop is stalled or stopping"}})
    def readyz():
        st = service.status()
        if not st["ready"]:  # (a loop slower than its period is degraded, not unready: it makes progress)
            return _err(503, "not ready", [Problem("", p) for p in st["problems"]])
        return {"status": "ok"}

    @app.get("/metrics", tags=["health"], summary="Prometheus metrics", response_class=Response,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
    def prom() -> Response:
        service.refresh_metrics()
        return Response(metrics.render(), media_type=metrics.content_type)

    return app
