"""What a framework's job config says about the job, and the commented scenario written from it."""

from __future__ import annotations

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
        return "  # " + "; ".join(parts) if parts else ""


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
    is, a hub id as the preset it names; else a UserError naming the field."""
    from estimators import hfconfig, models

    if hfconfig.looks_like_path(path):
        try:
            hfconfig.load(path)
        except ValueError as exc:
            raise UserError(Problem(source, str(exc), "point it at a local model directory holding a config.json"),
                            title=f"{where}: cannot write a scenario") from None
        return Value(path, source, "its config.json gives the dimensions")
    key = models.preset_key(path)
    if key not in models.PRESETS:
        raise UserError(Problem(source, f"model '{path}' is neither a preset nor a local model directory"
                                        f"{models_hint(path)}",
                                f"use a local directory holding the model's config.json (nothing is downloaded), "
                                f"or one of the presets: {', '.join(models.preset_names())}"),
                        title=f"{where}: cannot write a scenario")
    return Value(key, source, f"{path} = preset {key}")


def models_hint(path: str) -> str:
    from planner.errors import did_you_mean

    from estimators import models

    return did_you_mean(models.preset_key(path), models.preset_names())


def _line(indent: int, key: str, v: Value) -> str:
    return f"{' ' * indent}{key}: {_yaml_scalar(v.value)}{v.comment()}"


def _yaml_scalar(x: Any) -> str:
    import yaml

    return yaml.safe_dump(x, default_flow_style=True).strip().removesuffix("...").strip()


def scenario_text(job: JobShape, *, gpu_type: str, price: Optional[float], command: str, host_dram_gb: float = 2048.0) -> str:
    """The commented scenario YAML."""
    price_v = price if price is not None else 1.0
    lines = [f"# Written by `{command}`.",
             f"# Source: {job.framework} job config {job.config_path}. Each value's comment names the field it came from.",
             f"# {job.framework} configs do not name the GPU type or a price: gpu type {gpu_type} (--gpu-type)"
             + (f", price {price_v:g} $/GPU-hour (--price)." if price is not None
                else ", price 1 $/GPU-hour: a placeholder (--price): costs are then in GPU-hours."),
             ]
    lines += [f"# {n}" for n in job.notes]
    lines += [f"name: {job.name}",
              "gpu_types:",
              f"  {gpu_type}: {{price_per_gpu_hour: {price_v:g}}}",
              "cluster:",
              "  node_groups:"]
    gpn = job.gpus_per_node
    lines.append(f"    - {{name: rollout, gpu_type: {gpu_type}, count: {job.rollout_nodes.value}, gpus_per_node: {gpn.value}, "
                 f"host_dram_gb: {host_dram_gb:g}}}{Value(None, job.rollout_nodes.source, job.rollout_nodes.note).comment()}")
    lines.append(f"    - {{name: train, gpu_type: {gpu_type}, count: {job.trainer_nodes.value}, gpus_per_node: {gpn.value}, "
                 f"host_dram_gb: {host_dram_gb:g}}}{Value(None, job.trainer_nodes.source, job.trainer_nodes.note).comment()}")
    lines += ["jobs:",
              f"  - name: {job.name}",
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


def split_colocated(nodes: int, source: str) -> tuple[Value, Value, str]:
    """Rollout and training node counts for a colocated job of ``nodes`` nodes: the planner places
    the phases in separate pools (which co-execution groups time-share across jobs)."""
    if nodes == 1:
        return (Value(1, source, "colocated on 1 node; the planner needs a node per phase"),
                Value(1, source, "colocated on 1 node; the planner needs a node per phase"),
                "The source colocates rollout and training on 1 node; the planner places them in separate pools, so "
                "this cluster has 2 nodes (1 per phase). `planner simulate --policy colocated` models time-sharing.")
    t = nodes // 2
    return (Value(nodes - t, source, f"{nodes} colocated nodes split: {nodes - t} rollout"),
            Value(t, source, f"{nodes} colocated nodes split: {t} training"),
            f"The source colocates rollout and training on {nodes} nodes (time-shared); the planner places them in "
            f"separate pools, so its {nodes} nodes are split {nodes - t} rollout + {t} training. "
            f"`planner simulate --policy colocated` models the time-shared original.")
