"""Plan documents: the one data format that is emitted, validated, diffed and applied.

A plan document is versioned and self-describing::

    kind: PlacementPlan          # which decision problem produced it
    version: 1                   # plan format version; another version is refused with a message
    generator: rl-planner 0.1.0
    scenario: weave-micro        # scenario name and the digest of its validated content
    scenario_digest: 3f2a...
    solver:                      # the solve that produced it (solver-neutral record)
      backend: highs
      status: optimal            # optimal | feasible | infeasible | error | not_solved
      objective: 123.4
      best_bound: 123.4
      gap: 0.0
      wall_time_s: 0.41
      time_limit_s: 60
      warm_start: greedy         # or previous-plan, or null
    body: {...}                  # problem-specific; validated by the model registered for ``kind``

Serialisation is deterministic: the same plan gives the same bytes (keys sorted below the top
level, floats rounded to 9 significant digits, no timestamps unless the producer puts them in the
body). ``.json`` files are JSON, anything else YAML.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError
from pydantic_core import to_jsonable_python

from planner import __version__, safeload, yamlemit
from planner.errors import Problem, UserError

PLAN_VERSION = 1
#: free text a plan carries, in characters: names (a scenario or instance name is at most 200; backend,
#: status, the generator, the digest) and the solver's message (a few KB at fleet scale); a hand-edited
#: plan with megabytes there is refused, naming the field, rather than printed back
MAX_TEXT_NAME = 256
MAX_SOLVER_MESSAGE = 65536


# a plan of 20,000 jobs (the largest instance) is about 12 MB of JSON: JSON plan files may be
# larger than the 8 MB of other inputs (JSON is parsed in C; 32 MB take about a second); YAML
# plans keep the 8 MB (YAML costs about 2 us a node)
PLAN_LIMITS = safeload.with_limits(max_bytes=32 << 20)


def _limits(is_json: bool) -> safeload.Limits:
    return PLAN_LIMITS if is_json else safeload.LIMITS

# kind -> "module:Class" of the pydantic model that validates ``body``; each decision problem
# registers its own.
BODY_MODELS: dict[str, str] = {
    "PlacementPlan": "formulation.placement.plan:PlacementPlan",
    "ReallocPlan": "formulation.realloc.plan:ReallocPlan",
    "ExecutorTarget": "executor.target:ExecutorTarget",
    "CapacityPlan": "formulation.capacity.plan:CapacityPlan",
}


def register_body(kind: str, target: str) -> None:
    BODY_MODELS[kind] = target


def _a_number(v: Any) -> Any:
    """A solve record's number is a number: ``margin: true`` was read as a margin of 1 (every phase
    time doubled when the plan was checked) and ``objective: '32'`` as 32 (an outside audit)."""
    if isinstance(v, (bool, str, bytes)):
        raise ValueError(f"must be a number, not {'a boolean' if isinstance(v, bool) else 'text'}")
    return v


Number = Annotated[float, BeforeValidator(_a_number)]


class SolverRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: str = Field(max_length=MAX_TEXT_NAME)
    status: str = Field(max_length=MAX_TEXT_NAME)
    objective: Optional[Number] = None
    best_bound: Optional[Number] = None
    gap: Optional[Number] = Field(None, ge=0.0, description="relative gap |objective - best_bound| / |objective| "
                                 "(formulation.common.SolveRecord.gap): never negative")
    wall_time_s: Number = Field(0.0, ge=0.0)
    time_limit_s: Optional[Number] = Field(None, ge=0.0)
    warm_start: Optional[str] = Field(None, max_length=MAX_TEXT_NAME)
    message: str = Field("", max_length=MAX_SOLVER_MESSAGE)
    phase_time_estimate: Optional[str] = Field(None, description="the phase-time estimate the plan was made on (scenarios): "
                                               "conservative/max, sampled (the mean), p90 or p99; None: an instance file's own times")
    margin: Optional[Number] = Field(None, ge=0.0, le=1.0, description="explicit headroom on every phase time (a fraction), when given")
    slo_curve: Optional[list[dict]] = Field(None, description="with --slo-curve: $/h and simulated SLO attainment of the plan "
                                            "made on each estimate (planner.sim.slo_curve)")


class PlanDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(max_length=MAX_TEXT_NAME)
    version: int = PLAN_VERSION
    generator: str = Field(f"rl-planner {__version__}", max_length=MAX_TEXT_NAME)
    scenario: str = Field("", max_length=MAX_TEXT_NAME)
    scenario_digest: str = Field("", max_length=MAX_TEXT_NAME)
    solver: SolverRecord
    body: dict[str, Any] = Field(default_factory=dict)

    _body_model: Optional[BaseModel] = PrivateAttr(None)

    def body_as(self, model: type[BaseModel]) -> BaseModel:
        """The body as ``model`` (the one :func:`loads` validated it with, when it is that model)."""
        if type(self._body_model) is model:
            return self._body_model
        return model.model_validate(self.body)


def _round_float(x: float) -> Any:
    if not math.isfinite(x):
        return None if math.isnan(x) else (1e300 if x > 0 else -1e300)
    r = float(f"{x:.9g}")
    return int(r) if r.is_integer() and abs(r) < 2**53 else r


_PLAIN = (str, int, bool, type(None))


def _key_str(item: tuple) -> str:
    return str(item[0])


_FIELDS: dict[type, list[str]] = {}  # per model class: its fields, sorted, or [] when it must be dumped


def _model_fields(cls: type[BaseModel]) -> list[str]:
    """A plain pydantic model's field names, sorted: no aliases, serializers or computed fields,
    so reading its attributes gives what ``model_dump(mode="json")`` would; [] otherwise."""
    names = _FIELDS.get(cls)
    if names is None:
        plain = not (cls.model_computed_fields or any(f.alias or f.serialization_alias for f in cls.model_fields.values())
                     or "__get_pydantic_core_schema__" in cls.__dict__)
        names = _FIELDS[cls] = sorted(cls.model_fields) if plain else []
    return names


def _round(obj: Any) -> Any:
    """Keys sorted (as strings), floats to 9 significant digits (integral ones as ints). Plain
    values inside containers are handled inline (a 10,000-job plan: about 4x faster than one call
    per value). A pydantic model gives what its ``model_dump(mode="json")`` would, read from its
    fields in the same walk when it is plain (a 10,000-job plan body: 0.15 s against 0.45 s for a
    dump and a second walk)."""
    t = type(obj)
    if t is dict:
        return {str(k): _round_float(v) if type(v) is float else v if type(v) in _PLAIN else _round(v)
                for k, v in sorted(obj.items(), key=_key_str)}
    if t is list or t is tuple:
        return [_round_float(v) if type(v) is float else v if type(v) in _PLAIN else _round(v) for v in obj]
    if t is float:
        return _round_float(obj)
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, float):
        return _round_float(float(obj))
    if isinstance(obj, dict):
        return {str(k): _round(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return [_round(v) for v in obj]
    if isinstance(obj, BaseModel):
        names = _model_fields(type(obj))
        if names:
            return {n: _round_float(v) if type(v) is float else v if type(v) in _PLAIN else _round(v)
                    for n in names for v in (getattr(obj, n),)}
        return _round(obj.model_dump(mode="json"))
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _round(obj.item())
    if isinstance(obj, (Enum, set, frozenset)):  # as a dump writes them
        return _round(to_jsonable_python(obj))
    return obj


def to_data(doc: PlanDocument) -> dict:
    raw = doc.model_dump(mode="json")
    top = ["kind", "version", "generator", "scenario", "scenario_digest", "solver", "body"]
    return {k: _round(raw[k]) for k in top}


class _Dumper(safeload.SafeDumper):  # type: ignore[misc]
    """The safe dumper, libyaml's emitter where PyYAML has it: the same text (a 2,000-job plan
    byte for byte) in 0.42 s instead of 1.09."""


def _str_presenter(dumper, data):
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def dumps(doc: PlanDocument, fmt: str = "yaml") -> str:
    data = to_data(doc)
    if fmt == "json":
        return dumps_json(data)
    return dumps_yaml(data)


def dumps_yaml(data: Any) -> str:
    """A plan document's data as block-style YAML: written directly (:mod:`planner.yamlemit`, the
    same data as PyYAML's text), by PyYAML where that refuses it."""
    try:
        return yamlemit.dumps(data)
    except TypeError:
        return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def dumps_json(data: Any) -> str:
    """JSON plan documents are compact (one line): written by the C encoder (an indented dump
    goes through the pure-Python one, 4x slower) and half the size (a 10,000-job plan: 6 MB)."""
    return json.dumps(data, separators=(",", ":"), sort_keys=False) + "\n"


