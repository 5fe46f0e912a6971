"""A fault-injection harness: one migration, one fault at one point, then every invariant.

Used by the fault tests (sim and Ray) and by ``python -m executor.bench faults``. A case's
``impl`` picks the workers: the toy ones (outputs are a function of seed and position), or
``tinylm`` (real decoding: outputs and logprobs are compared with decoding the request
uninterrupted, :func:`expected`; trainer state is assembled from its sharded chunks). A *case* is
(migration, fault kind, step kind, nth step of that kind, point). The harness:

1. applies the base plan (rollout engines, a trainer, requests in flight, two training steps)
   and snapshots the trainer's full logical state (every parameter, gradient buffer and Adam
   moment, assembled from the shards);
2. applies the migration with the fault armed; a killed controller is replaced by a new one that
   resumes from the journal;
3. wakes frozen workers and makes each try a side effect with the epoch it holds;
4. lets the rollout finish and checks: every request finished exactly once with exactly its
   expected output; the trainer is wholly on the old or wholly on the new layout and its state
   is bit-identical to the snapshot (a rank whose process was killed is reported lost, never
   replaced by a half copy); every stale effect was refused; no actor, worker or placement
   group is left over after the dead are reaped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from executor import router
from executor.backends.base import observe
from executor.controller import Executor, reap
from executor.diff import diff
from executor.faults import ControllerCrash, Fault, FaultPlan
from executor.journal import Journal
from executor.state import Layout, Node
from executor.target import ExecutorTarget, to_state
from executor.workers.engine import expected_output
from executor.workers.model import STATE_KINDS, ModelSpec, owned_params, shard_slice

NODES = [Node("a", "H20", 4, 256.0), Node("b", "H20", 4, 256.0), Node("t", "H100", 4, 512.0), Node("u", "H100", 4, 512.0)]
ROLLOUT, TRAINER = "job/rollout", "job/trainer"
FAULT_KINDS = ("kill_source", "kill_destination", "kill_controller", "fail_destination_start", "freeze_node")
# The coordinator's process dies (SIGKILL) and its backend restarts it from its durable state
# (Ray: ``max_restarts``, :mod:`executor.workers.coordinator_store`); backends with ``kill_coordinator``.
COORDINATOR_FAULT = "kill_coordinator"
MIGRATIONS = ("workload", "p2p", "reboot")
MODEL = {"hidden": 32, "ffn": 64, "layers": 2, "vocab": 64, "seed": 3}


def _nodes():
    return [{"name": n.name, "gpu_type": n.gpu_type, "gpus": n.gpus, "dram_gb": n.dram_gb} for n in NODES]


def impls(impl: str) -> tuple[str, str]:
    """(rollout impl, trainer impl) of a case's ``impl``: one name for both, or ``"R+T"``
    (e.g. ``"sglang+toy"``, ``"toy+megatron"``)."""
    r, _, t = impl.partition("+")
    return r, (t if _ else r)


def base_body(impl: str = "") -> dict:
    """The cluster before the migration; ``impl`` picks the workers (``""``: the toy ones,
    ``"tinylm"``: the real small transformer, ``"R+T"``: rollout and trainer impls apart,
    :mod:`executor.workers.registry`)."""
    body = {"nodes": _nodes(), "components": [
        {"name": ROLLOUT, "role": "rollout", "gpu_type": "H20", "dram_gb_per_worker": 16, "placement": {"a": 1, "b": 2},
         "engine": {"max_batch": 8, "progress_every": 2}},
        {"name": TRAINER, "role": "trainer", "gpu_type": "H100", "dram_gb_per_worker": 64, "layout": {"tp": 2},
         "placement": {"t": 2}, "model": MODEL, "migration": "p2p"}]}
    if impl:
        for c, name in zip(body["components"], impls(impl)):
            if name:
                c["impl"] = name
        body["components"][0]["model"] = MODEL
    return body


def migration_body(kind: str, impl: str = "") -> dict:
    body = base_body(impl)
    r, t = body["components"]
    if kind == "workload":
        r["placement"] = {"a": 2}
    elif kind == "p2p" and impls(impl)[1] == "tinylm":  # no pipeline stages in the tiny LM: TP 2 -> TP 1 x DP 2
        t.update(layout={"tp": 1, "dp": 2}, placement={"u": 2})
    elif kind == "p2p":
        t.update(layout={"tp": 1, "pp": 2}, placement={"u": 2})
    else:
        t.update(layout={"tp": 1, "dp": 2}, placement={"u": 2}, migration="reboot")
    return body


def target(body: dict):
    return to_state(ExecutorTarget.model_validate(body))


# ----------------------------------------------------------------------------- trainer state
def full_state(backend: Any, ids: list[str]) -> tuple[dict, int, list[str]]:
    """Assemble the logical trainer state from the ranks ``ids``; (tensors, step, lost ranks)."""
    spec = ModelSpec(**MODEL)
    recs = {r["id"]: r for r in backend.coord("records")}
    out: dict = {}
    steps, lost = set(), []
    chunked = []
    for wid in ids:
        rec = recs.get(wid)
        try:
            st = backend.call(wid, "state")
        except Exception:  # noqa: BLE001 - a lost rank is reported, not assembled
            lost.append(wid)
            continue
        steps.add(st["step"])
        if "chunks" in st:  # a plain sharded state (executor.workers.shardstate)
            chunked.append(st)
            continue
        if rec is None:
            raise LookupError(f"{wid}: answered 'state' but the coordinator holds no record of it (its layout is unknown)")
        lay = Layout(**rec["layout"])
        for p in owned_params(spec, lay, st["rank"]):
            for k in STATE_KINDS:
                f = out.setdefault((p.name, k), torch.full(p.shape, float("nan")))
                f[shard_slice(p, lay, st["rank"])] = st["shards"][p.name][k]
    if chunked:
        from executor.workers import shardstate

        out.update(shardstate.assemble(chunked))
    return out, (steps.pop() if len(steps) == 1 else -1), lost


def same_state(a: dict, b: dict) -> list[str]:
    """Tensors that differ (NaN = not covered, so a missing shard shows up as a difference)."""
    bad = [f"{k}: missing" for k in a if k not in b] + [f"{k}: extra" for k in b if k not in a]
    for k in a:
        if k in b and not torch.equal(a[k], b[k]):
            both_nan = torch.isnan(a[k]) & torch.isnan(b[k])
            if not (torch.equal(torch.nan_to_num(a[k]), torch.nan_to_num(b[k])) and (torch.isnan(a[k]) == torch.isnan(b[k])).all()):
                bad.append(f"{k}: values differ")
            elif both_nan.any():
                bad.append(f"{k}: not covered")
    return bad


# ----------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    migration: str
    fault: str
    step_kind: str
    nth: int
    point: str
    impl: str = ""  # the workers ("": toy; "tinylm": the real small transformer)

    @property
    def id(self) -> str:
        return f"{self.impl + '-' if self.impl else ''}{self.migration}-{self.fault}-{self.step_kind}{self.nth}-{self.point}"


def unit_steps(kind: str, impl: str = "") -> list[tuple[str, int]]:
    """(step kind, nth of that kind) for every step of the migration's unit."""
    obs = target(base_body(impl))
    for c in obs.components.values():  # a fake observed state: the base placement, running
        from executor.diff import _new_workers

        c.workers = _new_workers(c, 1)
        c.workers = [w.__class__(**{**w.__dict__, "status": "running"}) for w in c.workers]
        c.generation, c.placement = 1, {}
    obs.nodes = {n.name: n for n in NODES}
    plan = diff(obs, target(migration_body(kind, impl)))
    seen: dict[str, int] = {}
    out = []
    for s in plan.steps:
        out.append((s.kind, seen.get(s.kind, 0)))
        seen[s.kind] = seen.get(s.kind, 0) + 1
    return out


