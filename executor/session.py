"""What the ``apply`` and ``status`` commands share: opening a backend, the default paths, the crash hook.

(Reading plan documents as targets needs the planner's documents and scenarios: it lives in
:mod:`planner.apply.documents`.)"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from estimators.errors import Problem, UserError

from executor.backends.base import Deadlines
from executor.state import Node

DEFAULT_DIR = Path(".rl-planner")


def _home() -> Path:
    return Path(os.environ.get("RL_PLANNER_HOME") or Path.home() / ".rl-planner")


def ray_address_key(address: Optional[str]) -> str:
    """The Ray cluster an address names, as a file-name-safe key: the address itself, or for
    ``auto`` what Ray would resolve it to (``RAY_ADDRESS``, then ``/tmp/ray/ray_current_cluster``)."""
    import re

    a = address if address not in (None, "", "auto") else os.environ.get("RAY_ADDRESS", "")
    if not a:
        try:
            a = Path("/tmp/ray/ray_current_cluster").read_text().strip()
        except OSError:
            a = "auto"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", a)[:120] or "auto"


def _connected_gcs(address: Optional[str]) -> Optional[str]:
    """The GCS address of the Ray cluster this process joined (what Ray reports, whichever alias of it
    --address gave: 127.0.0.1, localhost, a host name or its IP), else None. Keyed by the address as
    given, one cluster had a journal per alias: an apply interrupted under one was not found under
    another, which applied anew and left the first journal stale."""
    import sys

    ray = sys.modules.get("ray")
    if address == "local" or ray is None or not ray.is_initialized():
        return None
    try:
        return str(ray.get_runtime_context().gcs_address) or None
    except Exception:  # noqa: BLE001 - an older Ray without it: the address as given
        return None


def _unreachable(address: Optional[str], exc: Exception) -> UserError:
    return UserError(Problem("--address", f"cannot connect to a Ray cluster at {address or 'auto'}: {exc}",
                             "start one with 'ray start --head' or pass --address HOST:PORT"))


def connect_ray(address: Optional[str]) -> None:
    """Join the Ray cluster at ``address`` (before the journal's path is made, which is keyed by it)."""
    require("ray")
    from executor.backends.ray import cluster as rc

    try:
        rc.connect(address)
    except ConnectionError as exc:
        raise _unreachable(address, exc) from None


def journal_path(arg: Optional[str], backend: str = "sim", *, sim_state: Optional[str] = None, address: Optional[str] = None) -> Path:
    """The journal of the cluster the command acts on, wherever it is run from: beside the sim
    state (``SIM_STATE.journal``), or for Ray one per cluster address under ``~/.rl-planner/journals``
    (``$RL_PLANNER_HOME``). A journal in the working directory would be lost by resuming from
    another one, and with it the only record of an interrupted migration."""
    if arg:
        return Path(arg)
    if backend == "ray":
        d = _home() / "journals"
        given = d / f"ray-{ray_address_key(address)}.db"
        gcs = _connected_gcs(address)
        if gcs is None:
            return given
        p = d / f"ray-{re.sub(r'[^A-Za-z0-9._-]+', '_', gcs)[:120]}.db"
        return given if p != given and given.exists() and not p.exists() else p  # (one made before keys were resolved)
    sp = sim_state_path(sim_state).resolve()
    return sp.with_name(sp.name + ".journal")


def sim_state_path(arg: Optional[str]) -> Path:
    return Path(arg) if arg else DEFAULT_DIR / "sim-state.sqlite"


EXTRA_FIX = ("install the executor extra: pip install 'rl-planner[executor]' (from a clone: pip install -e '.[executor]'; "
             "on a machine without GPUs run 'pip install torch==2.13.0' first for the CPU build, see README.md)")


def missing_modules(kind: str) -> list[str]:
    """The optional packages a backend needs that are not installed: both run real workers (torch
    tensors), the Ray backend also needs ray. The core install (``pip install rl-planner``) has neither."""
    import importlib.util

    need = ["torch"] + (["ray"] if kind == "ray" else [])
    return [m for m in need if importlib.util.find_spec(m) is None]


def require(kind: str) -> None:
    """Refuse, in one line naming the extra, a backend whose packages are not installed."""
    missing = missing_modules(kind)
    if missing:
        raise UserError(Problem("--backend", f"the executor's {kind} backend runs real workers and needs "
                                f"{' and '.join(missing)}, which this install lacks", EXTRA_FIX))


def open_backend(kind: str, *, address: Optional[str] = None, sim_state: Optional[str] = None,
                 nodes: Optional[list[Node]] = None, deadlines: Optional[Deadlines] = None, observe_only: bool = False):
    """``observe_only`` (the sim backend): the caller only reads the saved cluster (``apply
    --dry-run``, ``status``), which needs no worker and so no torch: the core install can."""
    if kind == "ray" or (kind == "sim" and not observe_only):
        require(kind)
    if kind == "sim":
        from executor.backends.sim import SimBackend

        path = sim_state_path(sim_state)
        if not observe_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() and not nodes:
            raise UserError(Problem("--sim-state", f"no simulated cluster at {path}, and neither the plan nor --scenario names nodes",
                                    "apply a PlacementPlan with --scenario SCENARIO (its nodes make the cluster) or an "
                                    "ExecutorTarget with a 'nodes' list first, or pass --sim-state of an existing cluster"))
        b = SimBackend([], state_path=path, deadlines=deadlines, ticks_per_call=1, observe_only=observe_only)
        if nodes:
            saved = b.nodes()
            if not saved:  # a fresh simulated cluster: the plan's (or scenario's) nodes make it
                b._nodes = {n.name: n for n in nodes}
            else:  # a saved cluster's nodes are what it has: a plan may not add, resize or revive one
                check_plan_nodes(saved, nodes, path)
        return b
    if kind == "ray":
        from executor.backends.ray import RayBackend

        if address == "local":
            if not nodes:
                raise UserError(Problem("--address", "'local' starts a Ray cluster from the plan's nodes, and the plan has none",
                                        "add a 'nodes' list to the plan, or pass the address of a running cluster"))
            return RayBackend(local_nodes=nodes, deadlines=deadlines)
        try:
            return RayBackend(address=address, deadlines=deadlines)
        except ConnectionError as exc:
            raise _unreachable(address, exc) from None
    raise UserError(Problem("--backend", f"unknown backend {kind!r}", "use ray or sim"))


def check_plan_nodes(saved: dict[str, Node], nodes: list[Node], path: Path) -> None:
    """Refuse a plan whose nodes are not the saved simulated cluster's: a node it lacks, or one of
    another GPU type, GPU count or host DRAM (the plan was made for another cluster). Nodes of the
    cluster the plan does not name stay, as do the cluster's dead nodes."""
    bad = []
    for n in nodes:
        have = saved.get(n.name)
        if have is None:
            bad.append(f"{n.name} ({n.gpu_type} x{n.gpus}, {n.dram_gb:g} GB): not in the cluster")
        elif (have.gpu_type, have.gpus, float(have.dram_gb)) != (n.gpu_type, n.gpus, float(n.dram_gb)):
            bad.append(f"{n.name}: the plan has {n.gpu_type} x{n.gpus}, {n.dram_gb:g} GB; the cluster has "
                       f"{have.gpu_type} x{have.gpus}, {have.dram_gb:g} GB")
    if bad:
        shown = "; ".join(bad[:10]) + (f" (and {len(bad) - 10} more)" if len(bad) > 10 else "")
        raise UserError(Problem("nodes", f"the plan's nodes are not those of the simulated cluster at {path}: {shown}",
                                "apply a plan made for this cluster's nodes (the scenario it was planned from), or pass "
                                "--sim-state of a new file to simulate the plan's cluster"))


def crash_hook_from_env():
    """``RL_PLANNER_EXECUTOR_CRASH_AT=<step kind>:<point>[:<nth>[:term]]`` makes the process die there
    (``os._exit(137)``, as on SIGKILL), or with ``:term`` sends it SIGTERM there: the fault tests kill
    or stop a real controller with it."""
    spec = os.environ.get("RL_PLANNER_EXECUTOR_CRASH_AT")
    if not spec:
        return None
    import signal

    from executor.faults import Fault, FaultPlan

    parts = spec.split(":")
    kind, point, nth = parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0
    if parts[3:] == ["term"]:
        return FaultPlan([Fault(kind, point, lambda backend, step: os.kill(os.getpid(), signal.SIGTERM), nth=nth)])
    return FaultPlan([Fault(kind, point, lambda backend, step: os._exit(137), nth=nth)])
