"""planner init --from verl on a composed verl config (what ``python -m verl.trainer.main_ppo ...
--cfg job`` prints, and what verl ships as ``_generated_ppo_trainer.yaml``): dozens of fields the
reader never reads hold ``${oc.select:...}``, relative ``${.x}``, references to null fields and
text around references. Such a config was refused naming the first of them
(``actor_rollout_ref.actor.rollout_n: '${oc.select:...}' ... cannot resolve``), with a fix that told
the user to pass the composed config they had just passed."""

from __future__ import annotations


import yaml

from tests.conftest import ROOT, run_cli

# the layout of verl's composed ppo_trainer config, cut down to a few fields of each kind
COMPOSED = """\
data:
  train_batch_size: 128
  max_prompt_length: 1024
  max_response_length: 2048
actor_rollout_ref:
  hybrid_engine: true
  model:
    path: Qwen/Qwen2.5-7B-Instruct
    external_lib: null
  actor:
    strategy: fsdp
    rollout_n: ${oc.select:actor_rollout_ref.rollout.n,1}
    ppo_mini_batch_size: 64
    checkpoint:
      save_contents: [model, optimizer]
      load_contents: ${.save_contents}
    profiler:
      ranks: ${oc.select:actor_rollout_ref.actor.profiler.nothing,[]}
  rollout:
    name: vllm
    n: 8
    tensor_model_parallel_size: 2
    prompt_length: ${oc.select:data.max_prompt_length,512}
    response_length: ${oc.select:data.max_response_length,512}
critic:
  model:
    external_lib: ${actor_rollout_ref.model.external_lib}
  ppo_mini_batch_size: ${oc.select:actor_rollout_ref.actor.ppo_mini_batch_size,256}
ray_kwargs:
  ray_init:
    timeline_json_file: ${oc.env:RAY_TIMELINE,null}
trainer:
  project_name: verl_examples
  experiment_name: gsm8k
  default_local_dir: checkpoints/${trainer.project_name}/${trainer.experiment_name}
  n_gpus_per_node: 8
  nnodes: 2
"""


def _read(text: str):
    from planner.onramp.verl import read

    return read(yaml.safe_load(text), "composed.yaml")


def test_a_composed_config_is_read_and_its_unread_interpolations_left_alone():
    job = _read(COMPOSED)
    assert (job.batch_prompts.value, job.group_size.value, job.prompt_tokens.value) == (128, 8, 1024)
    assert job.max_response_tokens.value == 2048 and job.max_response_tokens.source == "data.max_response_length"
    assert (job.rollout_tp.value, job.gpus_per_node.value) == (2, 8)
    assert job.rollout_nodes.value + job.trainer_nodes.value == 2


def test_the_rollouts_own_response_length_is_the_one_read():
    """verl's rollout generates up to actor_rollout_ref.rollout.response_length; an override of it
    was dropped in silence (the scenario took data.max_response_length)."""
    job = _read(COMPOSED.replace("response_length: ${oc.select:data.max_response_length,512}", "response_length: 8192"))
    assert job.max_response_tokens.value == 8192
    assert job.max_response_tokens.source == "actor_rollout_ref.rollout.response_length"
    assert "2048" in job.max_response_tokens.note
    # oc.select's default where the field is absent (verl's 512)
    job = _read(COMPOSED.replace("  max_response_length: 2048\n", ""))
    assert job.max_response_tokens.value == 512


def test_an_unresolvable_interpolation_in_a_field_read_is_still_refused_naming_it():
    import pytest

    from planner.errors import UserError

    # an unresolvable mapping above the fields read names the field and where the ${...} sits
    with pytest.raises(UserError) as exc:
        _read(COMPOSED.replace("rollout:\n    name: vllm", "rollout: ${oc.env:R}\n  rollout_old:\n    name: vllm"))
    assert "through actor_rollout_ref.rollout)" in exc.value.problems[0].message
    for field, text in [("actor_rollout_ref.rollout.n", COMPOSED.replace("n: 8", "n: ${oc.env:N}")),
                        ("data.train_batch_size", COMPOSED.replace("train_batch_size: 128", "train_batch_size: ${.x}")),
                        ("actor_rollout_ref.rollout.n",  # a mapping above the fields read
                         COMPOSED.replace("rollout:\n    name: vllm", "rollout: ${oc.env:R}\n  rollout_old:\n    name: vllm"))]:
        with pytest.raises(UserError) as exc:
            _read(text)
        assert exc.value.problems[0].where == field, (field, exc.value.problems)
        assert "cannot resolve" in exc.value.problems[0].message