def all_cases(points=("before", "mid", "after"), impl: str = "") -> list[Case]:
    cases = []
    for m in MIGRATIONS:
        steps = unit_steps(m, impl)
        for f in FAULT_KINDS:
            for kind, nth in steps:
                if f == "fail_destination_start":
                    if kind == "create":
                        cases.append(Case(m, f, kind, nth, "before", impl))
                    continue
                for p in points:
                    cases.append(Case(m, f, kind, nth, p, impl))
    return cases


def rotating_cases(impl: str = "") -> list[Case]:
    """Every fault kind at every step of every migration, at one of the three points (rotating,
    so each point is hit for every fault kind): a third of :func:`all_cases`."""
    by_key: dict[tuple, list[Case]] = {}
    for c in all_cases(impl=impl):
        by_key.setdefault((c.migration, c.fault, c.step_kind, c.nth), []).append(c)
    out = []
    for i, cs in enumerate(by_key.values()):
        out.append(cs[i % len(cs)])
    return out


def coordinator_cases() -> list[Case]:
    """The coordinator dies mid-apply where it holds what must not be lost: requests moved in the
    ledger but not yet admitted (workload handoff, mid), the reshard done but not switched (P2P),
    a reboot's checkpoint saved but not yet read back (after the save; mid-create of the restart)."""
    return [Case("workload", COORDINATOR_FAULT, "handoff", 0, "mid"), Case("p2p", COORDINATOR_FAULT, "reshard", 0, "after"),
            Case("reboot", COORDINATOR_FAULT, "save", 0, "after"), Case("reboot", COORDINATOR_FAULT, "create", 1, "mid")]


