"""Turn pydantic validation errors into problems that name the field path, the bad value, what is
allowed, and (for unknown keys) the closest valid key."""

from __future__ import annotations

import types
import typing
from typing import Any, Mapping, Sequence

from pydantic import BaseModel, ValidationError

from planner.errors import Problem, did_you_mean
from planner.safeload import Document, fmt_path as _fmt


def _clean_path(loc: tuple, data: Any) -> tuple[tuple, Any]:
    """Drop pydantic's union-branch markers from ``loc``, keeping only real keys of ``data``."""
    out: list = []
    cur = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if (isinstance(cur, dict) and isinstance(part, str) and not last and loc[i + 1] in cur
                and any(v == part for v in cur.values() if isinstance(v, str))):
            continue  # a tagged union's tag (``source: quantiles``), also when a key has its name
        if isinstance(cur, dict) and part in cur:
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out.append(part)
            cur = cur[part]
        elif last and isinstance(cur, dict) and isinstance(part, str) and not _is_marker(part):
            out.append(part)  # a missing field or an unknown key
            cur = None
        # else: a union branch marker such as 'ModelSpec', 'str', 'lognormal', 'function-after[...]'
    return tuple(out), cur


def _is_marker(part: str) -> bool:
    return (part[:1].isupper() or "[" in part or part in {"str", "int", "float", "bool", "list", "dict"}
            or part.startswith(("constrained-", "function-", "lax-or-strict", "json-or-python", "tagged-union", "nullable")))


def _unwrap(tp):
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    return tp


def _candidates(tp, data) -> list:
    tp = _unwrap(tp)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        out = []
        for a in typing.get_args(tp):
            out += _candidates(a, data)
        return out
    return [tp]


