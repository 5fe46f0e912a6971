"""planner init --from verl|slime: scenarios written from the frameworks' job configs validate,
plan and simulate; bad input exits 2 naming the field, with nothing written.

All commands of a test run in one process (tests/foundation/inprocess.py), with torch, ray and
scipy blocked as on a core install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

EXAMPLES = ROOT / "examples" / "onramp"
VERL = EXAMPLES / "verl-grpo-qwen2.5-7b.yaml"
SLIME = EXAMPLES / "slime-grpo-qwen2.5-3b.sh"
HF = Path(__file__).parent / "hf_configs"


def _run(commands: list[list[str]]) -> list[dict]:
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"), "--block-extras",
                        json.dumps(commands)], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "120"})
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["imported"] == []
    return out["results"]


def test_examples_give_scenarios_that_validate_plan_and_simulate(tmp_path):
    v, s = tmp_path / "verl.yaml", tmp_path / "slime.yaml"
    cmds = [["init", "--from", "verl", str(VERL), "-o", str(v)],
            ["init", "--from", "slime", str(SLIME), "-o", str(s), "--gpu-type", "H800", "--price", "2.5"]]
    for sc in (v, s):
        plan = str(sc.with_suffix(".plan.yaml"))
        cmds += [["validate", str(sc)], ["plan", str(sc), "--time-limit", "5", "--out", plan],
                 ["simulate", str(sc), "--plan", plan, "--iterations", "1"]]
    cmds.append(["simulate", str(v), "--policy", "colocated", "--iterations", "1"])  # verl's time-shared original
    for r in _run(cmds):
        assert r["rc"] == 0, (r["argv"], r["stderr"])
    src = yaml.safe_load(VERL.read_text())
    job = yaml.safe_load(v.read_text())["jobs"][0]
    assert job["model"] == "qwen2.5-7b" and job["algorithm"] == "grpo"
    assert job["rollout"]["batch_prompts"] == src["data"]["train_batch_size"]
    assert job["rollout"]["group_size"] == src["actor_rollout_ref"]["rollout"]["n"]
    assert job["rollout"]["max_response_tokens"] == src["data"]["max_response_length"]
    assert job["rollout"]["tp"] == src["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"]
    assert job["trainer"]["tp"] == src["actor_rollout_ref"]["actor"]["megatron"]["tensor_model_parallel_size"]
    assert job["rollout"]["nodes"] + job["trainer"]["nodes"] == src["trainer"]["nnodes"]  # colocated nodes split
    text = v.read_text()
    assert "# data.train_batch_size" in text and "planner simulate --policy colocated" in text  # commented
    sj = yaml.safe_load(s.read_text())
    job = sj["jobs"][0]
    assert (job["rollout"]["batch_prompts"], job["rollout"]["group_size"], job["rollout"]["max_response_tokens"]) == (64, 8, 8192)
    assert (job["rollout"]["tp"], job["rollout"]["nodes"], job["trainer"]["tp"], job["trainer"]["nodes"]) == (2, 2, 2, 1)
    assert sj["gpu_types"] == {"H800": {"price_per_gpu_hour": 2.5}}


def test_disaggregated_verl_and_a_local_model_directory(tmp_path):
    cfg = yaml.safe_load(VERL.read_text())
    shutil.copytree(HF / "Qwen2.5-3B-Instruct", tmp_path / "qwen3b")
    cfg["actor_rollout_ref"]["model"]["path"] = str(tmp_path / "qwen3b")
    cfg["actor_rollout_ref"]["rollout"]["nnodes"] = 3
    cfg["trainer"]["nnodes"] = 1
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    (r,) = _run([["init", "--from", "verl", str(tmp_path / "c.yaml"), "-o", str(tmp_path / "s.yaml")]])
    assert r["rc"] == 0, r["stderr"]
    job = yaml.safe_load((tmp_path / "s.yaml").read_text())["jobs"][0]
    assert job["model"] == str(tmp_path / "qwen3b") and (job["rollout"]["nodes"], job["trainer"]["nodes"]) == (3, 1)


def _bad_verl(tmp_path, name, edit):
    cfg = yaml.safe_load(VERL.read_text())
    edit(cfg)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_bad_input_exits_2_naming_the_field_and_writes_nothing(tmp_path):
    slime_text = SLIME.read_text()
    cases = {
        "data.train_batch_size": _bad_verl(tmp_path, "nobatch", lambda c: c["data"].pop("train_batch_size")),
        "actor_rollout_ref.model.path": _bad_verl(tmp_path, "model", lambda c: c["actor_rollout_ref"]["model"].update(
            path="Qwen/Qwen9-1T")),
        "trainer.nnodes": _bad_verl(tmp_path, "nodes", lambda c: c["trainer"].update(nnodes=0)),
        "actor_rollout_ref.rollout.response_length": _bad_verl(tmp_path, "interp", lambda c: c["actor_rollout_ref"]["rollout"]
                                                                .update(response_length="${oc.env:LEN}")),
        "trainer.tp": _bad_verl(tmp_path, "tp", lambda c: c["actor_rollout_ref"]["actor"]["megatron"].update(
            tensor_model_parallel_size=16)),
    }
    (tmp_path / "noresp.sh").write_text(slime_text.replace("--rollout-max-response-len 8192", ""))
    (tmp_path / "shellvar.sh").write_text(slime_text.replace("--rollout-batch-size 64", "--rollout-batch-size ${BS}"))
    slime_cases = {"--rollout-max-response-len": tmp_path / "noresp.sh", "--rollout-batch-size": tmp_path / "shellvar.sh"}
    cmds = [["init", "--from", "verl", str(p), "-o", str(tmp_path / f"out-{i}.yaml")] for i, p in enumerate(cases.values())]
    cmds += [["init", "--from", "slime", str(p), "-o", str(tmp_path / f"sout-{i}.yaml")] for i, p in enumerate(slime_cases.values())]
    results = _run(cmds)
    for field, r in zip(list(cases) + list(slime_cases), results):
        assert r["rc"] == 2, (field, r)
        assert field in r["stderr"] and "Traceback" not in r["stderr"], (field, r["stderr"])
    assert not list(tmp_path.glob("*out-*.yaml"))  # nothing half-written


def test_the_end_to_end_onramp_example_in_docs_integration_runs(tmp_path, monkeypatch):
    """docs/integration.md's on-ramp example: slime config -> scenario -> plan -> executor target
    -> applied on the sim backend with tinylm workers, a rollout, a training step, a weight sync."""
    import re

    pytest.importorskip("torch")
    text = (ROOT / "docs" / "integration.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith("# on-ramp example")]
    assert len(blocks) == 1
    for r in _run([["init", "--from", "slime", str(SLIME), "-o", str(tmp_path / "slime.yaml")],
                   ["plan", str(tmp_path / "slime.yaml"), "--time-limit", "5", "--out", str(tmp_path / "slime-plan.yaml")]]):
        assert r["rc"] == 0, r
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(blocks[0], "docs/integration.md", "exec"), ns)
    b, job = ns["backend"], ns["job"]
    assert b.coord("ledger_summary")["done"] == 16
    assert {r["impl"] for r in b.coord("records") if r["component"] in (f"{job}/rollout", f"{job}/trainer")} == {"tinylm"}


def test_interpolation_cycles_exit_2_naming_the_key_and_the_cycle(tmp_path):
    """A ``${...}`` that leads back to its own key (directly, through other keys, or through a
    mapping that holds it) or a chain of references too deep: exit 2 naming the key and the cycle,
    not a RecursionError; nothing written."""
    text = VERL.read_text()
    assert "train_batch_size: 256" in text
    (tmp_path / "self.yaml").write_text(text.replace("train_batch_size: 256", "train_batch_size: ${data.train_batch_size}"))
    two = _bad_verl(tmp_path, "two", lambda c: c["data"].update(max_prompt_length="${data.max_response_length}",
                                                                 max_response_length="${data.max_prompt_length}"))
    inner = _bad_verl(tmp_path, "inner", lambda c: c["data"].update(again="${data}"))
    deep = _bad_verl(tmp_path, "deep", lambda c: c.update({f"k{i}": f"${{k{i + 1}}}" for i in range(100)}, k100=1,
                                                           data={**c["data"], "train_batch_size": "${k0}"}))
    cases = [(tmp_path / "self.yaml", ["data.train_batch_size", "data.train_batch_size -> data.train_batch_size", "cycle"]),
             (two, ["data.max_prompt_length -> data.max_response_length", "data.max_response_length -> data.max_prompt_length",
                    "cycle"]),
             (inner, ["data.again", "data.again -> data", "cycle"]),
             (deep, ["chain of more than", "data.train_batch_size"])]
    before = sorted(p.name for p in tmp_path.iterdir())
    results = _run([["init", "--from", "verl", str(p), "-o", str(tmp_path / f"out-{i}.yaml")] for i, (p, _) in enumerate(cases)])
    for (p, expect), r in zip(cases, results):
        assert r["rc"] == 2, (p.name, r)
        assert "Traceback" not in r["stderr"] and "RecursionError" not in r["stderr"] and "internal error" not in r["stderr"], r
        for e in expect:
            assert e in r["stderr"], (p.name, e, r["stderr"])
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
