"""The models a newcomer's verl or slime config names: Qwen3 dense presets (every slime example
script names a Qwen3 model; ``Qwen/Qwen3-8B`` was refused as neither a preset nor a local model),
and a training cluster's model path that this machine does not hold (``--hf-checkpoint
/root/Qwen2.5-3B-Instruct``, as slime's scripts write it) read as the preset its name gives."""

from __future__ import annotations

import pytest

from estimators import hfconfig, memory, models

#: Qwen3 config.json fields (hidden, layers, heads, kv heads, intermediate, tied), vocab 151936, head_dim 128
QWEN3 = {"qwen3-0.6b": (1024, 28, 16, 8, 3072, True), "qwen3-1.7b": (2048, 28, 16, 8, 6144, True),
         "qwen3-4b": (2560, 36, 32, 8, 9728, True), "qwen3-8b": (4096, 36, 32, 8, 12288, False),
         "qwen3-14b": (5120, 40, 40, 8, 17408, False), "qwen3-32b": (5120, 64, 64, 8, 25600, False)}
#: the model cards' parameter counts
PUBLISHED_B = {"qwen3-0.6b": 0.6, "qwen3-1.7b": 1.7, "qwen3-4b": 4.0, "qwen3-8b": 8.2, "qwen3-14b": 14.8, "qwen3-32b": 32.8}


@pytest.mark.parametrize("name", sorted(QWEN3))
def test_qwen3_presets_match_their_config_json_and_published_sizes(name):
    h, layers, heads, kv, inter, tied = QWEN3[name]
    cfg = {"model_type": "qwen3", "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": 151936, "head_dim": 128,
           "attention_bias": False, "tie_word_embeddings": tied}
    from_json = hfconfig.dims_from_config(cfg, name=name)
    preset = models.preset(name)
    assert preset.num_params == from_json.num_params
    assert memory.kv_bytes_per_token(preset) == memory.kv_bytes_per_token(from_json) == layers * kv * 128 * 2 * 2
    assert preset.num_params / 1e9 == pytest.approx(PUBLISHED_B[name], rel=0.03)


def test_hub_ids_of_qwen3_name_the_presets():
    assert models.preset_key("Qwen/Qwen3-8B") == "qwen3-8b"
    assert models.preset_key("Qwen/Qwen3-4B-Base") == "qwen3-4b"
    assert models.preset_key("Qwen/Qwen3-4B-Instruct-2507") == "qwen3-4b"
    assert models.preset_key("Qwen/Qwen3-30B-A3B") not in models.PRESETS  # a mixture of experts: not modelled


def test_a_model_path_this_machine_does_not_hold_is_read_as_the_preset_its_name_gives(tmp_path):
    from planner.errors import UserError
    from planner.onramp.shape import model_value

    missing = tmp_path / "cluster" / "Qwen2.5-3B-Instruct"
    v = model_value(str(missing), "--hf-checkpoint", "x.sh")
    assert v.value == "qwen2.5-3b" and "not on this machine" in v.note and v.source == "--hf-checkpoint"
    assert model_value(str(tmp_path / "Qwen3-8B") + "/", "--hf-checkpoint", "x.sh").value == "qwen3-8b"
    # a path whose name gives no preset is refused as before, naming the field
    with pytest.raises(UserError) as exc:
        model_value(str(tmp_path / "GLM-Z1-9B-0414"), "--hf-checkpoint", "x.sh")
    assert exc.value.problems[0].where == "--hf-checkpoint"
    # a directory that is there is read from its config.json, whatever its name
    there = tmp_path / "Qwen2.5-7B-Instruct"
    there.mkdir()
    (there / "config.json").write_text('{"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 2, '
                                       '"num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2048, '
                                       '"vocab_size": 1000}')
    assert model_value(str(there), "--hf-checkpoint", "x.sh").value == str(there)


def test_a_slime_script_with_a_cluster_path_and_a_qwen3_model_gives_a_valid_scenario(tmp_path):
    import yaml

    from planner.onramp import shape, slime
    from planner.schema.loader import load_scenario_data

    text = ("--hf-checkpoint /root/Qwen3-4B\n--rollout-batch-size 32\n--n-samples-per-prompt 8\n"
            "--rollout-max-response-len 8192\n--rollout-num-gpus-per-engine 2\n--tensor-model-parallel-size 2\n"
            "--actor-num-nodes 1\n--actor-num-gpus-per-node 8\n--colocate\n")
    job = slime.read(slime.load_args(text, "run.sh"), "run.sh")
    assert job.model.value == "qwen3-4b"
    out = shape.scenario_text(job, gpu_type="H100", price=None, command="planner init --from slime run.sh")
    sc = load_scenario_data(yaml.safe_load(out), filename="written")
    assert sc.jobs[0].model == "qwen3-4b"


def test_a_relative_model_directory_is_written_absolute(tmp_path, monkeypatch):
    """A scenario reads a relative model path from the directory it is run in: a scenario written
    from `--hf-checkpoint ./models/q` validated where it was written and failed from anywhere else
    ('models/q: cannot read it')."""
    from planner.onramp.shape import model_value

    (tmp_path / "models" / "q").mkdir(parents=True)
    (tmp_path / "models" / "q" / "config.json").write_text(
        '{"model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8, '
        '"num_key_value_heads": 8, "intermediate_size": 2048, "vocab_size": 1000}')
    monkeypatch.chdir(tmp_path)
    v = model_value("./models/q", "--hf-checkpoint", "run.sh")
    assert v.value == str(tmp_path / "models" / "q") and "./models/q from" in v.note
    monkeypatch.chdir("/")
    assert hfconfig.resolve(v.value).hidden_size == 1024  # read from anywhere


def test_slime_over_sampling_batch_is_the_rollout_batch():
    """slime samples prompts in rounds of --over-sampling-batch-size (DAPO-style dynamic sampling) until
    --rollout-batch-size pass its filter: the scenario took the smaller batch in silence."""
    from planner.onramp import slime

    text = ("--hf-checkpoint Qwen/Qwen3-4B --rollout-batch-size 32 --over-sampling-batch-size 64 "
            "--rollout-max-response-len 1024 --rollout-num-gpus 8")
    job = slime.read(slime.load_args(text, "run.sh"), "run.sh")
    assert job.batch_prompts.value == 64 and job.batch_prompts.source == "--over-sampling-batch-size"
    assert any("--over-sampling-batch-size 64" in n for n in job.notes)
    same = slime.read(slime.load_args(text.replace("64", "32"), "run.sh"), "run.sh")
    assert same.batch_prompts.value == 32 and same.batch_prompts.source == "--rollout-batch-size"