def test_the_cli_writes_a_valid_scenario_from_a_composed_config(tmp_path):
    src, out = tmp_path / "composed.yaml", tmp_path / "s.yaml"
    src.write_text(COMPOSED)
    p = run_cli("init", "--from", "verl", str(src), "-o", str(out), cwd=ROOT)
    assert p.returncode == 0, p.stderr
    v = run_cli("validate", str(out), cwd=ROOT)
    assert v.returncode == 0, v.stderr
    assert yaml.safe_load(out.read_text())["jobs"][0]["rollout"]["batch_prompts"] == 128


def test_dapo_gen_batch_size_is_the_rollout_batch():
    """verl generates data.gen_batch_size prompts per step where it is set (its dataloader batch; DAPO's
    dynamic sampling sets it to a few times data.train_batch_size): the scenario took train_batch_size,
    a rollout a third or a quarter of the real one, in silence."""
    dapo = COMPOSED.replace("  train_batch_size: 128\n", "  train_batch_size: 128\n  gen_batch_size: 384\n")
    job = _read(dapo)
    assert job.batch_prompts.value == 384 and job.batch_prompts.source == "data.gen_batch_size"
    assert any("data.gen_batch_size 384" in n and "data.train_batch_size 128" in n for n in job.notes)
    # the fully async recipe's gen_batch_size 1 (streaming) leaves the batch alone
    job = _read(COMPOSED.replace("  train_batch_size: 128\n", "  train_batch_size: 128\n  gen_batch_size: 1\n"))
    assert job.batch_prompts.value == 128 and job.batch_prompts.source == "data.train_batch_size"


