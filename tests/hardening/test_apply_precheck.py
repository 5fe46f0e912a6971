"""``planner apply`` checks a plan before it acts (issue 25, item 1): a PlacementPlan whose digest
is zeroed or missing, with a group removed or duplicated, a job listed twice, or false cost and
cycle claims is refused with exit 2 (as ``validate-plan`` refuses it) and nothing is written; an
ExecutorTarget that runs nothing, or keeps none of the running components, needs --allow-stop-all.
In-process (planner.cli.main) to stay fast."""

from __future__ import annotations

import contextlib
import copy
import io
from pathlib import Path

import pytest
import yaml

from tests.hardening import corpus

TINY = str(corpus.ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml")


def run(argv: list[str]) -> tuple[int, str]:
    from planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, out.getvalue() + err.getvalue()


def _drop_group(d):
    # the last group goes (the plan of the tiny scenario may be one pinned group of both jobs: then none is left)
    d["body"]["groups"] = d["body"]["groups"][:-1]


def _dup_group(d):
    d["body"]["groups"].append(copy.deepcopy(d["body"]["groups"][0]))


def _dup_job(d):
    d["body"]["groups"][0]["members"].append(copy.deepcopy(d["body"]["groups"][0]["members"][0]))


def _false_cost(d):
    d["body"]["cost_per_hour"] = 1.0
    d["body"]["groups"][0]["cost_per_hour"] = 1.0


def _false_cycle(d):
    d["body"]["groups"][0]["cycle_time_s"] = 0.5


BAD = [
    ("digest-zero", lambda d: d.update(scenario_digest="0" * 16), "scenario_digest"),
    ("digest-missing", lambda d: d.pop("scenario_digest"), "scenario_digest"),
    ("group-removed", _drop_group, "placed-once"),
    ("group-duplicated", _dup_group, "body.groups"),
    ("job-twice", _dup_job, "placed-once"),
    ("false-cost", _false_cost, "cost"),
    ("false-cycle", _false_cycle, "cycle-time"),
]


@pytest.mark.parametrize("cid,mutate,expect", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("dry", [False, True], ids=["apply", "dry-run"])
def test_apply_refuses_a_plan_validate_plan_refuses(good_plan, tmp_path, cid, mutate, expect, dry):
    d = copy.deepcopy(good_plan)
    mutate(d)
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    before = set(p.name for p in tmp_path.iterdir())
    rc, out = run(["apply", str(tmp_path / "x.yaml"), "--scenario", TINY, "--sim-state", str(tmp_path / "s.db"),
                   *(["--dry-run"] if dry else [])])
    assert rc == 2, out
    assert expect in out and "Traceback" not in out, out
    assert set(p.name for p in tmp_path.iterdir()) == before, "nothing written"
    assert run(["validate-plan", TINY, str(tmp_path / "x.yaml")])[0] == 2  # (a plan without a digest too: round 6 (b))


def test_the_good_plan_applies(good_plan, tmp_path):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(good_plan, sort_keys=False))
    rc, out = run(["apply", str(tmp_path / "p.yaml"), "--scenario", TINY, "--sim-state", str(tmp_path / "s.db")])
    assert rc == 0, out


def _target(components: list) -> str:
    d = copy.deepcopy(corpus.BASE_PLAN)
    d["body"]["components"] = components
    return yaml.safe_dump(d, sort_keys=False)


def test_an_empty_or_all_stopping_target_needs_the_flag(tmp_path: Path):
    sim = ["--sim-state", str(tmp_path / "s.db")]
    (tmp_path / "empty.yaml").write_text(_target([]))
    rc, out = run(["apply", str(tmp_path / "empty.yaml"), *sim])
    assert rc == 2 and "--allow-stop-all" in out and "body.components" in out, out
    assert not (tmp_path / "s.db").exists(), "refused before the cluster file is made"
    (tmp_path / "base.yaml").write_bytes(corpus.dump(corpus.BASE_PLAN))
    assert run(["apply", str(tmp_path / "base.yaml"), *sim])[0] == 0
    other = dict(corpus.BASE_PLAN["body"]["components"][0], name="other/rollout")
    (tmp_path / "other.yaml").write_text(_target([other]))
    rc, out = run(["apply", str(tmp_path / "other.yaml"), *sim])
    assert rc == 2 and "keeps none of the 1 running" in out and "job/rollout" in out, out
    rc, out = run(["apply", str(tmp_path / "empty.yaml"), *sim])
    assert rc == 2, out
    # explicitly asked for: both go through
    assert run(["apply", str(tmp_path / "other.yaml"), *sim, "--allow-stop-all"])[0] == 0
    rc, out = run(["apply", str(tmp_path / "empty.yaml"), *sim, "--allow-stop-all"])
    assert rc == 0, out
    rc, out = run(["status", *sim, "--json"])
    assert rc == 0 and "other/rollout" not in out, out
