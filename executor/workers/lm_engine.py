"""A rollout engine that really decodes the tiny LM (:mod:`executor.workers.tinylm`) with a KV cache.

The scheduling, prefix-cache index, ledger reports, drain / export / admit are the
:class:`~executor.workers.engine.RolloutEngine`'s; what differs is how a token is made:

* a request's first decode step **prefills** its prompt (one forward over the prompt tokens,
  keeping every layer's and head's keys and values) and then **replays** the output it already
  has, one token per forward, exactly as those tokens were decoded; after that each step is one
  forward of the last token against the cache. A request handed over mid-generation
  (workload migration, reboot) arrives with its partial output and no cache: the new engine
  re-prefills and continues. Because a replayed token goes through the same computation as the
  original decode step, the continuation — and the logprob of every token — is bit-identical to
  an uninterrupted run (the tests check this after every migration and fault);
* sampling per request: ``sampling.temperature`` 0 (default) is greedy; otherwise a sample from
  ``softmax(logits / T)`` drawn with a generator seeded by (request seed, position), so the draw
  does not depend on where or when the token is decoded;
* every token's logprob (``log_softmax(logits / T)``, ``T = 1`` for greedy) is returned with the
  completion (``meta.logprobs`` in the ledger);
* :meth:`update_weights` takes the trainer's parameters (weight sync, any TP layout).

Decoding is per request (batch of one per forward): the batch a request shares a step with
never changes its numbers.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import torch

from executor.workers import sampling, shardstate
from executor.workers import tinylm as lm
from executor.workers.engine import Req, RolloutEngine


class _Decode:
    """A request's decode state: KV cache, logits for the next token, logprobs so far."""

    __slots__ = ("kv", "next_logits", "logprobs", "pos")

    def __init__(self) -> None:
        self.kv: dict = {}
        self.next_logits: Optional[torch.Tensor] = None
        self.logprobs: list[float] = []
        self.pos = 0


def _temperature(r: Req) -> float:
    return float((r.sampling or {}).get("temperature", 0.0))


def _logprobs(logits: torch.Tensor, temp: float) -> torch.Tensor:
    return torch.log_softmax(logits / temp if temp > 0 else logits, dim=-1)


def pick(logits: torch.Tensor, temp: float, seed: int, pos: int) -> tuple[int, float]:
    """(token, its logprob) at output position ``pos``: greedy for ``temp == 0``, else seeded sampling."""
    lp = _logprobs(logits, temp)
    if temp > 0:
        g = torch.Generator().manual_seed((seed * 1_000_003 + pos * 7_919) % (2 ** 63))
        tok = int(torch.multinomial(lp.exp(), 1, generator=g))
    else:
        tok = int(torch.argmax(logits))
    return tok, float(lp[tok])


