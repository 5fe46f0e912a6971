"""Model dimensions from Hugging Face config.json files (estimators.hfconfig).

The fixtures under ``hf_configs/`` mirror the shipped config.json of each model (every field of
the published file). Their memory figures must match the matching preset within 2%, and their
parameter counts the model cards' published totals within 2% (an oracle independent of the
presets)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from estimators import hfconfig, memory, models
from tests.conftest import SCENARIOS, run_cli

HERE = Path(__file__).parent / "hf_configs"
# hub id -> the model card's published parameter count
CASES = {"Qwen/Qwen2.5-7B-Instruct": 7.61e9, "Qwen/Qwen2.5-3B-Instruct": 3.09e9, "Qwen/Qwen2.5-0.5B-Instruct": 0.49e9,
         "meta-llama/Llama-3.1-8B-Instruct": 8.03e9}


def _figures(m: models.ModelDims) -> dict[str, float]:
    return {"params": m.num_params, "training_state": memory.training_state(m).total_bytes,
            "train_per_gpu_tp2_dp4": memory.training_bytes_per_gpu(m, 2, 1, 4),
            "kv_per_token": memory.kv_bytes_per_token(m), "infer_weights_tp2": memory.inference_weight_bytes_per_gpu(m, 2),
            "kv_tokens_80gb": memory.kv_capacity_tokens(m, 80.0, 1), "dram_rollout": memory.host_dram_rollout_node_gb(m),
            "dram_train_2": memory.host_dram_train_node_gb(m, 2), "flops": m.flops_per_token_forward()}


@pytest.mark.parametrize("hub_id", sorted(CASES))
def test_config_json_gives_the_presets_memory_figures(hub_id):
    got = hfconfig.load(HERE / hub_id.split("/")[1])
    want = models.preset(hub_id)  # the hub id names the preset
    g, w = _figures(got), _figures(want)
    for k in w:
        assert g[k] == pytest.approx(w[k], rel=0.02), (hub_id, k)
    assert got.num_params == pytest.approx(CASES[hub_id], rel=0.02)
    assert (got.num_layers, got.num_heads, got.num_kv_heads, got.hd) == (want.num_layers, want.num_heads, want.num_kv_heads, want.hd)


def test_defaults_follow_the_model_class(tmp_path):
    cfg = json.loads((HERE / "Qwen2.5-7B-Instruct" / "config.json").read_text())
    del cfg["tie_word_embeddings"]
    got = hfconfig.dims_from_config(cfg)
    assert not got.tie_embeddings and got.qkv_bias  # Qwen2Config: untied by default; Qwen2 attention has the bias
    cfg["model_type"] = "gpt_neox"
    assert hfconfig.dims_from_config(cfg).tie_embeddings  # PretrainedConfig's default
    llama = json.loads((HERE / "Llama-3.1-8B-Instruct" / "config.json").read_text())
    del llama["attention_bias"], llama["num_key_value_heads"]
    got = hfconfig.dims_from_config(llama)
    assert not got.qkv_bias and got.num_kv_heads == 32  # no GQA field: MHA
    vl = {"model_type": "qwen2_5_vl", "tie_word_embeddings": False, "text_config": cfg}
    assert hfconfig.dims_from_config(vl).hidden_size == 3584


@pytest.mark.parametrize("edit, field", [({"hidden_size": None}, "hidden_size"), ({"num_key_value_heads": 5}, "num_key_value_heads"),
                                         ({"num_experts": 64}, "mixture-of-experts"), ({"vocab_size": "big"}, "vocab_size")])
def test_bad_config_is_refused_naming_the_field(edit, field):
    cfg = json.loads((HERE / "Qwen2.5-3B-Instruct" / "config.json").read_text())
    cfg.update(edit)
    with pytest.raises(hfconfig.HFConfigError, match=field):
        hfconfig.dims_from_config(cfg)


def test_hub_ids_name_presets():
    assert models.preset_key("Qwen/Qwen2.5-3B-Instruct") == "qwen2.5-3b"
    assert models.preset_key("meta-llama/Meta-Llama-3.1-70B-Instruct") == "llama3.1-70b"
    assert models.preset_key("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B") == "qwen2.5-7b"
    with pytest.raises(KeyError):
        models.preset("Qwen/Qwen9-1T")


def test_a_scenario_may_name_a_config_json(tmp_path):
    sc = yaml.safe_load((SCENARIOS / "ci" / "tiny-2jobs.yaml").read_text())
    shutil.copytree(HERE / "Qwen2.5-3B-Instruct", tmp_path / "qwen3b")
    sc["jobs"][1]["model"] = str(tmp_path / "qwen3b")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    bad = json.loads((HERE / "Qwen2.5-3B-Instruct" / "config.json").read_text())
    del bad["intermediate_size"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps(bad))
    sc["jobs"][1]["model"] = str(tmp_path / "bad")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(sc))
    ok = run_cli("estimate", str(tmp_path / "s.yaml"))
    assert ok.returncode == 0, ok.stderr
    ref = run_cli("estimate", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"))
    norm = [re.sub(r"\s+", " ", out) for out in (ok.stdout.replace("(qwen3b,", "(qwen2.5-3b,"), ref.stdout)]
    assert norm[0] == norm[1]  # every figure of the estimate is the preset's
    r = run_cli("validate", str(tmp_path / "b.yaml"))
    assert r.returncode == 2 and "intermediate_size" in r.stdout + r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("spelling", ["./qwen3b/config.json", "qwen3b", "./qwen3b"])
def test_a_relative_model_path_is_read_from_the_scenarios_folder(tmp_path, spelling):
    """Like its trace paths and ``include:``s, a scenario's relative ``model:`` path is read from the
    scenario's folder: it was read from the working folder, so a scenario beside its model's
    config.json was refused as an unknown preset (or read another file) when run from elsewhere."""
    sc = yaml.safe_load((SCENARIOS / "ci" / "tiny-2jobs.yaml").read_text())
    shutil.copytree(HERE / "Qwen2.5-3B-Instruct", tmp_path / "proj" / "qwen3b")
    sc["jobs"][1]["model"] = spelling
    (tmp_path / "proj" / "s.yaml").write_text(yaml.safe_dump(sc))
    (tmp_path / "elsewhere").mkdir()
    ok = run_cli("estimate", str(tmp_path / "proj" / "s.yaml"), cwd=tmp_path / "elsewhere")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "qwen3b" in ok.stdout or "qwen2.5-3b" in ok.stdout.lower()
    # ... and a path the scenario's folder does not hold is named as it is, exit 2
    sc["jobs"][1]["model"] = "./missing/config.json"
    (tmp_path / "proj" / "m.yaml").write_text(yaml.safe_dump(sc))
    r = run_cli("validate", str(tmp_path / "proj" / "m.yaml"), cwd=tmp_path / "elsewhere")
    assert r.returncode == 2 and "missing" in r.stdout + r.stderr and "Traceback" not in r.stderr
