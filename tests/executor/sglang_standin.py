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
* a ``/generate`` registers its rid first (``_init_req_state``, as SGLang >= 0.5.6 does), then
  waits at the tokenizer manager's pause gate (``is_pause_cond``) while the engine is paused: a
  pause with ``mode=abort`` does not reach it (it is not in the scheduler yet) and it does *not*
  watch for its client going away, so a cancelled call leaves its rid registered; it leaves the
  gate when generation continues, or aborted (no output) when ``/abort_request`` names it;
* a rid already registered is refused: 400 ``Duplicate request ID: <rid>``;
* ``/abort_request`` answers 200 for ids it never saw (and does nothing for them); for a known
  rid it aborts every registered request whose rid *starts with* it, as the scheduler matches
  ``req.rid.startswith(recv_req.rid)`` (aborting ``3-1`` also aborts ``3-10`` .. ``3-19``);
* ``/flush_cache`` answers 400 while any request is in the running batch (running, or paused
  ``in_place``); retracted requests do not block it;
* ``/release_memory_occupation`` while busy fails the scheduler's assertion
  ("release_memory_occupation should be called only when server is idle"), which takes the
  server down: the call answers 500, every request in flight ends with an error, and from then
  on every endpoint (``/health`` too) answers 503. Requests retracted by a paused engine may wait
  (``ignore_retracted``); while released, ``/generate`` fails;
* a weight update (``/update_weights_from_tensor`` or ``_from_distributed``) with ``flush_cache``
  (the default) on an engine paused with requests held in its running batch (``in_place``) fails
  the scheduler's ``assert flush_cache_success, "Cache flush failed after updating weights"``
  (``scheduler_update_weights_mixin``; paused, the update does not wait for the requests), which
  takes the server down as above;
* ``/release_memory_occupation`` / ``/resume_memory_occupation`` ``{tags}`` (none: all of
  ``weights, kv_cache, cuda_graph``): the scheduler adds each released tag to its ``offload_tags``
  and a resume removes each (``offload_tags.remove``): resuming a tag that is not released raises
  ``KeyError`` in the scheduler, which takes the server down as above;
* ``/destroy_weights_update_group`` ``{group_name}``; ``/update_weights_from_tensor``
  ``{serialized_named_tensors, load_format, flush_cache, weight_version}`` (colocated engines;
  SGLang's ``MultiprocessingSerializer`` shares CUDA IPC handles, this stand-in reads the CPU
  form the worker writes when SGLang is not importable: base64 of ``torch.save``);
* ``/get_server_info`` answers ``version`` and the launch arguments (and the
  ``CUDA_VISIBLE_DEVICES`` the process saw); ``python -m tests.executor.sglang_standin`` takes
  ``sglang.launch_server``'s arguments (``--model-path --tp-size --port --host ...``) so the
  worker's launcher can start it as the server process;
* ``/init_weights_update_group`` (``InitWeightsUpdateGroupReqInput``, ``backend="nccl"`` by
  default): NCCL needs CUDA, so on a CPU machine it answers ``success: false``; with ``gloo``
  it joins the trainer's group and ``/update_weights_from_distributed`` receives a broadcast
  from rank 0.

Decoding is a deterministic function of the whole token prefix (and the min-new-tokens mask),
so a request resumed elsewhere from prompt + partial output must end exactly as it would have
uninterrupted, tokens and logprobs alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

VOCAB = 32000
ALL_TAGS = ("weights", "kv_cache", "cuda_graph")  # sglang.srt.constants.GPU_MEMORY_ALL_TYPES (no tags: all of them)


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


VERSION = "0.5.9"  # the SGLang version this stand-in answers as (inside the worker's supported range)


