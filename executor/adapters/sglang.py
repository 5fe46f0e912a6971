"""SGLang engines over their HTTP API, as the executor's rollout engines.

Endpoints used (SGLang's native server, ``sglang.srt.entrypoints.http_server``):

* ``POST /generate`` ``{input_ids, sampling_params: {max_new_tokens}, rid}`` → ``{output_ids,
  meta_info: {id, finish_reason: {type: length|stop|abort}}}``; an aborted request answers with
  the output it had so far;
* ``POST /pause_generation`` ``{mode: abort|retract|in_place}``, ``POST /continue_generation``;
* ``POST /abort_request`` ``{rid}`` or ``{abort_all: true}`` — answers 200 even for an id it does
  not know, so it cannot tell you what was running;
* ``POST /flush_cache`` — refuses (400) unless the engine is idle;
* ``POST /init_weights_update_group``, ``POST /update_weights_from_distributed`` ``{names,
  dtypes, shapes, group_name, flush_cache}`` — weights broadcast from trainer rank 0;
* ``POST /release_memory_occupation`` / ``POST /resume_memory_occupation`` ``{tags}``;
* ``GET /health``.

SGLang offers no way to list or move in-flight requests, so this adapter keeps its own record
of every request it submitted (prompt, budget, output so far): a drain pauses the engine with
``mode=abort``, which makes every in-flight ``/generate`` return its partial output; the record
then holds exactly what must move, and a kept engine resumes each request by generating from
prompt + partial output with the remaining budget. Every call has a timeout.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import httpx


class SGLangError(RuntimeError):
    pass


@dataclass
class Tracked:
    rid: str
    prompt: list[int]
    max_new_tokens: int
    output: list[int] = field(default_factory=list)
    state: str = "pending"  # pending | running | done | aborted (partial output kept) | moved
    thread: Optional[threading.Thread] = None


class SGLangEngine:
    def __init__(self, base_url: str, *, timeout_s: float = 30.0,
                 on_finish: Optional[Callable[[str, list[int]], None]] = None) -> None:
        self.url = base_url.rstrip("/")
        self.http = httpx.Client(timeout=timeout_s)
        self.timeout_s = timeout_s
        self.on_finish = on_finish
        self.requests: dict[str, Tracked] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing
    def _post(self, path: str, body: Optional[dict] = None, ok=(200,)) -> httpx.Response:
        try:
            r = self.http.post(self.url + path, json=body or {})
        except httpx.HTTPError as exc:
            raise SGLangError(f"{self.url}{path}: {exc}") from None
        if r.status_code not in ok:
            raise SGLangError(f"{self.url}{path} answered {r.status_code}: {r.text[:200]}")
        return r

    def healthy(self) -> bool:
        try:
            return self.http.get(self.url + "/health").status_code == 200
        except httpx.HTTPError:
            return False

    # ------------------------------------------------------------------ requests
    def submit(self, rid: str, prompt: list[int], max_new_tokens: int, output: Optional[list[int]] = None) -> None:
        """Start (or resume, with ``output`` so far) a request; returns at once."""
        with self._lock:
            t = Tracked(rid, list(prompt), max_new_tokens, list(output or []), "running")
            self.requests[rid] = t
        t.thread = threading.Thread(target=self._run, args=(t,), daemon=True)
        t.thread.start()

    def _run(self, t: Tracked) -> None:
        left = t.max_new_tokens - len(t.output)
        if left <= 0:
            self._finish(t)
            return
        body = {"input_ids": t.prompt + t.output, "sampling_params": {"max_new_tokens": left}, "rid": t.rid}
        try:
            r = self.http.post(self.url + "/generate", json=body, timeout=None)
        except httpx.HTTPError:
            with self._lock:
                t.state = "aborted"
            return
        if r.status_code != 200:
            with self._lock:
                t.state = "aborted"
            return
        data = r.json()
        with self._lock:
            t.output += list(data.get("output_ids", []))
            reason = (data.get("meta_info", {}).get("finish_reason") or {}).get("type")
            if reason == "abort":
                t.state = "aborted"
                return
        self._finish(t)

    def _finish(self, t: Tracked) -> None:
        with self._lock:
            if t.state == "moved":
                return
            t.state = "done"
        if self.on_finish:
            self.on_finish(t.rid, list(t.output))

    def abort(self, rid: str) -> None:
        self._post("/abort_request", {"rid": rid})  # 200 whether or not the engine knew it

    def wait(self, rids: Optional[list[str]] = None, timeout_s: Optional[float] = None) -> None:
        end = time.time() + (timeout_s or self.timeout_s)
        for t in [self.requests[r] for r in (rids or list(self.requests))]:
            if t.thread:
                t.thread.join(max(0.0, end - time.time()))
                if t.thread.is_alive():
                    raise SGLangError(f"{self.url}: request {t.rid} still running after the deadline")

    # ------------------------------------------------------------------ migration
    def drain(self) -> list[dict]:
        """Pause with ``mode=abort``: every in-flight request returns its partial output. Returns
        every unfinished request from this adapter's own record (the engine cannot list them)."""
        self._post("/pause_generation", {"mode": "abort"})
        self.wait([r for r, t in self.requests.items() if t.state == "running"])
        return self.export()

    def export(self) -> list[dict]:
        with self._lock:
            return [{"id": t.rid, "prompt": list(t.prompt), "max_new_tokens": t.max_new_tokens, "output": list(t.output)}
                    for t in self.requests.values() if t.state in ("pending", "aborted")]

    def handed_off(self, rids: list[str]) -> None:
        with self._lock:
            for r in rids:
                if r in self.requests:
                    self.requests[r].state = "moved"

    def resume(self) -> None:
        self._post("/continue_generation")

    def flush_cache(self, deadline_s: float = 10.0) -> None:
        """Flush the prefix cache; SGLang refuses while requests run, so retry until idle."""
        end = time.time() + deadline_s
        while True:
            r = self._post("/flush_cache", ok=(200, 400))
            if r.status_code == 200:
                return
            if time.time() > end:
                raise SGLangError(f"{self.url}: cache not flushed within {deadline_s:g} s, the engine is never idle "
                                  f"({r.text[:120]}). Fix: drain it first")
            time.sleep(0.02)

    # ------------------------------------------------------------------ weights and memory
    def init_weights_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                           group_name: str, backend: str = "gloo") -> None:
        self._post("/init_weights_update_group", {"master_address": master_address, "master_port": master_port,
                                                  "rank_offset": rank_offset, "world_size": world_size,
                                                  "group_name": group_name, "backend": backend})

    def update_weights_from_distributed(self, names: list[str], dtypes: list[str], shapes: list[list[int]],
                                        group_name: str, version: str = "") -> dict:
        r = self._post("/update_weights_from_distributed", {"names": names, "dtypes": dtypes, "shapes": shapes,
                                                            "group_name": group_name, "flush_cache": True,
                                                            "weight_version": version})
        data = r.json()
        if not data.get("success"):
            raise SGLangError(f"{self.url}: weight update refused: {data.get('message')}")
        return data

    def release_memory(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        self._post("/release_memory_occupation", {"tags": list(tags)})

    def resume_memory(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        self._post("/resume_memory_occupation", {"tags": list(tags)})


def hand_off(src: SGLangEngine, dst: SGLangEngine) -> list[str]:
    """Workload migration between two SGLang engines: drain ``src``, resume its requests on ``dst``
    from their partial output. Returns the moved request ids."""
    moved = src.drain()
    for r in moved:
        dst.submit(r["id"], r["prompt"], r["max_new_tokens"], r["output"])
    src.handed_off([r["id"] for r in moved])
    return [r["id"] for r in moved]
