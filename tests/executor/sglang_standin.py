"""A stand-in SGLang server with the documented behaviour the adapter depends on, awkward parts
included: ``/abort_request`` answers 200 for ids it never saw; ``/flush_cache`` answers 400
unless idle; ``/pause_generation`` with ``mode=abort`` makes every in-flight ``/generate``
return its partial output with ``finish_reason: abort``; weights arrive by a collective
broadcast from rank 0 of a group the trainer opens (gloo here, NCCL on GPUs).

Decoding is a deterministic function of the whole token prefix, so a request resumed elsewhere
from prompt + partial output must end exactly as it would have uninterrupted.
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


def next_token(prefix: list[int]) -> int:
    h = len(prefix)
    for t in prefix[-4:]:
        h = (h * 1_000_003 + t) % 2_147_483_647
    return h % 32000


def reference(prompt: list[int], n: int) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        seq.append(next_token(seq))
    return seq[len(prompt):]


def make_app(tick_s: float = 0.002) -> FastAPI:
    app = FastAPI()
    st = {"paused": False, "abort_all": False, "aborted": set(), "running": 0, "released": False, "weights": {},
          "groups": {}, "version": "", "known": set()}

    @app.post("/generate")
    async def generate(req: Request):
        if st["released"]:
            return JSONResponse({"error": "weights released"}, status_code=400)
        body = await req.json()
        rid, seq = body["rid"], list(body["input_ids"])
        n = body["sampling_params"]["max_new_tokens"]
        st["known"].add(rid)
        out, reason = [], "length"
        st["running"] += 1
        try:
            while len(out) < n:
                if rid in st["aborted"] or st["abort_all"]:
                    reason = "abort"
                    break
                if not st["paused"]:
                    t = next_token(seq)
                    seq.append(t)
                    out.append(t)
                await asyncio.sleep(tick_s)
        finally:
            st["running"] -= 1
        return {"output_ids": out, "meta_info": {"id": rid, "finish_reason": {"type": reason}, "completion_tokens": len(out)}}

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
        st["paused"] = True
        if mode == "abort":
            st["abort_all"] = True
            while st["running"]:
                await asyncio.sleep(tick_s)
            st["abort_all"] = False
        return {}

    @app.post("/continue_generation")
    async def cont():
        st["paused"] = False
        return {}

    @app.post("/flush_cache")
    async def flush():
        if st["running"]:
            return JSONResponse("Cache not flushed. Please check that there is no running requests.", status_code=400)
        return "Cache flushed."

    @app.post("/release_memory_occupation")
    async def release(req: Request):
        st["released"] = True
        return {}

    @app.post("/resume_memory_occupation")
    async def resume(req: Request):
        st["released"] = False
        return {}

    @app.post("/init_weights_update_group")
    async def init_group(req: Request):
        body = await req.json()
        import datetime

        import torch.distributed as dist

        def join():
            store = dist.TCPStore(body["master_address"], body["master_port"], body["world_size"], False,
                                  timeout=datetime.timedelta(seconds=20))
            return dist.ProcessGroupGloo(dist.PrefixStore(body["group_name"], store), body["rank_offset"], body["world_size"],
                                         datetime.timedelta(seconds=20))

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
