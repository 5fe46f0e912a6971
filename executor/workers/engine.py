"""A rollout engine: a request queue, continuous-batching decode over time, a prefix cache.

It stands in for an SGLang/vLLM engine on CPU with the parts that migrations touch:

* ``pending`` requests wait for a batch slot; ``running`` ones decode one token per tick;
* a **prefix cache** of fixed-size token blocks (radix-style: a prompt's cached prefix is the
  longest run of its leading blocks present), LRU-evicted at ``cache_blocks``;
* output tokens are a deterministic function of (request seed, position), so a request that
  moves between engines mid-generation must end with exactly the output it would have had;
* completions and progress go to the coordinator with the engine's lease epoch; a refused
  completion (stale lease, not the owner) is dropped, never retried as success.

``drain()`` stops admission and decoding; ``export()`` hands out every unfinished request with
its partial output; ``admit()`` takes requests (new or handed over) and resumes them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from executor.workers import sampling

BLOCK = 16


def token_at(seed: int, pos: int, vocab: int = 32000) -> int:
    return (seed * 1_000_003 + pos * 7_919 + (pos * pos) % 104_729) % vocab


def expected_output(req: dict) -> list[int]:
    return [token_at(req["seed"], i) for i in range(req["target_len"])]


def block_keys(prompt: list[int]) -> list[tuple]:
    """Keys of the full blocks of a prompt; key i covers tokens [0, (i+1)*BLOCK)."""
    return [tuple(prompt[: (i + 1) * BLOCK]) for i in range(len(prompt) // BLOCK)]


@dataclass
class EngineConfig:
    max_batch: int = 64
    cache_blocks: int = 4096
    progress_every: int = 8  # report partial output to the ledger every N tokens
    tokens_per_tick: int = 1


@dataclass
class Req:
    id: str
    prompt: list[int]
    seed: int
    target_len: int
    output: list[int] = field(default_factory=list)
    turns_done: int = 0
    age: int = 0
    sampling: dict = field(default_factory=dict)  # carried across every move (e.g. temperature)

    def as_dict(self) -> dict:
        return {"id": self.id, "prompt": self.prompt, "seed": self.seed, "target_len": self.target_len,
                "output": list(self.output), "turns_done": self.turns_done, "age": self.age, "sampling": dict(self.sampling)}


class RolloutEngine:
    def __init__(self, worker_id: str, epoch: int, coord: Callable[..., Any], config: Optional[dict] = None,
                 fail_start: bool = False) -> None:
        if fail_start:
            raise MemoryError(f"{worker_id}: out of memory while loading weights and KV cache (injected)")
        self.id, self.epoch, self._coord = worker_id, epoch, coord
        self.cfg = EngineConfig(**(config or {}))
        self.pending: list[Req] = []
        self.running: dict[str, Req] = {}
        self.cache: "OrderedDict[tuple, None]" = OrderedDict()
        self.admitting = True
        self.decoding = True
        self.finished: list[str] = []
        self.refused: list[str] = []
        self.cache_hits_tokens = 0
        self._seen_done: set[str] = set()  # finished here: offering them again must not rerun them
        self._lock = threading.RLock()
        self._since_progress = 0

    # ------------------------------------------------------------------ requests in
    def admit(self, requests: list[dict]) -> int:
        with self._lock:
            have = {r.id for r in self.pending} | set(self.running) | self._seen_done
            n = 0
            for d in requests:
                if d["id"] in have:
                    continue  # idempotent: a resumed handoff may offer the same request twice
                self.pending.append(Req(d["id"], list(d["prompt"]), d["seed"], d["target_len"], list(d.get("output", [])),
                                        d.get("turns_done", 0), d.get("age", 0), sampling.merged(d)))
                n += 1
            return n

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    # ------------------------------------------------------------------ prefix cache
    def cached_prefix(self, prompt: list[int]) -> int:
        n = 0
        for k in block_keys(prompt):
            if k in self.cache:
                n += BLOCK
            else:
                break
        return n

    def score(self, prompts: list[list[int]]) -> list[int]:
        """Cached prefix length (tokens) of each prompt: the router's cache-affinity signal."""
        with self._lock:
            return [self.cached_prefix(p) for p in prompts]

    def cache_digest(self) -> list[int]:
        """Hashes of the cached blocks (what a router needs for affinity)."""
        with self._lock:
            return [hash(k) for k in self.cache]

    def _insert(self, prompt: list[int]) -> None:
        for k in block_keys(prompt):
            self.cache[k] = None
            self.cache.move_to_end(k)
        while len(self.cache) > self.cfg.cache_blocks:
            self.cache.popitem(last=False)

    # ------------------------------------------------------------------ decode
    def step(self) -> int:
        """One decode iteration: admit into free batch slots, one token each, finish the done ones."""
        with self._lock:
            if not self.decoding:
                return 0
            if self.admitting or self.pending:
                self.pending.sort(key=lambda r: (-r.turns_done, -self.cached_prefix(r.prompt), -r.age))
                while self.pending and len(self.running) < self.cfg.max_batch:
                    r = self.pending.pop(0)
                    self.cache_hits_tokens += self.cached_prefix(r.prompt)
                    self._insert(r.prompt)
                    self.running[r.id] = r
            for r in self.pending:
                r.age += 1
            done = []
            for r in self.running.values():
                for _ in range(self.cfg.tokens_per_tick):
                    if len(r.output) < r.target_len:
                        self._advance(r)
                if len(r.output) >= r.target_len:
                    done.append(r)
            produced = len(self.running)
            self._since_progress += 1
            updates = {}
            if self._since_progress >= self.cfg.progress_every:
                self._since_progress = 0
                updates = {r.id: list(r.output) for r in self.running.values() if r not in done}
            epoch = self.epoch
        # Side effects outside the lock, each fenced by the coordinator.
        if updates:
            self._coord("progress", self.id, epoch, updates)
        for r in done:
            meta = self._result_meta(r)
            ok = self._coord("complete", self.id, epoch, r.id, list(r.output), *([meta] if meta else []))
            with self._lock:
                self.running.pop(r.id, None)
                if ok:
                    self._seen_done.add(r.id)
                    self.finished.append(r.id)
                else:  # not ours (moved, or our lease is gone): drop it; the ledger's owner runs it
                    self.refused.append(r.id)
        return produced

    def _advance(self, r: Req) -> None:
        """Produce ``r``'s next output token (the toy: a function of the request's seed and position)."""
        r.output.append(token_at(r.seed, len(r.output)))

    def _result_meta(self, r: Req) -> dict:
        """What a completion carries besides the tokens (the real engine: the logprobs)."""
        return {}

    # ------------------------------------------------------------------ migration
    def drain(self) -> dict:
        with self._lock:
            self.admitting = False
            self.decoding = False
            return self.load()

    def undrain(self) -> None:
        with self._lock:
            self.admitting = True
            self.decoding = True

    def export(self) -> list[dict]:
        with self._lock:
            return [r.as_dict() for r in list(self.running.values()) + self.pending]

    def release(self, request_ids: list[str]) -> None:
        with self._lock:
            ids = set(request_ids)
            self.pending = [r for r in self.pending if r.id not in ids]
            for i in ids:
                self.running.pop(i, None)

    def load(self) -> dict:
        with self._lock:
            return {"pending": len(self.pending), "running": len(self.running), "finished": len(self.finished),
                    "refused": len(self.refused), "cache_blocks": len(self.cache), "admitting": self.admitting}

    def save_state(self) -> dict:
        """Reboot: everything needed to restart elsewhere (unfinished requests; the cache is not kept)."""
        return {"requests": self.export()}

    def update_weights(self, states: list[dict], version: int) -> int:
        """Weight sync: the toy's tokens do not depend on weights; it only records the version."""
        self.weights_version = version
        return version

    def ready(self) -> bool:
        return True

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.pop("_lock", None)
        d["_coord"] = None
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._lock = threading.RLock()
