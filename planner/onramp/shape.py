"""What a framework's job config says about the job, and the commented scenario written from it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from planner.errors import Problem, UserError


@dataclass
class Value:
    """A value and the source field it came from (``""``: a default, said in ``note``)."""

    value: Any
    source: str = ""
    note: str = ""

    def comment(self) -> str:
        parts = [p for p in (self.source, self.note) if p]
        return "  # " + _comment("; ".join(parts)) if parts else ""


@dataclass
class JobShape:
    framework: str
    config_path: str
    name: str
    model: Value
    algorithm: Value
    batch_prompts: Value
    group_size: Value
    max_response_tokens: Value
    prompt_tokens: Value
    rollout_tp: Value
    trainer_tp: Value
    trainer_pp: Value
    gpus_per_node: Value
    rollout_nodes: Value
    trainer_nodes: Value
    colocated: bool
    notes: list[str] = field(default_factory=list)
    #: the source field that moves the optimizer state (or weights) to host memory, if set: the planner's
    #: memory model keeps them on the GPUs (said beside a training-memory refusal)
    offload: str = ""


def need(cfg: dict, dotted: str, where: str, framework: str, fix: str = "") -> Any:
    """The value at ``dotted`` (a.b.c) of ``cfg``; a UserError naming the field if absent."""
    v = get(cfg, dotted)
    if v is None:
        raise UserError(Problem(dotted, f"no '{dotted}' in the {framework} config", fix or f"set {dotted} in {where}"),
                        title=f"{where}: cannot write a scenario")
    return v


def get(cfg: dict, dotted: str, default: Any = None) -> Any:
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur or cur[part] is None:
            return default
        cur = cur[part]
    return cur


def positive_int(v: Any, field_name: str, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise UserError(Problem(field_name, f"{v!r} is not a positive integer", f"set {field_name} to a whole number"),
                        title=f"{where}: cannot write a scenario")
    try:
        n = int(v)
    except ValueError:
        raise UserError(Problem(field_name, f"{v!r} is not a positive integer", f"set {field_name} to a whole number"),
                        title=f"{where}: cannot write a scenario") from None
    if n <= 0:
        raise UserError(Problem(field_name, f"{n} is not positive", f"set {field_name} to at least 1"),
                        title=f"{where}: cannot write a scenario")
    return n


def model_value(path: str, source: str, where: str) -> Value:
    """The scenario's ``model:`` for a framework's model path: a local config.json directory as
    is, a hub id as the preset it names, a local path this machine does not hold whose last part
    names a preset (``/root/Qwen2.5-7B-Instruct``) as that preset; else a UserError naming the field."""
    from estimators import hfconfig, models

    if hfconfig.looks_like_path(path):
        key = models.preset_key(path.rstrip("/"))
        if key in models.PRESETS and not _exists(hfconfig.config_path(path)):
            # (a training cluster's path, /root/Qwen3-4B in slime's scripts, that this machine does not hold)
            return Value(key, source, f"{path} is not on this machine; its name is preset {key} (if it is another model, "
                                      f"write the path of a directory holding its config.json here)")
        try:
            hfconfig.load(path)
        except ValueError as exc:
            raise UserError(Problem(source, str(exc), "point it at a local model directory holding a config.json"),
                            title=f"{where}: cannot write a scenario") from None
        import os

        # written absolute: a scenario reads a relative model path from the working directory it is run in,
        # and the written scenario is run from anywhere (the path was found from this one)
        full = os.path.abspath(os.path.expanduser(path))
        relative = not os.path.isabs(os.path.expanduser(path))
        return Value(full, source, "its config.json gives the dimensions" + (f" ({path} from {os.getcwd()})" if relative else ""))
    key = models.preset_key(path)
    if key not in models.PRESETS:
        raise UserError(Problem(source, f"model '{path}' is neither a preset nor a local model directory."
                                        f"{models_hint(path)}",
                                f"use a local directory holding the model's config.json (nothing is downloaded), "
                                f"or one of the presets: {', '.join(models.preset_names())}"),
                        title=f"{where}: cannot write a scenario")
    return Value(key, source, f"{path} = preset {key}")


def _exists(p) -> bool:
    try:
        return p.exists()
    except (OSError, ValueError):
        return False


def models_hint(path: str) -> str:
    from planner.errors import did_you_mean

    from estimators import models

    return did_you_mean(models.preset_key(path), models.preset_names())


def _line(indent: int, key: str, v: Value) -> str:
    return f"{' ' * indent}{key}: {_yaml_scalar(v.value)}{v.comment()}"


def _yaml_scalar(x: Any) -> str:
    """``x`` as one line of YAML that reads back as ``x`` anywhere in the written scenario (also as
    a key or an item of a flow mapping): quoted where YAML would read another type (``'2025'``,
    ``'on'``, ``'null'``) or a flow indicator (``'H100}'``), double-quoted with escapes where it
    holds a line break."""
    import json

    import yaml

    from planner.safeload import SafeDumper

    text = yaml.dump([x], Dumper=SafeDumper, default_flow_style=True, width=1 << 30).strip()[1:-1]  # a flow item: flow-safe
    if "\n" in text or (isinstance(x, str) and not x.isprintable()):
        return json.dumps(x)  # a JSON string is a YAML double-quoted scalar, on one line
    return text


def _comment(text: str) -> str:
    """``text`` for a ``#`` comment: line breaks (YAML's include U+2028, U+0085) and other
    unprintable characters escaped, so no value of a source config can end the comment."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def scenario_text(job: JobShape, *, gpu_type: str, price: Optional[float], command: str, host_dram_gb: float = 2048.0) -> str:
    """The commented scenario YAML."""
    price_v = price if price is not None else 1.0
    header = [f"Written by `{command}`.",
              f"Source: {job.framework} job config {job.config_path}. Each value's comment names the field it came from.",
              f"{job.framework} configs do not name the GPU type or a price: gpu type {gpu_type} (--gpu-type)"
              + (f", price {price_v:g} $/GPU-hour (--price)." if price is not None
                 else ", price 1 $/GPU-hour: a placeholder (--price): costs are then in GPU-hours."),
              *job.notes]
    if job.offload:
        header.append(f"{job.offload} is set: the source keeps that training state in host memory; the planner counts "
                      f"weights, gradients and Adam's state on the GPUs (memory per GPU on the safe side).")
    lines = [f"# {_comment(h)}" for h in header]
    gt, gpn = _yaml_scalar(gpu_type), _yaml_scalar(job.gpus_per_node.value)
    lines += [f"name: {_yaml_scalar(job.name)}",
              "gpu_types:",
              f"  {gt}: {{price_per_gpu_hour: {price_v:g}}}",
              "cluster:",
              "  node_groups:"]
    for group, nodes in (("rollout", job.rollout_nodes), ("train", job.trainer_nodes)):
        lines.append(f"    - {{name: {group}, gpu_type: {gt}, count: {_yaml_scalar(nodes.value)}, gpus_per_node: {gpn}, "
                     f"host_dram_gb: {host_dram_gb:g}}}{Value(None, nodes.source, nodes.note).comment()}")
    lines += ["jobs:",
              f"  - name: {_yaml_scalar(job.name)}",
              _line(4, "model", job.model),
              _line(4, "algorithm", job.algorithm),
              "    rollout:",
              _line(6, "batch_prompts", job.batch_prompts),
              _line(6, "group_size", job.group_size),
              _line(6, "prompt_tokens", job.prompt_tokens),
              _line(6, "max_response_tokens", job.max_response_tokens),
              _line(6, "tp", job.rollout_tp),
              _line(6, "nodes", job.rollout_nodes),
              "    trainer:",
              _line(6, "tp", job.trainer_tp),
              _line(6, "pp", job.trainer_pp),
              _line(6, "nodes", job.trainer_nodes),
              "    slo: {ratio_to_solo: 1.5}  # not in the source config: an iteration may take 1.5x its solo time (edit)",
              "solver: {time_limit_s: 30}"]
    return "\n".join(lines) + "\n"


