"""A newcomer's first hour (issue 14): --json on every command, terse defaults with --verbose,
the schema's solver backends matching the CLI's, nothing extra on stderr when piped."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, SCENARIOS

TINY = str(SCENARIOS / "ci" / "tiny-2jobs.yaml")


def _run(argvs, cwd, env=None):
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="100", **(env or {}))
    e.pop("RL_PLANNER_PROGRESS", None)
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"), json.dumps(argvs)],
                       cwd=cwd, capture_output=True, text=True, timeout=600, env=e)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])["results"]


def test_every_command_answers_in_json(tmp_path):
    pytest.importorskip("torch")  # apply and status: the executor extra
    res = _run([
        ["validate", TINY, "--json"],
        ["estimate", TINY, "--json"],
        ["plan", TINY, "--out", "p.yaml", "--json"],
        ["validate-plan", TINY, "p.yaml", "--json"],
        ["whatif", TINY, "--no-minimums", "--json"],
        ["realloc", str(SCENARIOS / "realloc" / "hetero-h20-h100.json"), "--scenario", str(SCENARIOS / "realloc" / "hetero.yaml"), "--json"],
        ["simulate", TINY, "--policy", "groups", "--json"],
        ["apply", "p.yaml", "--scenario", TINY, "--dry-run", "--json"],
        ["apply", "p.yaml", "--scenario", TINY, "--json"],
        ["status", "--json"],
    ], tmp_path)
    out = {}
    for r in res:
        assert r["rc"] == 0, (r["argv"], r["stderr"])
        out[r["argv"][0] + ("-dry" if "--dry-run" in r["argv"] else "")] = json.loads(r["stdout"])  # stdout is JSON and only JSON
    assert out["validate"][0]["ok"] and out["validate"][0]["jobs"] == 2
    assert out["plan"]["kind"] == "PlacementPlan" and out["plan"]["body"]["groups"]
    assert out["validate-plan"]["ok"] and out["validate-plan"]["violations"] == []
    assert out["whatif"]["kind"] == "CapacityPlan" and out["whatif"]["body"]["cost_per_hour"] > 0
    dry = out["apply-dry"]
    assert dry["steps"] == sum(len(u["steps"]) for u in dry["units"]) > 0 and all(u["cause"] for u in dry["units"])
    assert out["apply"]["status"] == "done" and out["apply"]["steps"] == dry["steps"]
    assert {c["name"] for c in out["status"]["state"]["components"]} >= {u["component"] for u in dry["units"]}


def test_defaults_are_terse_and_verbose_says_the_rest(tmp_path):
    pytest.importorskip("torch")
    tail = str(SCENARIOS / "realloc" / "tail-h100-16node.json")
    scen = str(SCENARIOS / "dynarl" / "math-7b-128gpu.yaml")
    res = _run([["realloc", tail, "--scenario", scen], ["realloc", tail, "--scenario", scen, "--verbose"],
                ["plan", TINY, "--out", "p.yaml"], ["apply", "p.yaml", "--scenario", TINY], ["status"]], tmp_path)
    terse, verbose, plan, apply, status = res
    assert terse["rc"] == verbose["rc"] == 0
    n_terse, n_verbose = len(terse["stdout"].splitlines()), len(verbose["stdout"].splitlines())
    assert n_terse <= 60 < n_verbose, (n_terse, n_verbose)
    assert "--verbose" in terse["stdout"] and "migration steps" in verbose["stdout"] and "because" not in terse["stdout"]
    # piped (not a terminal): no status line, nothing but the summary on stderr
    assert "plan:" not in plan["stderr"] and "\r" not in plan["stderr"] and "\x1b" not in plan["stderr"], plan["stderr"]
    # apply: no line per step unless --verbose
    assert apply["rc"] == 0 and "  done " not in apply["stderr"], apply["stderr"][:2000]
    # status: host DRAM in use to 0.1 GB, not 44.7713
    rows = [ln for ln in status["stdout"].splitlines() if ln.startswith("│ h20-0")]
    assert rows and "/512" in rows[0]
    used = rows[0].split("│")[5].strip().split("/")[0]
    assert len(used.split(".")[-1]) <= 1, rows[0]


@pytest.mark.parametrize("backend", ["auto", "colgen", "highs", "cpsat", "greedy"])
def test_the_scenarios_solver_backends_are_plans(backend):
    """solver.backend takes exactly planner plan --backend's choices (plan --help: its default comes from there)."""
    import argparse

    from planner.commands import plan
    from planner.schema.scenario import SolverSpec

    p = argparse.ArgumentParser()
    plan.add_arguments(p)
    choices = next(a.choices for a in p._actions if a.dest == "backend")
    assert backend in choices and SolverSpec(backend=backend).backend == backend
    assert set(SolverSpec.model_fields["backend"].annotation.__args__) == set(choices)
