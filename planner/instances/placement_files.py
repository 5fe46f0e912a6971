"""Numbers-only placement instance files (YAML or JSON): read once, validate, write.

Kept apart from the scenario compiler (:mod:`planner.instances.placement`) so that planning from
an instance file imports neither the estimators nor the scenario schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from formulation.placement.instance import MAX_INSTANCE_NODES, PlacementInstance
from planner.errors import Problem, UserError


def read_data(path: str | Path) -> Optional[dict]:
    """The parsed mapping of a YAML/JSON file when it is a placement instance, else None (the
    scenario loader then reports an unreadable file properly)."""
    doc = read_doc(path)
    return instance_data(doc.data) if doc is not None else None


def read_doc(path: str | Path):
    """The parsed document (:class:`planner.safeload.Document`) of a YAML/JSON file when it is a
    placement instance, else None (hand it to :func:`load_instance` with its data)."""
    from planner import safeload

    doc = safeload.try_load(path, what="instance file", limits=_limits(path))
    return doc if doc is not None and instance_data(doc.data) is not None else None


def instance_data(data: Any) -> Optional[dict]:
    """``data`` when it is a placement instance's mapping, else None."""
    return data if isinstance(data, dict) and ("pool_types" in data or data.get("kind") == "PlacementInstance") else None


# the scenario schema's bounds, for instances written by hand or by another tool (the fleet-scale
# benchmark plans 10,000 distinct jobs from an instance file)
MAX_INSTANCE_JOBS = 20000
MAX_INSTANCE_GPUS_PER_NODE = 64


def _limits(path: str | Path):
    """20,000 jobs are about 13 MB of JSON: a JSON instance file may have 32 MB (JSON is parsed in
    C); YAML keeps the 8 MB of other inputs."""
    from planner import safeload

    return safeload.with_limits(max_bytes=32 << 20) if Path(path).suffix.lower() == ".json" else safeload.LIMITS


def load_instance(path: str | Path, data: Optional[dict] = None, doc=None) -> PlacementInstance:
    """A numbers-only instance file (YAML or JSON), read through the bounded loader
    (:mod:`planner.safeload`), with errors that name the field. ``data``: the file's parsed
    mapping when read already, ``doc``: the document it was read as (:func:`read_doc`)."""
    from pydantic import ValidationError

    from planner import safeload

    p = Path(path)
    if not p.exists():
        raise UserError(Problem("", f"instance file not found: {p}", "check the path"))
    if data is None:
        doc = safeload.load(p, what="instance file", limits=_limits(p))
        data = doc.data
    if not isinstance(data, dict):
        raise UserError(Problem("", "a placement instance is a mapping with pool_types and jobs",
                                "see docs/placement.md for the format", source=str(p)))
    data = {k: v for k, v in data.items() if k != "kind"}
    safeload.check_numbers(data, doc, bools=False, where=str(p))  # an instance has no boolean field
    _check_node_keys(data, doc, str(p))
    try:
        inst = PlacementInstance.model_validate(data)
    except ValidationError as exc:
        from planner.schema.errors import fix_for

        problems = []
        for err in exc.errors(include_url=False)[:10]:
            # the field, its file:line and the fix the error's kind has ("neg.yaml: jobs.0.rollout_s.H20.1: ...
            # Fix: see docs/placement.md for the instance format" named neither line nor fix: an outside audit)
            loc = tuple(x for x in err["loc"] if x != "[key]")
            bad = err.get("input")
            shown = f" (got {bad!r})" if not isinstance(bad, (dict, list)) and bad is not None else ""
            fix = fix_for(err["type"], err.get("ctx") or {}) or "see docs/placement.md for the instance format"
            source = doc.where(loc) if doc is not None and loc else str(p)
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(Problem(".".join(str(x) for x in err["loc"]), f"{msg}{shown}", fix, source=source))
        raise UserError(problems, title=f"{p}: invalid placement instance") from None
    _check_sizes(inst, str(p))
    return inst


#: the tables keyed by pool node counts (GPU type -> nodes -> seconds)
NODE_TABLES = ("rollout_s", "train_s", "rollout_switch_s", "train_switch_s")


def _node_count(key: Any) -> Optional[int]:
    """A table key as a node count: a whole number, or (JSON's keys are text) its plain digits; None
    for anything else (``true``, ``1.0``, ``" 1"``, ``"01"``: the model's lax keys read them all as 1)."""
    if type(key) is int:
        return key
    if type(key) is str and 0 < len(key) <= 18 and key.isascii() and key.isdigit() and (key == "0" or key[0] != "0"):
        return int(key)
    return None


