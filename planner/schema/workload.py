"""Users' own workloads in a scenario: trace files, quantile tables, a calibration folder.

Three places of a job take a distribution of the user's (besides the shipped ones):

* ``rollout.response_lengths`` (tokens): ``{source: trace, path: lengths.csv, column: response_tokens}``
  or ``{source: quantiles, quantiles: {0: 40, 0.5: 900, 0.9: 4000, 1: 16000}}``;
* ``rollout.prompt_lengths`` (tokens, one draw per GRPO group in the simulator; the estimators use
  its mean as ``prompt_tokens`` unless ``prompt_tokens`` is given);
* ``rollout.tools.latency`` (seconds): ``rollpacker``, ``fixed``, or one of the two mappings above.

A trace is a CSV (header row) or JSONL file, optionally ``.gz``, with one numeric column named by
``column``; a relative ``path`` is relative to the scenario file. ``scale`` multiplies every value.
The scenario field ``calibration`` names a folder written by ``python -m estimators.calibrate --out``
(relative to the scenario file) that the estimators then read (:mod:`estimators.datadir`).

:func:`resolve_workloads` runs when a scenario is loaded: it makes paths absolute, reads every trace
(an unreadable file, a missing column or a bad row is an error naming the field, the file and line,
and the fix) and selects the calibration folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PositiveFloat, field_validator

# bounds the scenario schema shares (``planner.schema.scenario`` imports them from here: no import cycle)
MAX_TOKENS = 1 << 22        # prompt / response / observation tokens of one request
MAX_TOOL_LATENCY_S = 86400.0  # one tool call: a day (fixed_latency_s, and every value of a latency table or trace)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True, allow_inf_nan=False)


class TraceColumn(_Strict):
    """One numeric column of the user's trace file (CSV with a header row, or JSONL)."""

    source: Literal["trace"]
    path: str = Field(min_length=1, max_length=4096, description="CSV/TSV or JSONL file, optionally .gz; a relative path is relative to the scenario file")
    column: str = Field(min_length=1, max_length=200, description="CSV header name or JSONL key of the column to use")
    scale: PositiveFloat = Field(1.0, le=1e3, description="multiplies every value")


class QuantileTable(_Strict):
    """An inverse CDF given by points: quantile (0 to 1) -> value, linear in between."""

    source: Literal["quantiles"]
    quantiles: dict[float, float] = Field(
        max_length=10000, description="quantile -> value, e.g. {0: 40, 0.5: 900, 0.99: 12000, 1: 16000}; must include 0 and 1, values non-decreasing")
    scale: PositiveFloat = Field(1.0, le=1e3, description="multiplies every value")

    @field_validator("quantiles", mode="before")
    @classmethod
    def _distinct_keys(cls, v: Any) -> Any:
        """Keys that are the same quantile (``"0"``, ``"0.0"``, ``"-0"`` in JSON) would merge silently."""
        if isinstance(v, dict):
            seen: dict[float, Any] = {}
            for k in v:
                try:
                    q = float(k) if not isinstance(k, bool) else None
                except (TypeError, ValueError):
                    continue  # (the type check names it)
                if q is None or q != q:
                    continue
                if q in seen:
                    raise ValueError(f"the keys {str(seen[q])[:40]!r} and {str(k)[:40]!r} are the same quantile ({q:g}); "
                                     "give each quantile once")
                seen[q] = k
        return v

    @field_validator("quantiles")
    @classmethod
    def _table(cls, v: dict[float, float]) -> dict[float, float]:
        from estimators.traces import TraceError, check_quantiles

        try:
            check_quantiles(v.items())
        except TraceError as exc:
            raise ValueError(f"{exc.message}; {exc.fix}") from None
        return v


UserDistribution = Union[TraceColumn, QuantileTable]


def _latency_shape(v):
    """Name the accepted shapes when ``tools.latency`` is none of them (pydantic's union message lists only the words)."""
    if isinstance(v, str) and v not in ("rollpacker", "fixed"):
        raise ValueError(f"unknown tool latency {v!r}: use rollpacker, fixed (with fixed_latency_s), "
                         "{source: trace, path: FILE, column: NAME} or {source: quantiles, quantiles: {0: ..., 1: ...}}")
    if isinstance(v, dict) and v.get("source") not in ("trace", "quantiles"):
        raise ValueError(f"a tool latency mapping needs source: trace or source: quantiles, got {v.get('source')!r}: "
                         "e.g. {source: trace, path: FILE, column: NAME}")
    return v


