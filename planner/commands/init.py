"""planner init --from verl|slime CONFIG: write a commented scenario from an RL framework's job config."""

from __future__ import annotations

NAME = "init"
HELP = "write a commented scenario from a verl or slime job config (GPU counts, TP/PP, batch, group size, lengths, model)"
DESCRIPTION = """Write a scenario from an RL framework's own job config.

  --from verl    a verl Hydra YAML config (data.*, actor_rollout_ref.*, trainer.n_gpus_per_node,
                 trainer.nnodes, algorithm.adv_estimator); pass the composed config
                 (python -m verl.trainer.main_ppo ... --cfg job) or your override file
  --from slime   slime's arguments: a shell-style argument file (--rollout-batch-size 32 ...,
                 as in slime's example scripts) or a YAML mapping of them

Each value of the written scenario carries a comment naming the source field. Neither framework
names a GPU type or a price: --gpu-type (default H100) and --price (default 1 $/GPU-hour, a
placeholder: costs then read as GPU-hours). A model path that is a hub id names a preset
(Qwen/Qwen2.5-7B-Instruct -> qwen2.5-7b); a local model directory is read from its config.json.
The scenario is validated before it is written (nothing is written on a problem; exit 2 naming
the field). docs/integration.md has the verl and slime recipes."""


def add_arguments(p) -> None:
    from planner.commands import _args

    p.add_argument("config", type=_args.path, metavar="CONFIG", help="the framework's job config file")
    p.add_argument("--from", dest="framework", choices=("verl", "slime"), required=True, help="the framework that wrote CONFIG")
    p.add_argument("--out", "-o", type=_args.path, default="-", help="where to write the scenario (default: standard output)")
    p.add_argument("--gpu-type", default="H100", help="the GPU type of the nodes (a catalogue type; default H100)")
    p.add_argument("--price", type=float, default=None, help="$ per GPU-hour (default: 1, a placeholder)")
    p.add_argument("--name", default="", help="the scenario's and the job's name (default: the experiment's)")


def run(args) -> int:
    import shlex
    import sys

    from planner.errors import Problem, UserError
    from planner.onramp import shape
    from planner.safeload import read_text
    from planner.schema.loader import load_scenario_data

    if args.out != "-":  # an output it cannot write is refused before the config is read
        from planner.commands._args import check_outputs

        check_outputs(args, "out")
    where = args.config
    text = read_text(args.config, what="job config", where="CONFIG")
    if args.framework == "verl":
        from planner.onramp import verl
        from planner.safeload import check_text, parse

        doc = parse(text, args.config)
        check_text(doc)  # no control characters (ESC, NUL) in what the scenario's comments will echo
        job = verl.read(doc.data, where, args.name)
    else:
        from planner.onramp import slime

        job = slime.read(slime.load_args(text, where), where, args.name)
    if args.name:
        import re

        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.name):
            raise UserError(Problem("--name", f"'{args.name}' is not a job name", "use letters, digits, '.', '_' and '-'"))
    check_gpu_type(args.gpu_type)
    if args.price is not None and not (1e-6 <= args.price <= 1e4):  # the scenario schema's MIN_PRICE and MAX_PRICE
        raise UserError(Problem("--price", f"{args.price:g} $/GPU-hour is out of range", "give a price in [1e-06, 10000]"))
    command = "planner init " + " ".join(shlex.quote(a) for a in ["--from", args.framework, args.config]
                                         + (["--gpu-type", args.gpu_type] if args.gpu_type != "H100" else [])
                                         + (["--price", f"{args.price:g}"] if args.price is not None else []))
    text_out = shape.scenario_text(job, gpu_type=args.gpu_type, price=args.price, command=command)
    import yaml

    try:
        load_scenario_data(yaml.safe_load(text_out), filename=f"the scenario written from {where}")
    except UserError as exc:
        raise UserError(exc.problems, title=f"{where}: the scenario written from it is not valid (nothing written); the "
                                            f"fields below come from the {args.framework} config as the comments say") from None
    if args.out == "-":
        sys.stdout.write(text_out)
    else:
        from planner.safewrite import write_atomic

        write_atomic(args.out, text_out, where="--out")
        print(f"wrote {args.out}: scenario '{job.name}' from the {args.framework} config {where} "
              f"({job.rollout_nodes.value} rollout + {job.trainer_nodes.value} training node(s) of {args.gpu_type})")
    return 0


def check_gpu_type(gpu_type: str) -> None:
    """Refuse a ``--gpu-type`` outside the catalogue (the written scenario prices it without a
    ``base:``), with the message the scenario's check gives (``A100``, ``H100}``, ``[H100]``)."""
    from estimators import gpus
    from planner.errors import Problem, UserError, did_you_mean

    if gpus.canonical_name(gpu_type) is None or gpu_type != gpu_type.strip():
        catalogue = sorted(gpus.CATALOGUE)
        raise UserError(Problem("--gpu-type", f"unknown GPU type '{gpu_type}'.{did_you_mean(gpu_type, catalogue)}",
                                f"use one of {', '.join(catalogue)}"))
