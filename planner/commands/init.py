"""planner init --from verl|slime CONFIG: write a commented scenario from an RL framework's job config."""

from __future__ import annotations

NAME = "init"
HELP = "write a commented scenario from a verl or slime job config (GPU counts, TP/PP, batch, group size, lengths, model)"
DESCRIPTION = """Write a scenario from an RL framework's own job config.

  --from verl    a verl Hydra YAML config (data.*, actor_rollout_ref.*, trainer.n_gpus_per_node,
                 trainer.nnodes, algorithm.adv_estimator); pass the composed config
                 (python -m verl.trainer.main_ppo ... --cfg job), your override file, or the
                 launch script itself (its key=value overrides are read, as in verl's examples)
  --from slime   slime's arguments: a shell-style argument file (--rollout-batch-size 32 ...,
                 as in slime's example scripts) or a YAML mapping of them

Each value of the written scenario carries a comment naming the source field. Neither framework
names a GPU type or a price: --gpu-type (default H100) and --price (default 1 $/GPU-hour, a
placeholder: costs then read as GPU-hours). A model path that is a hub id names a preset
(Qwen/Qwen2.5-7B-Instruct -> qwen2.5-7b); a local model directory is read from its config.json; a
path this machine does not hold whose name is a preset's (/root/Qwen3-4B) is read as that preset.
The scenario is validated before it is written (nothing is written on a problem; exit 2 naming
the field). docs/integration.md has the verl and slime recipes."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("config", type=_args.path, metavar="CONFIG", help="the framework's job config file")
    p.add_argument("--from", dest="framework", choices=("verl", "slime"), required=True, help="the framework that wrote CONFIG")
    p.add_argument("--out", "-o", type=_args.path, default="-", help="where to write the scenario (default: standard output)")
    p.add_argument("--gpu-type", default="H100", help="the GPU type of the nodes (a catalogue type; default H100)")
    p.add_argument("--price", type=float, default=None, help="$ per GPU-hour (default: 1, a placeholder)")
    p.add_argument("--name", default=None, help="the scenario's and the job's name (default: the experiment's)")


def run(args) -> int:
    import shlex
    import sys

    from planner.errors import Problem, UserError
    from planner.onramp import shape
    from planner.safeload import read_text
    from planner.schema.loader import load_scenario_data

    if args.out != "-":  # an output it cannot write is refused before the config is read
        from planner.commands._args import check_outputs

        check_outputs(args, "out", inputs=[("CONFIG", args.config)])
    where = args.config
    text = read_text(args.config, what="job config", where="CONFIG")
    if args.framework == "verl":
        from planner.onramp import hydra_args, slime, verl
        from planner.safeload import check_text, parse

        if not slime.yaml_mapping(text) and hydra_args.looks_like_overrides(text):  # a launch script: key=value overrides
            job = verl.read(hydra_args.load(text, where), where, args.name or "")
        else:
            doc = parse(text, args.config)
            check_text(doc)  # no control characters (ESC, NUL) in what the scenario's comments will echo
            job = verl.read(doc.data, where, args.name or "")
    else:
        from planner.onramp import slime

        job = slime.read(slime.load_args(text, where), where, args.name or "")
    if args.name is not None:  # ('' took the experiment's name in silence)
        import re

        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.name):
            raise UserError(Problem("--name", f"'{args.name}' is not a job name", "use letters, digits, '.', '_' and '-'"))
    check_gpu_type(args.gpu_type)
    from planner.schema.scenario import MAX_PRICE, MIN_PRICE

    if args.price is not None and not (MIN_PRICE <= args.price <= MAX_PRICE):
        raise UserError(Problem("--price", f"{args.price:g} $/GPU-hour is out of range", f"give a price in [{MIN_PRICE:g}, {MAX_PRICE:g}]"))
    command = "planner init " + " ".join(shlex.quote(a) for a in ["--from", args.framework, args.config]
                                         + (["--gpu-type", args.gpu_type] if args.gpu_type != "H100" else [])
                                         + (["--price", f"{args.price:g}"] if args.price is not None else []))
    import yaml

    def written(j) -> str:
        out = shape.scenario_text(j, gpu_type=args.gpu_type, price=args.price, command=command)
        load_scenario_data(yaml.safe_load(out), filename=f"the scenario written from {where}")
        return out

    try:
        text_out = written(job)
    except UserError as exc:
        sharded = _fully_sharded_fallback(job, exc, written)
        if sharded is None:
            raise UserError(_with_sources(exc.problems, job), title=f"{where}: the scenario written from it is not valid "
                                                                    f"(nothing written); each field names the {args.framework} "
                                                                    f"field it came from") from None
        job, text_out = sharded
    if args.out == "-":
        sys.stdout.write(text_out)
    else:
        from planner.safewrite import write_atomic

        write_atomic(args.out, text_out, where="--out")
        print(f"wrote {args.out}: scenario '{job.name}' from the {args.framework} config {where} "
              f"({job.rollout_nodes.value} rollout + {job.trainer_nodes.value} training node(s) of {args.gpu_type})")
    return 0


def _with_sources(problems, job) -> list:
    """``problems`` of the written scenario with the source config's field named beside each scenario
    field they mention (``jobs[0].rollout.tp (16: actor_rollout_ref.rollout.tensor_model_parallel_size)``;
    the fix's ``raise rollout.tp`` likewise): nothing is written, so the comments that would say where a
    value came from are not there to read."""
    import dataclasses
    import re

    fields = {"model": job.model, "algorithm": job.algorithm, "rollout.batch_prompts": job.batch_prompts,
              "rollout.group_size": job.group_size, "rollout.prompt_tokens": job.prompt_tokens,
              "rollout.max_response_tokens": job.max_response_tokens, "rollout.tp": job.rollout_tp,
              "rollout.nodes": job.rollout_nodes, "trainer.tp": job.trainer_tp, "trainer.pp": job.trainer_pp,
              "trainer.nodes": job.trainer_nodes}

    def source(key: str) -> str:
        v = fields[key]
        return f"{v.value}: " + "; ".join(x for x in (v.source, v.note) if x) if v.source or v.note else f"{v.value}"

    out = []
    for p in problems:
        m = re.fullmatch(r"(.*?jobs\[0\]\.)(model|algorithm|rollout\.\w+|trainer\.\w+)(.*)", p.where)
        where = f"{p.where} ({source(m.group(2))})" if m and m.group(2) in fields else p.where
        named = [k for k in re.findall(r"\b(?:rollout|trainer)\.(?:tp/pp|\w+)", p.fix) if k != (m.group(2) if m else "")]
        keys = [k for n in named for k in ((n.replace("tp/pp", "tp"), n.replace("tp/pp", "pp")) if "tp/pp" in n else (n,))]
        extra = "; ".join(f"{k} is {source(k)}" for k in dict.fromkeys(keys) if k in fields)
        fix = f"{p.fix.rstrip('.')} (in the {job.framework} config: {extra})" if extra else p.fix
        if job.offload and p.message.startswith(_STATE_TOO_BIG):
            fix += (f". The {job.framework} config sets {job.offload}: the job keeps that state in host memory, which "
                    f"the planner's memory model does not (it counts weights, gradients and Adam's state on the GPUs)")
        out.append(dataclasses.replace(p, where=where, fix=fix))
    return out


#: the message of the scenario check's training-memory problem (``planner.schema.checks``)
_STATE_TOO_BIG = "the training state does not fit any allowed trainer GPU"


def _fully_sharded_fallback(job, exc, written):
    """A trainer that shards its whole state over data parallelism (FSDP: the config names no tensor or
    pipeline parallelism) whose state does not fit one GPU in the planner's memory model, which shards
    only the optimizer state (ZeRO-1): ``(job, text)`` with ``trainer.tp`` the least power of two within
    a node at which it fits and the header saying so (per-GPU memory then modelled on the safe side,
    training time as tensor parallelism over the same GPUs); None where that does not apply or no
    ``tp`` helps. A standard FSDP config of a 14B model was refused naming fields of a scenario the
    user did not have yet."""
    import dataclasses

    from planner.errors import UserError
    from planner.onramp.shape import Value

    if job.trainer_tp.source or job.trainer_pp.source or job.trainer_tp.value != 1 or job.trainer_pp.value != 1:
        return None  # (Megatron: the config's own model parallelism stands)
    if not any(p.message.startswith(_STATE_TOO_BIG) for p in exc.problems):
        return None
    tp = 2
    while tp <= int(job.gpus_per_node.value):
        note = (f"the training state does not fit one GPU at tp=1 in the planner's memory model, which shards only the "
                f"optimizer state over data parallelism (ZeRO-1) where FSDP shards weights and gradients too: trainer.tp "
                f"is set to {tp}, the least that fits (memory per GPU on the safe side; the training time is modelled as "
                f"tensor parallelism over the same GPUs). Edit it if your job differs.")
        trial = dataclasses.replace(job, trainer_tp=Value(tp, "", f"FSDP stand-in: {tp}-way, see the header"),
                                    notes=list(job.notes) + [note])
        try:
            return trial, written(trial)
        except UserError as again:
            if not any(p.message.startswith(_STATE_TOO_BIG) for p in again.problems):
                return None  # (fits now, but something else is wrong: the original problems are the ones to show)
        tp *= 2
    return None


def check_gpu_type(gpu_type: str) -> None:
    """Refuse a ``--gpu-type`` outside the catalogue (the written scenario prices it without a
    ``base:``), with the message the scenario's check gives (``A100``, ``H100}``, ``[H100]``)."""
    from estimators import gpus
    from planner.errors import Problem, UserError, did_you_mean

    if gpus.canonical_name(gpu_type) is None or gpu_type != gpu_type.strip():
        catalogue = sorted(gpus.CATALOGUE)
        raise UserError(Problem("--gpu-type", f"unknown GPU type '{gpu_type}'.{did_you_mean(gpu_type, catalogue)}",
                                f"use one of {', '.join(catalogue)}"))
