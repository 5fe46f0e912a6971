"""A slime job config as a :class:`JobShape`: slime's own argparse arguments
(``slime/utils/arguments.py`` plus Megatron's), either as the shell-style argument lists of its
example scripts (``--flag value`` tokens, ``# comments``, ``\\`` continuations, ``NAME=( ... )``
arrays) or as a YAML mapping (``rollout-batch-size: 32`` or ``rollout_batch_size: 32``). An
argument given twice is refused naming both (a YAML key repeated, or written both ways; a
``--flag`` repeated with another value), not read as the last one.

==================================  ===========================================================
slime argument                      scenario field
==================================  ===========================================================
``--hf-checkpoint``                 ``model`` (a local directory gives its config.json; a hub id
                                    names a preset)
``--advantage-estimator``           ``algorithm`` (``ppo``: ppo; grpo, gspo, reinforce_plus_plus: grpo)
``--rollout-batch-size``            ``rollout.batch_prompts`` (``--over-sampling-batch-size``, the
                                    prompts sampled per round, where larger)
``--n-samples-per-prompt``          ``rollout.group_size`` (default 1)
``--rollout-max-prompt-len``        ``rollout.prompt_tokens`` (default 512)
``--rollout-max-response-len``      ``rollout.max_response_tokens``
``--rollout-num-gpus-per-engine``   ``rollout.tp`` (SGLang TP per engine; default 1)
``--tensor-model-parallel-size``,   ``trainer.tp``, ``trainer.pp`` (default 1)
``--pipeline-model-parallel-size``
``--actor-num-nodes``,              training nodes and their GPUs (defaults 1, 8)
``--actor-num-gpus-per-node``
``--rollout-num-gpus``              rollout GPUs, in nodes of ``--actor-num-gpus-per-node``
                                    (``--num-gpus-per-node`` if given)
``--colocate``                      rollout on the training GPUs (split between the phases)
==================================  ===========================================================
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from planner.errors import Problem, UserError
from planner.onramp.shape import JobShape, Value, model_value, positive_int, split_colocated
from planner.safeload import check_text, parse_yaml


def parse_args_text(text: str, where: str) -> dict[str, Any]:
    """``--flag value`` pairs of a shell-style argument file (a flag without a value: True). A flag
    given twice with two values is refused naming both (slime's argparse would silently take the
    last, so the scenario could describe another job than the one that runs); the same value twice
    is read once."""
    text = text.replace("\\\n", " ")
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as exc:
        raise UserError(Problem("", f"cannot split the arguments: {exc}", "check the quotes"),
                        title=f"{where}: cannot write a scenario") from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("--") and len(t) > 2:
            key, _, inline = t[2:].partition("=")
            value: Any = True
            if inline:
                value = inline
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--") and tokens[i + 1] != ")":
                value = tokens[i + 1]
                i += 1
            if key in out and out[key] != value:
                raise UserError(Problem(f"--{key}", f"given twice, as {_shown(key, out[key])} and as {_shown(key, value)} "
                                        f"(slime would silently take the last)", f"keep one --{key} in {where}"),
                                title=f"{where}: cannot write a scenario")
            out[key] = value
        i += 1
    return out


def _shown(key: str, value: Any) -> str:
    return f"'--{key}'" if value is True else f"'--{key} {value}'"


def load_args(text: str, where: str) -> dict[str, Any]:
    """slime's arguments from ``text``: a YAML mapping (``rollout-batch-size: 32`` or
    ``rollout_batch_size: 32``), read by :mod:`planner.safeload` (an alias bomb, a duplicate key or
    another limit is refused, exit 2), or else (text that is not YAML, or YAML but not a mapping)
    the shell-style argument format. Two keys that name one argument are refused naming both."""
    if not yaml_mapping(text):
        return parse_args_text(text, where)
    doc = parse_yaml(text, where)
    check_text(doc)  # no control characters (ESC, NUL) in what the scenario's comments will echo
    out: dict[str, Any] = {}
    keys: dict[str, Any] = {}
    for k, v in doc.data.items():
        flag = str(k).lstrip("-").replace("_", "-")
        if flag in keys:
            raise UserError(Problem(f"--{flag}", f"'{keys[flag]}' ({doc.where((keys[flag],))}) and '{k}' ({doc.where((k,))}) "
                                    f"are both --{flag}", "keep one of them"), title=f"{where}: cannot write a scenario")
        keys[flag], out[flag] = k, v
    return out


def yaml_mapping(text: str) -> bool:
    """Whether ``text`` is YAML whose document is a mapping. Only the syntax is read (libyaml's
    events: no value is built and no alias expanded, so this is linear in the text's length)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    root = None
    try:
        for event in yaml.parse(text, Loader=loader):
            if root is None and isinstance(event, yaml.NodeEvent):
                root = event
    except (yaml.YAMLError, ValueError):  # not YAML (libyaml's reader raises ValueError on some characters)
        return False
    return isinstance(root, yaml.MappingStartEvent)


def _arg(args: dict, key: str, where: str, default: Any = None, required: bool = False) -> Any:
    v = args.get(key, default)
    if isinstance(v, (list, dict)):
        raise UserError(Problem(f"--{key}", f"a {'list' if isinstance(v, list) else 'mapping'}, not one value",
                                f"give --{key} a single value"), title=f"{where}: cannot write a scenario")
    if v is None and required:
        raise UserError(Problem(f"--{key}", f"no --{key} in the slime arguments", f"add --{key} to {where}"),
                        title=f"{where}: cannot write a scenario")
    if isinstance(v, str) and ("$" in v):
        raise UserError(Problem(f"--{key}", f"'{v}' is a shell variable this reader cannot expand",
                                f"write the value of --{key} itself"), title=f"{where}: cannot write a scenario")
    return v


def read(args: dict, where: str, name: str = "") -> JobShape:
    fw = "slime"
    path = str(_arg(args, "hf-checkpoint", where, required=True))
    est = str(_arg(args, "advantage-estimator", where, "grpo"))
    algo = Value("ppo" if est == "ppo" else "grpo", "--advantage-estimator" if "advantage-estimator" in args else "",
                 est if "advantage-estimator" in args else "slime's default grpo")

    def num(key: str, default: Any = None, required: bool = False) -> int:
        return positive_int(_arg(args, key, where, default, required), f"--{key}", where)

    def src(key: str, default_note: str) -> tuple[str, str]:
        return (f"--{key}", "") if key in args else ("", default_note)

    batch = num("rollout-batch-size", required=True)
    n = num("n-samples-per-prompt", 1)
    resp = num("rollout-max-response-len", required=True)
    prompt = num("rollout-max-prompt-len", 512)
    rtp = num("rollout-num-gpus-per-engine", 1)
    ttp, tpp = num("tensor-model-parallel-size", 1), num("pipeline-model-parallel-size", 1)
    anodes, agpn = num("actor-num-nodes", 1), num("actor-num-gpus-per-node", 8)
    gpn = num("num-gpus-per-node", agpn)
    notes = []
    batch_v = Value(batch, "--rollout-batch-size")
    over = num("over-sampling-batch-size", batch)  # slime samples prompts in rounds of this many (its default: the batch)
    if over > batch:
        batch_v = Value(over, "--over-sampling-batch-size", f"prompts sampled per round; --rollout-batch-size is {batch}")
        notes.append(f"--over-sampling-batch-size {over}: slime generates prompts in rounds of {over} until "
                     f"--rollout-batch-size {batch} pass its filters: rollout.batch_prompts is {over} (one round), so the "
                     f"training phase is modelled on all of them (on the safe side); a step that needs more rounds takes longer.")
    colocate = bool(args.get("colocate")) and str(args.get("colocate")).lower() not in ("false", "0")
    if colocate:
        rollout_nodes, trainer_nodes, note = split_colocated(anodes, "--actor-num-nodes", gpus_per_node=gpn,
                                                             trainer_mp=ttp * tpp, rollout_tp=rtp)
        notes.append(note)
    else:
        rg = num("rollout-num-gpus", required=True)
        rn = math.ceil(rg / gpn)
        rollout_nodes = Value(rn, "--rollout-num-gpus", f"{rg} GPUs in nodes of {gpn}")
        trainer_nodes = Value(anodes, "--actor-num-nodes")
        if rg % gpn:
            notes.append(f"--rollout-num-gpus {rg} is not a whole number of {gpn}-GPU nodes: rounded up to {rn} node(s).")
    if agpn != gpn:
        raise UserError(Problem("--actor-num-gpus-per-node", f"{agpn} GPUs per training node but {gpn} per node "
                                f"(--num-gpus-per-node)", "write the scenario's node groups by hand for mixed node shapes"),
                        title=f"{where}: cannot write a scenario")
    return JobShape(
        framework=fw, config_path=where, name=name or _name(args, where), model=model_value(path, "--hf-checkpoint", where),
        algorithm=algo, batch_prompts=batch_v,
        group_size=Value(n, *src("n-samples-per-prompt", "slime's default 1")),
        max_response_tokens=Value(resp, "--rollout-max-response-len"),
        prompt_tokens=Value(prompt, *src("rollout-max-prompt-len", "not in the arguments: 512")),
        rollout_tp=Value(rtp, *src("rollout-num-gpus-per-engine", "slime's default 1")),
        trainer_tp=Value(ttp, *src("tensor-model-parallel-size", "Megatron's default 1")),
        trainer_pp=Value(tpp, *src("pipeline-model-parallel-size", "Megatron's default 1")),
        gpus_per_node=Value(gpn, *src("num-gpus-per-node" if "num-gpus-per-node" in args else "actor-num-gpus-per-node",
                                      "slime's default 8")),
        rollout_nodes=rollout_nodes, trainer_nodes=trainer_nodes, colocated=colocate, notes=notes,
        offload="--optimizer-cpu-offload" if _flag(args, "optimizer-cpu-offload") else "")


def _flag(args: dict, key: str) -> bool:
    v = args.get(key)
    return v is not None and v is not False and str(v).lower() not in ("false", "0")


def _name(args: dict, where: str) -> str:
    raw = str(args.get("wandb-group") or Path(where).stem)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-._") or "slime-job"
    return name if name[0].isalnum() else f"j{name}"
