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


def _run(commands: list[list[str]], timeout: float = 600) -> list[dict]:
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"), "--block-extras",
                        json.dumps(commands)], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
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
                 ["simulate", str(sc), "--plan", plan, "--iterations", "8"]]
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


_SLIME_YAML = "hf-checkpoint: Qwen/Qwen2.5-3B-Instruct\nrollout-batch-size: 8\nrollout-max-response-len: 100\nrollout-num-gpus: 8\n"


def test_slime_yaml_alias_bombs_and_arguments_given_twice_exit_2(tmp_path):
    """slime's YAML form is read by safeload: a billion-laughs file is refused in well under a
    second (it hung); a key repeated, or written both as a-b and a_b, is refused naming both (the
    last one won silently); a shell-style --flag repeated with another value is refused naming both
    values (the same value twice reads once); text that is not a YAML mapping is still read as
    shell-style arguments."""
    levels = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    levels += [f"{k}: &{k} [" + ", ".join([f"*{p}"] * 9) + "]" for p, k in zip("abcdefgh", "bcdefghi")]
    (tmp_path / "bomb.yaml").write_text("\n".join(levels) + "\nhf-checkpoint: *i\nrollout-batch-size: 8\n"
                                        "rollout-max-response-len: 100\nrollout-num-gpus: 8\n")
    (tmp_path / "both.yaml").write_text(_SLIME_YAML + "rollout_batch_size: 64\n")
    (tmp_path / "same.yaml").write_text(_SLIME_YAML + "rollout-batch-size: 8\n")
    (tmp_path / "list.yaml").write_text(_SLIME_YAML.replace("Qwen/Qwen2.5-3B-Instruct", "[a, b]"))
    shell = SLIME.read_text()
    (tmp_path / "twice.sh").write_text(shell.replace("--rollout-batch-size 64", "--rollout-batch-size 64 --rollout-batch-size=32"))
    (tmp_path / "again.sh").write_text(shell.replace("--rollout-batch-size 64", "--rollout-batch-size 64 --rollout-batch-size=64"))
    (tmp_path / "ok.yaml").write_text(_SLIME_YAML.replace("rollout-num-gpus", "rollout_num_gpus"))
    bad = {"bomb.yaml": ["bomb.yaml:", "alias"],
           "both.yaml": ["--rollout-batch-size", "'rollout-batch-size' (", "both.yaml:2)", "'rollout_batch_size' (", "both.yaml:5)"],
           "same.yaml": ["same.yaml:5", "duplicate key 'rollout-batch-size'"],
           "list.yaml": ["--hf-checkpoint", "a list, not one value"],
           "twice.sh": ["--rollout-batch-size", "'--rollout-batch-size 64'", "'--rollout-batch-size 32'"]}
    good = ["again.sh", "ok.yaml"]
    cmds = [["init", "--from", "slime", str(tmp_path / f), "-o", str(tmp_path / f"out-{f}")] for f in [*bad, *good]]
    results = _run(cmds, timeout=120)
    for (f, expect), r in zip(bad.items(), results):
        assert r["rc"] == 2, (f, r)
        assert "Traceback" not in r["stderr"] and "internal error" not in r["stderr"], (f, r["stderr"])
        for e in expect:
            assert e in r["stderr"], (f, e, r["stderr"])
        assert not (tmp_path / f"out-{f}").exists()
    for f, r in zip(good, results[len(bad):]):
        assert r["rc"] == 0, (f, r["stderr"])
    assert yaml.safe_load((tmp_path / "out-again.sh").read_text())["jobs"][0]["rollout"]["batch_prompts"] == 64
    assert yaml.safe_load((tmp_path / "out-ok.yaml").read_text())["jobs"][0]["rollout"]["nodes"] == 1


def test_gpu_types_that_are_not_plain_words_exit_2_naming_the_option(tmp_path):
    """--gpu-type was pasted raw into the YAML: 'H100}', 'H100 #x', '[H100]' broke the document (an
    internal error). Each is refused as A100 is: exit 2 naming --gpu-type, nothing written."""
    cases = ["A100", "H100}", "H100 #x", "[H100]", "H100\nname: x", " H100"]
    results = _run([["init", "--from", "verl", str(VERL), "--gpu-type", g, "-o", str(tmp_path / f"o{i}.yaml")]
                    for i, g in enumerate(cases)])
    for g, r in zip(cases, results):
        assert r["rc"] == 2, (g, r)
        assert "--gpu-type: unknown GPU type" in r["stderr"] and "Fix: use one of H100" in r["stderr"], (g, r["stderr"])
        assert "internal error" not in r["stderr"] and "Traceback" not in r["stderr"], (g, r["stderr"])
    assert not list(tmp_path.iterdir())


