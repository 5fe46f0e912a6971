"""A stand-in SGLang server with the documented behaviour the adapter depends on, awkward parts
included (each rule names what it mimics in SGLang, ``sglang.srt``):

* ``/generate`` (``GenerateReqInput``): ``sampling_params`` with ``max_new_tokens``,
  ``min_new_tokens`` (stop tokens are masked until that many tokens are out, as SGLang's
  min-new-tokens penalizer does), ``stop_token_ids`` (the stop token is the last output token;
  ``finish_reason: {type: stop, matched}``), ``temperature`` (0: greedy); ``return_logprob`` adds
  ``meta_info.output_token_logprobs`` as ``[logprob, token_id, None]`` triples;
* ``/pause_generation`` (``PauseGenerationReqInput.mode``): ``abort`` makes every in-flight
  ``/generate`` return its partial output with ``finish_reason: abort``; ``in_place`` stops
  decoding with the requests and their KV cache in place; ``retract`` stops and drops their KV
  cache (back to the waiting queue): on ``/continue_generation`` each retracted request is
  prefilled again (counted in ``prefill_tokens``), an ``in_place`` one is not;
* a ``/generate`` that arrives while the engine is paused waits at the tokenizer manager's
  pause gate (``is_pause_cond``) before it is registered: a pause with ``mode=abort`` does not
  reach it, ``/abort_request`` does not know it, and it leaves the gate (aborted, no output) only
  when its client disconnects or generation continues;
* ``/abort_request`` answers 200 for ids it never saw;
* ``/flush_cache`` answers 400 while any request is in the running batch (running, or paused
  ``in_place``); retracted requests do not block it;
* ``/release_memory_occupation`` refuses unless fully idle, as the scheduler asserts
  ("release_memory_occupation should be called only when server is idle"); requests retracted
  by a paused engine may wait (newer SGLang's ``ignore_retracted``); while released, ``/generate``
  fails;
* ``/init_weights_update_group`` (``InitWeightsUpdateGroupReqInput``, ``backend="nccl"`` by
  default): NCCL needs CUDA, so on a CPU machine it answers ``success: false``; with ``gloo``
  it joins the trainer's group and ``/update_weights_from_distributed`` receives a broadcast
  from rank 0.

Decoding is a deterministic function of the whole token prefix (and the min-new-tokens mask),
so a request resumed elsewhere from prompt + partial output must end exactly as it would have
uninterrupted, tokens and logprobs alike.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

VOCAB = 32000


def _h(prefix: list[int]) -> int:
    h = len(prefix)
    for t in prefix[-4:]:
        h = (h * 1_000_003 + t) % 2_147_483_647
    return h


def next_token(prefix: list[int], masked: frozenset = frozenset()) -> int:
    t = _h(prefix) % VOCAB
    while t in masked:  # a masked (stop) token: the next best one
        t = (t + 1) % VOCAB
    return t


def logprob(prefix: list[int], token: int) -> float:
    return -((_h(prefix + [token]) % 997) / 100.0) - 0.01


def reference(prompt: list[int], sampling, with_logprobs: bool = False):
    """The uninterrupted output of a request (and its logprobs, and its finish reason)."""
    sp = {"max_new_tokens": sampling} if isinstance(sampling, int) else dict(sampling)
    seq, out, lps, finish = list(prompt), [], [], {"type": "length"}
    stops = frozenset(sp.get("stop_token_ids") or ())
    while len(out) < sp["max_new_tokens"]:
        masked = stops if len(out) < sp.get("min_new_tokens", 0) else frozenset()
        t = next_token(seq, masked)
        lps.append(logprob(seq, t))
        seq.append(t)
        out.append(t)
        if t in stops:
            finish = {"type": "stop", "matched": t}
            break
    return (out, lps, finish) if with_logprobs else out


def make_app(tick_s: float = 0.002) -> FastAPI:
    app = FastAPI()
    st = {"paused": None, "abort_all": False, "aborted": set(), "running": {}, "released": False, "weights": {},
          "groups": {}, "version": "", "known": set(), "prefill_tokens": 0, "generate_calls": 0,
          "hold": None, "at_gate": 0}

    def in_batch() -> int:  # requests holding KV in the running batch
        return sum(1 for r in st["running"].values() if not r["retracted"])

    @app.post("/generate")
    async def generate(req: Request):
        if st["released"]:
            return JSONResponse({"error": "memory released: resume_memory_occupation first"}, status_code=400)
        body = await req.json()
        rid, seq = body["rid"], list(body["input_ids"])
        sp = body["sampling_params"]
        n, min_new = sp["max_new_tokens"], sp.get("min_new_tokens", 0)
        stops = frozenset(sp.get("stop_token_ids") or ())
        st["at_gate"] += 1
        try:
            while st["paused"] is not None:  # the pause gate: not registered yet, so no abort reaches it
                if await req.is_disconnected():  # SGLang aborts a request whose client went away
                    return {"output_ids": [], "meta_info": {"id": rid, "finish_reason": {"type": "abort"},
                                                            "completion_tokens": 0, "prompt_tokens": len(seq)}}
                await asyncio.sleep(tick_s * 5)
        finally:
            st["at_gate"] -= 1
        st["known"].add(rid)
        st["generate_calls"] += 1
        st["prefill_tokens"] += len(seq)
        out, lps, reason = [], [], {"type": "length"}
        me = {"retracted": False, "decoded": 0}
        st["running"][rid] = me
        try:
            while len(out) < n:
                if rid in st["aborted"] or st["abort_all"]:
                    reason = {"type": "abort"}
                    break
                if st["hold"] is not None and len(out) >= st["hold"]:
                    pass  # a test's hold (StandIn.hold): this request waits, as behind a slow batch
                elif st["paused"] is None:
                    if me["retracted"]:  # back from the waiting queue: its KV cache is recomputed
                        st["prefill_tokens"] += len(seq)
                        me["retracted"] = False
                    t = next_token(seq, stops if len(out) < min_new else frozenset())
                    lps.append(logprob(seq, t))
                    seq.append(t)
                    out.append(t)
                    me["decoded"] = len(out)
                    if t in stops:
                        reason = {"type": "stop", "matched": t}
                        break
                elif st["paused"] == "retract":
                    me["retracted"] = True
                await asyncio.sleep(tick_s)
        finally:
            st["running"].pop(rid, None)
        meta = {"id": rid, "finish_reason": reason, "completion_tokens": len(out), "prompt_tokens": len(body["input_ids"])}
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(lps, out)]
        return {"output_ids": out, "meta_info": meta}

    @app.post("/abort_request")
    async def abort(req: Request):
        body = await req.json()
        if body.get("abort_all"):
            st["abort_all"] = True
        else:
            st["aborted"].add(body.get("rid"))
        return {}  # 200, known id or not

    @app.post("/pause_generation")
    async def pause(req: Request):
        mode = (await req.json()).get("mode", "abort")
        if mode not in ("abort", "retract", "in_place"):
            return JSONResponse({"error": f"Invalid mode: {mode!r}"}, status_code=400)
        st["paused"] = mode
        if mode == "abort":
            st["abort_all"] = True
            while st["running"]:
                await asyncio.sleep(tick_s)
            st["abort_all"] = False
        elif mode == "retract":
            for r in st["running"].values():
                r["retracted"] = True
        return {}

    @app.post("/continue_generation")
    async def cont():
        st["paused"] = None
        return {}

    @app.post("/flush_cache")
    async def flush():
        if in_batch():
            return JSONResponse("Cache not flushed. Please check that there is no running requests.", status_code=400)
        return "Cache flushed."

    @app.post("/release_memory_occupation")
    async def release(req: Request):
        if in_batch() or (st["running"] and st["paused"] is None):
            return JSONResponse({"error": "release_memory_occupation should be called only when server is idle."},
                                status_code=400)
        st["released"] = True
        return {}

    @app.post("/resume_memory_occupation")
    async def resume(req: Request):
        st["released"] = False
        return {}

    @app.post("/init_weights_update_group")
    async def init_group(req: Request):
        body = await req.json()
        backend = body.get("backend", "nccl")
        if backend == "nccl" and not torch.cuda.is_available():
            return {"success": False, "message": "Failed to init process group: NCCL needs CUDA devices (none here)"}
        import datetime

        import torch.distributed as dist

        def join():
            store = dist.TCPStore(body["master_address"], body["master_port"], body["world_size"], False,
                                  timeout=datetime.timedelta(seconds=120))
            return dist.ProcessGroupGloo(dist.PrefixStore(body["group_name"], store), body["rank_offset"], body["world_size"],
                                         datetime.timedelta(seconds=120))

        st["groups"][body["group_name"]] = await asyncio.to_thread(join)
        return {"success": True, "message": "group initialised"}

    @app.post("/update_weights_from_distributed")
    async def update(req: Request):
        body = await req.json()
        pg = st["groups"].get(body["group_name"])
        if pg is None:
            return {"success": False, "message": f"no group {body['group_name']}"}

        def recv():
            got = {}
            for name, dt, shape in zip(body["names"], body["dtypes"], body["shapes"]):
                t = torch.empty(shape, dtype=getattr(torch, dt))
                pg.broadcast(t, 0).wait()
                got[name] = t
            return got

        st["weights"].update(await asyncio.to_thread(recv))
        st["version"] = body.get("weight_version", "")
        return {"success": True, "message": "updated"}

    @app.get("/weights_digest")
    async def digest():
        return {n: float(t.double().sum()) for n, t in st["weights"].items()} | {"_version": st["version"]}

    @app.get("/standin_stats")
    async def stats():
        return {"prefill_tokens": st["prefill_tokens"], "generate_calls": st["generate_calls"], "running": len(st["running"]),
                "in_batch": in_batch(), "at_gate": st["at_gate"], "decoded": sum(r["decoded"] for r in st["running"].values())}

    @app.get("/health")
    async def health():
        return {}

    app.state.st = st
    return app


class StandIn:
    """Run the app with uvicorn on 127.0.0.1 in a thread."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.app = make_app()
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict:
        import httpx

        return httpx.get(self.url + "/standin_stats", timeout=60).json()

    def hold(self, tokens: int | None) -> None:
        """Tests only: every request stops decoding once it has ``tokens`` output tokens, until
        ``hold(None)`` (so a move finds requests in flight however slow the machine is)."""
        self.app.state.st["hold"] = tokens

    def __enter__(self) -> "StandIn":
        self.thread.start()
        end = time.monotonic() + 120  # generous: a loaded machine starts a server slowly
        while not self.server.started and time.monotonic() < end:
            time.sleep(0.01)
        if not self.server.started:
            self.__exit__()
            raise TimeoutError(f"the SGLang stand-in did not start serving on {self.url} within 120 s")
        return self

    def __exit__(self, *a) -> None:
        self.server.should_exit = True
        self.thread.join(5)
