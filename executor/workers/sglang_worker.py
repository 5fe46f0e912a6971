"""The ``sglang`` worker implementation: one SGLang server per rollout engine, launched on
exactly the GPUs the backend gave the worker, behind the executor's worker protocol.

What it does beyond the adapter (:mod:`executor.adapters.sglang_worker`, which drives a server
someone else started):

* **Launch.** With ``engine.launch`` set, the worker starts ``python -m sglang.launch_server
  --model-path M --tp-size N --host H --port P [extra args]`` as its own child process with
  ``CUDA_VISIBLE_DEVICES`` set to the GPU ids it was assigned (``ray.get_gpu_ids()`` inside a Ray
  worker actor, or ``launch.gpu_ids``), so Ray's GPU accounting covers the server: ``--tp-size``
  is the number of those GPUs. The child dies with the worker's process (``PR_SET_PDEATHSIG``)
  and ``close()`` stops its whole process group. Each engine has its own port, hence its own URL
  (``url()``); ``launch.deterministic`` adds ``--enable-deterministic-inference`` (SGLang
  re-prefills a moved request bit-identically only with it). Without ``launch``, ``engine.url``
  names a server started elsewhere.
* **Version.** The server's ``/get_server_info`` version must lie in :data:`SUPPORTED`
  (``sglang>=0.5.6,<0.6``, the ``sglang`` extra): the drain relies on ``pause_generation``'s
  modes, on requests registered before the pause gate and on ``ignore_retracted`` memory release.
* **Router.** With ``engine.router_url`` (an sgl-router), the engine is added
  (``/add_worker?url=``) once healthy, removed before a drain (so no new request reaches it) and
  added back by an undrain, and removed when stopped.
* **Drain.** ``pause_generation(mode=abort)``; requests that reached the server after the pause
  are aborted by their (fixed-length, never-prefix) wire rid and the abort is confirmed before
  they are handed over (:mod:`executor.adapters.sglang`).
* **Memory.** ``release_memory`` / ``resume_memory`` release only when idle by the worker's own
  record (else a clear error, before SGLang's assertion would take the server down).
* **Weights.** ``update_weights(states, version)``: colocated engines (``engine.colocated``) take
  the tensors through ``/update_weights_from_tensor``; others through a broadcast group
  (:class:`executor.workers.weight_sync.WeightSyncGroup`, backend ``engine.weight_sync_backend``,
  ``nccl`` by default) re-created after every move (drain, undrain, new lease).
* **Names.** ``engine.weight_names: hf`` sends a ``megatron`` trainer's parameters under their
  Hugging Face names (:mod:`executor.workers.hf_names`; attention shape from the component's
  ``model`` or the trainer's), as a real SGLang model loads them; default: as the trainer names them.
* **Sampling.** ``sampling`` and ``sampling_params`` of a request record are read alike
  (:mod:`executor.workers.sampling`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Optional

import httpx

from executor.adapters.sglang import SGLangError, parse_version
from executor.adapters.sglang_worker import SGLangRolloutWorker
from executor.workers import weight_sync

SUPPORTED = ((0, 5, 6), (0, 6, 0))  # [lowest, first unsupported)
SUPPORTED_TEXT = "sglang>=0.5.6,<0.6"
DEFAULT_CMD = [sys.executable, "-m", "sglang.launch_server"]


def launch_command() -> list[str]:
    """The server command: ``$RL_PLANNER_SGLANG_CMD`` (a JSON list, set on the worker's machine) or
    ``python -m sglang.launch_server``. A target cannot name a command (a plan is data, not code);
    code that builds a worker directly may pass ``launch.cmd``."""
    raw = os.environ.get("RL_PLANNER_SGLANG_CMD")
    if not raw:
        return list(DEFAULT_CMD)
    import json

    cmd = json.loads(raw)
    if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
        raise ValueError(f"RL_PLANNER_SGLANG_CMD must be a JSON list of strings, not {raw[:80]!r}")
    return cmd


def supported(version: str) -> bool:
    v = parse_version(version)
    return bool(v) and SUPPORTED[0] <= v < SUPPORTED[1]


def assigned_gpus(launch: dict, worker: dict) -> list[str]:
    """The GPU ids the server may use: ``launch.gpu_ids`` if given, else the ones Ray assigned this
    process (``ray.get_gpu_ids()``), else none (a CPU-only stand-in). Their number must match the
    worker's GPU count when the target gives one."""
    if launch.get("gpu_ids") is not None:
        ids = [str(g) for g in launch["gpu_ids"]]
    else:
        ids = []
        if "ray" in sys.modules:  # only inside a Ray worker (the core planner never imports Ray)
            import ray

            if ray.is_initialized():
                ids = [str(int(g)) if float(g).is_integer() else str(g) for g in ray.get_gpu_ids()]
    want = int(worker.get("gpus") or 0)
    if ids and want and len(ids) != want:
        raise ValueError(f"{worker.get('id')}: {len(ids)} GPU id(s) {ids} for a worker of {want} GPU(s); the server "
                         f"must run on exactly the worker's GPUs")
    return ids


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class ServerProcess:
    """An SGLang server as this worker's child process."""

    def __init__(self, cmd: list[str], gpu_ids: list[str], host: str, port: int, log_path: str) -> None:
        self.cmd, self.gpu_ids, self.host, self.port, self.log_path = cmd, gpu_ids, host, port, log_path
        self.proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(self.gpu_ids)}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=_die_with_parent)

    def wait_healthy(self, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SGLangError(f"the SGLang server exited with status {self.proc.returncode} before it served "
                                  f"({' '.join(self.cmd)}); its log ({self.log_path}) ends: {self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > end:
                self.stop()
                raise SGLangError(f"the SGLang server at {self.url} did not answer /health within {deadline_s:g} s "
                                  f"(stopped); its log ({self.log_path}) ends: {self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, n: int = 600) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> str:
        if self.proc is None or self.proc.poll() is not None:
            return "already gone"
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the server and its scheduler / detokenizer children
        except ProcessLookupError:
            return "already gone"
        try:
            self.proc.wait(grace_s)
            return "stopped"
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(grace_s)
            return "killed (did not stop in time)"


def launch_server(worker: dict, launch: dict) -> ServerProcess:
    """Start (and wait for) the server of one engine; see the module docstring."""
    if not launch.get("model_path"):
        raise ValueError(f"{worker.get('id')}: engine.launch needs model_path (a local path or a Hugging Face id SGLang "
                         f"can load)")
    gpus = assigned_gpus(launch, worker)
    tp = len(gpus) or int(launch.get("tp", 1))
    host = str(launch.get("host", "127.0.0.1"))
    port = int(launch.get("port") or _free_port(host))
    cmd = list(launch.get("cmd") or launch_command()) + ["--model-path", str(launch["model_path"]), "--tp-size", str(tp),
                                                    "--host", host, "--port", str(port)]
    if launch.get("deterministic"):
        cmd.append("--enable-deterministic-inference")
    cmd += [str(a) for a in launch.get("args") or []]
    log_dir = launch.get("log_dir") or tempfile.gettempdir()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(worker.get("id", "engine")))
    srv = ServerProcess(cmd, gpus, host, port, os.path.join(log_dir, f"sglang-{safe}-{port}.log"))
    srv.start()
    srv.wait_healthy(float(launch.get("startup_timeout_s", 900.0)))
    return srv


class SGLangWorker(SGLangRolloutWorker):
    """A rollout engine backed by its own SGLang server (``impl: sglang``)."""

    def __init__(self, worker_id: str, epoch: int, coord: Callable[..., Any], config: dict, worker: Optional[dict] = None,
                 fail_start: bool = False, model: Optional[dict] = None) -> None:
        if fail_start:
            raise MemoryError(f"{worker_id}: out of memory while loading weights and KV cache (injected)")
        self.server: Optional[ServerProcess] = None
        config = dict(config)
        if config.get("launch"):
            self.server = launch_server({**(worker or {}), "id": worker_id}, dict(config["launch"]))
            config["url"] = self.server.url
        try:
            super().__init__(worker_id, epoch, coord, config)
            self.version = self.engine.server_info().get("version", "")
            if not config.get("skip_version_check") and not supported(self.version):
                raise SGLangError(f"{worker_id}: SGLang {self.version or '(unknown version)'} at {self.engine.url}: this "
                                  f"worker relies on the pause modes and pause-gate semantics of {SUPPORTED_TEXT}")
        except BaseException:
            if getattr(self, "engine", None) is not None:
                self.engine.close()
            if self.server is not None:
                self.server.stop()
            raise
        self.router_url = (config.get("router_url") or "").rstrip("/")
        self.colocated = bool(config.get("colocated"))
        self.weight_names = str(config.get("weight_names") or "as_trained")
        if self.weight_names not in ("as_trained", "hf"):
            raise ValueError(f"{worker_id}: engine.weight_names must be 'as_trained' or 'hf', not {self.weight_names!r}")
        self.model = dict(model or {})
        self.tp = int(config.get("tp") or (len(self.server.gpu_ids) if self.server and self.server.gpu_ids else 1))
        self.weights_version = 0
        self.moves = 0  # drains, undrains and new leases: the weight-sync group is re-created after each
        self._group = weight_sync.WeightSyncGroup(backend=self.engine.weight_sync_backend,
                                                  host=str(config.get("weight_sync_host", "127.0.0.1")),
                                                  timeout_s=float(config.get("weight_sync_timeout_s", 120.0)),
                                                  prefix=f"rlp-{worker_id.replace('/', '-')}")
        self._routed = False
        try:
            self._route("add_worker")
        except BaseException:  # a server nobody can reach through the router is not kept
            self.engine.close()
            if self.server is not None:
                self.server.stop()
            raise

    def url(self) -> str:
        return self.engine.url

    # ------------------------------------------------------------------ router membership
    def _route(self, op: str, strict: bool = True) -> None:
        if not self.router_url:
            return
        try:
            r = httpx.post(f"{self.router_url}/{op}", params={"url": self.engine.url}, timeout=self.engine.timeout_s)
            if r.status_code != 200:
                raise SGLangError(f"router {self.router_url}/{op} answered {r.status_code}: {r.text[:200]}")
        except (httpx.HTTPError, SGLangError) as exc:
            if strict:
                raise SGLangError(f"{self.id}: router {self.router_url} refused {op} {self.engine.url}: {exc}") from None
            return
        self._routed = op == "add_worker"

    # ------------------------------------------------------------------ moves
    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.moves += 1

    def drain(self) -> dict:
        self._route("remove_worker")  # no new request reaches a draining engine
        self.moves += 1
        return super().drain()

    def undrain(self) -> None:
        super().undrain()
        self.moves += 1
        self._route("add_worker")

    # ------------------------------------------------------------------ memory
    def release_memory(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        """Release GPU memory: only when idle (nothing in flight, or retracted by a pause)."""
        self.engine.release_memory(tags)

    def resume_memory(self, tags: tuple[str, ...] = ("weights", "kv_cache")) -> None:
        self.engine.resume_memory(tags)

    # ------------------------------------------------------------------ weights
    def update_weights(self, states: list[dict], version: int) -> int:
        named = weight_sync.params_of(states)
        if self.weight_names == "hf":  # a megatron trainer's names -> the Hugging Face names SGLang loads
            from executor.workers.hf_names import megatron_to_hf
            from executor.workers.megatron_trainer import dims_of

            d = dims_of(self.model or (states[0].get("model") or {}))
            named = megatron_to_hf(named, d.heads, d.kv_heads, d.head_dim)
        if self.colocated:
            self.engine.update_weights_from_tensor([weight_sync.serialize_named(named)] * self.tp, str(version))
        else:
            self._group.ensure([(self.engine, self.tp)], self.moves)
            self._group.broadcast(named, str(version))
        self.weights_version = version
        return version

    def weight_groups_created(self) -> int:
        return self._group.created

    # ------------------------------------------------------------------ lifetime
    def ready(self) -> bool:
        return (self.server is None or self.server.alive()) and super().ready()

    def close(self) -> None:
        if self._routed:
            self._route("remove_worker", strict=False)
        self._group.close()
        try:
            super().close()
        finally:
            if self.server is not None:
                self.server.stop()


def make(args: dict, epoch: int, coord: Callable[..., Any], fail_start: bool = False) -> SGLangWorker:
    """The registry's rollout factory: ``args["engine"]`` is the config (see the module docstring)."""
    return SGLangWorker(args["worker"]["id"], epoch, coord, args.get("engine") or {}, worker=args["worker"],
                        fail_start=fail_start, model=args.get("model"))