ToolLatency = Annotated[Union[Literal["rollpacker", "fixed"], Annotated[UserDistribution, Field(discriminator="source")]],
                        BeforeValidator(_latency_shape)]


def table_of(spec: UserDistribution) -> tuple[float, ...]:
    """The spec's inverse CDF on :data:`estimators.traces.GRID_POINTS` points (``scale`` applied).
    Raises :class:`estimators.traces.TraceError`."""
    from estimators import traces

    if isinstance(spec, TraceColumn):
        t = traces.table_from_values(traces.read_column(spec.path, spec.column))
    else:
        t = traces.table_from_quantiles(spec.quantiles.items())
    return tuple(v * spec.scale for v in t) if spec.scale != 1.0 else t


def default_prompt_tokens(rollout, table) -> tuple[str, str] | None:
    """Set ``rollout.prompt_tokens`` to the mean of its ``prompt_lengths`` inverse CDF ``table`` where the
    job does not give ``prompt_tokens`` (scenario files and the daemon's ``POST /v1/jobs`` alike).
    A mean above the most tokens a prompt may have is ``(message, fix)`` and sets nothing: before, the
    assignment's validation error ended ``planner validate`` with an internal error (exit 1), and the
    daemon, which never set the default, checked and estimated the job at 512-token prompts."""
    from estimators.traces import table_mean

    if "prompt_tokens" in rollout.model_fields_set:
        return None
    mean = table_mean(table)
    if not mean <= MAX_TOKENS:
        return (f"the prompts' mean length, which prompt_tokens defaults to, is {mean:,.0f} tokens; a prompt may have at "
                f"most {MAX_TOKENS:,}", "lower the distribution's values (or its scale), or give rollout.prompt_tokens")
    rollout.prompt_tokens = max(1, round(mean))
    return None


def tool_latency_too_long(table, *, quote: bool = True) -> tuple[str, str] | None:
    """``(message, fix)`` when the tool latency inverse CDF ``table`` (``scale`` applied) reaches past
    :data:`planner.schema.scenario.MAX_TOOL_LATENCY_S`, the bound of ``fixed_latency_s``; else None.
    Before, a quantile table or trace could give 1e9-second tool calls (SLOs of 2e9 s, past the 1e8 s
    every time of a scenario is bounded by). ``quote=False``: the message says no value of the table
    (the daemon's answers never quote a value of a server file, :mod:`planner.daemon.datafiles`)."""

    top = max(table, default=0.0)
    if top <= MAX_TOOL_LATENCY_S:  # (NaN is not: a table of one is refused too)
        return None
    if quote:
        msg = (f"the longest tool call it gives is {top:,.1f} s (scale applied); a tool call may take at most "
               f"{MAX_TOOL_LATENCY_S:,.0f} s, as fixed_latency_s")
    else:
        msg = (f"it gives tool calls longer than {MAX_TOOL_LATENCY_S:,.0f} s (scale applied), the most one may take "
               "(as fixed_latency_s)")
    return msg, f"give latencies in seconds, at most {MAX_TOOL_LATENCY_S:,.0f} (lower the values or the scale)"


def tool_latency_table(spec) -> tuple[float, ...]:
    """:func:`table_of` a tool latency trace or quantile table, refused (:class:`estimators.traces.TraceError`,
    no value quoted) past :data:`MAX_TOOL_LATENCY_S`: what the estimators and the simulator read, so that a
    trace file edited after it was checked (a daemon's job) cannot hand them longer tool calls."""
    from estimators.traces import TraceError

    table = table_of(spec)
    bad = tool_latency_too_long(table, quote=False)
    if bad is not None:
        raise TraceError(*bad)
    return table


def no_tokens(table, attr: str) -> tuple[str, str] | None:
    """(message, fix) when a length table is 0 everywhere: a rollout whose every response (or prompt)
    is 0 tokens long generates nothing to train on, yet it was planned (the prefill and tool calls
    still timed) and simulated; ``None`` otherwise."""
    if len(table) and max(table) <= 0:
        what = "response" if attr == "response_lengths" else "prompt"
        return (f"every {what} length is 0 tokens: a rollout of empty {what}s gives nothing to train on",
                f"give the {what} lengths in tokens (e.g. {{0: 20, 0.5: 700, 1: 4096}}), or the column that holds them")
    return None