def make_app(tick_s: float = 0.002, *, version: str = VERSION, launch: dict | None = None) -> FastAPI:
    app = FastAPI()
    st = {"paused": None, "abort_all": False, "aborted": set(), "running": {}, "released": False, "weights": {},
          "groups": {}, "version": "", "known": set(), "prefill_tokens": 0, "generate_calls": 0,
          "hold": None, "at_gate": 0, "registered": set(), "dead": False, "duplicates": 0, "aborts": [],
          "offload_tags": set()}

    def in_batch() -> int:  # requests holding KV in the running batch
        return sum(1 for r in st["running"].values() if not r["retracted"])

    def down():
        return JSONResponse({"error": "the scheduler died (AssertionError: release_memory_occupation should be called "
                                      "only when server is idle)"}, status_code=503)

    @app.middleware("http")
    async def dead_server(request: Request, call_next):
        if st["dead"] and not request.url.path.startswith("/standin_"):
            return down()
        return await call_next(request)

    @app.post("/generate")
    async def generate(req: Request):
        if st["released"]:
            return JSONResponse({"error": "memory released: resume_memory_occupation first"}, status_code=400)
        body = await req.json()
        rid, seq = body["rid"], list(body["input_ids"])
        sp = body["sampling_params"]
        n, min_new = sp["max_new_tokens"], sp.get("min_new_tokens", 0)
        stops = frozenset(sp.get("stop_token_ids") or ())
        if rid in st["registered"]:
            st["duplicates"] += 1
            return JSONResponse({"error": {"message": f"Duplicate request ID: {rid}"}}, status_code=400)
        st["registered"].add(rid)  # _init_req_state: registered before the pause gate
        try:
            st["at_gate"] += 1
            try:
                while st["paused"] is not None:  # the gate: no disconnect watch; only an abort by rid lets it out
                    if rid in st["aborted"]:
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
                    if st["dead"]:
                        return JSONResponse({"error": "scheduler died"}, status_code=500)
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
        finally:
            st["registered"].discard(rid)
            st["aborted"].discard(rid)

    @app.post("/abort_request")
    async def abort(req: Request):
        body = await req.json()
        if body.get("abort_all"):
            st["abort_all"] = True
            return {}
        rid = body.get("rid") or ""
        if rid not in st["registered"]:
            return {}  # 200, and nothing happens: the tokenizer manager does not know it
        hit = sorted(r for r in st["registered"] if r.startswith(rid))  # the scheduler's prefix match
        st["aborted"].update(hit)
        st["aborts"].append({"rid": rid, "aborted": hit})
        return {}

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
            st["dead"] = True  # the scheduler's assertion fails and the server goes down with it
            return JSONResponse({"error": "AssertionError: release_memory_occupation should be called only when server "
                                          "is idle."}, status_code=500)
        tags = (await req.json()).get("tags") or list(ALL_TAGS)
        st["offload_tags"].update(tags)
        st["released"] = True
        return {}

    @app.post("/resume_memory_occupation")
    async def resume(req: Request):
        tags = (await req.json()).get("tags") or list(ALL_TAGS)
        if not set(tags) <= st["offload_tags"]:  # the scheduler's offload_tags.remove(tag): KeyError, the scheduler dies
            st["dead"] = True
            return JSONResponse({"error": f"KeyError: {sorted(set(tags) - st['offload_tags'])[0]!r}"}, status_code=500)
        st["offload_tags"] -= set(tags)
        st["released"] = bool(st["offload_tags"] & {"weights", "kv_cache"})
        return {}

    @app.post("/init_weights_update_group")
    async def init_group(req: Request):
        body = await req.json()
        backend = body.get("backend", "nccl")
        import torch  # (imported when used: a launched stand-in starts fast)

        if backend == "nccl" and not torch.cuda.is_available():
            return {"success": False, "message": "Failed to init process group: NCCL needs CUDA devices (none here)"}
        if body["group_name"] in st["groups"]:
            return {"success": False, "message": f"group {body['group_name']} exists already"}
        import datetime

        import torch.distributed as dist

        def join():
            store = dist.TCPStore(body["master_address"], body["master_port"], body["world_size"], False,
                                  timeout=datetime.timedelta(seconds=120))
            return dist.ProcessGroupGloo(dist.PrefixStore(body["group_name"], store), body["rank_offset"], body["world_size"],
                                         datetime.timedelta(seconds=120))

        st["groups"][body["group_name"]] = await asyncio.to_thread(join)
        return {"success": True, "message": "group initialised"}

    @app.post("/destroy_weights_update_group")
    async def destroy_group(req: Request):
        name = (await req.json()).get("group_name", "")
        if st["groups"].pop(name, None) is None:
            return {"success": False, "message": f"no group {name}"}
        return {"success": True, "message": "destroyed"}

    def flush_after_update_fails(body: dict):
        """The scheduler flushes the cache after a weight update (``flush_cache``, default true) and
        asserts the flush worked; a paused engine takes the update without waiting for its requests
        (the tokenizer manager skips the model-update lock while paused), so requests held in the
        running batch (``in_place``) fail the assertion and the server goes down."""
        if body.get("flush_cache", True) and st["paused"] is not None and in_batch():
            st["dead"] = True
            return JSONResponse({"error": "AssertionError: Cache flush failed after updating weights"}, status_code=500)
        return None

    @app.post("/update_weights_from_distributed")
    async def update(req: Request):
        body = await req.json()
        if (died := flush_after_update_fails(body)) is not None:
            return died
        pg = st["groups"].get(body["group_name"])
        if pg is None:
            return {"success": False, "message": f"no group {body['group_name']}"}

        import torch

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

    @app.post("/update_weights_from_tensor")
    async def update_tensor(req: Request):
        import base64
        import io

        import torch

        body = await req.json()
        if (died := flush_after_update_fails(body)) is not None:
            return died
        parts = body["serialized_named_tensors"]
        if not isinstance(parts, list) or not parts:
            return JSONResponse({"error": "serialized_named_tensors: one entry per TP rank"}, status_code=400)
        named = torch.load(io.BytesIO(base64.b64decode(parts[0])), weights_only=True)
        st["weights"].update(dict(named))
        st["version"] = body.get("weight_version") or ""
        return {"success": True, "message": "updated"}

    @app.get("/get_server_info")
    async def server_info():
        return {"version": version, **(launch or {}), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    @app.get("/weights_digest")
    async def digest():
        return {n: float(t.double().sum()) for n, t in st["weights"].items()} | {"_version": st["version"]}

    @app.get("/standin_stats")
    async def stats():
        return {"prefill_tokens": st["prefill_tokens"], "generate_calls": st["generate_calls"], "running": len(st["running"]),
                "in_batch": in_batch(), "at_gate": st["at_gate"], "decoded": sum(r["decoded"] for r in st["running"].values()),
                "registered": sorted(st["registered"]), "duplicates": st["duplicates"], "dead": st["dead"],
                "aborts": list(st["aborts"]), "groups": sorted(st["groups"])}

    @app.get("/health")
    async def health():
        return {}

    app.state.st = st
    return app


class StandIn:
    """Run the app with uvicorn on 127.0.0.1 in a thread."""

    def __init__(self, app: FastAPI | None = None) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.app = app if app is not None else make_app()
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


def make_router_app() -> FastAPI:
    """sgl-router's worker membership API: ``POST /add_worker?url=``, ``POST /remove_worker?url=``,
    ``GET /list_workers`` -> ``{"urls": [...]}`` (adding a URL twice keeps one)."""
    app = FastAPI()
    urls: list[str] = []
    log: list[tuple[str, str]] = []

    @app.post("/add_worker")
    async def add(url: str):
        log.append(("add", url))
        if url not in urls:
            urls.append(url)
        return {}

    @app.post("/remove_worker")
    async def remove(url: str):
        log.append(("remove", url))
        if url in urls:
            urls.remove(url)
        return {}

    @app.get("/list_workers")
    async def listing():
        return {"urls": list(urls)}

    app.state.urls, app.state.log = urls, log
    return app


def main(argv: list[str] | None = None) -> None:
    """Serve as ``sglang.launch_server`` would (the arguments the worker's launcher passes)."""
    ap = argparse.ArgumentParser(description="SGLang stand-in server (tests)")
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--tp-size", type=int, default=1)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--standin-version", default=VERSION)
    args, rest = ap.parse_known_args(argv)
    launch = {"model_path": args.model_path, "tp_size": args.tp_size, "port": args.port, "host": args.host, "extra_args": rest}
    uvicorn.run(make_app(version=args.standin_version, launch=launch), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