def _check_node_keys(data: dict, doc, source: str) -> None:
    """Every node-count key of a job's tables a whole number, each count once: YAML's ``true`` was
    read as 1 nodes, and ``1`` beside ``"1"`` made one entry whose seconds were the last one's."""
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        return
    for i, job in enumerate(jobs):
        if not isinstance(job, dict):
            continue
        name = job.get("name")
        who = f"job '{name[:200]}'" if isinstance(name, str) else f"jobs[{i}]"
        for table in NODE_TABLES:
            rows = job.get(table)
            if not isinstance(rows, dict):
                continue
            for t, row in rows.items():
                if not isinstance(row, dict):
                    continue
                seen: dict[int, Any] = {}
                for key in row:
                    n = _node_count(key)
                    if n is not None and n not in seen:
                        seen[n] = key
                        continue
                    where = doc.where(("jobs", i, table, t)) if doc is not None else source
                    field = f"jobs[{i}].{table}.{str(t)[:200]}"
                    if n is None:
                        raise UserError(Problem(field, f"{who}: the key {_shown(key)} of its {table} table for {str(t)[:200]} is "
                                                       "not a node count", "write node counts as whole numbers (1, 2, 4)",
                                                source=where))
                    raise UserError(Problem(field, f"{who}: its {table} table for {str(t)[:200]} gives {n} node(s) twice (keys "
                                                   f"{_shown(seen[n])} and {_shown(key)}); only one would be kept",
                                            "keep one entry per node count", source=where))


def _shown(key: Any) -> str:
    text = repr(key) if isinstance(key, str) else str(key).lower() if isinstance(key, bool) else str(key)
    return text if len(text) <= 40 else text[:40] + "..."


def _check_sizes(inst: PlacementInstance, source: str) -> None:
    problems = []
    for t, pool in inst.pool_types.items():
        if pool.gpus_per_node > MAX_INSTANCE_GPUS_PER_NODE:
            problems.append(Problem(f"pool_types.{t}.gpus_per_node", f"{pool.gpus_per_node} GPUs per node; at most "
                                    f"{MAX_INSTANCE_GPUS_PER_NODE} are supported", "fix the value", source=source))
    total = sum(pool.count for pool in inst.pool_types.values())
    if total > MAX_INSTANCE_NODES:
        problems.append(Problem("pool_types", f"{total} nodes in all; at most {MAX_INSTANCE_NODES} are supported",
                                "lower the counts", source=source))
    if len(inst.jobs) > MAX_INSTANCE_JOBS:
        problems.append(Problem("jobs", f"{len(inst.jobs)} jobs; at most {MAX_INSTANCE_JOBS} are supported", "split the instance",
                                source=source))
    for i, job in enumerate(inst.jobs):
        for key in ("rollout_s", "train_s"):
            for t, row in getattr(job, key).items():
                big = [n for n in row if n > MAX_INSTANCE_NODES]
                if big:
                    problems.append(Problem(f"jobs[{i}].{key}.{t}", f"a pool of {big[0]} nodes; at most {MAX_INSTANCE_NODES}",
                                            "fix the node counts", source=source))
    if problems:
        raise UserError(problems, title=f"{source}: invalid placement instance")


def is_instance_file(path: str | Path) -> bool:
    """Whether a YAML/JSON file is a numbers-only placement instance (has pool_types) rather than a scenario."""
    return read_data(path) is not None


def dump_instance(inst: PlacementInstance, as_json: bool = False) -> str:
    """The instance as a file ``planner plan`` reads back: YAML, or JSON (``as_json``: a name ending
    in .json, read with the larger JSON limits: 20,000 jobs fit)."""
    import json

    import yaml

    from planner.safeload import SafeDumper

    data = {"kind": "PlacementInstance", **inst.model_dump(mode="json", exclude_defaults=False)}
    text = json.dumps(data, indent=1) + "\n" if as_json else yaml.dump(data, Dumper=SafeDumper, sort_keys=False, width=120)
    _reads_back(text, inst, as_json)
    return text


def _reads_back(text: str, inst: PlacementInstance, as_json: bool = False) -> None:
    """The written instance is one ``planner plan`` reads back (same limits, same validation) and
    equal to ``inst``; else nothing is written and the error says why."""
    from planner import safeload

    try:
        doc = safeload.parse(text, "--save-instance", fmt="json" if as_json else "yaml",
                             limits=_limits("x.json" if as_json else "x.yaml"))
        safeload.check_text(doc)
        back = PlacementInstance.model_validate({k: v for k, v in doc.data.items() if k != "kind"})
        _check_sizes(back, "--save-instance")
    except UserError as exc:
        raise UserError(Problem("--save-instance", f"the instance would not read back: {exc.problems[0].message}",
                                "save it as JSON (--save-instance NAME.json: larger limits), or plan from the scenario itself")) from None
    if back != inst:
        raise UserError(Problem("--save-instance", "the instance would not read back unchanged",
                                "plan from the scenario itself; report this with the scenario"))
