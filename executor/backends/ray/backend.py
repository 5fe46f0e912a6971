"""``RayBackend``: the executor's interface on a Ray cluster.

* workers are detached named actors (name = worker id, namespace ``rl-planner``), so they
  outlive a controller that dies; each asks for ``num_gpus=g, accelerator_type=<type>`` (Ray's
  GPU semantics: the worker gets ``g`` GPUs of its own, ``CUDA_VISIBLE_DEVICES`` and
  ``ray.get_gpu_ids()`` name only them), a sliver of its node's ``rlp-node-<node>`` resource,
  its DRAM (``rlp-dram-gb``) and ``num_cpus=0``; a co-execution group's reservation of a node
  asks for the GPUs, and its members' workers inside it ask for none (they take turns on the
  reserved GPUs: :mod:`executor.capacity` counts them) and see the reservation's GPUs;
* **reservation**: before the first worker of a unit is created, the unit's new workers are
  reserved at once by one placement group (:meth:`RayBackend.reserve`: a bundle per node holding
  that node's new workers' GPUs, accelerator, node sliver and DRAM; ``STRICT_PACK`` when the unit
  is on one node, else ``PACK``; each bundle pinned to its node by the node resource), so other
  Ray work cannot starve a half-created layout; the workers are then scheduled into their
  node's bundle. A reservation not granted by the start deadline is removed and reported as
  :class:`StartFailed` (the unit rolls back, nothing was created). A worker's slot in a bundle
  is given back when it stops (a later unit may take a free slot of a kept group); a group
  with no worker left is removed; a rolled-back unit releases what it reserved
  (:meth:`RayBackend.release_reservation`). The groups and their slots are recorded in the
  coordinator, which is durable, so a resumed apply finds its reservation;
* every wait has a deadline: a worker that is not placed and ready by ``start_s`` is killed and
  reported as :class:`StartFailed` (Ray would leave it pending forever); a call that does not
  return by its deadline raises :class:`WorkerLost` (the process may live on: the controller
  fences it);
* the coordinator is a detached actor that Ray restarts (``max_restarts=-1``; calls made while
  it restarts are retried by Ray, ``max_task_retries=-1``); its state lives in ``state_dir``
  (:mod:`executor.workers.coordinator_store`), so a restarted one resumes with every lease, the
  request ledger and the checkpoints;
* actor states come from Ray's public state API (``ray.util.state.list_actors``, served by the
  dashboard's API server) or, on a cluster without a dashboard, from ``ray.util.list_named_actors``
  (public too; it lists only live named actors);
* P2P resharding runs over a gloo migration group among the old and new ranks, with a store
  hosted by the first old rank; training groups are separate gloo groups.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from estimators.errors import Problem, UserError
from executor.backends.base import Deadlines, StartFailed, WorkerLost
from executor.backends.ray import cluster as rc
from executor.backends.ray.actors import COORDINATOR, CoordinatorActorClass, WorkerActorClass
from executor.workers.coordinator_store import DamagedState
from executor.migrations import reshard as rs
from executor.state import Layout, Node
from executor.workers.model import ModelSpec

PG_PREFIX = "rlp-pg-"
ALIVE_STATES = ("ALIVE", "PENDING_CREATION", "DEPENDENCIES_UNREADY", "RESTARTING")


class RayBackend:
    name = "ray"

    def __init__(self, *, address: Optional[str] = None, local_nodes: Optional[list[Node]] = None,
                 deadlines: Optional[Deadlines] = None, tick_s: float = 0.01, state_dir: Optional[str] = None,
                 temp_dir: Optional[str] = None) -> None:
        """``state_dir``: where the coordinator keeps its durable state (a directory every node can
        reach on a real cluster: the coordinator may be restarted on another node). Default:
        ``$RL_PLANNER_RAY_STATE_DIR``, else a fresh temporary directory for a local cluster
        (removed on close) and ``.rl-planner/ray-coordinator`` (absolute) for one by address."""
        self.deadlines = deadlines or Deadlines()
        self.tick_s = tick_s
        self._cluster = None
        self._own_state_dir = False
        if local_nodes is not None:
            self._cluster = rc.start_local(local_nodes, temp_dir=temp_dir)
        else:
            rc.connect(address)
        state_dir = state_dir or os.environ.get("RL_PLANNER_RAY_STATE_DIR")
        if not state_dir:
            if local_nodes is not None:
                state_dir, self._own_state_dir = tempfile.mkdtemp(prefix="rlp-coord-"), True
            else:
                state_dir = str(Path(".rl-planner/ray-coordinator").resolve())
        self.state_dir = str(Path(state_dir).resolve())
        self.namespace = rc.NAMESPACE
        self._state_api: Optional[bool] = None
        try:
            self._coord = self._start_coordinator()
        except BaseException:  # a local cluster started here is not left running when the coordinator fails to start
            self.close()
            raise
        self._handles: dict[str, Any] = {}
        self.fail_starts: set[str] = set()
        self.creates: dict[str, int] = {}
        self._pids: dict[str, int] = {}
        self._node_res: dict[str, dict] = {}

    def _start_coordinator(self):
        h = CoordinatorActorClass.options(name=COORDINATOR, namespace=self.namespace, lifetime="detached", get_if_exists=True,
                                          max_restarts=-1, max_task_retries=-1).remote(self.state_dir)
        try:
            ray.get(h.invoke.remote("ping"), timeout=self.deadlines.start_s)
        except DamagedState as exc:  # (Ray's error for the call is also an instance of its cause)
            raise UserError(Problem("coordinator state", exc.what, exc.fix)) from None
        return h

    # ------------------------------------------------------------------ basics
    def nodes(self) -> dict[str, Node]:
        return rc.ray_nodes()

    def coord(self, method: str, *args: Any) -> Any:
        """A coordinator call. It normally answers at once; one that died is being restarted by Ray
        (a process start), which retries the call: so the deadline is the longer of call and start."""
        deadline = max(self.deadlines.call_s, self.deadlines.start_s)
        try:
            return ray.get(self._coord.invoke.remote(method, *args), timeout=deadline)
        except GetTimeoutError:
            raise RuntimeError(f"the coordinator did not answer {method} within {deadline:g} s") from None

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
        """Name -> state of the named actors of this namespace, from Ray's public APIs: the state
        API (``ray.util.state.list_actors``) where the cluster serves it, else
        ``ray.util.list_named_actors`` (live actors only, reported ``ALIVE``; a dead one is absent)."""
        if self._state_api is not False:
            try:
                from ray.util.state import list_actors

                # the address of the cluster this process is connected to: without it the state API
                # finds "the latest" Ray instance on the machine, another cluster where several run
                acts = list_actors(address=ray.get_runtime_context().gcs_address,
                                   filters=[("ray_namespace", "=", self.namespace)], limit=100_000, timeout=10,
                                   raise_on_missing_output=False)
                self._state_api = True
                out: dict[str, str] = {}
                for a in acts:
                    if a.name and out.get(a.name) not in ALIVE_STATES:
                        out[a.name] = a.state
                return out
            except Exception:  # noqa: BLE001 - no API server (no dashboard): the named-actor list
                if self._state_api:
                    raise
                self._state_api = False
        return {a["name"]: "ALIVE" for a in ray.util.list_named_actors(all_namespaces=True)
                if a.get("namespace") == self.namespace}

    def worker_alive(self, worker_id: str) -> bool:
        return self._actor_states().get(worker_id) in ALIVE_STATES

    # ------------------------------------------------------------------ lifecycle
    def _resources_of(self, node: str) -> dict:
        if node not in self._node_res:
            for rn in ray.nodes():
                res = rn.get("Resources") or {}
                for k in res:
                    if k.startswith(rc.NODE_PREFIX) and rn.get("Alive"):
                        self._node_res[k[len(rc.NODE_PREFIX):]] = dict(res)
        return self._node_res.get(node, {})

    def demand(self, w: dict, gpu_type: str = "") -> tuple[dict, float, str]:
        """(custom resources, num_gpus, accelerator type) a worker asks Ray for. A worker inside a
        co-execution group's reservation asks for no GPUs: the reservation's actor holds them, and
        Ray's resources add up, so they cannot say that members take turns on them."""
        res = self._resources_of(w["node"])
        resources = {f"{rc.NODE_PREFIX}{w['node']}": 0.001}
        gpus, accel = 0.0, ""
        if w["gpus"] and not w.get("share"):
            gtype = gpu_type or rc.gpu_type_of(res)[0]
            if rc.uses_ray_gpus(res):
                gpus, accel = float(w["gpus"]), gtype
                if f"{rc.ACCEL}{gtype}" in res:
                    resources[f"{rc.ACCEL}{gtype}"] = 0.001  # what Ray's accelerator_type option asks for
            else:  # an older node that names its GPU type as a custom resource
                resources[gtype] = float(w["gpus"])
        if w["dram_gb"]:
            resources[rc.DRAM] = rc.quantity(w["dram_gb"])
        return resources, gpus, accel

    def create_worker(self, args: dict, epoch: int) -> None:
        w = args["worker"]
        wid = w["id"]
        if self.worker_alive(wid):
            return
        resources, gpus, accel = self.demand(w, args.get("gpu_type", ""))
        opts: dict = dict(name=wid, namespace=self.namespace, lifetime="detached", resources=resources, num_gpus=gpus)
        slot = self._slot_of(wid)
        if slot is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            pg_name, bundle = slot
            pg = ray.util.get_placement_group(pg_name)
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=bundle,
                                                                           placement_group_capture_child_tasks=False)
        visible = self._reservation_gpus(w) if w.get("share") else None
        # a handle as self._handles holds them (Any: ray types an actor's methods without .remote unless each is a ray.method)
        h: Any = WorkerActorClass.options(**opts).remote(args, epoch, self.namespace, wid in self.fail_starts, self.tick_s,
                                                         self.deadlines.call_s, visible)
        asked = dict(resources, **({"GPU": gpus} if gpus else {}))
        try:
            ray.get(h.ready.remote(), timeout=self.deadlines.start_s)
        except GetTimeoutError:
            ray.kill(h, no_restart=True)
            where = f" in bundle {slot[1]} of placement group {slot[0]}" if slot else ""
            raise StartFailed(wid, f"not placed and ready within {self.deadlines.start_s:g} s (asked for {asked}{where}); "
                                   f"killed so it does not stay pending") from None
        except (RayActorError, RayTaskError) as exc:
            ray.kill(h, no_restart=True)
            raise StartFailed(wid, _cause(exc)) from None
        self._handles[wid] = h
        self.creates[wid] = self.creates.get(wid, 0) + 1

    def _reservation_gpus(self, w: dict) -> Optional[str]:
        """The GPUs of the co-execution group's reservation a member runs inside, as
        ``CUDA_VISIBLE_DEVICES`` (members take turns on them); None if it cannot be found."""
        for r in self.coord("records"):
            if r.get("reserves") == w["share"] and r["node"] == w["node"] and r.get("status") != "dead":
                try:
                    return self.worker_gpus(r["id"])["cuda_visible_devices"]
                except (WorkerLost, GetTimeoutError, RayActorError, KeyError, TypeError):
                    return None
        return None

    def worker_gpus(self, worker_id: str) -> dict:
        """What the worker's process sees: ``CUDA_VISIBLE_DEVICES``, ``ray.get_gpu_ids()``, its Ray node."""
        h = self._handle(worker_id)
        if h is None:
            raise WorkerLost(worker_id, "no such actor (its process is gone)")
        return ray.get(h.gpus.remote(), timeout=self.deadlines.call_s)

    # ------------------------------------------------------------------ reservation (placement groups)
    def _groups(self) -> dict[str, dict]:
        return self.coord("placement_groups")

    def _slot_of(self, wid: str) -> Optional[tuple[str, int]]:
        for name, g in self._groups().items():
            if wid in g["workers"]:
                return name, g["workers"][wid]["bundle"]
        return None

    def reserve(self, creates: list[dict]) -> Optional[str]:
        """Reserve the new workers ``creates`` (create-step args) at once, before any is created.

        A worker that already holds a slot (a resumed apply) is skipped; a worker that fits in a
        free slot of a bundle on its node of a group that is kept takes it (the group still holds
        those resources: taking them needs no new reservation). The rest get one new placement
        group: one bundle per node, ``{GPU: sum, accelerator_type:<t>: k*0.001, rlp-node-<n>: k*0.001,
        rlp-dram-gb: sum}`` for the ``k`` workers there; strategy ``STRICT_PACK`` on one node, else
        ``PACK``. It must be granted by the start deadline, else it is removed and
        :class:`StartFailed` names what was asked. Returns the new group's name (or None)."""
        groups = self._groups()
        held = {wid for g in groups.values() for wid in g["workers"]}
        states = self._actor_states()  # a worker already running (adopted by a resumed apply) needs no slot
        need = [a for a in creates if a["worker"]["id"] not in held and states.get(a["worker"]["id"]) not in ALIVE_STATES]
        for name, g in groups.items():  # a resumed apply: its reservation may not be granted yet
            if g.get("state") == "pending" and any(a["worker"]["id"] in g["workers"] for a in creates):
                self._wait_ready(name, g, creates)
        if not need:
            return None
        rest = []
        for a in need:
            w = a["worker"]
            resources, gpus, _ = self.demand(w, a.get("gpu_type", ""))
            slot = self._free_slot(groups, w["node"], resources, gpus)
            if slot is None:
                rest.append((a, resources, gpus))
                continue
            name, i = slot
            groups[name]["workers"][w["id"]] = {"bundle": i, "gpus": gpus, "resources": resources}
            self.coord("set_placement_group", name, groups[name])
        if not rest:
            return None
        by_node: dict[str, dict] = {}
        for a, resources, gpus in rest:
            b = by_node.setdefault(a["worker"]["node"], {})
            for k, v in resources.items():
                b[k] = round(b.get(k, 0.0) + v, rc.QUANTUM_DIGITS)
            if gpus:
                b["GPU"] = b.get("GPU", 0.0) + gpus
        nodes = sorted(by_node)
        ids = sorted(a["worker"]["id"] for a, _, _ in rest)
        name = PG_PREFIX + hashlib.sha1("\n".join(ids).encode()).hexdigest()[:16]
        bundles = [{"node": n, "resources": by_node[n]} for n in nodes]
        strategy = "STRICT_PACK" if len(nodes) == 1 else "PACK"
        info = {"bundles": bundles, "strategy": strategy, "state": "pending",
                "workers": {a["worker"]["id"]: {"bundle": nodes.index(a["worker"]["node"]), "gpus": gpus,
                                                "resources": resources} for a, resources, gpus in rest}}
        self.coord("set_placement_group", name, info)  # recorded first: a crash while waiting leaves no stray group
        from ray.util.placement_group import placement_group

        try:
            ray.util.get_placement_group(name)
        except ValueError:
            placement_group([b["resources"] for b in bundles], strategy=strategy, name=name,
                            lifetime="detached")
        self._wait_ready(name, info, [a for a, _, _ in rest])
        return name

    def _wait_ready(self, name: str, info: dict, creates: list[dict]) -> None:
        pg = ray.util.get_placement_group(name)
        try:
            ray.get(pg.ready(), timeout=self.deadlines.start_s)
        except GetTimeoutError:
            ray.util.remove_placement_group(pg)
            self.coord("drop_placement_group", name)
            asked = "; ".join(f"node {b['node']}: {_fmt(b['resources'])}" for b in info["bundles"])
            raise StartFailed(creates[0]["worker"]["id"],
                              f"the new layout's reservation (placement group {name}, {info['strategy']}: {asked}) was not "
                              f"granted within {self.deadlines.start_s:g} s: other Ray work holds those resources. The "
                              f"reservation was removed and no worker of it was created. Fix: free the GPUs (see "
                              f"'ray status') or raise --start-timeout") from None
        info["state"] = "created"
        self.coord("set_placement_group", name, info)

    @staticmethod
    def _free_slot(groups: dict, node: str, resources: dict, gpus: float) -> Optional[tuple[str, int]]:
        for name, g in sorted(groups.items()):
            if g.get("state") != "created":
                continue
            for i, b in enumerate(g["bundles"]):
                if b["node"] != node:
                    continue
                used: dict[str, float] = {}
                for x in g["workers"].values():
                    if x["bundle"] == i:
                        for k, v in dict(x["resources"], GPU=x["gpus"]).items():
                            used[k] = used.get(k, 0.0) + v
                want = dict(resources, GPU=gpus)
                if all(b["resources"].get(k, 0.0) - used.get(k, 0.0) >= v - 1e-9 for k, v in want.items() if v):
                    return name, i
        return None

    def _unassign(self, wid: str) -> None:
        """The worker's slot is free again; a group left with no worker is removed."""
        for name, g in self._groups().items():
            if wid not in g["workers"]:
                continue
            del g["workers"][wid]
            if g["workers"]:
                self.coord("set_placement_group", name, g)
            else:
                self._remove_group(name)

    def _remove_group(self, name: str) -> None:
        try:
            ray.util.remove_placement_group(ray.util.get_placement_group(name))
        except ValueError:
            pass
        self.coord("drop_placement_group", name)

    def release_reservation(self, worker_ids: list[str]) -> list[str]:
        """A unit rolled back: give back the slots of its new workers that are not running (their
        group is removed once empty). Returns the released worker ids."""
        out = []
        for wid in worker_ids:
            if self._slot_of(wid) is not None and not self.worker_alive(wid):
                self._unassign(wid)
                out.append(wid)
        return out

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
        # a live worker answers on another thread however busy it is, but a loaded machine may
        # take more than a second: wait a quarter of a call's deadline (1-10 s) before blaming
        ready, _ = ray.wait(list(pings.values()), num_returns=len(pings), timeout=min(10.0, max(1.0, self.deadlines.call_s / 4)))
        for w, ref in pings.items():
            if ref not in ready:
                return w
        return waiting[0]

    def stop_worker(self, worker_id: str) -> str:
        note = self._stop(worker_id)
        self._unassign(worker_id)  # its slot in its placement group is free (the group goes once empty)
        return note

    def _stop(self, worker_id: str) -> str:
        h = self._handle(worker_id)
        self._handles.pop(worker_id, None)
        if h is None or self._actor_states().get(worker_id) in ("DEAD", None):
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
        sent: dict[str, int] = {}
        got: dict[str, int] = {}
        for (_wid, _, a), res in zip(calls, results):
            (sent if a[5] == "old" else got).update(res["checksums"])
        bad = sorted(k for k in set(sent) | set(got) if sent.get(k) != got.get(k))
        nbytes = sum(res["bytes"] for (_, _, a), res in zip(calls, results) if a[5] == "old")
        return {"pieces": len(pieces), "pairs": len(sent), "bytes": nbytes, "seconds": seconds,
                "checksum_mismatches": bad, "checksums": sent}

    def form_training_group(self, component: str, ranks: list[dict], layout: Layout) -> None:
        ranks = sorted(ranks, key=lambda r: r["index"])
        keys = sorted({f"pp{pp}tp{tp}" for pp in range(layout.pp) for tp in range(layout.tp)})
        if layout.tp > 1:  # TP groups (one per DP replica), for workers whose ranks talk within TP (tinylm)
            keys += sorted({f"pp{pp}dp{dp}" for pp in range(layout.pp) for dp in range(layout.dp)})
        host, ports = "127.0.0.1", {}
        if layout.dp > 1 or layout.tp > 1:
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
        groups = self._groups()
        for name, g in groups.items():
            gone = [w for w in g["workers"] if not self.worker_alive(w)]
            if gone and len(gone) == len(g["workers"]):
                out.append(f"placement group {name} is held for workers that are all gone: {sorted(gone)}")
        for pg_id, pg in (ray.util.placement_group_table() or {}).items():
            if pg.get("state") not in ("REMOVED",) and pg.get("name") not in groups:
                out.append(f"placement group {pg.get('name') or pg_id} is {pg.get('state')} and not recorded")
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
        for pg in (ray.util.placement_group_table() or {}).values():
            if pg.get("state") != "REMOVED" and str(pg.get("name", "")).startswith(PG_PREFIX):
                try:
                    ray.util.remove_placement_group(ray.util.get_placement_group(pg["name"]))
                except ValueError:
                    pass
        self._handles.clear()
        self._pids.clear()
        self.fail_starts.clear()
        self.creates.clear()
        shutil.rmtree(self.state_dir, ignore_errors=True)  # a fresh coordinator starts from nothing
        self._coord = self._start_coordinator()

    def close(self) -> None:
        if self._cluster is not None:
            ray.shutdown()
            self._cluster.shutdown()
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    # ------------------------------------------------------------------ the coordinator's process
    def coordinator_pid(self) -> int:
        return ray.get(self._coord.pid.remote(), timeout=self.deadlines.call_s)

    def kill_coordinator(self, wait_s: Optional[float] = 60.0) -> int:
        """SIGKILL the coordinator's process (a crash); Ray restarts it from its state directory.
        Returns the new process id once it answers, or (``wait_s=None``) the old one at once:
        the next calls then meet the restart."""
        old = self.coordinator_pid()
        _signal(old, signal.SIGKILL)
        if wait_s is None:
            return old
        end = time.time() + wait_s
        while time.time() < end:
            try:
                pid = ray.get(self._coord.pid.remote(), timeout=max(1.0, end - time.time()))
                if pid != old:
                    return pid
            except (RayActorError, GetTimeoutError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the coordinator did not come back within {wait_s:g} s after it was killed")

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


def _fmt(res: dict) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(res.items()))


def _cause(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("MemoryError:", "out of memory"):
        i = text.find(marker)
        if i >= 0:
            return text[i: i + 200].splitlines()[0]
    return text.splitlines()[0][:200] if text else type(exc).__name__