def split_colocated(nodes: int, source: str, *, gpus_per_node: int, trainer_mp: int, rollout_tp: int) -> tuple[Value, Value, str]:
    """Rollout and training node counts for a colocated job of ``nodes`` nodes: the planner places
    the phases in separate pools (which co-execution groups time-share across jobs). About half
    the nodes train, rounded down to a whole number of the trainer's model-parallel groups
    (``trainer_mp`` = tp x pp GPUs: a 16-way trainer on 8-GPU nodes takes 2 nodes at least); the
    rollout keeps at least the nodes one engine of ``rollout_tp`` GPUs needs. Where the source's nodes do not hold both, the cluster
    gets more nodes than the source, and the note says so."""
    unit = trainer_mp // math.gcd(trainer_mp, gpus_per_node)  # training nodes come in multiples of this
    r_min = max(1, math.ceil(rollout_tp / gpus_per_node))
    t = max(unit, nodes // 2 // unit * unit)
    r = max(r_min, nodes - t)
    sim = "`planner simulate --policy colocated` models"
    if t + r == nodes:
        return (Value(r, source, f"{nodes} colocated nodes split: {r} rollout"),
                Value(t, source, f"{nodes} colocated nodes split: {t} training"),
                f"The source colocates rollout and training on {nodes} nodes (time-shared); the planner places them in "
                f"separate pools, so its {nodes} nodes are split {r} rollout + {t} training. {sim} the time-shared original.")
    if nodes == 1 and (r, t) == (1, 1):
        return (Value(1, source, "colocated on 1 node; the planner needs a node per phase"),
                Value(1, source, "colocated on 1 node; the planner needs a node per phase"),
                "The source colocates rollout and training on 1 node; the planner places them in separate pools, so "
                f"this cluster has 2 nodes (1 per phase). {sim} time-sharing.")
    why = (f"the trainer's tp x pp = {trainer_mp} needs {t} node(s) of {gpus_per_node} GPUs" if t > 1 else "the trainer needs 1 node")
    why += f" and the rollout {r}" + (f" (tp={rollout_tp})" if r > 1 else "")
    more = t + r - nodes
    note = f"colocated on {nodes} node(s): {r} rollout + {t} training, {more} node(s) added (see the note at the top)"
    return (Value(r, source, note), Value(t, source, note),
            f"The source colocates rollout and training on {nodes} node(s); the planner places them in separate pools "
            f"and {why}, so this cluster has {t + r} nodes ({r} rollout + {t} training, {more} more than the source). "
            f"{sim} the time-shared original.")
