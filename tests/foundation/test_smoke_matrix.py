"""The CLI smoke matrix (issue 24): every command, and every ``simulate --policy``, with only its
required arguments on shipped inputs, then the same with ``--json``.

Each command must exit 0 and say something readable (a summary naming what it did, no
traceback); with ``--json`` its stdout must be JSON and only JSON. All commands run in one
process (:mod:`tests.foundation.inprocess`: one start-up) in one temporary folder, on the
smallest shipped scenarios (``scenarios/ci``). What counts as "required":

* ``admit``: ``--current`` and ``--job`` (argparse requires them);
* ``realloc``: the shipped snapshots do not carry throughput curves for every component, so they
  need their ``--scenario`` (the snapshot's README line says so; without it the command exits 2
  naming the fix);
* ``apply`` of a PlacementPlan: its ``--scenario`` (the plan names nodes, the scenario sizes them);
* ``daemon``: ``--scenario`` on the first start; its default runs until stopped, so the matrix gives
  it the horizon it needs to end (``--clock virtual --until-idle``) and a free port;
* ``status``: after ``apply`` (it reads the cluster ``apply`` left in the folder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT, SCENARIOS

TINY = str(SCENARIOS / "ci" / "tiny-2jobs.yaml")
ONE = str(SCENARIOS / "ci" / "tiny-1job.yaml")
JOB_POLICIES = ("static", "static-batch", "colocated", "dynamic", "consolidate")
TRACE_POLICIES = ("groups", "solo-d", "colocated-jobs")


def _run(argvs, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="100")
    env.pop("RL_PLANNER_PROGRESS", None)
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "foundation" / "inprocess.py"), json.dumps(argvs)],
                       cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])["results"]


def _first_job_only(tmp_path) -> str:
    """tiny-2jobs without its second job: the current plan ``admit`` adds small-b to."""
    import yaml

    doc = yaml.safe_load(open(TINY))
    doc["jobs"] = doc["jobs"][:1]
    doc["name"] = "tiny-first"
    p = tmp_path / "tiny-first.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(p)


def matrix(tmp_path) -> list[tuple[list[str], str]]:
    """(argv, a phrase the readable output must hold), in an order where each command's inputs exist."""
    first = _first_job_only(tmp_path)
    hetero = [str(SCENARIOS / "realloc" / "hetero-h20-h100.json"), "--scenario", str(SCENARIOS / "realloc" / "hetero.yaml")]
    rows: list[tuple[list[str], str]] = [
        (["validate", TINY], "ok"),
        (["estimate", TINY], "small-a"),
        (["plan", first], "plan written to tiny-first.plan.yaml"),
        (["plan", TINY], "plan written to tiny-2jobs.plan.yaml"),
        (["validate-plan", TINY, "tiny-2jobs.plan.yaml"], "every constraint holds"),
        (["admit", TINY, "--current", "tiny-first.plan.yaml", "--job", "small-b"], "admitted small-b"),
        (["realloc", *hetero], "throughput"),
        (["whatif", TINY], "$/h"),
        (["schema"], "ClusterSpec"),
    ]
    rows += [(["simulate", ONE, "--policy", p], "iteration time") for p in JOB_POLICIES]
    rows += [(["simulate", TINY, "--policy", p], "SLO attainment") for p in TRACE_POLICIES]
    rows += [
        (["apply", "tiny-2jobs.plan.yaml", "--scenario", TINY, "--dry-run"], "totals:"),
        (["apply", "tiny-2jobs.plan.yaml", "--scenario", TINY], "applied"),
        (["status"], "components"),
        (["daemon", "--scenario", ONE, "--clock", "virtual", "--until-idle", "--listen", "127.0.0.1:0"], "idle"),
    ]
    return rows


JSONLESS = {"schema", "daemon"}  # schema prints a JSON schema anyway; the daemon serves its answers over HTTP


def test_every_command_runs_on_its_defaults_and_says_what_it_did(tmp_path):
    rows = matrix(tmp_path)
    res = _run([argv for argv, _ in rows], tmp_path)
    for (argv, phrase), r in zip(rows, res):
        said = r["stdout"] + r["stderr"]
        assert r["rc"] == 0, (argv, r["stderr"][-2000:])
        assert "Traceback" not in said and "internal error" not in said, (argv, said[-2000:])
        assert phrase in said, (argv, phrase, said[-2000:])


def test_every_command_answers_in_json_on_its_defaults(tmp_path):
    rows = [(argv, p) for argv, p in matrix(tmp_path) if argv[0] not in JSONLESS]
    res = _run([argv + ["--json"] for argv, _ in rows], tmp_path)
    for (argv, _), r in zip(rows, res):
        assert r["rc"] == 0, (argv, r["stderr"][-2000:])
        json.loads(r["stdout"])  # stdout is JSON and only JSON


def test_simulate_runs_a_one_job_policy_without_iterations():
    """The default of --iterations (2) is read before the amount of work is bounded (issue 24: it
    was None there, and every request-level policy crashed with TypeError on its defaults)."""
    from planner.cli import main

    assert main(["simulate", ONE, "--policy", "static"]) == 0


def test_until_idle_refuses_a_scenario_that_cannot_go_idle(tmp_path, capsys):
    """Jobs without duration_s run until cancelled: --until-idle would never end (issue 24)."""
    from planner.cli import main

    rc = main(["daemon", "--scenario", TINY, "--clock", "virtual", "--until-idle", "--state", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert rc == 2 and "--until-idle" in err and "small-a" in err and "--max-cycles" in err, err
    assert not (tmp_path / "s.sqlite").exists()  # refused before the state file is made


def test_a_scenarios_phase_times_are_estimated_once_and_a_changed_scenario_is_not_read_from_the_cache(tmp_path, monkeypatch):
    """planner/instances/cache.py: the second plan of the same scenario reads the compiled instance
    (the model is not run again) and writes the same plan; a changed scenario gets its own entry."""
    import yaml

    import planner.instances.placement as placement
    from planner.cli import main

    monkeypatch.setenv("RL_PLANNER_CACHE", "1")
    monkeypatch.setenv("RL_PLANNER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    calls = []
    real = placement.compile_scenario
    monkeypatch.setattr(placement, "compile_scenario", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert main(["plan", TINY, "-o", "a.yaml"]) == 0
    assert main(["plan", TINY, "-o", "b.yaml"]) == 0
    assert len(calls) == 1
    body = lambda p: yaml.safe_load(open(p))["body"]  # noqa: E731
    assert body("a.yaml") == body("b.yaml")
    doc = yaml.safe_load(open(TINY))
    doc["jobs"][0]["rollout"]["max_response_tokens"] = 1024
    (tmp_path / "changed.yaml").write_text(yaml.safe_dump(doc))
    assert main(["plan", "changed.yaml", "-o", "c.yaml"]) == 0
    assert len(calls) == 2 and len(list((tmp_path / "cache" / "instances").iterdir())) == 2
