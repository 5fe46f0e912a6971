"""SGLang engines over their HTTP API, as the executor's rollout engines (optional extra).

Endpoints used (SGLang's native server, ``sglang.srt.entrypoints.http_server``; request bodies
are the dataclasses of ``sglang.srt.managers.io_struct``):

* ``POST /generate`` (``GenerateReqInput``) ``{input_ids, sampling_params, rid, return_logprob,
  top_logprobs_num}`` → ``{output_ids, meta_info: {id, finish_reason: {type: length|stop|abort,
  matched?}, output_token_logprobs: [[logprob, token_id, text], ...]}}``. ``sampling_params`` are
  SGLang's (``docs/basic_usage/sampling_params``): ``max_new_tokens, min_new_tokens, temperature,
  top_p, top_k, min_p, stop, stop_token_ids, ignore_eos, repetition_penalty, frequency_penalty,
  presence_penalty, sampling_seed, ...``; an aborted request answers with the output it had;
* ``POST /pause_generation`` (``PauseGenerationReqInput``) ``{mode}``:
  ``abort`` aborts and returns every request being processed (each ``/generate`` answers with
  its partial output); ``in_place`` stops the scheduler with the requests and their KV cache
  where they are (they continue after ``/continue_generation`` with the old KV cache; a flush
  fails while they are in the running batch); ``retract`` stops it and moves the running
  requests back to the waiting queue (the KV cache may be flushed; it is recomputed on
  continue). ``POST /continue_generation``;
* ``POST /abort_request`` ``{rid}`` or ``{abort_all: true}``: answers 200 even for an id it does
  not know, so it cannot tell you what was running; for a known rid the scheduler aborts every
  request whose rid *starts with* it (``req.rid.startswith(rid)``);
* a ``/generate`` whose ``rid`` is registered already is refused: 400 ``Duplicate request ID``;
* ``POST /flush_cache``: refuses (400) unless the engine is idle;
* ``POST /init_weights_update_group`` (``InitWeightsUpdateGroupReqInput``: ``master_address,
  master_port, rank_offset, world_size, group_name, backend`` with ``backend="nccl"`` by
  default), ``POST /update_weights_from_distributed`` ``{names, dtypes, shapes, group_name,
  flush_cache, weight_version}``: weights broadcast from trainer rank 0;
* ``POST /destroy_weights_update_group`` ``{group_name}``; ``POST /update_weights_from_tensor``
  ``{serialized_named_tensors (one per TP rank), load_format, flush_cache, weight_version}``
  (colocated engines: the tensors are shared, not broadcast);
* ``POST /release_memory_occupation`` / ``POST /resume_memory_occupation`` ``{tags}``: the
  scheduler asserts it is fully idle before releasing ("release_memory_occupation should be
  called only when server is idle"): a failed assertion takes the server down. Requests
  retracted by a paused engine may wait;
* ``GET /get_server_info``: ``version`` and the server arguments;
* ``GET /health``.

How the adapter uses them:

* **Requests and moves.** SGLang offers no way to list or move in-flight requests, so the
  adapter keeps its own record of every request it submitted: prompt, the *full* sampling
  parameters, whether logprobs were asked, output and output logprobs so far. A drain pauses
  with ``mode=abort`` (the only mode that hands requests back). A ``/generate`` sent just before
  the pause may reach the server after it: in SGLang >= 0.5.6 it is then *registered* (its rid
  is taken) and waits at the pause gate, where the pause's abort does not reach it and which does
  not watch for its client going away. So once the engine has answered the pause, the drain
  waits ``drain_grace_s`` for the answers in transit and *withdraws* the rest: it aborts each by
  its rid and waits (``abort_confirm_s``) for the call to answer ``abort``, the confirmation that
  the server let the request go; only then is it handed over (a request whose abort is not
  confirmed fails the drain, which the executor rolls back: it is never run twice). Every
  ``/generate`` of a request carries a new *wire rid*: a fixed-length digest of (engine salt,
  request id, attempt), so no rid is a prefix of another (an abort never hits a neighbour such
  as ``3-10`` for ``3-1``) and a resubmission never meets "Duplicate request ID". A kept engine
  resumes each one
  from prompt + partial output with the same sampling parameters, the token budget and
  ``min_new_tokens`` reduced by what was already generated, and the logprobs appended to the
  ones already received, so a greedy request ends with exactly its uninterrupted tokens and
  logprobs. (What cannot carry over: frequency/presence penalties count output tokens, and the
  generated prefix becomes prompt on the new engine; a sampled, non-greedy request continues
  from a new random state.)
* **Pauses that keep requests.** When the requests stay on the engine (a neighbour moves, the
  engine's own weights are updated) :meth:`SGLangEngine.pause` uses ``in_place`` (no re-prefill
  at all, the KV cache stays) or, where the cache must be flushed or the memory released,
  ``retract`` (the requests stay queued in the engine: no re-submission, their KV is recomputed
  once on continue); ``abort`` is used only to move requests away.
* **Memory** is released only when the engine is idle by this adapter's own record (nothing in
  flight, or only requests retracted by a pause): otherwise :class:`SGLangError` says what runs
  and how to get idle, before the server's assertion would.
* **Weights** are synced over NCCL by default (SGLang's default, GPUs); tests pass ``gloo``.
* **Async client.** Requests are coroutines on one event loop thread (``httpx.AsyncClient``), not
  a thread each; every control call has a timeout (``timeout_s``), and a ``/generate`` has its
  own (``generate_timeout_s``), after which the request is aborted on the server and kept as
  aborted here, with its partial output, so it can be resumed. A ``/generate`` whose connection
  fails without an answer (a kept-alive connection the server closes, at its keep-alive timeout,
  just as the call reuses it) is sent again (``connection_retries`` times, each with a new wire
  rid, after aborting the failed one on the server): only a drain resumes a request kept as
  aborted, so on an engine that is not draining it would otherwise never end. Idle connections
  are dropped after ``KEEPALIVE_EXPIRY_S``, before uvicorn's default keep-alive timeout (5 s).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import httpx

PAUSE_MODES = ("abort", "retract", "in_place")
KEEPALIVE_EXPIRY_S = 2.0


class SGLangError(RuntimeError):
    pass


@dataclass
class Tracked:
    rid: str
    prompt: list[int]
    sampling: dict  # SGLang sampling_params as first submitted (max_new_tokens: the request's whole budget)
    return_logprob: bool = True
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    state: str = "pending"  # pending | running | done | aborted (partial output kept) | moved
    finish: dict = field(default_factory=dict)
    future: Any = None
    attempt: int = 0  # /generate calls made for it (each with its own wire rid)
    wire: str = ""  # the rid of the latest call, as the server knows it

    @property
    def max_new_tokens(self) -> int:
        return int(self.sampling.get("max_new_tokens", 128))


WIRE_RID_LEN = 32


def wire_rid(salt: str, rid: str, attempt: int) -> str:
    """The rid one ``/generate`` call of a request carries: fixed length, so none is a prefix of
    another (SGLang's abort matches by prefix), and new for every attempt (a resubmission is
    never a duplicate of a call the server still holds)."""
    return "rlp" + hashlib.sha256(f"{salt}\x00{rid}\x00{attempt}".encode()).hexdigest()[:WIRE_RID_LEN - 3]


def parse_version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def resumed_sampling(sampling: dict, generated: int) -> dict:
    """The sampling parameters that continue a request that already generated ``generated`` tokens:
    the same parameters, with the budget and the minimum reduced by what is done."""
    sp = dict(sampling)
    sp["max_new_tokens"] = max(0, int(sampling.get("max_new_tokens", 128)) - generated)
    if sampling.get("min_new_tokens"):
        sp["min_new_tokens"] = max(0, int(sampling["min_new_tokens"]) - generated)
    return sp


class SGLangEngine:
    def __init__(self, base_url: str, *, timeout_s: float = 30.0, generate_timeout_s: float = 600.0,
                 on_finish: Optional[Callable[[str, list[int]], None]] = None, return_logprob: bool = True,
                 weight_sync_backend: str = "nccl", drain_grace_s: float = 5.0, abort_confirm_s: float = 30.0,
                 rid_salt: str = "", connection_retries: int = 3) -> None:
        self.url = base_url.rstrip("/")
        self.connection_retries = connection_retries  # a /generate whose connection fails is sent again this often
        self.timeout_s, self.generate_timeout_s = timeout_s, generate_timeout_s
        self.drain_grace_s, self.abort_confirm_s = drain_grace_s, abort_confirm_s
        self.rid_salt = f"{rid_salt or base_url}|{time.time_ns()}"  # a new client never reuses an old one's rids
        self.on_finish = on_finish
        self.on_finish_logprobs: Optional[Callable[[str, list[int], list[float]], None]] = None
        self.return_logprob = return_logprob
        self.weight_sync_backend = weight_sync_backend
        self.requests: dict[str, Tracked] = {}
        self.paused: Optional[str] = None  # the pause mode in force, if any
        self.released: Optional[set[str]] = None  # memory tags this client released (None: unknown, none released by it)
        self._closed = False
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"sglang-{self.url}", daemon=True)
        self._thread.start()
        self.http = self._sync(self._client())

    async def _client(self) -> httpx.AsyncClient:
        # idle connections are dropped here before the server's keep-alive timeout (uvicorn's, 5 s by default)
        # closes them, so a call seldom goes out on a connection the server is closing
        return httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s), limits=httpx.Limits(
            max_connections=None, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_EXPIRY_S))

    def _sync(self, coro, timeout: Optional[float] = None) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout if timeout is not None else self.timeout_s + 5)
        except TimeoutError:
            fut.cancel()
            raise SGLangError(f"{self.url}: no answer within {timeout or self.timeout_s + 5:g} s") from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def shut() -> None:  # requests still out end here (their answers would be dropped anyway)
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await self.http.aclose()

        try:  # best effort: a loaded machine may take a while to end the calls; the loop stops regardless
            self._sync(shut(), 30)
        except SGLangError:
            pass
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    # ------------------------------------------------------------------ plumbing
    async def _apost(self, path: str, body: Optional[dict] = None, ok=(200,), timeout: Optional[float] = None) -> httpx.Response:
        try:
            r = await self.http.post(self.url + path, json=body or {}, timeout=timeout or self.timeout_s)
        except httpx.HTTPError as exc:
            raise SGLangError(f"{self.url}{path}: {type(exc).__name__} {exc}") from None
        if r.status_code not in ok:
            raise SGLangError(f"{self.url}{path} answered {r.status_code}: {r.text[:200]}")
        return r

    def _post(self, path: str, body: Optional[dict] = None, ok=(200,), timeout: Optional[float] = None) -> httpx.Response:
        return self._sync(self._apost(path, body, ok, timeout), (timeout or self.timeout_s) + 5)

    def healthy(self) -> bool:
        async def get():
            try:
                return (await self.http.get(self.url + "/health", timeout=self.timeout_s)).status_code == 200
            except httpx.HTTPError:
                return False
        return self._sync(get())

    # ------------------------------------------------------------------ requests
    def submit(self, rid: str, prompt: list[int], sampling_params: Union[int, dict], output: Optional[list[int]] = None,
               logprobs: Optional[list[float]] = None, return_logprob: Optional[bool] = None) -> None:
        """Start (or resume, with ``output`` and ``logprobs`` so far) a request; returns at once.
        ``sampling_params``: SGLang's, or just ``max_new_tokens`` as an int."""
        sp = {"max_new_tokens": sampling_params} if isinstance(sampling_params, int) else dict(sampling_params)
        t = Tracked(rid, list(prompt), sp, self.return_logprob if return_logprob is None else return_logprob,
                    list(output or []), list(logprobs or []), "running")
        with self._lock:
            prev = self.requests.get(rid)
            t.attempt = prev.attempt if prev is not None else 0  # a resubmission goes on with new wire rids
            self.requests[rid] = t
        t.future = asyncio.run_coroutine_threadsafe(self._generate(t), self._loop)

    async def _generate(self, t: Tracked) -> None:
        if t.max_new_tokens - len(t.output) <= 0 or t.finish.get("type") == "stop":
            await asyncio.to_thread(self._finish, t)
            return
        for retry in range(self.connection_retries + 1):
            t.attempt += 1
            t.wire = wire_rid(self.rid_salt, t.rid, t.attempt)
            body = {"input_ids": t.prompt + t.output, "sampling_params": resumed_sampling(t.sampling, len(t.output)),
                    "rid": t.wire, "return_logprob": t.return_logprob}
            try:
                r = await self.http.post(self.url + "/generate", json=body, timeout=self.generate_timeout_s)
                break
            except httpx.TimeoutException:
                try:  # the server would go on: abort it there; the partial output is lost with the answer
                    await self._apost("/abort_request", {"rid": t.wire})
                except SGLangError:
                    pass
                self._abort(t, f"no answer within {self.generate_timeout_s:g} s")
                return
            except httpx.TransportError as exc:
                # The connection failed without an answer: typically a kept-alive connection that the server
                # closed (its keep-alive timeout) just as this call reused it. Nothing but a drain resumes an
                # aborted request, so on an engine that is not draining the request would wait forever: send
                # it again (a new wire rid, from the output it had), after aborting the call on the server in
                # case it got there. A drain hands it over instead.
                if retry < self.connection_retries and self.paused != "abort" and not self._closed and t.state == "running":
                    try:
                        await self._apost("/abort_request", {"rid": t.wire})
                    except SGLangError:
                        pass
                    await asyncio.sleep(0.05 * 2 ** retry)
                    continue
                self._abort(t, f"{type(exc).__name__}: {exc}")
                return
            except httpx.HTTPError as exc:
                self._abort(t, f"{type(exc).__name__}: {exc}")
                return
        if r.status_code != 200:
            self._abort(t, r.text[:200])
            return
        data = r.json()
        meta = data.get("meta_info") or {}
        with self._lock:
            if t.state != "running":  # withdrawn meanwhile: the answer is dropped, the request resumes from before it
                return
            t.output += list(data.get("output_ids", []))
            if t.return_logprob:
                t.logprobs += [float(x[0]) for x in meta.get("output_token_logprobs") or []]
            t.finish = meta.get("finish_reason") or {}
            if t.finish.get("type") == "abort":
                t.state = "aborted"
                return
        await asyncio.to_thread(self._finish, t)  # the callback may block (a coordinator call): not on the loop

    def _abort(self, t: Tracked, message: str) -> bool:
        """Mark a running request aborted (kept with its output so far, to be resumed); False if it
        had already ended or been withdrawn."""
        with self._lock:
            if t.state != "running":
                return False
            t.state, t.finish = "aborted", {"type": "abort", "message": message}
            return True

    def _finish(self, t: Tracked) -> None:
        with self._lock:
            if t.state != "running":  # moved, or withdrawn at a drain
                return
            t.state = "done"
        if self.on_finish:
            self.on_finish(t.rid, list(t.output))
        if self.on_finish_logprobs:
            self.on_finish_logprobs(t.rid, list(t.output), list(t.logprobs))

    def abort(self, rid: str) -> None:
        """Abort a request by its id (the wire rid of its latest call if it is tracked here)."""
        t = self.requests.get(rid)
        self._post("/abort_request", {"rid": t.wire if t is not None and t.wire else rid})  # 200, known or not

    def _unanswered(self, rids: list[str], timeout_s: float) -> list[Tracked]:
        """Wait up to ``timeout_s`` for these requests' calls to end; the ones still out."""
        end, left = time.time() + timeout_s, []
        for t in [self.requests[r] for r in rids]:
            if t.future is None:
                continue
            try:
                t.future.result(max(0.0, end - time.time()))
            except TimeoutError:
                left.append(t)
            except CancelledError:
                pass
        return left

    def wait(self, rids: Optional[list[str]] = None, timeout_s: Optional[float] = None) -> None:
        left = self._unanswered(rids or list(self.requests), timeout_s or self.timeout_s)
        if left:
            raise SGLangError(f"{self.url}: request {left[0].rid} still running after the deadline"
                              + (f" (and {len(left) - 1} more)" if len(left) > 1 else ""))

    def in_flight(self) -> list[str]:
        with self._lock:
            return [r for r, t in self.requests.items() if t.state == "running"]

    # ------------------------------------------------------------------ pauses and moves
    def pause(self, mode: str = "in_place") -> None:
        """Stop generating, keeping the requests on the engine: ``in_place`` (KV cache kept: no
        re-prefill) or ``retract`` (requests back to the engine's waiting queue; the cache may then be
        flushed or the memory released, and their KV is recomputed on :meth:`resume`). ``abort``
        hands the requests back instead: use :meth:`drain` for that."""
        if mode not in PAUSE_MODES:
            raise SGLangError(f"pause mode {mode!r}: use one of {', '.join(PAUSE_MODES)}")
        self._post("/pause_generation", {"mode": mode})
        self.paused = mode

    def drain(self) -> list[dict]:
        """Pause with ``mode=abort``: every in-flight request returns its partial output. Returns
        every unfinished request from this adapter's own record (the engine cannot list them)."""
        self._post("/pause_generation", {"mode": "abort"})
        self.paused = "abort"
        # Every request the scheduler had is answered now; one whose call reached the server after the
        # pause is registered and waits at the pause gate, which the pause's abort does not reach and
        # which does not notice a client going away: abort it by its rid and wait for the answer.
        late = self._unanswered(self.in_flight(), self.drain_grace_s)
        end = time.time() + self.abort_confirm_s
        sent: dict[str, str] = {}
        while True:
            left = [t for t in late if t.future is not None and not t.future.done()]
            if not left or time.time() > end:
                break
            for t in left:  # (a call still on its way has no rid on the server yet: sent once it has)
                if t.wire and sent.get(t.rid) != t.wire:
                    self._post("/abort_request", {"rid": t.wire})
                    sent[t.rid] = t.wire
            time.sleep(0.01)
        if left:
            raise SGLangError(f"{self.url}: the abort of request {left[0].rid} (rid {left[0].wire}) was not confirmed within "
                              f"{self.abort_confirm_s:g} s" + (f" (and {len(left) - 1} more)" if len(left) > 1 else "")
                              + "; it is not handed over (it could run twice). Fix: check the server's health, then "
                              "retry the drain")
        return self.export()

    def export(self) -> list[dict]:
        """The unfinished requests, with what a kept engine needs to continue each one exactly."""
        with self._lock:
            return [{"id": t.rid, "prompt": list(t.prompt), "sampling_params": dict(t.sampling),
                     "max_new_tokens": t.max_new_tokens, "return_logprob": t.return_logprob, "output": list(t.output),
                     "logprobs": list(t.logprobs)} for t in self.requests.values() if t.state in ("pending", "aborted")]

    def handed_off(self, rids: list[str]) -> None:
        with self._lock:
            for r in rids:
                if r in self.requests:
                    self.requests[r].state = "moved"

    def resume(self) -> None:
        self._post("/continue_generation")
        self.paused = None

    def flush_cache(self, deadline_s: float = 10.0) -> None:
        """Flush the prefix cache; SGLang refuses while requests run, so retry until idle."""
        end = time.time() + deadline_s
        while True:
            r = self._post("/flush_cache", ok=(200, 400))
            if r.status_code == 200:
                return
            if time.time() > end:
                raise SGLangError(f"{self.url}: cache not flushed within {deadline_s:g} s, the engine is never idle "
                                  f"({r.text[:120]}). Fix: drain it, or pause it with mode=retract, first")
            time.sleep(0.02)

    # ------------------------------------------------------------------ weights and memory
    def init_weights_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                           group_name: str, backend: Optional[str] = None) -> None:
        """Join the trainer's weight-sync group (NCCL unless the adapter or call says otherwise)."""
        r = self._post("/init_weights_update_group", {"master_address": master_address, "master_port": master_port,
                                                      "rank_offset": rank_offset, "world_size": world_size,
                                                      "group_name": group_name, "backend": backend or self.weight_sync_backend},
                       timeout=max(self.timeout_s, 60.0))
        data = r.json()
        if data.get("success") is False:
            raise SGLangError(f"{self.url}: weight-sync group {group_name} not initialised: {data.get('message')}")

    def check_update(self, flush_cache: bool) -> None:
        """SGLang flushes the cache after a weight update and *asserts* that the flush worked; a paused
        engine takes the update at once (no wait for its requests), so with requests held in its running
        batch (``pause(mode=in_place)``) the flush fails and the assertion takes the server down. Refused
        here instead, with the way out."""
        held = self.in_flight() if self.paused == "in_place" else []
        if flush_cache and held:
            raise SGLangError(f"{self.url}: a weight update with flush_cache while {len(held)} request(s) are held by a "
                              f"pause with mode=in_place (e.g. {held[0]}) would fail SGLang's 'Cache flush failed after "
                              "updating weights' assertion and take the server down. Fix: pass flush_cache=False (the "
                              "held requests keep the KV cache of the old weights), or pause with mode=retract or drain first")

    def update_weights_from_distributed(self, names: list[str], dtypes: list[str], shapes: list[list[int]],
                                        group_name: str, version: str = "", flush_cache: bool = True) -> dict:
        self.check_update(flush_cache)
        r = self._post("/update_weights_from_distributed", {"names": names, "dtypes": dtypes, "shapes": shapes,
                                                            "group_name": group_name, "flush_cache": flush_cache,
                                                            "weight_version": version}, timeout=max(self.timeout_s, 120.0))
        data = r.json()
        if not data.get("success"):
            raise SGLangError(f"{self.url}: weight update refused: {data.get('message')}")
        return data

    def release_memory(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        """Release GPU memory: only when idle (SGLang asserts it). Requests retracted by a pause may wait."""
        running = self.in_flight()
        if running and self.paused != "retract":
            raise SGLangError(f"{self.url}: cannot release memory while {len(running)} request(s) are in flight "
                              f"(e.g. {running[0]}); SGLang releases only when idle. Fix: drain the engine, or "
                              f"pause it with mode=retract, first")
        self._post("/release_memory_occupation", {"tags": list(tags)})
        self.released = (self.released or set()) | set(tags)

    def server_info(self) -> dict:
        """``/get_server_info``: the version and the server's arguments."""
        async def get():
            try:
                return await self.http.get(self.url + "/get_server_info", timeout=self.timeout_s)
            except httpx.HTTPError as exc:
                raise SGLangError(f"{self.url}/get_server_info: {type(exc).__name__} {exc}") from None
        r = self._sync(get())
        if r.status_code != 200:
            raise SGLangError(f"{self.url}/get_server_info answered {r.status_code}: {r.text[:200]}")
        return r.json()

    def destroy_weights_group(self, group_name: str) -> bool:
        """Leave a weight-sync group; False if the server had none of that name."""
        return bool(self._post("/destroy_weights_update_group", {"group_name": group_name}).json().get("success"))

    def update_weights_from_tensor(self, serialized_per_rank: list[str], version: str = "", flush_cache: bool = True,
                                   load_format: Optional[str] = None) -> dict:
        """Colocated engines: the named tensors, serialised once per TP rank."""
        self.check_update(flush_cache)
        r = self._post("/update_weights_from_tensor", {"serialized_named_tensors": serialized_per_rank,
                                                       "load_format": load_format, "flush_cache": flush_cache,
                                                       "weight_version": version}, timeout=max(self.timeout_s, 120.0))
        data = r.json()
        if not data.get("success"):
            raise SGLangError(f"{self.url}: weight update refused: {data.get('message')}")
        return data

    def resume_memory(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        """Take back memory released with these tags. SGLang's scheduler removes each tag from the
        released ones (``offload_tags.remove``): a tag that is not released raises there and takes the
        server down, so one this client knows it did not release (or resumed already) is refused."""
        if self.released is not None and not set(tags) <= self.released:
            missing = sorted(set(tags) - self.released)
            raise SGLangError(f"{self.url}: cannot resume memory tag(s) {', '.join(missing)}: not released (released: "
                              f"{', '.join(sorted(self.released)) or 'none'}); SGLang's scheduler fails on a tag it did not "
                              "release and the server goes down. Fix: resume only the tags release_memory was given")
        self._post("/resume_memory_occupation", {"tags": list(tags)})
        if self.released is not None:
            self.released -= set(tags)


def hand_off(src: SGLangEngine, dst: SGLangEngine) -> list[str]:
    """Workload migration between two SGLang engines: drain ``src``, resume its requests on ``dst``
    from their partial output and logprobs, with their sampling parameters. Returns the moved ids."""
    moved = src.drain()
    for r in moved:
        dst.submit(r["id"], r["prompt"], r["sampling_params"], r["output"], r["logprobs"], r["return_logprob"])
    src.handed_off([r["id"] for r in moved])
    return [r["id"] for r in moved]
