"""A short time limit holds in CPU seconds too (issue 26): no solver threads beyond one under a
limit of 2 s or less, and one BLAS thread in the quick commands' executable. Nothing here is timed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.placement.generate import generate_distinct
from formulation.common import SolveOptions, SolveStatus
from formulation.placement import cpsat
from formulation.placement.solve import SHORT_LIMIT_S, solve


@pytest.mark.parametrize("limit, threads, want", [(1.0, 4, 1), (SHORT_LIMIT_S, 2, 1), (5.0, 3, 3), (1.0, 1, 1)])
def test_solver_threads_are_cut_to_one_under_a_short_limit(monkeypatch, limit, threads, want):
    seen = []

    def stand_in(idx, options, *a, **k):
        seen.append(options.threads)
        return None, SolveStatus.NOT_SOLVED, None, "stand-in"

    monkeypatch.setattr(cpsat, "solve_compact", stand_in)
    res = solve(generate_distinct(8, 0), SolveOptions(time_limit_s=limit, threads=threads), "cpsat")
    assert seen == [want]
    assert ("solver threads cut to 1" in res.record.message) == (want < threads)


def _blas_setting_seen_by_the_command(argv: list[str], env: dict) -> list[str]:
    """What a command run by the executable's ``main`` sees: OPENBLAS_NUM_THREADS, and whether
    numpy was imported before (the command itself stands in: it prints and returns)."""
    code = ("import os, sys; from planner import cli; "
            "cli._run = lambda args: print(os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules) or 0; "
            f"cli.main({argv!r}, leave_quickly=True)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.split()


def test_the_quick_commands_run_numpy_with_one_blas_thread(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    plan = ["plan", "scenarios/ci/tiny-1job.yaml", "--out", str(tmp_path / "p.json")]
    assert _blas_setting_seen_by_the_command(plan, env) == ["1", "False"]
    assert _blas_setting_seen_by_the_command(["admit", "x.yaml", "--current", "p.json", "--job", "j"], env)[0] == "1"
    # a caller's own setting stands, and commands that are not quick keep the default
    assert _blas_setting_seen_by_the_command(plan, {**env, "OPENBLAS_NUM_THREADS": "2"})[0] == "2"
    assert _blas_setting_seen_by_the_command(["simulate", "scenarios/ci/tiny-1job.yaml"], env)[0] == "None"


def test_admit_imports_neither_the_other_commands_nor_a_solver(tmp_path):
    """`planner admit` (a decision of milliseconds: its whole command is its start-up) imports its own
    command module alone, and no solver, no scipy, no torch, no Ray (each costs tenths of a second)."""
    import json

    inst = generate_distinct(40, 0)
    data = {"kind": "PlacementInstance", **inst.model_dump(mode="json")}
    full, base, plan = tmp_path / "full.json", tmp_path / "base.json", tmp_path / "plan.json"
    full.write_text(json.dumps(data))
    arriving = data["jobs"][5]["name"]
    base.write_text(json.dumps(dict(data, jobs=[j for j in data["jobs"] if j["name"] != arriving])))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-m", "planner.cli", "plan", str(base), "--backend", "fast", "--out", str(plan),
                    "--allow-unplaced"], capture_output=True, text=True, env=env, check=True)
    code = ("import sys\nfrom planner import cli\n"
            f"rc = cli.main(['admit', {str(full)!r}, '--current', {str(plan)!r}, '--job', {arriving!r}, '--out', "
            f"{str(tmp_path / 'admitted.json')!r}])\n"
            "print(rc, ' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.split()
    rc, mods = out[0], set(out[1:])
    assert rc in ("0", "2")  # admitted, or explained why not: either way the imports are the command's own
    assert "planner.commands.admit" in mods
    assert not {m for m in mods if m.startswith("planner.commands.") and not m.startswith("planner.commands._")} - {"planner.commands.admit"}
    heavy = ("highspy", "ortools", "scipy", "torch", "ray", "matplotlib", "planner.schema", "estimators.simulate")
    assert not {m for m in mods if m.split(".")[0] in heavy or m in heavy}
