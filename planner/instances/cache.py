"""A disk cache of compiled placement instances: the phase times of a scenario, estimated once.

Compiling a scenario runs the request-level rollout model for every job on every pool size it may
get (in the ``sampled`` estimate, 4-12 simulated iterations each): for ``weave-trace-60.yaml``
that is 398 simulated rollouts, about 8.5 of the 9.5 s `planner plan` took at load average ~2
(the solver: 0.5 s). The result depends only on the scenario, the estimate, the margin and the
code of the model, so `planner plan` / `admit` / `validate-plan` keep it on disk, keyed by

* the scenario's digest (:func:`planner.plandoc.scenario_digest`: its content, includes resolved)
  and the bytes of every file or folder it names (trace files, a calibration folder:
  :func:`referenced_digest`),
* the estimate and the margin,
* a digest of the model's source (every ``.py`` under ``simulator/``, ``estimators/``,
  ``planner/instances/`` and ``planner/schema/``, and the shipped calibration data): any change
  to the code or data makes a new key, so a stale entry is never read.

Below the whole instance, each job's phase tables are kept on their own (:func:`jobs`), keyed by
the job's spec, the rest of the scenario but its name and description (cluster, GPU types,
calibration, solver), the referenced files' digest, the estimate, the margin and the code digest:
a `planner plan` cut short by its time limit keeps the jobs it estimated, and the next run
estimates only the others.

Where: ``$RL_PLANNER_CACHE_DIR``, else ``$XDG_CACHE_HOME/rl-planner``, else
``~/.cache/rl-planner``. ``RL_PLANNER_CACHE=0`` turns it off (the test suite does: tests patch
the model at run time, which no source digest sees). An unreadable or corrupt entry is ignored
and recomputed; a failed write is ignored (the cache never fails a command).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[2]
MODEL_SOURCES = ("simulator", "estimators", "planner/instances", "planner/schema")


def enabled() -> bool:
    return os.environ.get("RL_PLANNER_CACHE", "1") != "0"


def folder() -> Path:
    if os.environ.get("RL_PLANNER_CACHE_DIR"):
        return Path(os.environ["RL_PLANNER_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rl-planner"


@lru_cache(maxsize=1)
def code_digest() -> str:
    h = hashlib.sha256()
    for top in MODEL_SOURCES:
        for p in sorted((ROOT / top).rglob("*")):
            if p.is_file() and p.suffix in (".py", ".json", ".yaml", ".csv") and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(ROOT)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def referenced_digest(scenario) -> str:
    """A digest of the files and folders the scenario names (absolute paths once loaded)."""
    h = hashlib.sha256()

    def walk(v) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, str) and v.startswith(os.sep) and len(v) < 4096:
            p = Path(v)
            files = sorted(p.rglob("*")) if p.is_dir() else [p] if p.is_file() else []
            for f in files:
                if f.is_file():
                    h.update(str(f).encode())
                    h.update(f.read_bytes())

    walk(scenario.model_dump(mode="json"))
    return h.hexdigest()[:16]


def instance(digest: str, mode: str, margin: float, compute: Callable[[], object]):
    """The compiled instance for this scenario ``digest``, ``mode`` and ``margin``: from the cache,
    else ``compute()`` (then stored)."""
    from formulation.placement.instance import PlacementInstance

    if not enabled():
        return compute()
    path = folder() / "instances" / f"{digest}-{mode}-{margin:g}-{code_digest()}.json"
    cached = _read(path, PlacementInstance)
    if cached is not None:
        return cached
    inst = compute()
    _write(path, inst.model_dump_json())  # type: ignore[attr-defined]
    return inst


def compiled(scenario, mode: Optional[str] = None, margin: float = 0.0, on_job=None, deadline: Optional[float] = None):
    """``scenario`` compiled (:func:`planner.instances.placement.compile_scenario`, jobs estimated side
    by side) on estimate ``mode`` (default: its ``solver.phase_time_estimate``) and ``margin``, through
    the cache: the whole instance when kept, else each job kept, the others estimated (and kept).
    ``deadline``: a :func:`planner.instances.placement.clock` value, else
    :class:`planner.instances.placement.CompileCut` (the jobs estimated before it are kept)."""
    from planner.instances.placement import compile_scenario
    from planner.plandoc import scenario_digest

    est = mode or scenario.solver.phase_time_estimate
    ref = referenced_digest(scenario) if enabled() else ""
    digest = scenario_digest(scenario)
    key = f"{digest}-{ref}" if enabled() else digest
    return instance(key, est, margin, lambda: jobs(
        scenario, ref, est, margin,
        lambda known: compile_scenario(scenario, mode, margin, on_job=on_job, parallel=True, deadline=deadline, known=known)))


def job_keys(scenario, ref: str, mode: str, margin: float) -> list[str]:
    """The cache key of each job's phase tables (see the module docstring); ``ref``: :func:`referenced_digest`."""
    import json

    rest = scenario.model_dump(mode="json")
    for k in ("name", "description", "jobs"):
        rest.pop(k, None)
    base = hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode())
    base.update(f"|{ref}|{mode}|{margin:g}|{code_digest()}|".encode())
    out = []
    for j in scenario.jobs:
        h = base.copy()
        h.update(json.dumps(j.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode())
        out.append(h.hexdigest()[:24])
    return out


def jobs(scenario, ref: str, mode: str, margin: float, compute: Callable[[dict], object]):
    """``compute(known)``, ``known`` the jobs whose phase tables the cache holds (index -> job); the
    jobs it compiles are stored, also those of a compile cut short
    (:class:`planner.instances.placement.CompileCut`, raised on)."""
    from formulation.placement.instance import PlacementJob
    from planner.instances.placement import CompileCut

    if not enabled():
        return compute({})
    where = folder() / "jobs"
    keys = job_keys(scenario, ref, mode, margin)
    known = {}
    for k, key in enumerate(keys):
        got = _read(where / f"{key}.json", PlacementJob)
        if got is not None and getattr(got, "name", None) == scenario.jobs[k].name:
            known[k] = got
    try:
        inst = compute(known)
    except CompileCut as cut:
        for k, job in cut.compiled.items():
            _write(where / f"{keys[k]}.json", job.model_dump_json())
        raise
    for k, job in enumerate(inst.jobs):  # type: ignore[attr-defined]
        if k not in known:
            _write(where / f"{keys[k]}.json", job.model_dump_json())
    return inst


def _read(path: Path, model) -> Optional[object]:
    try:
        return model.model_validate_json(path.read_bytes())
    except Exception:  # noqa: BLE001 - absent, unreadable or corrupt: recompute
        return None


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        pass
