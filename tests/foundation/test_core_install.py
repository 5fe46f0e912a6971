"""The core install: every core command runs without torch, ray and scipy (issue 14).

``pip install rl-planner`` (no extras) must validate, estimate, plan, admit, realloc, simulate,
whatif and run the daemon on the sim backend; torch and ray belong to the ``executor`` extra,
scipy to ``calibrate``. The commands run in one subprocess whose imports of the three packages
fail (tests/foundation/inprocess.py --block-extras), as on a machine where they are not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, SCENARIOS

EXTRAS = {"torch", "ray", "scipy"}


def _run_blocked(argvs: list[list[str]], cwd) -> dict:
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="120")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"), "--block-extras", json.dumps(argvs)],
                       cwd=cwd, capture_output=True, text=True, timeout=600, env=e)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_core_commands_run_without_torch_ray_or_scipy(tmp_path):
    tiny = str(SCENARIOS / "ci" / "tiny-2jobs.yaml")
    one = tmp_path / "one.yaml"  # small-a alone: the plan admit starts from
    one.write_text((SCENARIOS / "ci" / "tiny-2jobs.yaml").read_text())
    cmds = [
        ["validate", tiny],
        ["estimate", tiny],
        ["plan", tiny, "--out", "plan.yaml"],
        ["validate-plan", tiny, "plan.yaml"],
        ["realloc", str(SCENARIOS / "realloc" / "hetero-h20-h100.json"), "--scenario", str(SCENARIOS / "realloc" / "hetero.yaml")],
        ["simulate", tiny, "--policy", "static", "--job", "small-a", "--iterations", "1"],
        ["simulate", tiny, "--policy", "groups"],
        ["whatif", tiny, "--no-minimums"],
        ["daemon", "--scenario", tiny, "--state", "d.sqlite", "--clock", "virtual", "--max-cycles", "3", "--listen", "127.0.0.1:0"],
        ["apply", "plan.yaml", "--scenario", tiny, "--backend", "sim", "--dry-run"],
        ["status"],
        ["apply", "plan.yaml", "--scenario", tiny, "--backend", "sim"],
    ]
    out = _run_blocked(cmds, tmp_path)
    assert out["imported"] == [], f"a core command imported {out['imported']}"
    *core, dry, status, apply = out["results"]
    for r in core:
        assert r["rc"] == 0, (r["argv"], r["stderr"])
    daemon = core[-1]
    assert "apply ok" in daemon["stderr"], daemon  # the simulated cluster applied the daemon's first plan
    assert (tmp_path / "plan.yaml").exists()
    # the diff needs no worker (issue 24): every step, and the totals per kind
    assert dry["rc"] == 0 and "totals:" in dry["stdout"] and " create" in dry["stdout"], dry
    assert not (tmp_path / ".rl-planner" / "sim-state.sqlite").exists()  # a dry run writes no cluster
    # nothing applied: status says so, and that a real apply needs the executor extra
    assert status["rc"] == 2 and "nothing was applied" in status["stderr"] and "rl-planner[executor]" in status["stderr"], status
    # the executor is an extra: one line naming it, no traceback
    assert apply["rc"] == 2 and "rl-planner[executor]" in apply["stderr"], apply
    assert len(apply["stderr"].strip().splitlines()) == 1 and "Traceback" not in apply["stderr"]


def test_status_and_a_dry_run_read_a_cluster_the_executor_made_without_torch(tmp_path):
    """A cluster applied where the executor extra is installed, then shown and diffed on a core
    install (issue 24): the trainer ranks' saved tensors are not loaded, nothing is saved."""
    pytest.importorskip("torch")
    tiny = str(SCENARIOS / "ci" / "tiny-1job.yaml")  # the smallest cluster: one group
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"),  # with the extras: one process
                        json.dumps([["plan", tiny, "-o", "plan.yaml"], ["apply", "plan.yaml", "--scenario", tiny]])],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, env=e)
    assert r.returncode == 0, r.stderr[-4000:]
    for made in json.loads(r.stdout.strip().splitlines()[-1])["results"]:
        assert made["rc"] == 0, (made["argv"], made["stderr"][-2000:])
    state = tmp_path / ".rl-planner" / "sim-state.sqlite"
    before = state.read_bytes()
    out = _run_blocked([["status"], ["status", "--json"], ["apply", "plan.yaml", "--scenario", tiny, "--dry-run"]], tmp_path)
    assert out["imported"] == [], out["imported"]
    status, status_json, dry = out["results"]
    assert status["rc"] == 0 and "small.trainer" in status["stdout"], status
    components = {c["name"] for c in json.loads(status_json["stdout"])["state"]["components"]}
    assert {"small/trainer", "small/rollout"} <= components, components
    assert dry["rc"] == 0 and "nothing to do" in dry["stdout"], dry
    assert state.read_bytes() == before


def test_every_core_module_imports_without_torch_ray_or_scipy():
    """No module of planner, formulation, estimators or simulator imports them at its top level
    (the executor package is the extra's; its modules import torch where they run workers)."""
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"), "--block-extras", "--import-all",
                        "planner", "formulation", "estimators", "simulator"], cwd=ROOT, capture_output=True, text=True, timeout=600, env=e)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["failed"] == [] and out["imported"] == [], out


def test_core_dependencies_name_no_extra_and_the_executor_extra_takes_any_torch_build():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower() for d in meta["dependencies"]}
    assert not names & EXTRAS, names & EXTRAS
    torch = [d for d in meta["optional-dependencies"]["executor"] if d.startswith("torch")]
    assert torch and "+" not in torch[0] and "==" not in torch[0] and "<" in torch[0], torch  # a range, no local-version pin


@pytest.mark.skipif(os.environ.get("RL_PLANNER_PIP_CHECK") != "1", reason="pip resolver check: RL_PLANNER_PIP_CHECK=1 (1-2 min, reads the package index)")
@pytest.mark.parametrize("torch_req, build", [("torch==2.13.0", "+cpu"), ("torch==2.14.1", "")])
def test_the_executor_extra_resolves_beside_a_cpu_and_a_cuda_torch(tmp_path, torch_req, build):
    """pip's resolver (dry run, nothing installed) accepts the executor extra with the CPU build
    and with the CUDA build (PyPI's plain wheel, which pulls the nvidia-* runtime packages)."""
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                        torch_req, f"{ROOT}[executor]"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert got["torch"] == torch_req.split("==")[1] + build and "ray" in got
    cuda = any(n.startswith("nvidia-") for n in got)
    assert cuda == (build == ""), sorted(n for n in got if n.startswith("nvidia-"))