def _local_model_path(name: str, base: Path) -> str | None:
    """A relative ``model:`` that names a local config.json or model folder, as an absolute path from
    ``base`` (it was read from the working folder: a scenario beside its model's config.json only
    planned when run from that folder); ``None`` for a preset, a hub id or an absolute path."""
    try:
        q = Path(name).expanduser()
        if q.is_absolute():
            return None
        cand = base / q
        explicit = name.endswith(".json") or name.startswith(("./", "../"))
        if explicit or (cand.is_dir() and (cand / "config.json").is_file()):
            return str(cand.resolve())
    except (OSError, ValueError, RuntimeError):  # a name no file system holds: left for the checks to name
        return None
    return None


def resolve_workloads(scenario, doc=None, base_dir: str | Path | None = None) -> None:
    """Make the scenario's trace paths, local model paths (a Hugging Face ``config.json`` or its
    folder) and calibration folder absolute (relative to ``base_dir``: the scenario's folder, as an
    ``include:`` is), check that every trace reads, set ``prompt_tokens`` from ``prompt_lengths`` where it was not
    given, and select the calibration folder. Raises :class:`planner.errors.UserError` listing
    every problem."""
    from estimators import datadir
    from estimators.traces import TraceError
    from planner.errors import Problem, UserError
    from planner.safeload import fmt_path as _fmt

    base = Path(base_dir) if base_dir is not None else Path.cwd()
    problems: list[Problem] = []

    def where(path: tuple) -> str:
        return doc.where(path) if doc is not None else ""

    def absolute(p: str) -> str:
        q = Path(p).expanduser()
        return str(q if q.is_absolute() else (base / q).resolve())

    for j, job in enumerate(scenario.jobs):
        if isinstance(job.model, str) and base_dir is not None:
            local = _local_model_path(job.model, base)
            try:
                if local is not None:
                    job.model = local
            except ValueError:  # (pydantic's ValidationError: the field's length limit)
                problems.append(Problem(_fmt(("jobs", j, "model")), f"the model path from the scenario's folder, {str(local)[:80]}..., is "
                                        "longer than a model name may be", "give a shorter path to the model's config.json "
                                        "(e.g. a link beside the scenario)", source=where(("jobs", j, "model"))))
        r = job.rollout
        items: list[tuple[tuple[str | int, ...], Any, str]] = [(("jobs", j, "rollout", "response_lengths"), r, "response_lengths"),
                 (("jobs", j, "rollout", "prompt_lengths"), r, "prompt_lengths")]
        if r.tools is not None:
            items.append((("jobs", j, "rollout", "tools", "latency"), r.tools, "latency"))
        for path, owner, attr in items:
            spec = getattr(owner, attr)
            if not isinstance(spec, (TraceColumn, QuantileTable)):
                continue
            if isinstance(spec, TraceColumn) and not Path(spec.path).is_absolute():
                spec = spec.model_copy(update={"path": absolute(spec.path)})
                setattr(owner, attr, spec)
            try:
                table = table_of(spec)
            except TraceError as exc:
                problems.append(Problem(_fmt(path), exc.message, exc.fix, source=where(path)))
                continue
            bad = no_tokens(table, attr) if attr != "latency" else None
            bad = bad or (default_prompt_tokens(r, table) if attr == "prompt_lengths" else
                          tool_latency_too_long(table) if attr == "latency" else None)
            if bad is not None:
                problems.append(Problem(_fmt(path), *bad, source=where(path)))
    cal = getattr(scenario, "calibration", None)
    try:
        if cal is not None:
            scenario.calibration = absolute(cal)
        datadir.select(scenario.calibration if cal is not None else None)
        env_folder = datadir.selected() if cal is None else None
        if env_folder is not None:  # RL_PLANNER_CALIBRATION: checked like the field
            datadir.check_folder(env_folder)
    except ValueError as exc:
        problems.append(Problem("calibration", str(exc),
                                "name a folder written by 'python -m estimators.calibrate --out DIR' "
                                "(relative to the scenario file), or remove the field", source=where(("calibration",))))
    if problems:
        raise UserError(problems, title=f"{doc.filename}: invalid scenario" if doc is not None else "invalid scenario")
