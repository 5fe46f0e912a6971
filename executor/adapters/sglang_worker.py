"""An SGLang server as one of the executor's rollout workers (optional extra).

:class:`SGLangRolloutWorker` answers the calls the executor's migrations make on a rollout
engine (the methods of :class:`executor.workers.engine.RolloutEngine`: ``admit``, ``drain``,
``undrain``, ``export``, ``release``, ``load``, ``score``, ``save_state``, ``set_epoch``,
``ready``, ``step``) by driving one SGLang server through :class:`~executor.adapters.sglang.SGLangEngine`:

* a request record may carry ``sampling`` and / or SGLang ``sampling_params`` (read alike,
  :mod:`executor.workers.sampling`; else greedy with ``max_new_tokens = target_len``); they
  travel with the request through the ledger, so the engine that resumes a
  moved request generates with the same parameters;
* completions go to the coordinator with the worker's lease, with the request's output logprobs
  (``meta``), and are fenced like any engine's: a stale or non-owner completion is refused;
* ``drain`` pauses the server with ``mode=abort`` (SGLang's only mode that hands requests back),
  then reports each request's partial output *and its logprobs so far* to the ledger, so a kept
  engine that ``admit``s it continues the logprobs where they stopped;
* ``undrain`` (a rolled-back drain) continues generation and resumes the aborted requests on the
  same server from their partial output;
* ``score`` answers 0 for every prompt: SGLang does not expose its radix cache, so affinity
  falls back to load;
* SGLang decodes on its own: ``step`` only reports how many requests are in flight.

Config (the component's ``engine`` settings, or the worker factory's): ``url`` (required),
``timeout_s``, ``generate_timeout_s``, ``drain_grace_s`` (default 5: how long a drain waits for
answers in transit before it withdraws a request that reached the server after the pause),
``return_logprob`` (default true), ``weight_sync_backend`` (default ``nccl``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from executor.adapters.sglang import SGLangEngine
from executor.workers import sampling


class SGLangRolloutWorker:
    def __init__(self, worker_id: str, epoch: int, coord: Callable[..., Any], config: dict, fail_start: bool = False) -> None:
        if fail_start:
            raise MemoryError(f"{worker_id}: out of memory while loading weights and KV cache (injected)")
        if not config.get("url"):
            raise ValueError(f"{worker_id}: an SGLang rollout worker needs engine.url (the server's base URL)")
        self.id, self.epoch, self._coord = worker_id, epoch, coord
        self.engine = SGLangEngine(config["url"], timeout_s=float(config.get("timeout_s", 30.0)),
                                   generate_timeout_s=float(config.get("generate_timeout_s", 600.0)),
                                   drain_grace_s=float(config.get("drain_grace_s", 5.0)),
                                   return_logprob=bool(config.get("return_logprob", True)),
                                   weight_sync_backend=config.get("weight_sync_backend", "nccl"),
                                   abort_confirm_s=float(config.get("abort_confirm_s", 30.0)), rid_salt=worker_id)
        if not self.engine.healthy():
            self.engine.close()
            raise RuntimeError(f"{worker_id}: SGLang at {config['url']} does not answer /health")
        self.engine.on_finish_logprobs = self._finished
        self.draining = False
        self.finished: list[str] = []
        self.refused: list[str] = []
        self._accepted: set[str] = set()  # completions the ledger took: offering them again must not rerun them
        self._meta: dict[str, dict] = {}  # request id -> the ledger record's other fields (component, seed, ...)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ requests
    def admit(self, requests: list[dict]) -> int:
        n = 0
        for d in requests:
            t = self.engine.requests.get(d["id"])
            if t is not None and (t.state in ("running", "pending") or (t.state == "done" and d["id"] in self._accepted)):
                continue  # idempotent: a resumed handoff may offer the same request twice
            # (one that ended here but whose completion the ledger refused, e.g. it arrived after a handoff
            # moved the request away, runs again from the ledger's resume point: skipping it would lose it)
            sp = sampling.sglang_params(d)  # `sampling` and `sampling_params` alike (executor.workers.sampling)
            with self._lock:
                self._meta[d["id"]] = {k: v for k, v in d.items() if k not in ("output", "logprobs")}
            self.engine.submit(d["id"], d["prompt"], sp, d.get("output") or [], d.get("logprobs") or [],
                               d.get("return_logprob"))
            n += 1
        return n

    def _finished(self, rid: str, output: list[int], logprobs: list[float]) -> None:
        meta = {"logprobs": logprobs} if self.engine.requests[rid].return_logprob else {}
        ok = self._coord("complete", self.id, self.epoch, rid, output, meta)
        with self._lock:
            (self.finished if ok else self.refused).append(rid)
            if ok:
                self._accepted.add(rid)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def step(self) -> int:
        return len(self.engine.in_flight())

    @property
    def pending(self) -> int:  # (what the sim backend's clock looks at; SGLang decodes on its own)
        return 0

    @property
    def running(self) -> int:
        return len(self.engine.in_flight())

    # ------------------------------------------------------------------ migration
    def drain(self) -> dict:
        self.draining = True
        held = self.engine.drain()
        if held:  # the resume point of each request, with its logprobs so far, in the ledger
            self._coord("progress", self.id, self.epoch, {r["id"]: r["output"] for r in held},
                        {r["id"]: {"logprobs": r["logprobs"]} for r in held if r["return_logprob"]})
        return self.load()

    def undrain(self) -> None:
        self.engine.resume()
        self.draining = False
        for r in self.engine.export():  # aborted by the drain, not moved: continue them here
            self.engine.submit(r["id"], r["prompt"], r["sampling_params"], r["output"], r["logprobs"], r["return_logprob"])

    def export(self) -> list[dict]:
        out = []
        for r in self.engine.export():
            with self._lock:
                base = dict(self._meta.get(r["id"], {}))
            out.append({**base, "id": r["id"], "prompt": r["prompt"], "output": r["output"], "logprobs": r["logprobs"],
                        "sampling_params": r["sampling_params"], "target_len": r["max_new_tokens"]})
        return out

    def release(self, request_ids: list[str]) -> None:
        self.engine.handed_off(request_ids)

    def load(self) -> dict:
        held = self.engine.export()
        return {"pending": len(held), "running": len(self.engine.in_flight()), "finished": len(self.finished),
                "refused": len(self.refused), "cache_blocks": 0, "admitting": not self.draining}

    def score(self, prompts: list[list[int]]) -> list[int]:
        return [0] * len(prompts)  # SGLang does not expose its radix cache

    def cache_digest(self) -> list[int]:
        return []

    def save_state(self) -> dict:
        """Reboot: the unfinished requests (after a drain, with their partial output and logprobs)."""
        return {"requests": self.export()}

    def ready(self) -> bool:
        return self.engine.healthy()

    def close(self) -> None:
        self.engine.close()

    def __getstate__(self) -> dict:
        raise TypeError("an SGLang rollout worker holds a live client; it is not saved with a simulated cluster")

    def __reduce__(self):  # (the sim backend's state files pickle workers: refuse clearly)
        raise TypeError("an SGLang rollout worker holds a live client; it is not saved with a simulated cluster")


def make(args: dict, epoch: int, coord: Callable[..., Any], fail_start: bool = False,
         config: Optional[dict] = None) -> SGLangRolloutWorker:
    """Build one from a create step's args (``args["engine"]`` holds the config), for a worker registry."""
    return SGLangRolloutWorker(args["worker"]["id"], epoch, coord, config or args.get("engine") or {}, fail_start=fail_start)
