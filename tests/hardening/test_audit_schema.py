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


def test_plan_may_still_write_over_its_current_plan(tmp_path):
    """Re-optimising a plan in place (`--current P -o P`) is not an input replaced by something else: allowed."""
    plan = tmp_path / "p.yaml"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_2), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_2), "--current", str(plan), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    assert yaml.safe_load(plan.read_text())["kind"] == "PlacementPlan"
