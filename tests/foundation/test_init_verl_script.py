"""planner init --from verl on a launch script: verl's examples configure a job as Hydra overrides
on the command line (python3 -m verl.trainer.main_ppo data.train_batch_size=1024 ...), not as a
YAML file. Such a script was refused as "a verl config is a YAML mapping", with no fix."""

from __future__ import annotations


import pytest
import yaml

from planner.errors import UserError
from planner.onramp import hydra_args, verl
from tests.conftest import ROOT, run_cli

SCRIPT = r"""#!/bin/bash
set -x
export CUDA_DEVICE_MAX_CONNECTIONS=1  # not an override
train_path=$HOME/data/gsm8k/train.parquet

python3 -m verl.trainer.main_ppo --config-path=config \
    --config-name='ppo_megatron_trainer.yaml'\
    algorithm.adv_estimator=grpo \
    data.train_files="$train_path" \
    data.train_batch_size=512 \
    data.max_prompt_length=1024 \
    data.max_response_length=3072 \
    actor_rollout_ref.model.path=$HOME/models/Qwen2.5-7B-Instruct \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=4 \
    actor_rollout_ref.rollout.n=5 \
    +actor_rollout_ref.rollout.extra=1 \
    trainer.logger='["console","wandb"]' \
    trainer.experiment_name='qwen2_7b_megatron' \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=2 $@
"""


def _job(text: str):
    return verl.read(hydra_args.load(text, "run.sh"), "run.sh")


def test_a_launch_scripts_overrides_are_read():
    assert hydra_args.looks_like_overrides(SCRIPT)
    job = _job(SCRIPT)
    assert (job.batch_prompts.value, job.group_size.value, job.max_response_tokens.value, job.prompt_tokens.value) == (512, 5, 3072,
                                                                                                                      1024)
    assert job.model.value == "qwen2.5-7b" and job.rollout_tp.value == 4
    # --config-name ppo_megatron_trainer: the Megatron strategy, so the trainer's tp and pp are the script's
    assert (job.trainer_tp.value, job.trainer_pp.value) == (2, 2)
    assert job.name == "qwen2_7b_megatron" and job.algorithm.value == "grpo"
    fsdp = _job(SCRIPT.replace("--config-name='ppo_megatron_trainer.yaml'\\", ""))
    assert (fsdp.trainer_tp.value, fsdp.trainer_pp.value) == (1, 1)


def test_a_shell_variable_in_a_field_read_is_refused_naming_it():
    for var in ("$bs", "${bs}"):
        with pytest.raises(UserError) as exc:
            _job(SCRIPT.replace("data.train_batch_size=512", f"data.train_batch_size={var}"))
        p = exc.value.problems[0]
        assert p.where == "data.train_batch_size" and "shell variable" in p.message
    _job(SCRIPT.replace("data.train_files=\"$train_path\"", "data.train_files=$train_path"))  # not read: no matter


def test_a_key_given_twice_or_a_control_character_is_refused():
    with pytest.raises(UserError) as exc:
        _job(SCRIPT + "\npython3 -m verl.trainer.main_ppo data.train_batch_size=256\n")
    assert exc.value.problems[0].where == "data.train_batch_size" and "twice" in exc.value.problems[0].message
    with pytest.raises(UserError) as exc:
        _job(SCRIPT.replace("'qwen2_7b_megatron'", "'q\x1b[2J'"))
    assert exc.value.problems[0].where == "trainer.experiment_name"
    with pytest.raises(UserError):
        _job(SCRIPT + "\ntrainer.nnodes.x=1\n")  # a value and fields below it


def test_the_cli_reads_a_script_and_still_reads_yaml(tmp_path):
    src, out = tmp_path / "run.sh", tmp_path / "s.yaml"
    src.write_text(SCRIPT)
    p = run_cli("init", "--from", "verl", str(src), "-o", str(out), cwd=ROOT)
    assert p.returncode == 0, p.stderr
    job = yaml.safe_load(out.read_text())["jobs"][0]
    assert (job["rollout"]["batch_prompts"], job["trainer"]["tp"], job["trainer"]["pp"]) == (512, 2, 2)
    ex = run_cli("init", "--from", "verl", str(ROOT / "examples" / "onramp" / "verl-grpo-qwen2.5-7b.yaml"), cwd=ROOT)
    assert ex.returncode == 0 and "batch_prompts: 256" in ex.stdout, ex.stderr


def test_hydras_own_overrides_yaml_is_read():
    """A Hydra run writes its command line's overrides to .hydra/overrides.yaml, a YAML list of 'key=value'."""
    text = ("- algorithm.adv_estimator=grpo\n- data.train_batch_size=64\n- data.max_response_length=2048\n"
            "- actor_rollout_ref.model.path=Qwen/Qwen3-8B\n- actor_rollout_ref.rollout.n=16\n"
            "- trainer.n_gpus_per_node=8\n- trainer.nnodes=2\n- trainer.experiment_name=q3\n")
    job = _job(text)
    assert (job.model.value, job.batch_prompts.value, job.group_size.value, job.name) == ("qwen3-8b", 64, 16, "q3")


def test_a_file_that_is_neither_says_what_to_pass(tmp_path):
    src = tmp_path / "notes.txt"
    src.write_text("hello world\n")
    p = run_cli("init", "--from", "verl", str(src), cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "launch script" in p.stderr and "Fix:" in p.stderr