def _model_at(root: type[BaseModel], path: tuple, data: Any) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``path`` (None when not a model)."""
    tp: Any = root
    cur = data
    for part in path:
        models = [c for c in _candidates(tp, cur) if isinstance(c, type) and issubclass(c, BaseModel)]
        nxt = None
        if isinstance(part, int):
            for c in _candidates(tp, cur):
                if typing.get_origin(c) is list:
                    nxt = typing.get_args(c)[0]
        else:
            for c in _candidates(tp, cur):
                if typing.get_origin(c) is dict:
                    nxt = typing.get_args(c)[1]
            for m in _pick(models, cur):
                if part in m.model_fields:
                    nxt = m.model_fields[part].annotation
                    break
        if nxt is None:
            return None
        tp = nxt
        cur = cur.get(part) if isinstance(cur, dict) else (cur[part] if isinstance(cur, list) and isinstance(part, int) and part < len(cur) else None)
    models = [c for c in _candidates(tp, cur) if isinstance(c, type) and issubclass(c, BaseModel)]
    picked = _pick(models, cur)
    return picked[0] if picked else None


def _pick(models: list, cur) -> list:
    """Prefer the discriminated-union member whose literal tag matches the data."""
    if len(models) <= 1 or not isinstance(cur, dict):
        return models
    for m in models:
        f = m.model_fields.get("source")
        if f is not None and f.default == cur.get("source"):
            return [m]
    for m in models:
        f = m.model_fields.get("source")
        if f is not None and typing.get_args(f.annotation) and cur.get("source") in typing.get_args(f.annotation):
            return [m]
    return models


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def problems_from_validation(exc: ValidationError, doc: Document, root: type[BaseModel] | None = None) -> list[Problem]:
    return problems_from_errors(exc.errors(include_url=False), doc, root)


def problems_from_errors(errors: Sequence[Mapping[str, Any]], doc: Document, root: type[BaseModel] | None = None) -> list[Problem]:
    """:func:`problems_from_validation` of pydantic's error list (what a ``ValidationError`` or
    FastAPI's ``RequestValidationError`` holds), ``loc`` relative to ``doc``'s top level."""
    from planner.schema.scenario import Scenario

    root = root or Scenario
    by_path: dict[tuple, Problem] = {}
    union_types: dict[tuple, list[str]] = {}
    for err in errors:
        path, _ = _clean_path(tuple(err["loc"]), doc.data)
        kind = err["type"]
        value = err.get("input")
        where = _fmt(path)
        if kind == "extra_forbidden":
            parent = path[:-1]
            model = _model_at(root, parent, doc.data)
            allowed = sorted(model.model_fields) if model else []
            hint = did_you_mean(path[-1], allowed)
            msg = f"unknown key '{path[-1]}'.{hint}"
            fix = f"allowed keys here: {', '.join(allowed)}" if allowed else "remove it"
            by_path[path] = Problem(where, msg, fix, source=doc.where(path))
            continue
        if kind == "missing":
            p = Problem(where, "required field is missing", f"add '{path[-1]}'", source=doc.where(path))
        else:
            text = err["msg"]
            if text.startswith("Value error, "):
                text = text[len("Value error, "):]
            if kind in {"literal_error", "union_tag_invalid"}:
                expected = err.get("ctx", {}).get("expected")
                text = f"{_short(value)} is not allowed; expected {expected}" if expected else text
            elif kind == "string_type" and len(err["loc"]) > len(path):
                # one branch of a union (e.g. model: preset name or dimensions); report once below
                union_types.setdefault(path, []).append("a preset name")
                continue
            elif kind == "model_type" and len(err["loc"]) > len(path):
                union_types.setdefault(path, []).append("a mapping of dimensions")
                continue
            elif kind == "int_parsing_size":
                text = f"{_short(value)} is too large for a whole number"
            elif not isinstance(value, (dict, list)):
                text = f"{text} (got {_short(value)})"
            p = Problem(where, text, fix_for(kind, err.get("ctx") or {}), source=doc.where(path))
        # keep the first problem per path, but a concrete one beats a union summary
        by_path.setdefault(path, p)
    for path, kinds in union_types.items():
        if path not in by_path and not any(k[: len(path)] == path and k != path for k in by_path):
            value = _lookup(doc.data, path)
            by_path[path] = Problem(_fmt(path), f"got {_short(value)}; expected {' or '.join(dict.fromkeys(kinds))}",
                                    source=doc.where(path))
    return list(by_path.values())


_FIXES = {
    "finite_number": "write a finite number (no .inf, .nan, Infinity or NaN)",
    "bool_type": "write true or false",
    "int_type": "write a whole number", "int_parsing": "write a whole number", "int_from_float": "write a whole number",
    "float_type": "write a number", "float_parsing": "write a number",
    "string_type": "write a text value", "list_type": "write a list", "dict_type": "write a mapping", "model_type": "write a mapping",
    "too_long": "shorten it (the limits keep every command within memory and time)",
    "string_too_long": "shorten it", "string_pattern_mismatch": "use letters, digits, '.', '_' and '-'",
    "int_parsing_size": "write a whole number within the field's range", "string_too_short": "write a non-empty value",
    "too_short": "add the missing items", "dict_type_size": "write a mapping",
}


_PATTERN_FIXES = {r"^[a-z-]+$": "use lowercase letters and '-' (e.g. placement or realloc)"}


def fix_for(kind: str, ctx: dict) -> str:
    """A fix for a pydantic error type: the range that is allowed, or the kind of value."""
    if kind in ("less_than_equal", "less_than"):
        return f"use a value of at most {ctx.get('le', ctx.get('lt'))} (the supported maximum)"
    if kind in ("greater_than_equal", "greater_than"):
        return f"use a value {'of at least' if kind == 'greater_than_equal' else 'above'} {ctx.get('ge', ctx.get('gt'))}"
    if kind == "value_error" and "is a boolean" in str(ctx.get("error", "")):
        return "write a number (true and false are not numbers)"
    if kind in ("literal_error", "union_tag_invalid", "enum") and ctx.get("expected"):
        return f"use {ctx['expected']}"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") in _PATTERN_FIXES:
        return _PATTERN_FIXES[ctx["pattern"]]
    if kind == "string_pattern_mismatch" and ctx.get("pattern") and "._-" not in str(ctx["pattern"]):
        return f"write a value matching {ctx['pattern']}"
    if kind == "string_too_short" and ctx.get("min_length", 1) > 1:
        return f"write at least {ctx['min_length']} characters"
    if kind == "too_short" and "min_length" in ctx:
        return f"give at least {ctx['min_length']} item(s)"
    return _FIXES.get(kind, "")


def _lookup(data: Any, path: tuple) -> Any:
    cur = data
    for p in path:
        try:
            cur = cur[p]
        except (KeyError, IndexError, TypeError):
            return None
    return cur
