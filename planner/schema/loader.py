"""Read scenario YAML with line numbers, ``include:`` overlays, and clear errors.

``include: [base.yaml, ...]`` (paths relative to the including file) loads those files first and
deep-merges this file on top: mappings merge key by key, anything else (lists included) replaces.
An include must lie below the including file's folder (or a folder in ``$RL_PLANNER_INCLUDE_PATH``)
and be a regular file; at most :data:`MAX_INCLUDES` files in all. Reading, parsing and every limit
(size, depth, aliases, encoding) are :mod:`planner.safeload`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from estimators.merge import deep_merge
from planner import safeload
from planner.errors import Problem, UserError
from planner.safeload import Document, fmt_path as _fmt  # noqa: F401 - re-exported (schema.errors, checks)

Path_ = tuple  # a path into the document: ("jobs", 3, "rollout")

INCLUDE_PATH_ENV = "RL_PLANNER_INCLUDE_PATH"
MAX_INCLUDES = 32  # files one scenario may pull in, all levels together


def parse_yaml(text: str, filename: str = "<input>") -> Document:
    return safeload.parse_yaml(text, filename)


def include_roots(including: Path) -> list[Path]:
    """Folders an ``include:`` may read from: the including file's folder and the folders listed
    in ``$RL_PLANNER_INCLUDE_PATH`` (``os.pathsep``-separated)."""
    roots = [including.resolve().parent]
    for d in os.environ.get(INCLUDE_PATH_ENV, "").split(os.pathsep):
        if d.strip():
            roots.append(Path(d).resolve())
    return roots


def _include_path(doc: Document, p: Path, inc: str) -> Path:
    where = doc.where(("include",))
    ip = (p.parent / inc).resolve()
    roots = include_roots(p)
    if not any(ip == r or r in ip.parents for r in roots):
        raise UserError(Problem("include", f"{inc!r} is outside {roots[0]} (the including file's folder)",
                                f"move the file below that folder, or add its folder to ${INCLUDE_PATH_ENV}", source=where))
    return ip


def read_document(path: str | Path, _seen: tuple = (), _count: list | None = None, *, parsed: Document | None = None) -> Document:
    """The scenario file at ``path`` with its includes merged in. ``parsed``: the file already parsed
    as YAML by :mod:`planner.safeload` (:func:`planner.dockind.sniff`), so it is not read again
    (its data is merged in place)."""
    p = Path(path)
    count = _count if _count is not None else [0]
    if parsed is not None and parsed.filename != str(p):
        raise ValueError(f"the document parsed from {parsed.filename} is not {p}")
    doc = parsed if parsed is not None else safeload.load(p, what="scenario file", fmt="yaml")
    if doc.data is None:
        raise UserError(Problem("", f"{p} is empty", "write a scenario (see scenarios/README.md)"))
    if not isinstance(doc.data, dict):
        raise UserError(Problem("", f"the top level of {p} must be a mapping, got {type(doc.data).__name__}",
                                "start the file with keys such as 'name:', 'cluster:', 'jobs:'", source=f"{p}:1"))
    includes = doc.data.pop("include", None)
    if includes is None:
        return doc
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) and i for i in includes):
        raise UserError(Problem("include", "must be a file name or a list of file names", source=doc.where(("include",))))
    merged: Any = {}
    origins: dict = {}
    for inc in includes:
        ip = _include_path(doc, p, inc)
        if ip in _seen or ip == p.resolve():
            raise UserError(Problem("include", f"include cycle through {inc}", "remove the circular include",
                                    source=doc.where(("include",))))
        count[0] += 1
        if count[0] > MAX_INCLUDES:
            raise UserError(Problem("include", f"more than {MAX_INCLUDES} included files in all",
                                    "include fewer files (each file is read once per include)", source=doc.where(("include",))))
        inc_doc = read_document(ip, _seen + (p.resolve(),), count)
        merged = deep_merge(merged, inc_doc.data)
        origins.update(inc_doc.origins)  # (a later include's lines replace an earlier one's, as its values do)
        origins.update({k: f"{inc_doc.filename}:{n}" for k, n in inc_doc.lines.items()})
    # an error in a value that came from an included file names that file and line: it named the
    # including file's `include:` line (an outside audit); a path this file replaces keeps its own line
    doc.origins = {k: v for k, v in origins.items() if k and not _overridden(doc.data, k)}
    doc.data = deep_merge(merged, doc.data)
    return doc


def _overridden(data: Any, path: tuple) -> bool:
    """Whether the overlay ``data`` sets ``path`` itself or replaces one of its prefixes (with a value
    that is not a mapping: lists and scalars replace, mappings merge key by key)."""
    node = data
    for i, key in enumerate(path):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
        if i == len(path) - 1 or not isinstance(node, dict):
            return True
    return False


def load_scenario(path: str | Path, *, check: bool = True, parsed: Document | None = None, buys_nodes: bool = False):
    """Read, validate and (by default) cross-check a scenario file. Raises :class:`UserError`.
    ``parsed``: the file as :func:`planner.dockind.expect` parsed it (then it is not read again).
    ``buys_nodes``: the command decides the nodes to buy (``planner whatif``; see
    :func:`planner.schema.checks.check_scenario`)."""
    from planner.schema.errors import problems_from_validation
    from planner.schema.scenario import Scenario

    doc = read_document(path, parsed=parsed)
    try:
        scenario = Scenario.model_validate(doc.data)
    except ValidationError as exc:
        raise UserError(problems_from_validation(exc, doc), title=f"{path}: invalid scenario") from None
    from planner.schema.workload import resolve_workloads

    resolve_workloads(scenario, doc, Path(path).resolve().parent)
    if check:
        from planner.schema.checks import check_scenario

        check_scenario(scenario, doc, buys_nodes=buys_nodes)
    return scenario


def load_scenario_data(data: dict, *, check: bool = True, filename: str = "<data>"):
    """Validate an already-parsed mapping (the HTTP API uses this)."""
    from planner.schema.errors import problems_from_validation
    from planner.schema.scenario import Scenario

    doc = Document(data, {}, filename)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise UserError(problems_from_validation(exc, doc), title="invalid scenario") from None
    from planner.schema.workload import resolve_workloads

    resolve_workloads(scenario, doc)
    if check:
        from planner.schema.checks import check_scenario

        check_scenario(scenario, doc)
    return scenario