def representative_cases(impl: str = "") -> list[Case]:
    """Every fault kind for every migration, at a step where it bites (the default test set)."""
    picks = {
        "workload": {"kill_source": ("handoff", 0, "before"), "kill_destination": ("handoff", 0, "mid"),
                     "kill_controller": ("handoff", 0, "mid"), "fail_destination_start": ("create", 0, "before"),
                     "freeze_node": ("drain", 0, "before")},
        "p2p": {"kill_source": ("reshard", 0, "before"), "kill_destination": ("reshard", 0, "mid"),
                "kill_controller": ("reshard", 0, "after"), "fail_destination_start": ("create", 1, "before"),
                "freeze_node": ("reshard", 0, "before")},
        "reboot": {"kill_source": ("stop", 0, "before"), "kill_destination": ("switch", 0, "before"),
                   "kill_controller": ("create", 0, "mid"), "fail_destination_start": ("create", 1, "before"),
                   "freeze_node": ("save", 0, "before")},
    }
    return [Case(m, f, *picks[m][f], impl) for m in MIGRATIONS for f in FAULT_KINDS]


# ----------------------------------------------------------------------------- the run
@dataclass
class Outcome:
    case: Case
    status: str = ""
    resumed: bool = False
    layout: str = ""  # old | new
    lost_ranks: list[str] = field(default_factory=list)
    stale_attempts: int = 0
    stale_accepted: int = 0
    coordinator_restarts: int = 0
    problems: list[str] = field(default_factory=list)
    requests: int = 0
    seconds: float = 0.0
    fired: bool = False


def _roles(backend: Any, kind: str, old_ids: dict) -> tuple[list[str], list[str]]:
    recs = backend.coord("records")
    if kind == "workload":
        src = [r["id"] for r in recs if r["component"] == ROLLOUT and r["node"] == "b"]
        dst = [r["id"] for r in recs if r["component"] == ROLLOUT and r["node"] == "a"]
    else:
        src = [r["id"] for r in recs if r["component"] == TRAINER and r["id"] in old_ids[TRAINER]]
        dst = [r["id"] for r in recs if r["component"] == TRAINER and r["id"] not in old_ids[TRAINER]]
    return src, dst


def expected(impl: str) -> Callable[[dict], tuple[list[int], Any]]:
    """request record -> (its output, its logprobs or None) in a run with no migration."""
    if impls(impl)[0] != "tinylm":
        return lambda r: (expected_output(r), None)
    from executor.workers.lm_engine import reference_output

    cache: dict = {}

    def ref(r: dict):
        key = (tuple(r["prompt"]), r["seed"], r["target_len"], tuple(sorted((r.get("sampling") or {}).items())))
        if key not in cache:
            cache[key] = reference_output(MODEL, r)
        return cache[key]
    return ref