def test_names_and_values_yaml_would_read_as_another_type_are_written_quoted(tmp_path):
    """An experiment name YAML reads as a number, a boolean or null ('20250101', 'on', 'null',
    '007', '0x1F'), or --name 2025, was written unquoted and the scenario refused ("name: Input
    should be a valid string"); a source value with a line break ended its comment. Now each is
    quoted, the scenario is written, and it loads back with the name as the same string."""
    names = ["20250101", "on", "null", "007", "0x1F"]  # (a plain 1e3 is a number in the source, as OmegaConf reads it)
    paths = [_bad_verl(tmp_path, f"n{i}", lambda c, n=n: c["trainer"].update(experiment_name=n)) for i, n in enumerate(names)]
    odd = _bad_verl(tmp_path, "odd", lambda c: c["algorithm"].update(adv_estimator="grpo\nname: [\u2028x: }"))
    cmds = [["init", "--from", "verl", str(p), "-o", str(tmp_path / f"out{i}.yaml")] for i, p in enumerate(paths)]
    cmds += [["init", "--from", "verl", str(VERL), "--name", "2025", "-o", str(tmp_path / "named.yaml")],
             ["init", "--from", "verl", str(odd), "-o", str(tmp_path / "odd-out.yaml")]]
    results = _run(cmds)
    for r in results:
        assert r["rc"] == 0, (r["argv"], r["stderr"])
    for i, n in enumerate([*names, "2025"]):
        out = tmp_path / (f"out{i}.yaml" if i < len(names) else "named.yaml")
        sc = yaml.safe_load(out.read_text())
        assert sc["name"] == n and sc["jobs"][0]["name"] == n, (n, out.read_text()[:600])
    sc = yaml.safe_load((tmp_path / "odd-out.yaml").read_text())
    assert sc["jobs"][0]["algorithm"] == "grpo" and sc["name"] == "qwen2.5-7b-grpo"


def test_yaml_scalars_and_comments_cannot_break_the_written_document():
    from planner.onramp.shape import _comment, _yaml_scalar

    from planner.safeload import parse_yaml

    for x in ["H100}", "[H100]", "H100 #x", "a: b", "a\nb", "a\u2028b", "\x85", "it's", '"', "on", "null", "007", "0x1F",
              "1e3", "1.5E-3", "x" * 300 + " y" * 100, "", 3, 1.5, True, None]:
        assert parse_yaml(f"k: {_yaml_scalar(x)}\n").data["k"] == x, x  # (this reader takes 1e3 as a number)
        text = f"k: {_yaml_scalar(x)}  # {_comment(str(x))}\nf: {{a: {_yaml_scalar(x)}, b: 1}}\n{_yaml_scalar(x)}: 2\n"
        assert "\n" not in _yaml_scalar(x) and "\n" not in _comment(str(x))
        data = yaml.safe_load(text)
        assert data["k"] == x and data["f"] == {"a": x, "b": 1} and data[x] == 2, (x, text)


def test_colocated_nodes_split_by_the_trainers_model_parallelism(tmp_path):
    """verl trainer.nnodes 2 with Megatron tp 8 x pp 2 on 8-GPU nodes (valid in verl) was split 1 +
    1 and then refused ("tp x pp = 16 does not divide the 8 GPUs of 1 node"): the trainer now gets
    the 2 nodes its 16 GPUs need and the rollout 1, a node more than the source, which the header
    says. The same for a 1-node source and for slime's --colocate; splits that fit are unchanged."""
    def megatron(nodes, tp, pp):
        return lambda c: (c["trainer"].update(nnodes=nodes), c["actor_rollout_ref"]["actor"]["megatron"].update(
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp))

    verl_cases = {"v2": (megatron(2, 8, 2), (1, 2), "1 more than the source"),
                  "v1": (megatron(1, 4, 4), (1, 2), "2 more than the source"),
                  "v6": (megatron(6, 8, 4), (2, 4), "split 2 rollout + 4 training"),
                  "v4": (megatron(4, 4, 1), (2, 2), "split 2 rollout + 2 training")}
    paths = {k: _bad_verl(tmp_path, k, edit) for k, (edit, _, _) in verl_cases.items()}
    shell = SLIME.read_text()
    assert "--actor-num-nodes 1" in shell and "--pipeline-model-parallel-size 1" in shell
    (tmp_path / "s2.sh").write_text(shell.replace("--actor-num-nodes 1", "--actor-num-nodes 2 --colocate")
                                    .replace("--tensor-model-parallel-size 2", "--tensor-model-parallel-size 8")
                                    .replace("--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2"))
    cmds = [["init", "--from", "verl", str(p), "-o", str(tmp_path / f"out-{k}.yaml")] for k, p in paths.items()]
    cmds.append(["init", "--from", "slime", str(tmp_path / "s2.sh"), "-o", str(tmp_path / "out-s2.yaml")])
    cmds.append(["validate", str(tmp_path / "out-v2.yaml")])
    results = _run(cmds)
    for r in results:
        assert r["rc"] == 0, (r["argv"], r["stderr"])
    for k, (_, want, note) in [*verl_cases.items(), ("s2", (None, (1, 2), "1 more than the source"))]:
        text = (tmp_path / f"out-{k}.yaml").read_text()
        job = yaml.safe_load(text)["jobs"][0]
        assert (job["rollout"]["nodes"], job["trainer"]["nodes"]) == want, (k, text[:800])
        assert note in text, (k, text[:800])


