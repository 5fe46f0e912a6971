"""The coordinator: leases (epoch fencing), the worker registry, the request ledger, checkpoints.

One coordinator per cluster (a detached Ray actor, or an object in the sim backend). It is the
only place where a worker's side effect takes hold, and it checks the worker's lease first:

* a **lease** is ``(worker id, epoch)``; epochs come from one counter that only grows, so a
  worker declared dead (its lease revoked) or retired by a switch can never act again, even if
  its process lives on (a frozen node that wakes up);
* the **request ledger** holds every rollout request: its owner engine, its partial output as
  last reported, and whether it finished. A completion is accepted only from the current owner
  with a valid lease and only once; every refusal is recorded;
* **checkpoints** (reboot) and **trainer commits** are accepted only with a valid lease (and, for
  commits, only from the component's active set).

With a ``state_dir`` (the Ray backend always gives one) every change is written to
:class:`executor.workers.coordinator_store.CoordinatorStore` before the call returns, and a new
coordinator on the same directory (Ray's restart of a dead actor) starts from it: the epoch
counter and leases (so fencing holds across the restart), the registry, the ledger, the
checkpoints (committed with a marker written last), parked components and placement groups.
Calls are idempotent, so one that Ray retries after the restart (``max_task_retries``) does
nothing twice: a repeated completion by the owner that made it is accepted again, a repeated
trainer commit is recorded once.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from executor.workers.coordinator_store import CoordinatorStore

KV = ("next_epoch", "leases", "active", "registry", "generation", "dead_nodes", "parked", "pgs", "writer")


class Changes:
    """What changed in a coordinator since the sim backend last saved it (its incremental saves,
    :meth:`executor.backends.sim.SimBackend.save`): whole attributes by name, registry records,
    requests and checkpoints by key. Leases and the append-only lists (rejected effects, illegal
    transitions, commits) are found by the backend itself (a diff, their lengths). ``full``: a
    change this record cannot name (the next save writes the whole coordinator)."""

    __slots__ = ("names", "registry", "requests", "checkpoints", "full")

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.registry: set[str] = set()
        self.requests: set[str] = set()
        self.checkpoints: set[str] = set()
        self.full = False

    def take(self) -> "Changes":
        """A copy of what is recorded; this one starts empty."""
        out = Changes()
        out.names, out.registry, out.requests, out.checkpoints, out.full = (self.names, self.registry, self.requests,
                                                                           self.checkpoints, self.full)
        self.names, self.registry, self.requests, self.checkpoints, self.full = set(), set(), set(), set(), False
        return out

    def merge(self, other: "Changes") -> None:
        """Record ``other`` again (a save that did not commit)."""
        self.names |= other.names
        self.registry |= other.registry
        self.requests |= other.requests
        self.checkpoints |= other.checkpoints
        self.full = self.full or other.full


class Coordinator:
    # The sim backend's record of changes since its last save (an instance attribute it sets; never saved).
    _changes: Optional[Changes] = None

    def __init__(self, first_epoch: int = 1, state_dir: Optional[str] = None) -> None:
        self._lock = threading.RLock()
        self._store: Optional[CoordinatorStore] = None
        self.next_epoch = first_epoch
        self.leases: dict[str, int] = {}
        self.active: dict[str, list[str]] = {}
        self.registry: dict[str, dict] = {}
        self.requests: dict[str, dict] = {}
        self.rejected: list[dict] = []
        self.checkpoints: dict[str, Any] = {}
        self.commits: dict[str, list[dict]] = {}
        self.generation: dict[str, int] = {}
        self.dead_nodes: dict[str, str] = {}
        self.illegal: list[str] = []
        self.parked: dict[str, dict] = {}  # component -> its checkpoint while it is stopped between a park and a restore
        self.pgs: dict[str, dict] = {}  # the Ray backend's reservations (name -> bundles and slots)
        self.restarts = 0  # how many times this state was loaded by a new coordinator process
        self.writer = ""  # the apply whose step last changed the cluster (its journal and id: Controller's stale-journal check)
        if state_dir:
            self._open(state_dir)

    # ------------------------------------------------------------------ durability
    def _open(self, state_dir: str) -> None:
        """Load the saved state, whole or not at all: a damaged record (of the wrong type, or an event
        missing a field) raises ``DamagedState`` naming it, here and not in the middle of an apply."""
        from executor.workers.coordinator_store import CoordinatorStore, DamagedState

        store = CoordinatorStore(state_dir)
        try:
            saved = store.load()
            kv = saved["kv"]
            for name in KV:
                if name in kv:
                    want = type(getattr(self, name))
                    if not isinstance(kv[name], want) or isinstance(kv[name], bool):
                        raise DamagedState(f"the coordinator's state {store.path}: kv record {name!r} holds a "
                                           f"{type(kv[name]).__name__}, not a {want.__name__}")
            ev = saved["events"]
            try:
                illegal = [str(e["text"]) for e in ev.get("illegal", [])]
                commits: dict[str, list[dict]] = {}
                for c in ev.get("commit", []):
                    commits.setdefault(c["component"], []).append({k: c[k] for k in ("worker", "epoch", "step")})
                restarts = int(kv.get("restarts", -1)) + 1
            except (KeyError, TypeError, ValueError) as exc:
                raise DamagedState(f"the coordinator's state {store.path}: an event or restart record is damaged "
                                   f"({type(exc).__name__}: {exc})") from None
            checkpoints = store.load_checkpoints()
        except BaseException:
            store.close()
            raise
        self._store = store
        for name in KV:
            if name in kv:
                setattr(self, name, kv[name])
        self.requests = saved["requests"]
        self.rejected = ev.get("rejected", [])
        self.illegal = illegal
        self.commits.update(commits)
        self.checkpoints = checkpoints
        self.restarts = restarts
        store.write(kv={"restarts": self.restarts})

    def _save(self, *names: str, requests: tuple = (), events: tuple = (), records: Optional[tuple] = None) -> None:
        """Every change goes through here: ``names`` the attributes changed, ``requests`` the request
        ids, ``records`` the registry ids changed (for the sim backend's incremental saves; None with
        "registry" among ``names``: not said, the next save writes the coordinator whole)."""
        ch = self._changes
        if ch is not None:
            for n in names:
                if n == "registry":
                    if records is None:
                        ch.full = True
                elif n != "leases":  # (leases: the backend diffs them)
                    ch.names.add(n)
            ch.registry.update(records or ())
            ch.requests.update(requests)
        if self._store is not None:
            self._store.write(kv={n: getattr(self, n) for n in names}, requests=[self.requests[r] for r in requests],
                              events=events)

    def durable(self) -> dict:
        """Where the state lives and how often a new process took it over."""
        return {"state_dir": str(self._store.dir) if self._store else None, "restarts": self.restarts}

    # ------------------------------------------------------------------ leases
    def grant(self, worker_id: str) -> int:
        with self._lock:
            e = self.next_epoch
            self.next_epoch += 1
            self.leases[worker_id] = e
            self._save("next_epoch", "leases")
            return e

    def revoke(self, worker_id: str, why: str = "") -> None:
        with self._lock:
            self.leases.pop(worker_id, None)
            rec = self.registry.get(worker_id)
            if rec is not None and why:
                rec.setdefault("revoked_because", why)
            self._save("leases", "registry", records=(worker_id,))

    def lease(self, worker_id: str) -> Optional[int]:
        return self.leases.get(worker_id)

    def _fence(self, worker_id: str, epoch: int, what: str) -> bool:
        if self.leases.get(worker_id) == epoch:
            return True
        self._reject({"worker": worker_id, "epoch": epoch, "current": self.leases.get(worker_id), "what": what,
                      "at": time.time()})
        return False

    def _reject(self, rec: dict) -> None:
        self.rejected.append(rec)
        self._save(events=(("rejected", rec),))

    # ------------------------------------------------------------------ registry
    def register(self, record: dict) -> None:
        with self._lock:
            self.registry[record["id"]] = dict(record)
            self._save("registry", records=(record["id"],))

    def set_status(self, worker_id: str, status: str) -> None:
        """Move a worker along the lifecycle table (:data:`executor.steps.WORKER_TRANSITIONS`).
        An illegal move is a bug in the executor: it is recorded (tests assert there is none)
        rather than raised, so a controller in the middle of a rollback is not stopped by it."""
        from executor.steps import WORKER_TRANSITIONS

        with self._lock:
            rec = self.registry.get(worker_id)
            if rec is None or rec.get("status") == status:
                return
            old = rec.get("status", "requested")
            events: tuple = ()
            if status not in WORKER_TRANSITIONS.get(old, ()):
                self.illegal.append(f"{worker_id}: {old} -> {status}")
                events = (("illegal", {"text": self.illegal[-1]}),)
            rec["status"] = status
            self._save("registry", events=events, records=(worker_id,))

    def illegal_transitions(self) -> list[str]:
        return list(self.illegal)

    def update_record(self, worker_id: str, fields: dict) -> None:
        """A kept trainer rank's new place in its component's layout (index, layout, generation)."""
        with self._lock:
            if worker_id in self.registry:
                self.registry[worker_id].update(fields)
                self._save("registry", records=(worker_id,))

    def unregister(self, worker_id: str) -> None:
        with self._lock:
            self.registry.pop(worker_id, None)
            self.leases.pop(worker_id, None)
            self._save("registry", "leases", records=(worker_id,))

    def records(self) -> list[dict]:
        with self._lock:
            return [dict(r, epoch=self.leases.get(r["id"], 0)) for r in self.registry.values()]

    def switch(self, component: str, active: list[str], retired: list[str], generation: int) -> None:
        """Atomically make ``active`` the serving set of ``component`` and revoke ``retired``."""
        with self._lock:
            for w in retired:
                self.leases.pop(w, None)
                if w in self.registry and self.registry[w].get("status") != "dead":
                    self.set_status(w, "stopping")
            self.active[component] = list(active)
            self.generation[component] = generation
            self._save("leases", "registry", "active", "generation", records=tuple(retired))

    def active_set(self, component: str) -> list[str]:
        return list(self.active.get(component, []))

    # ------------------------------------------------------------------ request ledger
    def submit(self, requests: list[dict], owners: list[str]) -> None:
        with self._lock:
            new = []
            for r, o in zip(requests, owners):
                if r["id"] in self.requests:
                    continue  # idempotent
                self.requests[r["id"]] = {**r, "owner": o, "output": [], "done": False, "finished_by": None,
                                          "completions_refused": 0, "handoffs": 0}
                new.append(r["id"])
            self._save(requests=tuple(new))

    def progress(self, worker_id: str, epoch: int, updates: dict[str, list[int]], meta: Optional[dict] = None) -> bool:
        """An engine reports partial output; kept as the resume point if the engine dies. ``meta``
        (request id -> fields, e.g. ``logprobs`` of that output) is kept with it, for the engine
        that resumes the request (an SGLang engine's output logprobs)."""
        with self._lock:
            if not self._fence(worker_id, epoch, f"progress of {len(updates)} request(s)"):
                return False
            changed = []
            for rid, out in updates.items():
                r = self.requests.get(rid)
                if r and r["owner"] == worker_id and not r["done"] and len(out) >= len(r["output"]):
                    if list(out) != r["output"] or (meta and rid in meta):
                        changed.append(rid)
                    r["output"] = list(out)
                    r.update((meta or {}).get(rid, {}))
            self._save(requests=tuple(changed))
            return True

    def complete(self, worker_id: str, epoch: int, request_id: str, output: list[int], meta: Optional[dict] = None) -> bool:
        """The owner finished a request (``meta``: fields kept with it, e.g. its output ``logprobs``)."""
        with self._lock:
            r = self.requests.get(request_id)
            if not self._fence(worker_id, epoch, f"complete {request_id}"):
                if r:
                    r["completions_refused"] += 1
                    self._save(requests=(request_id,))
                return False
            if (r is not None and r["done"] and r["finished_by"] == worker_id and r.get("finished_epoch") == epoch
                    and r["output"] == list(output)):
                return True  # the same completion again (a call retried after a coordinator restart)
            if r is None or r["done"] or r["owner"] != worker_id:
                if r:
                    r["completions_refused"] += 1
                    self._save(requests=(request_id,))
                self._reject({"worker": worker_id, "epoch": epoch, "current": self.leases.get(worker_id),
                              "what": f"complete {request_id} (not the owner or already done)", "at": time.time()})
                return False
            r["done"], r["finished_by"], r["output"], r["finished_epoch"] = True, worker_id, list(output), epoch
            if meta:  # kept both as the request's own fields (the SGLang worker) and under "meta" (the tinylm workers)
                r.update(meta)
                r["meta"] = dict(meta)
            self._save(requests=(request_id,))
            return True

    def cancel(self, component: str, why: str) -> int:
        """The component leaves the plan: its unfinished requests end as cancelled (counted once;
        a completion that arrives later is refused)."""
        with self._lock:
            n = []
            for r in self.requests.values():
                if r.get("component") == component and not r["done"]:
                    r["done"], r["cancelled"], r["finished_by"] = True, why, None
                    n.append(r["id"])
            self._save(requests=tuple(n))
            return len(n)

    def owned_by(self, worker_ids: list[str]) -> list[dict]:
        with self._lock:
            s = set(worker_ids)
            return [dict(r, output=list(r["output"])) for r in self.requests.values() if r["owner"] in s and not r["done"]]

    def transfer(self, moves: dict[str, str], snapshots: dict[str, list[int]]) -> list[dict]:
        """Move request ownership (request id -> new owner); ``snapshots`` is the partial output
        handed over. Returns the records as moved (what the new owner must resume from)."""
        with self._lock:
            out = []
            for rid, new_owner in moves.items():
                r = self.requests[rid]
                if r["done"]:
                    continue
                snap = snapshots.get(rid)
                if snap is not None and len(snap) >= len(r["output"]):
                    r["output"] = list(snap)
                if r["owner"] != new_owner:
                    r["owner"] = new_owner
                    r["handoffs"] += 1
                out.append(dict(r, output=list(r["output"])))
            self._save(requests=tuple(r["id"] for r in out))
            return out

    def ledger_summary(self) -> dict:
        with self._lock:
            rs = list(self.requests.values())
            return {"requests": len(rs), "done": sum(r["done"] for r in rs), "cancelled": sum(bool(r.get("cancelled")) for r in rs),
                    "refused_completions": sum(r["completions_refused"] for r in rs),
                    "handoffs": sum(r["handoffs"] for r in rs), "rejected_effects": len(self.rejected)}

    def request_records(self) -> list[dict]:
        with self._lock:
            return [dict(r, output=list(r["output"])) for r in self.requests.values()]

    def rejected_effects(self) -> list[dict]:
        with self._lock:
            return list(self.rejected)

    # ------------------------------------------------------------------ trainer and checkpoints
    def authorize(self, worker_id: str, epoch: int, what: str) -> bool:
        """A worker asks before it changes state it owns: refused (and recorded) on a stale lease."""
        with self._lock:
            return self._fence(worker_id, epoch, what)

    def commit_step(self, worker_id: str, epoch: int, component: str, step: int) -> bool:
        with self._lock:
            if not self._fence(worker_id, epoch, f"commit step {step} of {component}"):
                return False
            if worker_id not in self.active.get(component, []):
                self._reject({"worker": worker_id, "epoch": epoch, "current": epoch,
                              "what": f"commit step {step} of {component} (not in the active set)", "at": time.time()})
                return False
            rec = {"worker": worker_id, "epoch": epoch, "step": step}
            if rec in self.commits.get(component, []):
                return True  # the same commit again (a call retried after a coordinator restart)
            self.commits.setdefault(component, []).append(rec)
            self._save(events=(("commit", dict(rec, component=component)),))
            return True

    def committed_steps(self) -> dict[str, int]:
        """Per trainer component, how many optimizer steps it committed (any generation): a trainer
        that committed none still holds its initial state, so new ranks can take its place."""
        with self._lock:
            return {c: len({x["step"] for x in v}) for c, v in self.commits.items() if v}

    def put_checkpoint(self, worker_id: str, epoch: int, key: str, blob: Any) -> bool:
        with self._lock:
            if not self._fence(worker_id, epoch, f"save checkpoint {key}"):
                return False
        if self._store is not None:  # committed (marker written last) before it is acknowledged; other calls go on meanwhile
            self._store.put_checkpoint(key, blob)
        with self._lock:
            self.checkpoints[key] = blob
            if self._changes is not None:
                self._changes.checkpoints.add(key)
            return True

    def get_checkpoint(self, key: str) -> Any:
        return self.checkpoints.get(key)

    def checkpoint_keys(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.checkpoints if k.startswith(prefix))

    def drop_checkpoints(self, prefix: str) -> None:
        with self._lock:
            for k in [k for k in self.checkpoints if k.startswith(prefix)]:
                if self._store is not None:
                    self._store.drop_checkpoint(k)
                del self.checkpoints[k]
                if self._changes is not None:
                    self._changes.checkpoints.add(k)

    def mark_node_dead(self, node: str, why: str) -> None:
        with self._lock:
            self.dead_nodes[node] = why
            self._save("dead_nodes")

    def dead_node_list(self) -> dict[str, str]:
        return dict(self.dead_nodes)

    def revive_node(self, node: str) -> Optional[str]:
        """Forget that ``node`` was declared dead (an operator repaired it): why it was, or None when
        it was not. Its fenced workers stay fenced (their leases were revoked): only new ones run there."""
        with self._lock:
            why = self.dead_nodes.pop(node, None)
            if why is not None:
                self._save("dead_nodes")
            return why

    # ------------------------------------------------------------------ parked components
    def park(self, component: str, info: dict) -> None:
        """A staged reboot saved ``component`` and is stopping it: where its state is until it is restored."""
        with self._lock:
            self.parked[component] = dict(info)
            self._save("parked")

    def unpark(self, component: str) -> None:
        with self._lock:
            self.parked.pop(component, None)
            self._save("parked")

    def parked_components(self) -> dict[str, dict]:
        return {k: dict(v) for k, v in self.parked.items()}

    def claim_writer(self, tag: str) -> str:
        """Mark the cluster as changed by the apply ``tag`` from now on; the mark it held before."""
        with self._lock:
            before, self.writer = self.writer, str(tag)[:512]
            if before != self.writer:
                self._save("writer")
            return before

    def last_writer(self) -> str:
        return self.writer

    def generations(self) -> dict[str, int]:
        return dict(self.generation)

    # ------------------------------------------------------------------ placement groups (the Ray backend's reservations)
    def set_placement_group(self, name: str, info: dict) -> None:
        with self._lock:
            self.pgs[name] = json.loads(json.dumps(info))
            self._save("pgs")

    def drop_placement_group(self, name: str) -> None:
        with self._lock:
            self.pgs.pop(name, None)
            self._save("pgs")

    def placement_groups(self) -> dict[str, dict]:
        with self._lock:
            return json.loads(json.dumps(self.pgs))

    def ping(self) -> bool:
        return True

    def __getstate__(self) -> dict:
        """For the sim backend's saves: checkpoint tensors as raw bytes (:mod:`executor.workers.rawtensor`;
        parked trainers' checkpoints stay here across many saves)."""
        from executor.workers import rawtensor

        d = dict(self.__dict__)
        d.pop("_lock", None)
        d.pop("_changes", None)
        d["_store"] = None  # (the sim backend's coordinator has none)
        cache = d.pop("_encoded", {})  # a checkpoint never changes once put: encoded once, while it is kept
        enc = {k: cache[k][1] if k in cache and cache[k][0] is v else rawtensor.encode(v) for k, v in self.checkpoints.items()}
        self.__dict__["_encoded"] = {k: (self.checkpoints[k], e) for k, e in enc.items()}
        d["checkpoints"] = enc
        return d

    def __setstate__(self, d: dict) -> None:
        from executor.workers import rawtensor

        self.__dict__.update(d)
        self.__dict__.setdefault("parked", {})
        self.__dict__.setdefault("pgs", {})
        self.__dict__.setdefault("restarts", 0)
        self.__dict__.setdefault("writer", "")
        self.__dict__.setdefault("_store", None)
        self.checkpoints = {k: rawtensor.decode(v) for k, v in d.get("checkpoints", {}).items()}
        self._lock = threading.RLock()