def run_case(case: Case, make_backend: Callable[[], Any], *, requests: int = 60, settle_s: float = 60.0,
             prompt_len: int = 64, expect: Callable[[dict], tuple[list[int], Any]] | None = None,
             after_apply: Callable[[], None] | None = None) -> Outcome:
    """``expect``: request record -> (output, logprobs or None) uninterrupted (default: :func:`expected`);
    ``after_apply``: called once the migration's apply has returned, before the rollout is let finish
    (e.g. to let engines that were held mid-request decode on: the move then always finds requests in
    flight, however fast the machine)."""
    t0 = time.time()
    out = Outcome(case)
    b = make_backend()
    j = Journal(":memory:")
    Executor(b, j).apply(diff(observe(b), target(base_body(case.impl))).steps, "base")
    reqs = router.make_requests(ROLLOUT, requests, prompts=6, prompt_len=prompt_len, min_len=4, max_len=24, seed=7)
    if impls(case.impl)[0] == "tinylm":  # half greedy, half sampled: sampling parameters must survive every move
        for i, r in enumerate(reqs):
            r["sampling"] = {"temperature": 0.0 if i % 2 == 0 else 0.8}
    router.submit(b, ROLLOUT, reqs)
    for s in range(2):
        assert all(b.train_step(TRAINER, s))
    b.tick(3)
    old_ids = {c: [r["id"] for r in b.coord("records") if r["component"] == c] for c in (ROLLOUT, TRAINER)}
    before, before_step, _ = full_state(b, old_ids[TRAINER])
    frozen: list[str] = []
    killed: list[str] = []
    restarts_before: list[int] = []

    def act(backend, step):
        src, dst = _roles(backend, case.migration, old_ids)
        live_src = [w for w in src if backend.worker_alive(w)]
        live_dst = [w for w in dst if backend.worker_alive(w)]
        if case.fault == "kill_source" and live_src:
            backend.kill(live_src[0])
            killed.append(live_src[0])
        elif case.fault == "kill_destination" and live_dst:
            backend.kill(live_dst[0])
            killed.append(live_dst[0])
        elif case.fault == COORDINATOR_FAULT:
            restarts_before.append(backend.coord("durable")["restarts"])
            backend.kill_coordinator(wait_s=None)  # the controller's next calls meet the restart
        elif case.fault == "freeze_node":
            node = "b" if case.migration == "workload" else "t"
            for r in backend.coord("records"):
                if r["node"] == node and backend.worker_alive(r["id"]) and r["id"] not in frozen:
                    backend.freeze(r["id"])
                    frozen.append(r["id"])

    plan = FaultPlan()
    if case.fault == "kill_controller":
        plan.faults.append(Fault(case.step_kind, case.point, "crash", nth=case.nth))
    elif case.fault == "fail_destination_start":
        def arm(backend, step):  # this create's worker fails in start-up, as on an OOM
            backend.fail_starts.add(step.args["worker"]["id"])
        plan.faults.append(Fault(case.step_kind, case.point, arm, nth=case.nth))
    else:
        plan.faults.append(Fault(case.step_kind, case.point, act, nth=case.nth))
    steps = diff(observe(b), target(migration_body(case.migration, case.impl))).steps
    try:
        res = Executor(b, j, faults=plan).apply(steps, case.migration)
    except ControllerCrash:
        out.resumed = True
        res = Executor(b, j).apply(steps, case.migration)  # a new controller resumes from the journal
    out.status = res.status
    out.fired = all(f.fired for f in plan.faults)
    if after_apply is not None:
        after_apply()
    b.fail_starts.clear()

    # Stale workers wake up and try to act with the epoch they hold.
    for wid in frozen:
        b.thaw(wid)
    for wid in frozen:
        rec = next((r for r in b.coord("records") if r["id"] == wid), None)
        if rec is None or rec.get("status") != "dead":
            continue
        out.stale_attempts += 1
        if rec["role"] == "trainer":
            ok = b.call(wid, "train_step", 99)  # its commit must be refused
        else:  # a thawed engine decodes on and tries to complete its requests
            b.tick(5)
            ok = False
        out.stale_accepted += int(bool(ok))
    # Let the rollout finish.
    end, last, still, changed = time.time() + settle_s, -1, 0, time.time()
    while time.time() < end:
        summ = b.coord("ledger_summary")
        if summ["done"] == summ["requests"]:
            break
        still = still + 1 if summ["done"] == last else 0
        if still == 0:
            changed = time.time()
        elif still > 50 and time.time() - changed > min(30.0, settle_s / 2):
            break  # no progress: something is stuck (reported below)
        else:  # engines that decode on their own (an SGLang server) need time, not ticks
            time.sleep(0.002)
        last = summ["done"]
        b.tick(20)
    recs = b.coord("request_records")
    out.requests = len(recs)
    not_done = [r["id"] for r in recs if not r["done"]]
    ref = expect or expected(case.impl)
    wrong = [r["id"] for r in recs if r["done"] and r["output"] != ref(r)[0]]
    if impls(case.impl)[0] == "tinylm" or expect is not None:
        wrong += [r["id"] for r in recs if r["done"] and r["output"] == ref(r)[0]
                  and (r.get("meta") or {}).get("logprobs") != ref(r)[1]]
    if not_done:
        out.problems.append(f"{len(not_done)} request(s) never finished: {not_done[:5]}")
    if wrong:
        out.problems.append(f"{len(wrong)} request(s) finished with the wrong output (or logprobs): {wrong[:5]}")
    if len(recs) != requests:
        out.problems.append(f"ledger holds {len(recs)} requests, {requests} were submitted")
    # Trainer: wholly on the old or wholly on the new layout, bit-identical to the snapshot.
    ids_now = [r["id"] for r in b.coord("records") if r["component"] == TRAINER]
    gens = {r["generation"] for r in b.coord("records") if r["component"] == TRAINER}
    if len(gens) > 1:
        out.problems.append(f"trainer ranks of generations {sorted(gens)} coexist")
    is_old = set(ids_now) <= set(old_ids[TRAINER])
    base_t = target(base_body(case.impl)).components[TRAINER]
    shapes = {(tuple(sorted(r["layout"].items())), r["node"]) for r in b.coord("records") if r["component"] == TRAINER}
    old_shape = {(tuple(sorted(vars(base_t.layout).items())), n) for n in base_t.placement}
    out.layout = "old" if shapes <= old_shape else "new"  # a reboot restored in place is the old layout again
    after, step_after, lost = full_state(b, ids_now)
    out.lost_ranks = lost + (sorted(set(old_ids[TRAINER]) - set(ids_now)) if is_old else [])
    if not out.lost_ranks:
        diffs = same_state(before, after)
        if diffs:
            out.problems.append(f"trainer state differs from before the migration: {diffs[:4]}")
        if step_after != before_step:
            out.problems.append(f"trainer step {step_after}, was {before_step}")
    elif set(out.lost_ranks) - set(killed):
        out.problems.append(f"the {out.layout} layout lost ranks nobody killed: {sorted(set(out.lost_ranks) - set(killed))}")
    else:  # a killed rank took the only copy of its shard with it: every surviving element is untouched
        for k, t in after.items():
            m = ~torch.isnan(t)
            if not torch.equal(t[m], before[k][m]):
                out.problems.append(f"surviving old shards of {k} changed")
                break
    if case.fault == COORDINATOR_FAULT:
        out.coordinator_restarts = b.coord("durable")["restarts"] - (restarts_before[0] if restarts_before else 0)
        if out.coordinator_restarts < 1:
            out.problems.append("the coordinator was not restarted")
        if out.status != "done":
            out.problems.append(f"the apply did not finish across the coordinator's restart: {out.status}")
    illegal = b.coord("illegal_transitions")
    if illegal:
        out.problems.append(f"illegal worker transitions: {illegal[:4]}")
    if out.stale_accepted:
        out.problems.append(f"{out.stale_accepted} stale effect(s) were accepted")
    reap(b)
    leaks = b.leaks()
    if leaks:
        out.problems.append(f"leaked: {leaks}")
    if hasattr(b, "creates"):
        twice = [w for w, n in b.creates.items() if n > 1]
        if twice:
            out.problems.append(f"created twice: {twice}")
    out.seconds = time.time() - t0
    return out
