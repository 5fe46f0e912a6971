"""Shipped scenarios, the generated JSON Schema, plan documents, and the CLI surface."""

from __future__ import annotations

import json

import pytest

from formulation.common import SolveRecord, SolveStatus
from planner import plandoc
from planner.cli import build_parser, main
from planner.errors import UserError
from planner.schema import load_scenario
from planner.schema.__main__ import SCHEMA_PATH, generate
from tests.conftest import SCENARIOS, run_cli

# scenarios/instances/ holds numbers-only placement instances (docs/placement.md), scenarios/executor/
# the executor's own targets (ExecutorTarget plans), not scenarios
SHIPPED = sorted(p for p in SCENARIOS.rglob("*.yaml") if not {"instances", "executor"} & set(p.relative_to(SCENARIOS).parts))


def test_there_are_shipped_scenarios():
    names = {p.name for p in SHIPPED}
    assert {"weave-micro.yaml", "weave-trace-60.yaml", "agentic-7b.yaml", "procurement.yaml"} <= names
    assert len(list((SCENARIOS / "dynarl").glob("math-*.yaml"))) == 6
    assert len(list((SCENARIOS / "ci").glob("*.yaml"))) >= 2


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(SCENARIOS)) for p in SHIPPED])
def test_every_shipped_scenario_validates(path):
    sc = load_scenario(path)
    assert sc.name


def test_trace_has_50_jobs_with_arrivals():
    sc = load_scenario(SCENARIOS / "weave-trace-60.yaml")
    arrivals = [j.arrival_s for j in sc.jobs]
    assert len(sc.jobs) >= 50 and arrivals == sorted(arrivals) and arrivals[-1] > arrivals[0]


def test_dynarl_overlay_includes_base():
    sc = load_scenario(SCENARIOS / "dynarl" / "math-32b-128gpu.yaml")
    job = sc.jobs[0]
    assert (job.rollout.batch_prompts, job.rollout.group_size, job.rollout.max_response_tokens) == (512, 16, 28672)
    assert sum(g.count * g.gpus_per_node for g in sc.cluster.node_groups) == 128
    assert sc.solver.phase_time_estimate == "sampled"  # from base.yaml


def test_json_schema_is_up_to_date():
    assert SCHEMA_PATH.read_text() == generate(), "run: python -m planner.schema"


def test_json_schema_describes_scenarios():
    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["additionalProperties"] is False
    assert {"name", "cluster", "jobs", "solver"} <= set(schema["properties"])


# ----------------------------------------------------------------------------- plan documents
def _doc(**body):
    rec = SolveRecord("highs", SolveStatus.OPTIMAL, objective=12.5, best_bound=12.5, wall_time_s=0.25, warm_start="greedy")
    return plandoc.PlanDocument(kind="TestPlan", scenario="s", solver=plandoc.SolverRecord(**rec.as_dict()), body=body)


def test_plan_roundtrip_is_deterministic(tmp_path):
    doc = _doc(groups=[{"b": 1.0 / 3.0, "a": [3, 2, 1]}], z=1, a=2)
    for suffix in (".yaml", ".json"):
        p1, p2 = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
        plandoc.write(doc, p1)
        back = plandoc.read(p1)
        plandoc.write(back, p2)
        assert p1.read_bytes() == p2.read_bytes()
        assert back.solver.status == "optimal" and back.solver.gap == 0.0 and back.solver.warm_start == "greedy"
    text = plandoc.dumps(doc)
    assert text.startswith("kind: TestPlan\nversion: 1\n")


def test_plan_from_another_version_is_refused(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text(plandoc.dumps(doc := _doc()).replace("version: 1", "version: 7"))
    with pytest.raises(UserError) as err:
        plandoc.read(p)
    assert "version 7" in err.value.render() and "reads version 1" in err.value.render()
    with pytest.raises(UserError, match="expected a PlacementPlan"):
        plandoc.loads(plandoc.dumps(doc), expect_kind="PlacementPlan")
    with pytest.raises(UserError, match="not a plan document"):
        plandoc.loads("just: text\n")


def test_solve_record_gap():
    assert SolveRecord("x", SolveStatus.FEASIBLE, objective=110.0, best_bound=100.0).gap == pytest.approx(10 / 110)
    assert SolveRecord("x", SolveStatus.NOT_SOLVED).gap is None


# ------------------------------------------------------------------------------------- CLI
def _commands():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)


def test_help_on_every_command(capsys):
    for name in [None] + _commands():
        argv = ["--help"] if name is None else [name, "--help"]
        with pytest.raises(SystemExit) as ex:
            main(argv)
        assert ex.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_console_entry_point_and_exit_codes(tmp_path):
    proc = run_cli("validate", str(SCENARIOS / "ci" / "tiny-2jobs.yaml"))
    assert proc.returncode == 0 and "ok:" in proc.stdout
    proc = run_cli("no-such-command")
    assert proc.returncode == 2
    proc = run_cli("estimate", str(SCENARIOS / "weave-micro.yaml"), "--job", "qwen7b-mth")
    assert proc.returncode == 2 and "qwen7b-math" in proc.stderr


def test_estimate_table_and_json():
    proc = run_cli("estimate", str(SCENARIOS / "weave-micro.yaml"))
    assert proc.returncode == 0, proc.stderr
    for text in ("qwen7b-math", "host DRAM per rollout node", "solo iteration time", "H20"):
        assert text in proc.stdout
    proc = run_cli("estimate", str(SCENARIOS / "ci" / "tiny-mixed.yaml"), "--json")
    data = json.loads(proc.stdout)
    assert len(data["jobs"]) == 4
    for job in data["jobs"]:
        assert job["solo_iteration_s"] > 0 and job["slo_s"] >= job["solo_iteration_s"] - 0.1
        assert set(job["rollout_s"]) <= {"H20", "H800", "H100"}


def test_internal_error_is_status_1_without_traceback(monkeypatch, capsys):
    import planner.commands.validate as v

    def boom(args):
        raise RuntimeError("kaput")

    monkeypatch.setattr(v, "run", boom)
    rc = main(["validate", "x.yaml"])
    err = capsys.readouterr().err
    assert rc == 1 and "internal error" in err and "Traceback" not in err


def test_a_command_that_pauses_the_collector_resumes_it(monkeypatch, capsys):
    """``PAUSE_GC`` (planner admit): the cyclic collector is off while the command runs and on
    again after it, also when it fails (an in-process caller keeps its collector)."""
    import gc

    import planner.commands.admit as admit

    assert admit.PAUSE_GC
    seen = []

    def run(args):
        seen.append(gc.isenabled())
        raise RuntimeError("kaput")

    monkeypatch.setattr(admit, "run", run)
    assert gc.isenabled()
    assert main(["admit", "x.json", "--current", "p.json", "--job", "j"]) == 1
    assert seen == [False] and gc.isenabled()
    capsys.readouterr()
