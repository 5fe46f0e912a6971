"""Read scenario YAML with line numbers, ``include:`` overlays, and clear errors.

``include: [base.yaml, ...]`` (paths relative to the including file) loads those files first and
deep-merges this file on top: mappings merge key by key, anything else (lists included) replaces.
Duplicate keys in one mapping are an error (YAML itself would silently keep the last).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from planner.errors import Problem, UserError

Path_ = tuple  # a path into the document: ("jobs", 3, "rollout")


class Document:
    """Parsed YAML data plus the source line of every path."""

    def __init__(self, data: Any, lines: dict[Path_, int], filename: str) -> None:
        self.data = data
        self.lines = lines
        self.filename = filename

    def where(self, path: Path_) -> str:
        """``file:line`` of the deepest known prefix of ``path``."""
        for n in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:n]))
            if line is not None:
                return f"{self.filename}:{line}"
        return self.filename


def _construct(node: yaml.Node, path: Path_, lines: dict, filename: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for knode, vnode in node.value:
            key = _scalar_key(knode, filename)
            if key in out:
                raise UserError(Problem(_fmt(path + (key,)), f"duplicate key '{key}' (YAML would silently keep the last one)",
                                        "remove one of the two entries", source=f"{filename}:{knode.start_mark.line + 1}"))
            out[key] = _construct(vnode, path + (key,), lines, filename)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(v, path + (i,), lines, filename) for i, v in enumerate(node.value)]
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _scalar_key(knode: yaml.Node, filename: str):
    if not isinstance(knode, yaml.ScalarNode):
        raise UserError(Problem("", "mapping keys must be plain scalars", source=f"{filename}:{knode.start_mark.line + 1}"))
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(knode)
    finally:
        loader.dispose()


def _fmt(path: Path_) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def parse_yaml(text: str, filename: str = "<input>") -> Document:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        src = f"{filename}:{mark.line + 1}" if mark else filename
        problem = getattr(exc, "problem", None) or str(exc)
        raise UserError(Problem("", f"not valid YAML: {problem}", "check indentation and quoting near that line", source=src)) from None
    lines: dict = {}
    data = _construct(node, (), lines, filename) if node is not None else None
    return Document(data, lines, filename)


def _deep_merge(base: Any, top: Any) -> Any:
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for k, v in top.items():
            out[k] = _deep_merge(base[k], v) if k in base else v
        return out
    return top


def read_document(path: str | Path, _seen: tuple = ()) -> Document:
    p = Path(path)
    if not p.exists():
        raise UserError(Problem("", f"file not found: {p}", "check the path"))
    if p.is_dir():
        raise UserError(Problem("", f"{p} is a directory, not a scenario file", "pass a .yaml file"))
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(Problem("", f"cannot read {p}: {exc}")) from None
    doc = parse_yaml(text, str(p))
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
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise UserError(Problem("include", "must be a file name or a list of file names", source=doc.where(("include",))))
    merged: Any = {}
    for inc in includes:
        ip = (p.parent / inc).resolve()
        if ip in _seen or ip == p.resolve():
            raise UserError(Problem("include", f"include cycle through {inc}", "remove the circular include",
                                    source=doc.where(("include",))))
        merged = _deep_merge(merged, read_document(ip, _seen + (p.resolve(),)).data)
    doc.data = _deep_merge(merged, doc.data)
    return doc


def load_scenario(path: str | Path, *, check: bool = True):
    """Read, validate and (by default) cross-check a scenario file. Raises :class:`UserError`."""
    from planner.schema.errors import problems_from_validation
    from planner.schema.scenario import Scenario

    doc = read_document(path)
    try:
        scenario = Scenario.model_validate(doc.data)
    except ValidationError as exc:
        raise UserError(problems_from_validation(exc, doc), title=f"{path}: invalid scenario") from None
    from planner.schema.workload import resolve_workloads

    resolve_workloads(scenario, doc, Path(path).resolve().parent)
    if check:
        from planner.schema.checks import check_scenario

        check_scenario(scenario, doc)
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
