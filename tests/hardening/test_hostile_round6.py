"""Low-severity gaps left by the session-45 audits (docs/security.md, Round 6): an output path ending
in '/' written as a file named like the folder, empty paths taken for "not given", a flow-style YAML
plan reported as bad JSON, and a trace CSV row missing a field skipped. Each: exit 2, the option,
field or line named, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import ROOT, SCENARIO, _refused

NEW = "{d}/new/"  # a folder that does not exist, written with a trailing slash


@pytest.mark.parametrize("argv, option", [
    (["plan", str(SCENARIO), "-o", NEW], "--out"),
    (["plan", str(SCENARIO), "-o", "{d}/p.yaml", "--plot", NEW], "--plot"),
    (["plan", str(SCENARIO), "-o", "{d}/p.yaml", "--save-instance", NEW], "--save-instance"),
    (["admit", str(SCENARIO), "--current", "{d}/missing.yaml", "--job", "small-a", "-o", NEW], "--out"),
    (["realloc", "{d}/missing.json", "--out", NEW], "--out"),
    (["init", "--from", "verl", "{d}/missing.yaml", "-o", NEW], "--out"),
], ids=["plan-o", "plan-plot", "plan-save-instance", "admit-o", "realloc-out", "init-o"])
def test_an_output_file_path_ending_in_a_slash_is_refused_not_written_as_a_file(argv, option, tmp_path):
    """``-o results/`` (no such folder) wrote a file named ``results``, after the whole solve."""
    rc, output, _cpu, rss = run_inprocess([a.format(d=tmp_path) for a in argv])
    _refused(rc, output, rss, option, "ends in '/'", "give a file's path")
    assert not list(tmp_path.iterdir()), "something was written"


def test_an_output_file_path_naming_a_folder_or_under_a_file_is_refused(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "f").write_text("x")
    for out, words in ((f"{tmp_path}", "is a directory"), (f"{tmp_path}/sub/", "is a directory"),
                       (f"{tmp_path}/f/", "ends in '/'"), (f"{tmp_path}/f/p.yaml", "is a file, not a folder")):
        rc, output, _cpu, rss = run_inprocess(["plan", str(SCENARIO), "-o", out])
        _refused(rc, output, rss, "--out", words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "sub"] and not list((tmp_path / "sub").iterdir())
    assert (tmp_path / "f").read_text() == "x"


@pytest.mark.parametrize("command", ["simulate", "whatif"])
def test_a_folder_output_ending_in_a_slash_is_that_folder(command, tmp_path):
    """``simulate``/``whatif --out`` name a folder: ``--out new/`` creates it and writes inside."""
    argv = [command, str(SCENARIO), "--out", f"{tmp_path}/new/"] + (["--policy", "solo-d"] if command == "simulate" else [])
    rc, output, _cpu, _rss = run_inprocess(argv)
    assert rc == 0, output[-2000:]
    assert (tmp_path / "new").is_dir() and len(list((tmp_path / "new").iterdir())) >= 2


@pytest.mark.parametrize("argv", [
    ["plan", str(SCENARIO), "-o", "{d}/p.yaml", "--plot", ""],
    ["plan", str(SCENARIO), "-o", "{d}/p.yaml", "--current", ""],
    ["plan", str(SCENARIO), "-o", "{d}/p.yaml", "--slo-curve", "--slo-curve-plot", " "],
    ["admit", str(SCENARIO), "--current", "", "--job", "small-a"],
    ["simulate", str(SCENARIO), "--plan", ""],
    ["validate-plan", str(SCENARIO), ""],
    ["validate", ""],
    ["status", "--sim-state", ""],
    ["status", "--journal", ""],
    ["apply", "{d}/p.yaml", "--dry-run", "--sim-state", ""],
    ["apply", "{d}/p.yaml", "--dry-run", "--journal", ""],
    ["apply", "{d}/p.yaml", "--dry-run", "--scenario", ""],
    ["realloc", "{d}/s.json", "--decision", "completion", "--context", ""],
    ["daemon", "--state", ""],
    ["daemon", "--ready-file", ""],
], ids=["plan-plot", "plan-current", "plan-slo-curve-plot", "admit-current", "simulate-plan", "validate-plan-plan",
        "validate-scenario", "status-sim-state", "status-journal", "apply-sim-state", "apply-journal", "apply-scenario",
        "realloc-context", "daemon-state", "daemon-ready-file"])
def test_an_empty_path_is_refused_naming_the_option(argv, tmp_path, monkeypatch):
    """``--plot ''`` drew nothing and ``--current ''`` planned from scratch, without a word; an empty
    ``--sim-state``/``--journal`` took the default file."""
    monkeypatch.chdir(tmp_path)
    argv = [a.format(d=tmp_path) for a in argv]
    option = argv[argv.index("") - 1] if "" in argv else argv[-2]
    rc, output, _cpu, rss = run_inprocess(argv)
    _refused(rc, output, rss, "is empty, not a path")
    if option.startswith("-"):
        assert f"argument {option}" in output or f"argument {option}/" in output, output[-2000:]
    assert not list(tmp_path.iterdir()), "something was written"



MICRO = ROOT / "scenarios" / "weave-micro.yaml"


def _block_and_flow_plans(tmp_path: Path) -> tuple[Path, Path]:
    block = tmp_path / "p.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(MICRO), "-o", str(block), "--time-limit", "20"])
    assert rc == 0, output[-2000:]
    flow = tmp_path / "flow.yaml"
    flow.write_text(yaml.safe_dump(yaml.safe_load(block.read_text()), default_flow_style=True))
    assert flow.read_text().startswith("{") and "\n" in flow.read_text().strip()
    return block, flow


def test_a_flow_style_yaml_plan_is_read_as_yaml_and_judged_as_the_block_style_one(tmp_path):
    """``{kind: PlacementPlan, ...}`` (YAML, starting with '{') was refused as bad JSON."""
    block, flow = _block_and_flow_plans(tmp_path)
    for argv in (["validate-plan", str(MICRO), "{p}"], ["simulate", str(MICRO), "--plan", "{p}"],
                 ["apply", "{p}", "--scenario", str(MICRO), "--dry-run", "--sim-state", str(tmp_path / "s.sqlite")]):
        seen = []
        for p in (block, flow):
            rc, output, _cpu, _rss = run_inprocess([a.format(p=p) for a in argv])
            assert rc == 0, output[-2000:]
            seen.append("".join(output.split()).replace(str(p), "PLAN"))  # (the tables wrap a long path)
        assert seen[0] == seen[1], argv[0]
    # the same wrong value in either style: the same refusal
    for p in (block, flow):
        doc = yaml.safe_load(p.read_text())
        doc["body"]["groups"][0]["members"][0]["moved"] = "yes"
        p.write_text(yaml.safe_dump(doc, default_flow_style=p is flow))
        rc, output, _cpu, rss = run_inprocess(["validate-plan", str(MICRO), str(p)])
        _refused(rc, output, rss, "body.groups.0.members.0.moved")
        assert "JSON" not in output, output[-2000:]


def test_a_broken_flow_style_plan_is_a_yaml_problem_at_its_line(tmp_path):
    (tmp_path / "flow.yaml").write_text("{kind: PlacementPlan,\n version: 1,\n body: {groups: [}\n")
    for argv in (["validate-plan", str(MICRO), "{d}/flow.yaml"], ["simulate", str(MICRO), "--plan", "{d}/flow.yaml"],
                 ["apply", "{d}/flow.yaml", "--dry-run", "--sim-state", "{d}/s.sqlite"]):
        rc, output, _cpu, rss = run_inprocess([a.format(d=tmp_path) for a in argv])
        _refused(rc, output, rss, f"{tmp_path}/flow.yaml:3", "not valid YAML")
        assert "JSON" not in output, output[-2000:]
    (tmp_path / "flow.yaml").write_text("{version: 1, groups: []}\n")
    rc, output, _cpu, rss = run_inprocess(["validate-plan", str(MICRO), str(tmp_path / "flow.yaml")])
    _refused(rc, output, rss, "not a plan document: no 'kind' field")
    # a file named .json is JSON: not JSON there is still a JSON problem
    (tmp_path / "flow.json").write_text("{kind: PlacementPlan, version: 1}\n")
    rc, output, _cpu, rss = run_inprocess(["validate-plan", str(MICRO), str(tmp_path / "flow.json")])
    _refused(rc, output, rss, "flow.json:1", "cannot parse as JSON")


def _own_trace(tmp_path: Path, csv_text: str) -> Path:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "own-trace.csv").write_text(csv_text)
    scenario = tmp_path / "own-trace.yaml"
    scenario.write_text((ROOT / "scenarios" / "own-trace.yaml").read_text())
    return scenario


def test_a_trace_csv_row_missing_a_field_is_refused_naming_the_file_line_and_field(tmp_path):
    """A row shorter than the header was skipped in silence (its value for the column read as an empty cell)."""
    rows = (ROOT / "scenarios" / "traces" / "own-trace.csv").read_text().splitlines()
    text = "\n".join(rows[:5] + ["", "5,300,,0.5", "6,700"] + rows[5:]) + "\n"  # line 6 blank, line 7 an empty cell, line 8 short
    scenario = _own_trace(tmp_path, text)
    for argv in (["validate", str(scenario)], ["plan", str(scenario), "-o", str(tmp_path / "p.yaml")]):
        rc, output, _cpu, rss = run_inprocess(argv)
        _refused(rc, output, rss, f"{tmp_path}/traces/own-trace.csv:8", "2 of the header's 4 fields", "no 'response_tokens', 'tool_s'",
                 "jobs[0].rollout.response_lengths")
        assert ":7:" not in output and ":6:" not in output, output[-2000:]
    assert not (tmp_path / "p.yaml").exists()


def test_a_trace_csv_with_empty_cells_and_blank_lines_still_reads(tmp_path):
    """Empty cells are skipped as docs/workloads.md says; a blank line is no row."""
    rows = (ROOT / "scenarios" / "traces" / "own-trace.csv").read_text().splitlines()
    scenario = _own_trace(tmp_path, "\n".join(rows[:5] + ["", "5,300,,", ",,,"] + rows[5:]) + "\n\n")
    rc, output, _cpu, _rss = run_inprocess(["validate", str(scenario)])
    assert rc == 0, output[-2000:]
