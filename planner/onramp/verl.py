"""A verl job config (the Hydra YAML ``verl.trainer.main_ppo`` runs with) as a :class:`JobShape`.

Fields read (verl's ``ppo_trainer.yaml`` / ``ppo_megatron_trainer.yaml`` names):

==============================================  =============================================
verl field                                      scenario field
==============================================  =============================================
``actor_rollout_ref.model.path``                ``model`` (a hub id names a preset; a local
                                                directory gives its config.json)
``algorithm.adv_estimator``                     ``algorithm`` (``gae``: ppo; else grpo)
``data.train_batch_size``                       ``rollout.batch_prompts`` (``data.gen_batch_size``,
                                                the prompts generated per step, where larger)
``actor_rollout_ref.rollout.n``                 ``rollout.group_size`` (default 1)
``data.max_prompt_length``                      ``rollout.prompt_tokens`` (default 512)
``data.max_response_length``                    ``rollout.max_response_tokens``
``actor_rollout_ref.rollout.tensor_model_parallel_size``  ``rollout.tp`` (default 2, verl's)
``actor_rollout_ref.actor.megatron.tensor_model_parallel_size`` / ``pipeline_model_parallel_size``
                                                ``trainer.tp`` / ``trainer.pp`` (Megatron
                                                strategy; FSDP: 1 / 1)
``trainer.n_gpus_per_node``, ``trainer.nnodes``  the nodes (colocated: split between the phases)
``rollout.nnodes`` / ``rollout.n_gpus_per_node``  a separate rollout pool, if given (verl's
                                                one_step_off_policy and fully_async_policy
                                                recipes; also read as ``actor_rollout_ref.rollout.
                                                nnodes`` / ``n_gpus_per_node``)
==============================================  =============================================

``actor_rollout_ref.rollout.multi_turn`` is not read: with ``enable: true`` the header says so (the job
is written single-turn; ``turns`` and ``tools`` are set by hand).

``actor_rollout_ref.rollout.response_length``, where given, is the rollout's own generation limit
(verl's default is ``${oc.select:data.max_response_length,512}``) and is the one read.

Hydra interpolations of other fields (``${data.max_response_length}``, also of a null field) and
``${oc.select:field,default}`` are resolved; any other ``${...}`` (``oc.env``, relative ``${.x}``,
text around a reference) is refused naming the field where a field read above holds it, and left
as is elsewhere (a composed config, ``--cfg job``, holds dozens in fields this reader never reads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.errors import Problem, UserError
from planner.onramp.shape import JobShape, Value, get, model_value, need, positive_int, split_colocated

_REF = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")
_SELECT = re.compile(r"^\$\{oc\.select:\s*([A-Za-z0-9_.]+)\s*(?:,(.*))?\}$", re.S)
_MISSING = object()

#: verl's switches that keep the actor's optimizer state or weights in host memory between steps
OFFLOAD = ("actor_rollout_ref.actor.megatron.optimizer_offload", "actor_rollout_ref.actor.megatron.param_offload",
           "actor_rollout_ref.actor.fsdp_config.optimizer_offload", "actor_rollout_ref.actor.fsdp_config.param_offload")

#: the fields :func:`read` reads (an unresolvable ``${...}`` in one of them, or above it, is refused)
READ = ("actor_rollout_ref.model.path", "algorithm.adv_estimator", "data.train_batch_size", "data.gen_batch_size",
        "actor_rollout_ref.rollout.n",
        "data.max_response_length", "actor_rollout_ref.rollout.response_length", "data.max_prompt_length",
        "actor_rollout_ref.rollout.tensor_model_parallel_size", "actor_rollout_ref.actor.strategy",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", "trainer.n_gpus_per_node", "trainer.nnodes",
        "actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node", "rollout.nnodes", "rollout.n_gpus_per_node",
        "actor_rollout_ref.rollout.multi_turn.enable", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
        "trainer.experiment_name", *OFFLOAD)


@dataclass(frozen=True)
class Unresolved:
    """A ``${...}`` this reader cannot resolve, and the key that holds it: refused only if read."""

    text: str
    loc: str
    shell: bool = False  # a shell variable of a launch script (planner.onramp.hydra_args), not a ${...} of Hydra's


def _lookup(root: Any, dotted: str) -> Any:
    """The value at ``dotted`` (``None`` where the field is null), or ``_MISSING``."""
    cur = root
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


_MAX_DEPTH = 32  # a chain of references longer than this is refused (real configs use a few)


def resolve(cfg: Any, root: dict, where: str, path: str = "") -> Any:
    """Resolve ``${a.b}`` references to other fields (Hydra's interpolation of plain field paths).

    A reference back into a key being resolved (``a: ${a}``; ``a: ${b}`` with ``b: ${a}``; ``a:
    {x: ${a}}``) or a chain of more than ``_MAX_DEPTH`` references is refused naming the key and
    the cycle. Each referenced key is resolved once (so repeated references cannot blow up).
    """
    return _resolve(cfg, root, where, path, (), {})


def _resolve(cfg: Any, root: dict, where: str, loc: str, stack: tuple[str, ...], done: dict[str, Any]) -> Any:
    # loc: where cfg sits in root; stack: the keys whose ${...} are being followed.
    if isinstance(cfg, dict):
        return {k: _resolve(v, root, where, f"{loc}.{k}" if loc else str(k), stack, done) for k, v in cfg.items()}
    if isinstance(cfg, list):
        return [_resolve(v, root, where, f"{loc}[{i}]", stack, done) for i, v in enumerate(cfg)]
    if not (isinstance(cfg, str) and "${" in cfg):
        return cfg
    title = f"{where}: cannot write a scenario"
    m = _REF.match(cfg.strip()) or _SELECT.match(cfg.strip())
    if not m:
        return Unresolved(cfg, loc)
    ref = m.group(1)
    if _lookup(root, ref) in (_MISSING, None) and m.re is _SELECT:  # oc.select's default
        return _select_default(m.group(2) or "", cfg, loc)
    if _lookup(root, ref) is _MISSING:
        return Unresolved(cfg, loc)
    if ref in done:
        return done[ref]
    stack = (*stack, loc)
    back = [i for i, s in enumerate(stack) if s == ref or s.startswith(ref + ".") or s.startswith(ref + "[")]
    if back:  # ref is (or holds) a key whose reference is being followed: a cycle
        raise UserError(Problem(loc, f"'{cfg}' leads back to itself (interpolation cycle: {' -> '.join((*stack[back[0]:], ref))})",
                                "write the value itself in the config for one of these keys"), title=title)
    if len(stack) > _MAX_DEPTH:
        raise UserError(Problem(loc, f"'{cfg}' is a chain of more than {_MAX_DEPTH} interpolations "
                                f"({stack[0]} -> ... -> {ref})", "write the value itself in the config"), title=title)
    done[ref] = value = _resolve(get(root, ref), root, where, ref, stack, done)
    return value


def _select_default(text: str, cfg: str, loc: str) -> Any:
    """``${oc.select:field,DEFAULT}``'s DEFAULT as OmegaConf reads it, for a scalar (``512``, ``false``,
    ``null``, ``'~/models/x'``) or an empty ``[]`` / ``{}``; anything else (a collection, which could hold
    YAML anchors and aliases this bounded reader would not see, or another ``${...}``) is :class:`Unresolved`."""
    text = text.strip()
    if text in ("[]", "{}"):
        return [] if text == "[]" else {}
    if not text:
        return None
    if len(text) > 1000 or text[0] in "[{&*!|>%@`" or "${" in text:
        return Unresolved(cfg, loc)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return Unresolved(cfg, loc)
    return value if value is None or isinstance(value, (str, int, float, bool)) else Unresolved(cfg, loc)


def read(cfg: dict, where: str, name: str = "") -> JobShape:
    if not isinstance(cfg, dict):
        raise UserError(Problem("", "a verl config is a YAML mapping (data, actor_rollout_ref, trainer, ...) or a launch "
                                    "script of key=value overrides (data.train_batch_size=256 ...), and this is neither",
                                "pass the YAML config, the composed one (python -m verl.trainer.main_ppo ... --cfg job) "
                                "or the launch script"),
                        title=f"{where}: cannot write a scenario")
    cfg = resolve(cfg, cfg, where)
    _refuse_unresolved(cfg, where)
    fw = "verl"
    path = str(need(cfg, "actor_rollout_ref.model.path", where, fw, "the model's hub id or local directory"))
    est = str(get(cfg, "algorithm.adv_estimator", "gae"))
    algo = Value("ppo" if est == "gae" else "grpo", "algorithm.adv_estimator" if get(cfg, "algorithm.adv_estimator") else "",
                 f"{est}" if get(cfg, "algorithm.adv_estimator") else "verl's default gae (PPO with a critic)")
    batch = positive_int(need(cfg, "data.train_batch_size", where, fw), "data.train_batch_size", where)
    batch_v = Value(batch, "data.train_batch_size")
    gen = get(cfg, "data.gen_batch_size")  # the prompts generated per step (verl's dataloader batch; DAPO's dynamic sampling)
    if gen is not None and positive_int(gen, "data.gen_batch_size", where) > batch:  # (1: the fully async recipe's streaming)
        gen = positive_int(gen, "data.gen_batch_size", where)
        batch_v = Value(gen, "data.gen_batch_size", f"prompts generated per step; data.train_batch_size is {batch}")
    n = positive_int(get(cfg, "actor_rollout_ref.rollout.n", 1), "actor_rollout_ref.rollout.n", where)
    data_resp = get(cfg, "data.max_response_length")
    rollout_resp = get(cfg, "actor_rollout_ref.rollout.response_length")  # what verl's rollout generates up to
    if rollout_resp is not None and rollout_resp != data_resp:
        resp_src = "actor_rollout_ref.rollout.response_length"
        resp = positive_int(rollout_resp, resp_src, where)
        resp_note = "the rollout's generation limit" + (f" (data.max_response_length is {data_resp})" if data_resp is not None else "")
    else:
        resp_src, resp_note = "data.max_response_length", ""
        resp = positive_int(need(cfg, resp_src, where, fw), resp_src, where)
    prompt = positive_int(get(cfg, "data.max_prompt_length", 512), "data.max_prompt_length", where)
    rtp = positive_int(get(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size", 2),
                       "actor_rollout_ref.rollout.tensor_model_parallel_size", where)
    strategy = str(get(cfg, "actor_rollout_ref.actor.strategy", "fsdp"))
    if strategy == "megatron":
        ttp = positive_int(get(cfg, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size", 1),
                           "actor_rollout_ref.actor.megatron.tensor_model_parallel_size", where)
        tpp = positive_int(get(cfg, "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", 1),
                           "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", where)
        tsrc = ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
                "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size")
    else:
        ttp, tpp, tsrc = 1, 1, ("", "")
    gpn = positive_int(need(cfg, "trainer.n_gpus_per_node", where, fw), "trainer.n_gpus_per_node", where)
    nnodes = positive_int(need(cfg, "trainer.nnodes", where, fw), "trainer.nnodes", where)
    notes = []
    # a separate rollout pool: top-level rollout.* in verl's one_step_off_policy and fully_async_policy recipes
    pool = next((p for p in ("rollout", "actor_rollout_ref.rollout") if get(cfg, f"{p}.nnodes") is not None), None)
    if pool is not None:
        rn = positive_int(get(cfg, f"{pool}.nnodes"), f"{pool}.nnodes", where)
        rgpn = positive_int(get(cfg, f"{pool}.n_gpus_per_node", gpn), f"{pool}.n_gpus_per_node", where)
        if rgpn != gpn:
            raise UserError(Problem(f"{pool}.n_gpus_per_node", f"{rgpn} GPUs per rollout node but {gpn} per "
                                    f"training node (trainer.n_gpus_per_node)", "write the scenario's node groups by hand "
                                    "for mixed node shapes"), title=f"{where}: cannot write a scenario")
        rollout_nodes, trainer_nodes, colocated = (Value(rn, f"{pool}.nnodes"), Value(nnodes, "trainer.nnodes"), False)
    else:
        rollout_nodes, trainer_nodes, note = split_colocated(nnodes, "trainer.nnodes", gpus_per_node=gpn,
                                                             trainer_mp=ttp * tpp, rollout_tp=rtp)
        notes.append(note)
        colocated = True
    if strategy != "megatron":
        notes.append(f"actor strategy {strategy}: no tensor or pipeline parallelism in the config (FSDP shards over data parallelism).")
    if batch_v.source == "data.gen_batch_size":
        notes.append(f"data.gen_batch_size {batch_v.value} prompts are generated per step (verl's dataloader batch) and "
                     f"data.train_batch_size {batch} train: rollout.batch_prompts is {batch_v.value}, so the training phase "
                     f"is modelled on all of them (on the safe side); a dynamic-sampling step that needs more than one "
                     f"generation batch takes longer than planned.")
    if get(cfg, "actor_rollout_ref.rollout.multi_turn.enable") is True:  # read nowhere else: say so, never drop it silently
        most = get(cfg, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns")
        notes.append("actor_rollout_ref.rollout.multi_turn.enable is true but multi-turn settings are not read: the job below "
                     "is single-turn. Set rollout.turns" + (f" (max_assistant_turns: {most})" if most is not None else "")
                     + " and rollout.tools (tool latency, observation tokens) by hand (docs/workloads.md).")
    return JobShape(
        framework=fw, config_path=where, name=name or _name(cfg, where), model=model_value(path, "actor_rollout_ref.model.path", where),
        algorithm=algo, batch_prompts=batch_v,
        group_size=Value(n, "actor_rollout_ref.rollout.n" if get(cfg, "actor_rollout_ref.rollout.n") else "", "" if get(
            cfg, "actor_rollout_ref.rollout.n") else "verl's default 1"),
        max_response_tokens=Value(resp, resp_src, resp_note),
        prompt_tokens=Value(prompt, "data.max_prompt_length" if get(cfg, "data.max_prompt_length") else "", "" if get(
            cfg, "data.max_prompt_length") else "verl's default 512"),
        rollout_tp=Value(rtp, "actor_rollout_ref.rollout.tensor_model_parallel_size"),
        trainer_tp=Value(ttp, tsrc[0], "" if tsrc[0] else f"{strategy}: no tensor parallelism"),
        trainer_pp=Value(tpp, tsrc[1], "" if tsrc[1] else f"{strategy}: no pipeline stages"),
        gpus_per_node=Value(gpn, "trainer.n_gpus_per_node"), rollout_nodes=rollout_nodes, trainer_nodes=trainer_nodes,
        colocated=colocated, notes=notes, offload=next((f for f in OFFLOAD if get(cfg, f) is True), ""))



def _refuse_unresolved(cfg: dict, where: str) -> None:
    """A UserError naming the first field read that holds (or sits below) a ``${...}`` left unresolved."""
    for dotted in READ:
        cur: Any = cfg
        for part in dotted.split("."):
            if isinstance(cur, Unresolved):
                break
            if not isinstance(cur, dict) or part not in cur:
                cur = None
                break
            cur = cur[part]
        if isinstance(cur, Unresolved):
            via = f" (through {cur.loc})" if cur.loc != dotted else ""
            if cur.shell:
                raise UserError(Problem(dotted, f"'{cur.text}' is a shell variable this reader cannot expand",
                                        f"write the value of {dotted} itself in {where}"), title=f"{where}: cannot write a scenario")
            raise UserError(Problem(dotted, f"'{cur.text}' is a Hydra interpolation this reader cannot resolve{via}",
                                    "write the value itself in the config (or pass the resolved config: "
                                    "python -m verl.trainer.main_ppo ... --cfg job --resolve)"),
                            title=f"{where}: cannot write a scenario")


def _name(cfg: dict, where: str) -> str:
    raw = str(get(cfg, "trainer.experiment_name") or Path(where).stem)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-._") or "verl-job"
    return name if name[0].isalnum() else f"j{name}"