def test_control_characters_in_a_config_exit_2_naming_the_field(tmp_path):
    """An ESC sequence in a verl or slime (YAML) config would be echoed into the written scenario's
    comments and a terminal: refused, exit 2 naming the field, nothing written."""
    verl = yaml.safe_load(VERL.read_text())
    verl["trainer"]["experiment_name"] = "grpo\x1b[2Jx"
    (tmp_path / "esc-verl.yaml").write_text(yaml.safe_dump(verl))
    (tmp_path / "esc-slime.yaml").write_text(_SLIME_YAML.replace("rollout-num-gpus: 8", 'rollout-num-gpus: 8\nadvantage-estimator: "grpo\\x1b[31m"'))
    files = ["esc-verl.yaml", "esc-slime.yaml"]
    fw = {"esc-verl.yaml": "verl", "esc-slime.yaml": "slime"}
    results = _run([["init", "--from", fw[f], str(tmp_path / f), "-o", str(tmp_path / f"out-{f}")] for f in files], timeout=120)
    for f, r in zip(files, results):
        assert r["rc"] == 2, (f, r)
        assert "control character" in r["stderr"] or "escape" in r["stderr"].lower(), (f, r["stderr"])
        assert "\x1b" not in r["stderr"] and not (tmp_path / f"out-{f}").exists()


def test_a_multi_turn_verl_config_says_its_turns_are_not_read():
    """verl's multi_turn block was dropped without a word: an agentic job came out single-turn."""
    from planner.onramp.shape import scenario_text
    from planner.onramp.verl import read

    cfg = yaml.safe_load(VERL.read_text())
    assert not any("multi_turn" in n for n in read(cfg, str(VERL)).notes)
    cfg["actor_rollout_ref"]["rollout"]["multi_turn"] = {"enable": True, "max_assistant_turns": 5}
    job = read(cfg, str(VERL))
    [note] = [n for n in job.notes if "multi_turn" in n]
    assert "not read" in note and "single-turn" in note and "max_assistant_turns: 5" in note and "rollout.turns" in note
    text = scenario_text(job, gpu_type="H100", price=None, command="planner init --from verl x.yaml")
    assert f"# {note}" in text


def test_an_fsdp_config_whose_state_needs_sharding_gets_the_least_tp_that_fits(tmp_path):
    """verl's FSDP shards weights, gradients and optimizer state over data parallelism; the planner's
    memory model shards only the optimizer state. A standard FSDP config of a 14B model on 3 colocated
    nodes of 8 H100s was refused ("the training state does not fit ... raise trainer.tp/pp", fields of a
    scenario the user did not have yet); it is written with trainer.tp 2, the least that fits, and the
    header says why. The 7B job and a Megatron config keep tp 1 / the config's own."""
    cfg = yaml.safe_load(VERL.read_text())
    cfg["actor_rollout_ref"]["actor"]["strategy"] = "fsdp"
    cfg["actor_rollout_ref"]["actor"].pop("megatron", None)
    cfg["actor_rollout_ref"]["model"]["path"] = "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B"
    cfg["trainer"]["nnodes"] = 3
    (tmp_path / "c14.yaml").write_text(yaml.safe_dump(cfg))
    cfg["actor_rollout_ref"]["model"]["path"] = "Qwen/Qwen2.5-7B-Instruct"
    (tmp_path / "c7.yaml").write_text(yaml.safe_dump(cfg))
    r14, r7, v14 = _run([["init", "--from", "verl", str(tmp_path / "c14.yaml"), "-o", str(tmp_path / "s14.yaml")],
                         ["init", "--from", "verl", str(tmp_path / "c7.yaml"), "-o", str(tmp_path / "s7.yaml")],
                         ["validate", str(tmp_path / "s14.yaml")]])
    assert r14["rc"] == 0 and r7["rc"] == 0, (r14["stderr"], r7["stderr"])
    assert v14["rc"] == 0, v14["stderr"]
    text = (tmp_path / "s14.yaml").read_text()
    assert yaml.safe_load(text)["jobs"][0]["trainer"]["tp"] == 2
    assert "trainer.tp is set to 2, the least that fits" in text and "ZeRO-1" in text
    assert yaml.safe_load((tmp_path / "s7.yaml").read_text())["jobs"][0]["trainer"]["tp"] == 1
