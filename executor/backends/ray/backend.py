"""``RayBackend``: the executor's interface on a Ray cluster.

* workers are detached named actors (name = worker id, namespace ``rl-planner``), so they
  outlive a controller that dies; each asks for ``{gpu_type: gpus, rlp-node-<node>: 0.001,
  rlp-dram-gb: dram}`` and ``num_cpus=0``; a co-execution group's reservation of a node asks for
  the GPUs, and its members' workers inside it ask for none (they take turns on the reserved
  GPUs: :mod:`executor.capacity` counts them);
* every wait has a deadline: a worker that is not placed and ready by ``start_s`` is killed and
  reported as :class:`StartFailed` (Ray would leave it pending forever); a call that does not
  return by its deadline raises :class:`WorkerLost` (the process may live on: the controller
  fences it);
* P2P resharding runs over a gloo migration group among the old and new ranks, with a store
  hosted by the first old rank; training groups are separate gloo groups.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Optional

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from executor.backends.base import Deadlines, StartFailed, WorkerLost
from executor.backends.ray import cluster as rc
from executor.backends.ray.actors import COORDINATOR, CoordinatorActor, WorkerActor
from executor.migrations import reshard as rs
from executor.state import Layout, Node
from executor.workers.model import ModelSpec


class RayBackend:
    name = "ray"

    def __init__(self, *, address: Optional[str] = None, local_nodes: Optional[list[Node]] = None,
                 deadlines: Optional[Deadlines] = None, tick_s: float = 0.01) -> None:
        self.deadlines = deadlines or Deadlines()
        self.tick_s = tick_s
        self._cluster = None
        if local_nodes is not None:
            self._cluster = rc.start_local(local_nodes)
        else:
            rc.connect(address)
        self.namespace = rc.NAMESPACE
        self._coord = CoordinatorActor.options(name=COORDINATOR, namespace=self.namespace, lifetime="detached",
                                               get_if_exists=True).remote()
        ray.get(self._coord.invoke.remote("ping"), timeout=self.deadlines.start_s)
        self._handles: dict[str, Any] = {}
        self.fail_starts: set[str] = set()
        self.creates: dict[str, int] = {}
        self._pids: dict[str, int] = {}

    # ------------------------------------------------------------------ basics
    def nodes(self) -> dict[str, Node]:
        return rc.ray_nodes()

    def coord(self, method: str, *args: Any) -> Any:
        try:
            return ray.get(self._coord.invoke.remote(method, *args), timeout=self.deadlines.call_s)
        except GetTimeoutError:
            raise RuntimeError(f"the coordinator did not answer {method} within {self.deadlines.call_s:g} s") from None

    def _handle(self, wid: str):
        h = self._handles.get(wid)
        if h is None:
            try:
                h = ray.get_actor(wid, namespace=self.namespace)
            except ValueError:
                return None
            self._handles[wid] = h
        return h

    def _actor_states(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for a in ray._private.state.actors().values():
            if a.get("Name") and a.get("RayNamespace", self.namespace) == self.namespace:
                st = a.get("State")
                if out.get(a["Name"]) != "ALIVE":
                    out[a["Name"]] = st
        return out

    def worker_alive(self, worker_id: str) -> bool:
        return self._actor_states().get(worker_id) in ("ALIVE", "PENDING_CREATION", "DEPENDENCIES_UNREADY", "RESTARTING")

    # ------------------------------------------------------------------ lifecycle
    def create_worker(self, args: dict, epoch: int) -> None:
        w = args["worker"]
        wid = w["id"]
        if self.worker_alive(wid):
            return
        resources = {f"{rc.NODE_PREFIX}{w['node']}": 0.001}
        # A worker inside a co-execution group's reservation asks for no GPUs: the reservation's actor
        # holds them, and Ray's resources add up, so they cannot say that members take turns on them.
        if w["gpus"] and not w.get("share"):
            resources[args.get("gpu_type") or self._gpu_type(w["node"])] = float(w["gpus"])
        if w["dram_gb"]:
            resources[rc.DRAM] = float(w["dram_gb"])
        h = WorkerActor.options(name=wid, namespace=self.namespace, lifetime="detached", resources=resources).remote(
            args, epoch, self.namespace, wid in self.fail_starts, self.tick_s, self.deadlines.call_s)
        try:
            ray.get(h.ready.remote(), timeout=self.deadlines.start_s)
        except GetTimeoutError:
            ray.kill(h, no_restart=True)
            raise StartFailed(wid, f"not placed and ready within {self.deadlines.start_s:g} s (asked for {resources}); "
                                   f"killed so it does not stay pending") from None
        except (RayActorError, RayTaskError) as exc:
            ray.kill(h, no_restart=True)
            raise StartFailed(wid, _cause(exc)) from None
        self._handles[wid] = h
        self.creates[wid] = self.creates.get(wid, 0) + 1

    def _gpu_type(self, node: str) -> str:
        n = self.nodes().get(node)
        return n.gpu_type if n else "GPU"

    def call(self, worker_id: str, method: str, *args: Any, deadline_s: Optional[float] = None) -> Any:
        return self.call_many([(worker_id, method, args)], deadline_s)[0]

    def call_many(self, calls: list[tuple[str, str, tuple]], deadline_s: Optional[float] = None) -> list[Any]:
        deadline = deadline_s or self.deadlines.call_s
        refs = []
        for wid, m, a in calls:
            h = self._handle(wid)
            if h is None:
                raise WorkerLost(wid, "no such actor (its process is gone)")
            refs.append((wid, h.invoke.remote(m, *a)))
        end = time.time() + deadline
        owner = {r: wid for wid, r in refs}
        pending = [r for _, r in refs]
        results = {}
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, end - time.time()))
            if not ready:
                break
            for r in ready:
                try:
                    results[r] = ray.get(r)
                except RayActorError as exc:  # a dead peer fails the group at once, and is the one to blame
                    raise WorkerLost(owner[r], f"its process died ({_cause(exc)})") from None
        if pending:
            raise WorkerLost(self._blame([owner[r] for r in pending]), f"no answer within {deadline:g} s") from None
        return [results[r] for _, r in refs]

    def _blame(self, waiting: list[str]) -> str:
        """Of the workers that missed a deadline, the one that is dead or frozen (a worker merely
        blocked on a dead peer still answers a ping on another thread)."""
        states = self._actor_states()
        for w in waiting:
            if states.get(w) == "DEAD":
                return w
        pings = {w: self._handle(w).ready.remote() for w in waiting}
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=1.0)
        for w, ref in pings.items():
            if ref not in ready:
                return w
        return waiting[0]

    def stop_worker(self, worker_id: str) -> str:
        h = self._handle(worker_id)
        self._handles.pop(worker_id, None)
        if h is None or self._actor_states().get(worker_id) == "DEAD":
            return "already gone"
        ray.kill(h, no_restart=True)
        end = time.time() + self.deadlines.stop_s
        while time.time() < end:
            if self._actor_states().get(worker_id) in ("DEAD", None):
                return "stopped"
            time.sleep(0.05)
        pid = self._pids.get(worker_id)
        if pid:  # a frozen process ignores the polite kill; the node agent would SIGKILL it
            _signal(pid, signal.SIGKILL)
            return "killed (did not stop in time)"
        raise WorkerLost(worker_id, f"still alive {self.deadlines.stop_s:g} s after kill")

    # ------------------------------------------------------------------ trainer
    def reshard(self, component: str, old: list[dict], new: list[dict], old_layout: Layout, new_layout: Layout,
                generation: int) -> dict:
        spec = ModelSpec(**(new[0].get("model") or {})) if new else ModelSpec()
        fill = {r["index"] for r in new}  # in place, the kept ranks are not among them: they hold their shards
        pieces = [pc for pc in rs.plan(spec, old_layout, new_layout) if pc.dst in fill]
        # only the old ranks that send join the migration group: one with nothing to send would leave
        # (and close its connections) while the others still build the full mesh
        senders = {pc.src for pc in pieces}
        old = sorted((r for r in old if r["index"] in senders), key=lambda r: r["index"])
        new = sorted(new, key=lambda r: r["index"])
        rank_map = {}
        for i, r in enumerate(old):
            rank_map[("old", r["index"])] = i
        for i, r in enumerate(new):
            rank_map[("new", r["index"])] = len(old) + i
        world = len(old) + len(new)
        host, port = self.call(old[0]["id"], "host_migration_store", world, self.deadlines.reshard_s)
        prefix = f"mig-{component}-g{generation}-{time.time_ns()}"
        tuples = [(p.name, p.src, p.dst, p.dim, p.src_lo, p.src_hi, p.dst_lo, p.dst_hi) for p in pieces]
        calls = []
        for side, recs in (("old", old), ("new", new)):
            for r in recs:
                mine = [t for t in tuples if (t[1] if side == "old" else t[2]) == r["index"]]
                calls.append((r["id"], "migrate", (host, port, rank_map[(side, r["index"])], world, prefix, side, mine,
                                                   rank_map, self.deadlines.reshard_s)))
        t0 = time.time()
        results = self.call_many(calls, self.deadlines.reshard_s)
        seconds = time.time() - t0
        sent, got = {}, {}
        for (_wid, _, a), res in zip(calls, results):
            (sent if a[5] == "old" else got).update(res["checksums"])
        bad = sorted(k for k in set(sent) | set(got) if sent.get(k) != got.get(k))
        nbytes = sum(res["bytes"] for (_, _, a), res in zip(calls, results) if a[5] == "old")
        return {"pieces": len(pieces), "pairs": len(sent), "bytes": nbytes, "seconds": seconds,
                "checksum_mismatches": bad, "checksums": sent}

    def form_training_group(self, component: str, ranks: list[dict], layout: Layout) -> None:
        ranks = sorted(ranks, key=lambda r: r["index"])
        keys = sorted({f"pp{pp}tp{tp}" for pp in range(layout.pp) for tp in range(layout.tp)})
        host, ports = "127.0.0.1", {}
        if layout.dp > 1:
            host, ports = self.call(ranks[0]["id"], "host_training_stores", keys, layout.dp, self.deadlines.call_s)
        self.call_many([(r["id"], "join_training_group", (host, ports, self.deadlines.call_s)) for r in ranks])

    def train_step(self, component: str, step: int) -> list[bool]:
        ids = self.coord("active_set", component)
        return self.call_many([(i, "train_step", (step,)) for i in ids])

    def tick(self, n: int = 1) -> None:
        time.sleep(n * self.tick_s)

    # ------------------------------------------------------------------ checks and teardown
    def leaks(self) -> list[str]:
        reg = {r["id"] for r in self.coord("records")}
        out = [f"actor {name} is alive but not registered" for name, st in self._actor_states().items()
               if st == "ALIVE" and name != COORDINATOR and name not in reg]
        dead = {r["id"] for r in self.coord("records") if r.get("status") == "dead"}
        out += [f"registered worker {w} has no live actor" for w in reg if w not in dead and not self.worker_alive(w)]
        out += [f"worker {w} was declared dead but its process still runs (not reaped)" for w in dead if self.worker_alive(w)]
        for pg_id, pg in (ray.util.placement_group_table() or {}).items():
            if pg.get("state") not in ("REMOVED",):
                out.append(f"placement group {pg_id} is {pg.get('state')}")
        return sorted(out)

    def reset(self) -> None:
        """Kill every worker actor and start a fresh coordinator (tests, benchmarks)."""
        for pid in self._pids.values():
            _signal(pid, signal.SIGCONT)
        for name, st in self._actor_states().items():
            if st != "DEAD":
                try:
                    ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
                except ValueError:
                    pass
        end = time.time() + 20
        while time.time() < end and any(st != "DEAD" for st in self._actor_states().values()):
            time.sleep(0.05)
        self._handles.clear()
        self._pids.clear()
        self.fail_starts.clear()
        self.creates.clear()
        self._coord = CoordinatorActor.options(name=COORDINATOR, namespace=self.namespace, lifetime="detached",
                                               get_if_exists=True).remote()
        ray.get(self._coord.invoke.remote("ping"), timeout=self.deadlines.start_s)

    def close(self) -> None:
        if self._cluster is not None:
            ray.shutdown()
            self._cluster.shutdown()

    # ------------------------------------------------------------------ fault injection
    def pid(self, worker_id: str) -> int:
        if worker_id not in self._pids:
            self._pids[worker_id] = ray.get(self._handle(worker_id).pid.remote(), timeout=self.deadlines.call_s)
        return self._pids[worker_id]

    def kill(self, worker_id: str) -> None:
        """The worker's process dies (SIGKILL), as on a crash."""
        _signal(self.pid(worker_id), signal.SIGKILL)
        end = time.time() + 10
        while time.time() < end and self._actor_states().get(worker_id) != "DEAD":
            time.sleep(0.05)

    def freeze(self, worker_id: str) -> None:
        """The process stops (SIGSTOP): it answers nothing but lives on, as on a frozen node."""
        self.pid(worker_id)
        _signal(self._pids[worker_id], signal.SIGSTOP)

    def thaw(self, worker_id: str) -> None:
        if worker_id in self._pids:
            _signal(self._pids[worker_id], signal.SIGCONT)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _cause(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("MemoryError:", "out of memory"):
        i = text.find(marker)
        if i >= 0:
            return text[i: i + 200].splitlines()[0]
    return text.splitlines()[0][:200] if text else type(exc).__name__