def write(doc: PlanDocument, path: str | Path, where: str = "--out") -> None:
    """Write atomically (temp file + rename): a failed write never leaves half a plan; a device
    (``/dev/null``) is written in place and a symbolic link refused (:mod:`planner.safewrite`)."""
    from planner.safewrite import write_atomic

    p = Path(path)
    write_atomic(p, dumps(doc, "json" if p.suffix == ".json" else "yaml"), where=where)


def _parse(text: str, source: str) -> Any:
    from planner import safeload

    # JSON, parsed in C; or flow-style YAML, which starts with '{' too
    return safeload.parse_json_or_yaml(text, source, limits=_limits(False), json_limits=_limits(True), starts=("{",)).data


def loads(text: str, source: str = "<plan>", expect_kind: str | None = None) -> PlanDocument:
    data = _parse(text, source)
    if not isinstance(data, dict) or "kind" not in data:
        raise UserError(Problem("", "not a plan document: no 'kind' field", "pass a file written by a planner command", source=source))
    version = data.get("version")
    if type(version) is not int or version != PLAN_VERSION:
        raise UserError(Problem("version", f"plan format version {version!r}, but this rl-planner ({__version__}) reads version {PLAN_VERSION}",
                                "re-create the plan with this version's planner, or use the rl-planner release that wrote it "
                                f"({data.get('generator', 'unknown')})", source=source))
    if not isinstance(data["kind"], str):
        raise UserError(Problem("kind", f"must be a plan kind name, got {data['kind']!r}", "pass a file written by a planner command",
                                source=source))
    if expect_kind and data["kind"] != expect_kind:
        raise UserError(Problem("kind", f"expected a {expect_kind}, got a {data['kind']}", "pass the right plan file", source=source))
    try:
        doc = PlanDocument.model_validate(data)
    except ValidationError as exc:
        raise UserError(_problems(exc, "", source)) from None
    _refuse_non_finite(doc.solver.model_dump(), "solver", source)
    target = BODY_MODELS.get(doc.kind)
    if target:
        mod, cls = target.split(":")
        model = getattr(importlib.import_module(mod), cls)
        try:
            body = model.model_validate(doc.body)
        except ValidationError as exc:
            raise UserError(_problems(exc, "body.", source, doc.kind)) from None
        if not _model_finite(body):  # the walk below names the bad value
            _refuse_non_finite(body.model_dump(), "body", source)
        doc._body_model = body  # validated once: read by body_as
    return doc