def test_a_refused_scenario_names_the_source_fields_not_only_the_scenarios(tmp_path):
    """Nothing is written when the scenario is not valid, so the comments that say where each value
    came from are not there: the message said "the fields below come from the verl config as the
    comments say" and named only scenario fields (jobs[0].rollout.tp, 'raise trainer.tp/pp')."""
    src = tmp_path / "big.yaml"
    src.write_text(COMPOSED.replace("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-72B-Instruct")
                   .replace("tensor_model_parallel_size: 2", "tensor_model_parallel_size: 16"))
    out = tmp_path / "s.yaml"
    p = run_cli("init", "--from", "verl", str(src), "-o", str(out), cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "as the comments say" not in p.stderr
    assert "jobs[0].rollout.tp (16: actor_rollout_ref.rollout.tensor_model_parallel_size)" in p.stderr, p.stderr
    assert not out.exists()


def test_fix_texts_name_the_source_field_of_each_scenario_field_they_mention():
    from planner.commands.init import _with_sources
    from planner.errors import Problem

    job = _read(COMPOSED)
    [p] = _with_sources([Problem("the scenario written from x: jobs[0].model", "the training state does not fit",
                                 "raise trainer.tp/pp or trainer.nodes, or allow a GPU with more memory")], job)
    assert p.where.startswith("the scenario written from x: jobs[0].model (qwen2.5-7b: actor_rollout_ref.model.path")
    assert "trainer.nodes is 1: trainer.nnodes" in p.fix and "trainer.tp is 1" in p.fix and "trainer.pp is 1" in p.fix
    [q] = _with_sources([Problem("cluster.node_groups[0]", "bad", "fix it")], job)  # not a job field: as it was
    assert (q.where, q.fix) == ("cluster.node_groups[0]", "fix it")


def test_optimizer_offload_is_named_beside_a_training_memory_refusal_and_in_the_header():
    """slime's --optimizer-cpu-offload and verl's *_offload keep state in host memory, which the planner's
    memory model does not: slime's own Qwen3-32B script (8 GPUs, tp 8, the optimizer offloaded) was
    refused as 'does not fit' without a word about why the job runs upstream."""
    from planner.commands.init import _with_sources
    from planner.errors import Problem
    from planner.onramp import shape, slime

    args = ("--hf-checkpoint Qwen/Qwen2.5-32B-Instruct --rollout-batch-size 8 --rollout-max-response-len 1024 "
            "--tensor-model-parallel-size 8 --actor-num-nodes 1 --colocate --optimizer-cpu-offload")
    job = slime.read(slime.load_args(args, "run.sh"), "run.sh")
    assert job.offload == "--optimizer-cpu-offload"
    [p] = _with_sources([Problem("jobs[0].model", "the training state does not fit any allowed trainer GPU at tp=8",
                                 "raise trainer.tp/pp or trainer.nodes")], job)
    assert "sets --optimizer-cpu-offload" in p.fix and "host memory" in p.fix
    text = shape.scenario_text(job, gpu_type="H100", price=None, command="planner init")
    assert "# --optimizer-cpu-offload is set" in text
    assert slime.read(slime.load_args(args.replace(" --optimizer-cpu-offload", ""), "run.sh"), "run.sh").offload == ""
    job = _read(COMPOSED.replace("    strategy: fsdp\n", "    strategy: fsdp\n    fsdp_config: {optimizer_offload: true}\n"))
    assert job.offload == "actor_rollout_ref.actor.fsdp_config.optimizer_offload"
    assert _read(COMPOSED).offload == ""


def test_the_disaggregated_recipes_rollout_pool_is_read():
    """verl's one_step_off_policy and fully_async_policy recipes name their rollout pool as top-level
    rollout.nnodes / rollout.n_gpus_per_node (trainer.nnodes is then the training pool alone); the
    reader looked only under actor_rollout_ref.rollout, so such a job was written colocated: its
    training nodes split between the phases and the whole rollout pool dropped, in silence."""
    async_cfg = COMPOSED + "rollout:\n  nnodes: 3\n  n_gpus_per_node: 8\n  total_rollout_steps: 100\n"
    job = _read(async_cfg)
    assert (job.rollout_nodes.value, job.trainer_nodes.value, job.colocated) == (3, 2, False)
    assert job.rollout_nodes.source == "rollout.nnodes"
    from planner.errors import UserError

    import pytest

    with pytest.raises(UserError) as exc:
        _read(async_cfg.replace("  n_gpus_per_node: 8\n  total", "  n_gpus_per_node: 4\n  total"))
    assert exc.value.problems[0].where == "rollout.n_gpus_per_node"


def test_oc_select_defaults_are_scalars_only():
    """An oc.select default is read as YAML; a collection there could hold anchors and aliases (a
    billion-laughs string for the job's name) outside the bounded reader: only scalars are taken."""
    from planner.onramp.verl import Unresolved, _select_default

    assert _select_default(" 512", "c", "l") == 512 and _select_default("false", "c", "l") is False
    assert _select_default("null", "c", "l") is None and _select_default('"~/models/x"', "c", "l") == "~/models/x"
    assert _select_default("[]", "c", "l") == [] and _select_default("", "c", "l") is None
    bomb = "[&a [x,x,x,x,x,x,x,x,x], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]]"
    for text in (bomb, "{a: 1}", "${data.x}", "*a", "x: [1"):
        assert isinstance(_select_default(text, "c", "l"), Unresolved), text
    import pytest

    from planner.errors import UserError

    with pytest.raises(UserError) as exc:  # refused naming the field, not expanded
        _read(COMPOSED.replace("experiment_name: gsm8k", "experiment_name: ${oc.select:nothing," + bomb + "}"))
    assert exc.value.problems[0].where == "trainer.experiment_name"
