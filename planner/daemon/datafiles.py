"""Files a submitted job may make the daemon read: none, or those inside the operator's data folder.

A job spec may name a trace file (``rollout.response_lengths``, ``rollout.prompt_lengths``,
``rollout.tools.latency`` as ``{source: trace, path: ..., column: ...}``). Over the API that path
comes from a client, and reading it would let any ``submit`` token make the daemon open server
files (and, before, echo their values). So:

* without ``--data-dir`` a job that names a file is refused (422, the field named): send the
  distribution as ``{source: quantiles, ...}`` instead;
* with ``--data-dir DIR`` the path must be relative, and resolve (symbolic links followed) to a
  regular file inside ``DIR``; the job is stored with that resolved path.

The trace is then read by the bounded reader (:mod:`estimators.boundedio`), whose messages name
the file, line and column but never a value of the file.

The job's ``model`` is the same kind of input: a string that is no preset name is a path to a
Hugging Face ``config.json`` (or its folder). Over the API it obeys the same rule (refused without
``--data-dir``; relative and inside it with one), and it is read *once*, at submission: the job is
stored with the dimensions it gave (``model`` becomes the explicit mapping), so the daemon never
reads the file again and a file removed later cannot fail a cycle. A file that gives no dimensions is
refused naming the field, never with a value of the file.

A trace file accepted at submission may be deleted or damaged later (and a job stored before
models were kept as their dimensions may still name a config.json): each cycle the daemon reads a
live job's files once per process (:func:`unreadable`), and again after an apply of a plan holding it
failed (the executor's target reads them: a file gone meanwhile fails that apply), and fails that job
alone, with the field, when they no longer read (``planner.daemon.cycle``).

Inside the daemon a job names its files by their resolved absolute paths (what it reads); a client
never sees them so: every JSON answer of the API goes through :func:`public` (the ASGI layer
:class:`planner.daemon.api.PublicPaths`), which writes a path inside the data folder relative to it,
as the client named it (``traces/lengths.csv``), and the folder itself as ``<data folder>``. That
covers the stored spec echoed back, a 422 naming a file that does not read, and a failed job's
reason or a decision's reasons naming one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from planner.errors import Problem, UserError, did_you_mean
from planner.schema.scenario import JobSpec
from planner.schema.workload import TraceColumn


def _fields(job: JobSpec):
    r = job.rollout
    yield "rollout.response_lengths", r, "response_lengths"
    yield "rollout.prompt_lengths", r, "prompt_lengths"
    if r.tools is not None:
        yield "rollout.tools.latency", r.tools, "latency"


def _inside(field: str, path: str, data_dir: Optional[Path], send: str) -> Path:
    """``path`` (a client's) resolved to a regular file or folder inside ``data_dir``; UserError naming ``field``."""
    if data_dir is None:
        raise UserError(Problem(field, "this daemon reads no file named in a request",
                                f"{send}, or ask the operator to start the daemon with --data-dir DIR and name a file inside DIR"))
    rel = PurePosixPath(path)
    if rel.is_absolute() or ".." in rel.parts or "\\" in path or "\x00" in path or path.startswith("~"):
        raise UserError(Problem(field, "must be a relative path inside the daemon's data folder (no '..', not absolute)",
                                "name the file relative to the data folder, e.g. traces/lengths.csv"))
    root = Path(os.path.realpath(data_dir))
    full = Path(os.path.realpath(root / rel))
    try:
        there = full.is_file() or full.is_dir()
    except OSError:  # a name longer than the file system holds (ENAMETOOLONG): a 500 before
        there = False
    if root not in full.parents or not there:
        raise UserError(Problem(field, "no such file inside the daemon's data folder",
                                "name a file the operator put in the data folder (links that lead outside it are refused)"))
    return full


def _model(job: JobSpec, data_dir: Optional[Path]) -> None:
    """A ``model`` that names no preset: read once from inside ``data_dir``, kept as its dimensions."""
    from estimators import hfconfig
    from estimators.models import PRESETS, preset, preset_names
    from planner.schema.scenario import ModelSpec

    if not isinstance(job.model, str):
        return
    try:
        preset(job.model)
        return
    except KeyError:
        pass
    # the base presets only (an alias names one of them): the list of both outgrew the 500 characters a fix keeps in
    # an API refusal once the Qwen3 presets came, and cut the --data-dir way out off the end
    presets = ", ".join(sorted(PRESETS)) + " and their aliases"
    send = (f"use a preset ({presets}) or give the dimensions as a mapping (hidden_size, num_layers, "
            "num_heads, num_kv_heads, intermediate_size, vocab_size)")
    name = job.model
    shown = name if len(name) <= 100 else name[:100] + "..."
    path_like = "/" in name or "\\" in name or name.endswith(".json") or name.startswith((".", "~"))
    not_preset = f"'{shown}' is not a known model preset (nor a Hugging Face hub id of one)"
    try:
        full = _inside("model", name, data_dir, send)
    except UserError:
        # a name is first a preset's: say that it is none, and which there are, not only that no file is read
        if path_like and data_dir is not None:  # a path, and this daemon reads files: the data folder's refusal says why
            raise
        fix = (f"name a preset ({presets}), or give the dimensions as a mapping (hidden_size, num_layers, "
               "num_heads, num_kv_heads, intermediate_size, vocab_size)")
        if data_dir is not None:  # a bare name, neither a preset nor inside the data folder
            also, fix = ", nor a file or folder inside the daemon's data folder", fix + ", or name a model folder inside it"
        elif path_like:
            also = "; and this daemon reads no model file named in a request (it runs without --data-dir)"
            fix += ", or ask the operator to start the daemon with --data-dir DIR and name a config.json inside DIR"
        else:
            also = ""
        raise UserError(Problem("model", f"{not_preset}{also}.{did_you_mean(name, preset_names())}", fix)) from None
    if full.is_dir():
        full = full / "config.json"
        if not full.is_file():
            raise UserError(Problem("model", "the folder inside the daemon's data folder holds no config.json",
                                    "name a model folder with a config.json, or the config.json itself"))
    try:
        d = hfconfig.load(full)
    except (hfconfig.HFConfigError, OSError):
        raise UserError(Problem("model", "the file inside the daemon's data folder gives no model dimensions "
                                "(not a dense decoder's Hugging Face config.json)", send)) from None
    rel = PurePosixPath(job.model)
    label = (rel.parent.name if rel.name == "config.json" else rel.name) or "custom"  # the client's own words, not the file's
    try:
        job.model = ModelSpec(name=label[:64], hidden_size=d.hidden_size, num_layers=d.num_layers, num_heads=d.num_heads,
                              num_kv_heads=d.num_kv_heads, intermediate_size=d.intermediate_size, vocab_size=d.vocab_size,
                              head_dim=d.head_dim or None, tie_embeddings=d.tie_embeddings, qkv_bias=d.qkv_bias)
    except ValueError:
        raise UserError(Problem("model", "the config.json inside the daemon's data folder gives dimensions out of the "
                                "supported range", send)) from None


def confine(job: JobSpec, data_dir: Optional[Path]) -> JobSpec:
    """``job`` with every trace path resolved inside ``data_dir`` and a model file read into its dimensions;
    UserError naming the field otherwise."""
    job = job.model_copy(deep=True)
    _model(job, data_dir)
    for where, owner, attr in _fields(job):
        spec = getattr(owner, attr)
        if not isinstance(spec, TraceColumn):
            continue
        field = f"{where}.path"
        full = _inside(field, spec.path, data_dir, "send the distribution as {source: quantiles, quantiles: {0: ..., 1: ...}}")
        if not full.is_file():
            raise UserError(Problem(field, "no such regular file inside the daemon's data folder",
                                    "name a file the operator put in the data folder (links that lead outside it are refused)"))
        setattr(owner, attr, spec.model_copy(update={"path": str(full)}))
    return job


def job_spec(rec) -> JobSpec:
    """The spec of a stored job (a :class:`planner.daemon.store.JobRecord`) as the loop plans it. Its
    ``prompt_tokens``, when the client left it to default to the mean of a ``prompt_lengths`` trace file
    (``rec.prompt_tokens_from_trace``), is that mean as the file reads now, as the estimators and the
    simulated cluster read the file's prompt lengths: before, it stayed the figure of submission for good
    (restarts included) after the file was edited. A file that no longer reads, or whose mean is past the
    most a prompt may have, keeps the stored figure: :func:`unreadable` fails the job."""
    from estimators.traces import TraceError, table_mean
    from planner.schema.scenario import MAX_TOKENS

    spec = JobSpec.model_validate(rec.spec)
    r = spec.rollout
    if getattr(rec, "prompt_tokens_from_trace", False) and isinstance(r.prompt_lengths, TraceColumn):
        from planner.schema.workload import table_of

        try:
            mean = table_mean(table_of(r.prompt_lengths))
        except TraceError:
            return spec
        if mean <= MAX_TOKENS:
            r.prompt_tokens = max(1, round(mean))
    return spec


def trace_stamp(rec) -> Optional[tuple[int, int]]:
    """(modification time in ns, size) of the prompt_lengths trace file a stored job's prompt_tokens
    defaults to (``rec.prompt_tokens_from_trace``), None where it does not or the file is gone: a
    cache of :func:`job_spec` keyed on it reads the file again once it changes."""
    if not getattr(rec, "prompt_tokens_from_trace", False):
        return None
    spec = (rec.spec.get("rollout") or {}).get("prompt_lengths")
    path = spec.get("path") if isinstance(spec, dict) else None
    if not isinstance(path, str):
        return None
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_mtime_ns, st.st_size


def unreadable(job: JobSpec, *, prompt_tokens_from_trace: bool = False) -> Optional[str]:
    """Why a file ``job`` names (a trace column, a model's local config.json) cannot be read now: the
    field and the file, never a value of the file; None when every one reads (or it names none).
    A trace is held to the bounds it met at submission (:func:`planner.daemon.service.check_job`): the
    bounded reader's (finite numbers, at most 1e9), for a tool latency trace MAX_TOOL_LATENCY_S, and for a
    prompt_lengths trace whose mean is the job's prompt_tokens (``prompt_tokens_from_trace``) a mean a
    prompt may have (as :func:`planner.schema.workload.default_prompt_tokens`)."""
    from estimators import hfconfig
    from estimators.traces import TraceError, table_mean
    from planner.schema.scenario import MAX_TOKENS
    from planner.schema.workload import table_of, tool_latency_table

    for where, owner, attr in _fields(job):
        spec = getattr(owner, attr)
        if isinstance(spec, TraceColumn):
            try:  # bounded as at submission (planner.daemon.service.check_job): a file edited since may hold values past them
                table = tool_latency_table(spec) if attr == "latency" else table_of(spec)
            except TraceError as exc:  # its message names the file, line and column, never a value
                return f"{where}.path: {exc.message}"
            if attr == "prompt_lengths" and prompt_tokens_from_trace and not table_mean(table) <= MAX_TOKENS:
                return (f"{where}.path: trace file {spec.path}: the prompts' mean length, which prompt_tokens defaults to, is past "
                        f"the {MAX_TOKENS:,} tokens a prompt may have")
    if isinstance(job.model, str):
        try:
            hfconfig.resolve(job.model)  # a preset: a lookup; a local path: its config.json, read bounded
        except (ValueError, KeyError):  # (an HFConfigError may quote a value of the file: not repeated here)
            return f"model: {job.model} is no longer a readable config.json of a dense decoder model"
    return None


def check_data_dir(path: Optional[Path]) -> Optional[Path]:
    """``--data-dir``: an existing folder (resolved), or None."""
    if path is None:
        return None
    if not Path(path).is_dir():
        raise UserError(Problem("--data-dir", f"{path} is not a folder", "pass the folder of trace files jobs may name"))
    return Path(os.path.realpath(path))


DATA_FOLDER = "<data folder>"  # the data folder itself, in an answer to a client


def public_text(text: str, root: str) -> str:
    """``text`` with every path inside the folder ``root`` (resolved, absolute) written relative to it,
    and ``root`` itself as ``<data folder>``: what an API answer may say of a server file."""
    if root not in text:
        return text
    text = text.replace(root + os.sep, "")
    return re.sub(re.escape(root) + r"(?![\w.-])", DATA_FOLDER, text)


def public(value: Any, root: str) -> Any:
    """A JSON value (dicts, lists, strings, numbers) with :func:`public_text` applied to every string, keys included."""
    if isinstance(value, str):
        return public_text(value, root)
    if isinstance(value, dict):
        return {public_text(k, root) if isinstance(k, str) else k: public(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [public(v, root) for v in value]
    return value


def public_root(data_dir: Optional[Path]) -> Optional[str]:
    """The data folder as :func:`public` matches it (resolved), or None when there is none to hide (no
    data folder; or ``/``, every path lying inside it: the answers then hold paths as they are)."""
    if data_dir is None:
        return None
    root = os.path.realpath(data_dir)
    return None if root == os.sep else root