class LMEngine(RolloutEngine):
    def __init__(self, worker_id: str, epoch: int, coord: Callable[..., Any], config: Optional[dict] = None,
                 fail_start: bool = False, model: Optional[dict] = None) -> None:
        super().__init__(worker_id, epoch, coord, config, fail_start=fail_start)
        self.model = dict(model or {})
        self.spec = lm.spec_of(self.model)
        probs = lm.layout_problems(self.spec, 1)
        if probs:
            raise ValueError(f"{worker_id}: " + "; ".join(probs))
        self.P = lm.full_params(self.spec)
        self.weights_version = 0
        self._dec: dict[str, _Decode] = {}
        self.prefill_tokens = 0  # tokens computed by prefills and replays
        self.reprefill = {"requests": 0, "tokens": 0, "seconds": 0.0}  # requests that arrived with partial output

    # ------------------------------------------------------------------ decoding
    def _forward(self, tokens: list[int], d: _Decode) -> torch.Tensor:
        with torch.no_grad(), lm.one_thread():
            x = torch.tensor([tokens], dtype=torch.long)
            out = lm.forward(self.spec, self.P, x, kv=d.kv, pos0=d.pos)
        d.pos += len(tokens)
        return out[0, -1]

    def _prefill(self, r: Req) -> _Decode:
        t0 = time.perf_counter()
        d = _Decode()
        V = self.spec.vocab
        d.next_logits = self._forward([t % V for t in r.prompt], d)
        self.prefill_tokens += len(r.prompt)
        temp = _temperature(r)
        for tok in r.output:  # the partial output a moved request arrives with: replayed token by token
            d.logprobs.append(float(_logprobs(d.next_logits, temp)[tok]))
            d.next_logits = self._forward([tok], d)
            self.prefill_tokens += 1
        if r.output:
            self.reprefill["requests"] += 1
            self.reprefill["tokens"] += len(r.prompt) + len(r.output)
            self.reprefill["seconds"] += time.perf_counter() - t0
        return d

    def _advance(self, r: Req) -> None:
        d = self._dec.get(r.id)
        if d is None or len(d.logprobs) != len(r.output):
            d = self._dec[r.id] = self._prefill(r)
        assert d.next_logits is not None  # _prefill set it; nothing unsets it
        tok, lp = pick(d.next_logits, _temperature(r), r.seed, len(r.output))
        r.output.append(tok)
        d.logprobs.append(lp)
        if len(r.output) < r.target_len:
            d.next_logits = self._forward([tok], d)

    def _result_meta(self, r: Req) -> dict:
        d = self._dec.pop(r.id, None)
        return {"logprobs": list(d.logprobs) if d else [], "weights_version": self.weights_version}

    def release(self, request_ids: list[str]) -> None:
        super().release(request_ids)
        with self._lock:
            for i in request_ids:
                self._dec.pop(i, None)

    def export(self) -> list[dict]:
        """Unfinished requests with their partial output; the cache stays (a new owner re-prefills)."""
        return super().export()

    def kv_cache_bytes(self) -> int:
        """Bytes of keys and values held for unfinished requests (what a KV transfer would move)."""
        with self._lock:
            return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for d in self._dec.values() for k, v in d.kv.values())

    def kv_cache_copy(self) -> list:
        """A copy of every cached key and value (the benchmark's in-process baseline for a KV transfer)."""
        with self._lock, lm.one_thread():
            return [(k.clone(), v.clone()) for d in self._dec.values() for k, v in d.kv.values()]

    def reprefill_stats(self) -> dict:
        return dict(self.reprefill)

    def load(self) -> dict:
        out = super().load()
        with self._lock:
            out["kv_cache_tokens"] = sum(d.pos for d in self._dec.values())
        return out

    # ------------------------------------------------------------------ weight sync
    def update_weights(self, states: list[dict], version: int) -> int:
        """Take the trainer's parameters from rank states of any TP layout (``param/`` chunks);
        the KV caches are dropped (computed with the old weights). Returns the new version."""
        full = shardstate.assemble([{**s, "chunks": {k: m for k, m in s["chunks"].items() if m["fqn"].startswith("param/")}}
                                    for s in states])
        new = {}
        for p in lm.param_specs(self.spec):
            t = full.get(f"param/{p.name}")
            if t is None or tuple(t.shape) != p.shape or torch.isnan(t).any():
                raise ValueError(f"{self.id}: weight sync lacks parameter {p.name} (or part of it); send every TP rank's state")
            new[p.name] = lm.init_blocks_from(t, p)
        with self._lock:
            self.P = new
            self._dec.clear()
            self.weights_version = version
        return version

    def __getstate__(self) -> dict:
        d = super().__getstate__()
        d["_dec"] = {}  # a restored engine re-prefills (as a moved request would)
        d["P"] = {k: [t.clone() for t in v] for k, v in self.P.items()}
        return d


def reference_output(model: dict, req: dict) -> tuple[list[int], list[float]]:
    """The output and logprobs of ``req`` decoded from start to end on one engine, never moved:
    what every migration must reproduce bit for bit."""
    e = LMEngine("reference", 0, lambda *a: True, {"max_batch": 1}, model=model)
    r = Req(req["id"], list(req["prompt"]), req["seed"], req["target_len"], [], sampling=sampling.merged(req))
    e._dec.clear()
    while len(r.output) < r.target_len:
        e._advance(r)
    return list(r.output), list(e._dec[r.id].logprobs)