def _model_finite(obj: Any) -> bool:
    """Whether a validated model holds finite numbers only, read from its fields in one walk
    (without dumping it first: a 2,000-job plan body's dump and walk took twice as long). A
    value of a type other than the plain ones (a model, a container, a number, a string) answers
    False, so that :func:`_refuse_non_finite` decides on the dump."""
    isfinite = math.isfinite
    stack = [obj]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            items: Any = v.values()
        elif t is list or t is tuple:
            items = v
        elif isinstance(v, BaseModel) and not v.__pydantic_extra__:
            items = v.__dict__.values()
        else:
            return False
        for x in items:
            tx = type(x)
            if tx is float:
                if not isfinite(x):
                    return False
            elif tx is not str and tx is not int and tx is not bool and x is not None:
                stack.append(x)
    return True


def _refuse_non_finite(data: Any, where: str, source: str) -> None:
    """A plan read from a file holds finite numbers only (:func:`write` never writes NaN or inf)."""
    from planner import safeload

    if safeload._numbers_clean(data, bools=True):  # one pass without paths; the walk below names a bad one
        return
    stack = [(data, where)]
    while stack:
        v, w = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise UserError(Problem(w, f"{v} is not a finite number", "re-create the plan with the planner command that writes it",
                                    source=source))
        if isinstance(v, dict):
            stack.extend((x, f"{w}.{k}") for k, x in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{w}[{i}]") for i, x in enumerate(v))


def _problems(exc: ValidationError, prefix: str, source: str, kind: str = "") -> list[Problem]:
    # an ExecutorTarget may be written by hand (docs/executor.md); the other kinds are planner outputs
    fix = ("fix the field as docs/executor.md describes the target" if kind == "ExecutorTarget"
           else "re-create the plan with the planner command that writes it (plans are outputs, not hand-written)")
    out = []
    for err in exc.errors(include_url=False)[:10]:
        loc = prefix + ".".join(str(x) for x in err["loc"])
        bad = err.get("input")
        shown = f" (got {bad!r:.60})" if bad is not None and not isinstance(bad, (dict, list)) else ""
        out.append(Problem(loc.rstrip("."), err["msg"].removeprefix("Value error, ") + shown, fix, source=source))
    return out


def read(path: str | Path, expect_kind: str | None = None) -> PlanDocument:
    from planner import safeload

    return loads(safeload.read_text(path, what="plan file", limits=_limits(Path(path).suffix.lower() == ".json")), str(path), expect_kind)


def peek_kind(path: str | Path) -> Optional[str]:
    """The ``kind`` of a plan file without validating it (None when it cannot be read as one):
    lets a consumer refuse a kind it cannot use before complaining about the body."""
    from planner import safeload

    try:
        data = _parse(safeload.read_text(path, what="plan file", limits=_limits(Path(path).suffix.lower() == ".json")), str(path))
    except UserError:
        return None
    return data.get("kind") if isinstance(data, dict) and isinstance(data.get("kind"), str) else None


def scenario_digest(scenario: BaseModel) -> str:
    canon = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]
