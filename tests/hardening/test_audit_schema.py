"""An outside audit of scenario files and the planning commands a newcomer runs (validate, estimate,
plan, validate-plan, admit, init): outputs that would replace an input or another output, and plan
documents edited by hand. Each refusal: exit 2, the option or file named, no traceback, nothing
written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import _refused

ROOT = Path(__file__).resolve().parents[2]
TINY_2 = ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml"
VERL = ROOT / "examples" / "onramp" / "verl-grpo-qwen2.5-7b.yaml"


@pytest.mark.parametrize("spelling", ["same", "dotted", "link"])
def test_plan_refuses_an_out_that_is_its_own_input(tmp_path, spelling):
    """`planner plan S.yaml -o S.yaml` replaced the scenario by its plan, exit 0: the scenario was lost."""
    s = tmp_path / "s.yaml"
    shutil.copy(TINY_2, s)
    before = s.read_bytes()
    given = str(s)
    if spelling == "dotted":
        (tmp_path / "sub").mkdir()
        out = str(tmp_path / "sub" / ".." / "s.yaml")
    elif spelling == "link":
        link = tmp_path / "link.yaml"
        link.symlink_to(s)
        given, out = str(link), str(s)
    else:
        out = str(s)
    rc, output, _cpu, rss = run_inprocess(["plan", given, "-o", out])
    _refused(rc, output, rss, "--out", "input", "another file")
    assert s.read_bytes() == before


def test_admit_refuses_an_out_that_is_its_input(tmp_path):
    s = tmp_path / "s.yaml"
    shutil.copy(TINY_2, s)
    plan = tmp_path / "p.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(s), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    before = s.read_bytes()
    rc, output, _cpu, rss = run_inprocess(["admit", str(s), "--current", str(plan), "--job", "small-a", "-o", str(s)])
    _refused(rc, output, rss, "--out", "input")
    assert s.read_bytes() == before


def test_init_refuses_an_out_that_is_its_config(tmp_path):
    """`planner init --from verl C.yaml -o C.yaml` replaced the verl config by the scenario written from it."""
    c = tmp_path / "verl.yaml"
    shutil.copy(VERL, c)
    before = c.read_bytes()
    rc, output, _cpu, rss = run_inprocess(["init", "--from", "verl", str(c), "-o", str(c)])
    _refused(rc, output, rss, "--out", "CONFIG")
    assert c.read_bytes() == before


@pytest.mark.parametrize("other", ["--save-instance", "--plot"])
def test_plan_refuses_two_outputs_on_one_file(tmp_path, other):
    """`--out X --save-instance X` (or `--plot X`) wrote both to X, exit 0: the plan was lost under the other."""
    out = tmp_path / "x.yaml"
    rc, output, _cpu, rss = run_inprocess(["plan", str(TINY_2), "-o", str(out), other, str(out)])
    _refused(rc, output, rss, other, "--out", "different files")
    assert not out.exists()


def test_plan_refuses_a_plot_over_its_current_plan(tmp_path):
    """`plan --current P --plot P` drew the timeline over the current plan, exit 0."""
    plan = tmp_path / "p.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_2), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    before = plan.read_bytes()
    rc, output, _cpu, rss = run_inprocess(["plan", str(TINY_2), "--current", str(plan), "-o", str(tmp_path / "new.yaml"),
                                           "--plot", str(plan)])
    _refused(rc, output, rss, "--plot", "--current")
    assert plan.read_bytes() == before and not (tmp_path / "new.yaml").exists()


def test_plan_may_still_write_over_its_current_plan(tmp_path):
    """Re-optimising a plan in place (`--current P -o P`) is not an input replaced by something else: allowed."""
    plan = tmp_path / "p.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_2), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_2), "--current", str(plan), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    assert yaml.safe_load(plan.read_text())["kind"] == "PlacementPlan"


def _two_types(tmp_path) -> tuple[Path, Path]:
    """tiny-2jobs with small-b on H100 nodes of its own (so admitting it opens a new group and leaves
    small-a's group as it was), and the same scenario without small-b."""
    d = yaml.safe_load(TINY_2.read_text())
    d["gpu_types"]["H100"] = {"price_per_gpu_hour": 2.0}
    d["cluster"]["node_groups"].append({"name": "h100", "gpu_type": "H100", "count": 2, "gpus_per_node": 8,
                                        "host_dram_gb": 512, "cluster": "b"})
    d["jobs"][1]["rollout"]["gpu_types"] = ["H100"]
    d["jobs"][1]["trainer"]["gpu_types"] = ["H100"]
    both, one = tmp_path / "both.yaml", tmp_path / "one.yaml"
    both.write_text(yaml.safe_dump(d, sort_keys=False))
    d["jobs"] = d["jobs"][:1]
    one.write_text(yaml.safe_dump(d, sort_keys=False))
    return both, one


def _edit_cycle(g):
    g["cycle_time_s"] = 1.0


def _edit_member_cycle(g):
    g["members"][0]["cycle_time_s"] = 1.0


def _edit_slack(g):
    g["members"][0]["slack_s"] = 0.5


def _edit_critical(g):
    g["critical"] = ["X:nothing"]


def _edit_busy(g):
    g["rollout_busy"] = 0.01


@pytest.mark.parametrize("edit", [_edit_cycle, _edit_member_cycle, _edit_slack, _edit_critical, _edit_busy],
                         ids=["cycle", "member-cycle", "slack", "critical", "busy"])
def test_admit_does_not_carry_a_hand_edited_schedule_into_its_plan(tmp_path, edit):
    """admit takes the groups it does not touch over from the current plan as they are: a current plan
    whose group recorded a wrong cycle_time_s (or slack, critical cycle, busy share) gave an admitted
    plan, written with exit 0, that `validate-plan` refuses (cycle-time, slo-claim, critical). The
    group is rebuilt from its members' phase times instead, as `plan --current` does."""
    both, one = _two_types(tmp_path)
    current = tmp_path / "current.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(one), "-o", str(current)])
    assert rc == 0, output[-2000:]
    doc = yaml.safe_load(current.read_text())
    assert [m["job"] for m in doc["body"]["groups"][0]["members"]] == ["small-a"]
    was = dict(doc["body"]["groups"][0])
    edit(doc["body"]["groups"][0])
    current.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "admitted.yaml"
    rc, output, _cpu, _rss = run_inprocess(["admit", str(both), "--current", str(current), "--job", "small-b", "-o", str(out)])
    assert rc == 0, output[-2000:]
    admitted = yaml.safe_load(out.read_text())
    assert len(admitted["body"]["groups"]) == 2  # small-b in a group of its own: small-a's group untouched by the move
    g = next(g for g in admitted["body"]["groups"] if g["order"] == ["small-a"])
    for key in ("cycle_time_s", "rollout_busy", "train_busy"):
        assert g[key] == pytest.approx(was[key], rel=1e-6), key
    rc, output, _cpu, _rss = run_inprocess(["validate-plan", str(both), str(out)])
    assert rc == 0, output[-2000:]


@pytest.mark.parametrize("field,value", [("gpus_per_node", 1), ("host_dram_gb", 64), ("cluster", "a")])
def test_node_groups_of_one_gpu_type_must_hold_alike_nodes(tmp_path, field, value):
    """The planner plans a GPU type's nodes as one kind (the first group's GPUs per node and fabric, the
    smallest host DRAM): with an H20 group of one 8-GPU node and one of 1-GPU nodes, `plan` pinned a tp=8
    rollout to an 8-GPU and a 1-GPU node, priced as 16 GPUs where 9 exist (validate and validate-plan
    passing). Refused, naming the group and the fix."""
    d = yaml.safe_load(TINY_2.read_text())
    extra = {"name": "h800-odd", "gpu_type": "H800", "count": 2, "gpus_per_node": 8, "host_dram_gb": 512, "cluster": "b"}
    extra[field] = value
    d["cluster"]["node_groups"].append(extra)
    s = tmp_path / "s.yaml"
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    for argv in (["validate", str(s)], ["plan", str(s), "-o", str(tmp_path / "p.yaml")]):
        rc, output, _cpu, rss = run_inprocess(argv)
        _refused(rc, output, rss, f"cluster.node_groups[2].{field}", "h800-odd", "same GPU type H800", "base: H800")
    assert not (tmp_path / "p.yaml").exists()
    # the fix the message gives: a GPU type of its own, derived from H800
    d["gpu_types"]["H800-h800-odd"] = {"base": "H800", "price_per_gpu_hour": 2.0}
    d["cluster"]["node_groups"][2]["gpu_type"] = "H800-h800-odd"
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    rc, output, _cpu, _rss = run_inprocess(["validate", str(s)])
    assert rc == 0, output[-2000:]


def test_an_undefined_fabric_lists_each_defined_one_once(tmp_path):
    d = yaml.safe_load(TINY_2.read_text())
    d["cluster"]["clusters"] = [{"name": "a"}, {"name": "a"}]
    s = tmp_path / "s.yaml"
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    rc, output, _cpu, rss = run_inprocess(["validate", str(s)])
    _refused(rc, output, rss, "cluster names must be unique", "cluster 'b' is not defined")
    assert "use one of a\n" in output or output.rstrip().endswith("use one of a"), output


@pytest.mark.parametrize("fmt", ["yaml", "json-escaped", "json-raw"])
@pytest.mark.parametrize("char", ["\u202e", "\u2067"])
def test_a_name_with_a_bidirectional_override_is_refused(tmp_path, fmt, char):
    """A scenario named "tiny<U+202E>2jobs" validated and was echoed as it was: the terminal shows the
    text after it reversed (Trojan Source). Refused as the other control characters are, naming the field."""
    import json

    d = yaml.safe_load(TINY_2.read_text())
    d["name"] = f"tiny{char}2jobs"
    s = tmp_path / ("s.yaml" if fmt == "yaml" else "s.json")
    if fmt == "yaml":
        s.write_text(yaml.safe_dump(d, sort_keys=False, allow_unicode=True), encoding="utf-8")
    else:
        s.write_text(json.dumps(d, ensure_ascii=fmt == "json-escaped"), encoding="utf-8")
    rc, output, _cpu, rss = run_inprocess(["validate", str(s)])
    _refused(rc, output, rss, "name:", "control characters")
    assert char not in output


def test_a_bidirectional_override_read_from_a_plan_is_escaped_when_printed(tmp_path):
    """A plan's member named "small<U+202E>a" was printed raw in validate-plan's list of violations."""
    plan = tmp_path / "p.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_2), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    plan.write_text(plan.read_text().replace("small-a", "small\u202ea"), encoding="utf-8")
    rc, output, _cpu, rss = run_inprocess(["validate-plan", str(TINY_2), str(plan)])
    _refused(rc, output, rss, "unknown-job", "small\\u202ea")
    assert "\u202e" not in output


@pytest.mark.parametrize("field,old,new", [("margin", "margin: 1\n", "margin: true\n"),
                                           ("objective", "objective: ", "objective: '{}'"),
                                           ("wall_time_s", "wall_time_s: ", "wall_time_s: true #")],
                         ids=["margin-true", "objective-text", "wall-time-true"])
def test_a_plans_solve_record_takes_numbers_not_booleans_or_text(tmp_path, field, old, new):
    """The plan body's numbers were strict, its solve record's were not: `margin: true` was read as a
    margin of 1 (the plan checked with every phase time doubled) and `objective: '32'` as 32, both
    passing validate-plan."""
    plan = tmp_path / "p.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_2), "--margin", "1", "-o", str(plan)])
    assert rc == 0, output[-2000:]
    text = plan.read_text()
    assert old in text
    if field == "objective":
        value = yaml.safe_load(text)["solver"]["objective"]
        text = text.replace(f"objective: {value}\n", new.format(value) + "\n")
    else:
        text = text.replace(old, new, 1)
    plan.write_text(text)
    rc, output, _cpu, rss = run_inprocess(["validate-plan", str(TINY_2), str(plan)])
    _refused(rc, output, rss, f"solver.{field}", "must be a number")


def test_plan_refuses_a_default_output_that_is_its_input(tmp_path, monkeypatch):
    """Without --out the plan goes to NAME.plan.yaml in the current folder: beside a scenario file so
    named, `planner plan tiny-2jobs.plan.yaml` replaced the scenario by its plan, exit 0."""
    monkeypatch.chdir(tmp_path)
    s = tmp_path / "tiny-2jobs.plan.yaml"
    shutil.copy(TINY_2, s)
    before = s.read_bytes()
    rc, output, _cpu, rss = run_inprocess(["plan", s.name])
    _refused(rc, output, rss, "--out", "default output tiny-2jobs.plan.yaml", "give --out")
    assert s.read_bytes() == before
    rc, output, _cpu, _rss = run_inprocess(["plan", s.name, "--out", "p.yaml"])
    assert rc == 0, output[-2000:]
    assert s.read_bytes() == before


def test_an_error_in_an_included_file_names_that_file_and_line(tmp_path):
    """`include: base.yaml` and a bad value in base.yaml: the error named the including file's
    `include:` line, not base.yaml's line. A value the including file replaces keeps its own line."""
    base = TINY_2.read_text().replace("rollout: {batch_prompts: 32, group_size: 4, max_response_tokens: 2048, gpu_types: [H20]}",
                                      "rollout: {batch_prompts: 32, group_size: 4, max_response_tokens: 2048, gpu_types: [H20], tp: 3}")
    assert "tp: 3" in base
    (tmp_path / "base.yaml").write_text(base)
    bad_lines = [i + 1 for i, ln in enumerate(base.splitlines()) if "tp: 3" in ln]
    top = tmp_path / "top.yaml"
    top.write_text("# an overlay\n\ninclude: base.yaml\nname: overlay\n")
    rc, output, _cpu, rss = run_inprocess(["validate", str(top)])
    _refused(rc, output, rss, f"base.yaml:{bad_lines[0]}: jobs[0].rollout.tp", f"base.yaml:{bad_lines[1]}: jobs[1].rollout.tp")
    assert "top.yaml:3" not in output
    # the overlay replaces the jobs (a list replaces): its own line is named
    top.write_text("include: base.yaml\nname: overlay\njobs:\n  - name: j\n    model: qwen2.5-1.5b\n"
                   "    rollout: {batch_prompts: 32, max_response_tokens: 2048, tp: 5}\n")
    rc, output, _cpu, rss = run_inprocess(["validate", str(top)])
    _refused(rc, output, rss, "top.yaml:6: jobs[0].rollout.tp")
    assert "base.yaml" not in output


def test_a_model_that_fits_no_gpu_says_by_how_much(tmp_path):
    """"the training state does not fit any allowed trainer GPU" said no more: how much memory the job
    needs against what the GPU offers is what tells a tp from a GPU type as the fix."""
    d = yaml.safe_load(TINY_2.read_text())
    d["jobs"][1]["model"] = "qwen2.5-72b"
    s = tmp_path / "s.yaml"
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    rc, output, _cpu, rss = run_inprocess(["validate", str(s)])
    _refused(rc, output, rss, "jobs[1].model", "does not fit any allowed rollout GPU", "on a H20, 96 GB: the weights take",
             "KV-cache room for 0 tokens", "does not fit any allowed trainer GPU", "on a H800:", "GB of model state a GPU",
             "less 25% kept for activations")


@pytest.mark.parametrize("components,words", [([], ["has no rollout and no trainer"]), (["trainer"], ["has no rollout"]),
                                              (["rollout", "rollout", "trainer"], ["lists rollout more than once"])],
                         ids=["empty", "no-rollout", "twice"])
def test_a_jobs_components_hold_a_rollout_and_a_trainer_once(tmp_path, components, words):
    """`components: []` (or without a rollout) validated, and the job was planned with a rollout and a
    trainer all the same; a component listed twice passed too."""
    d = yaml.safe_load(TINY_2.read_text())
    d["jobs"][0]["components"] = components
    s = tmp_path / "s.yaml"
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    rc, output, _cpu, rss = run_inprocess(["validate", str(s)])
    _refused(rc, output, rss, "jobs[0].components", *words)


def test_a_bad_number_in_an_instance_file_names_its_line_and_the_fix(tmp_path):
    """A numbers-only instance's errors read "neg.yaml: jobs.0.rollout_s.H20.1: Input should be greater
    than 0 (got -220.1). Fix: see docs/placement.md for the instance format": no line, no fix."""
    src = (ROOT / "scenarios" / "instances" / "placement-small.yaml").read_text()
    old = "rollout_s: {H20: {1: 220.1,"
    assert old in src
    line = next(i + 1 for i, ln in enumerate(src.splitlines()) if old in ln)
    f = tmp_path / "neg.yaml"
    f.write_text(src.replace(old, "rollout_s: {H20: {1: -220.1,", 1))
    rc, output, _cpu, rss = run_inprocess(["plan", str(f), "-o", str(tmp_path / "p.yaml")])
    _refused(rc, output, rss, f"neg.yaml:{line}: jobs.0.rollout_s.H20.1", "got -220.1", "Fix: use a value above 0")
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("name,sweep", [("capacity-plan.yaml", []), ("answer.md", []), ("sweep.md", ["--sweep", "price.H800=1.5:2.5:2"])])
def test_whatif_refuses_an_out_folder_whose_answer_would_replace_the_scenario(tmp_path, name, sweep):
    """`planner whatif DIR/capacity-plan.yaml --out DIR` would have written the answer over the scenario after the
    whole search: refused before any solve, the scenario untouched."""
    d = tmp_path / "out"
    d.mkdir()
    s = d / name
    shutil.copy(ROOT / "scenarios" / "procurement.yaml", s)
    before = s.read_bytes()
    rc, output, _cpu, rss = run_inprocess(["whatif", str(s), *sweep, "--out", str(d)])
    _refused(rc, output, rss, "--out", "is the scenario given", "another --out folder")
    assert s.read_bytes() == before and sorted(p.name for p in d.iterdir()) == [name]


@pytest.mark.parametrize("side", ["rollout_busy", "train_busy"])
def test_validate_plan_judges_the_busy_shares(tmp_path, side):
    """A plan whose group records a busy share its schedule does not give passed `validate-plan` (and its summary
    printed it): now the rule `busy` names the group, the share recorded and the one the schedule gives."""
    both, one = _two_types(tmp_path)
    plan = tmp_path / "plan.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(one), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    rc, output, _cpu, _rss = run_inprocess(["validate-plan", str(one), str(plan)])
    assert rc == 0, output[-2000:]
    doc = yaml.safe_load(plan.read_text())
    g = doc["body"]["groups"][0]
    g[side] = 0.123 if abs(g[side] - 0.123) > 0.01 else 0.456
    plan.write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, output, _cpu, rss = run_inprocess(["validate-plan", str(one), str(plan)])
    _refused(rc, output, rss, f"busy[group={g['id']}]", f"{side} is", "the schedule gives")
