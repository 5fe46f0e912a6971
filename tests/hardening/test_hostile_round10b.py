"""Round 10b: the less-trodden commands and flags from outside (admit against another scenario's
plan, output folders no process can create, options that did nothing in silence, trace rows that do
not line up with the header, a scenario with no jobs, an empty --name). Each refusal: exit 2, the
option, file or field named, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import _refused

ROOT = Path(__file__).resolve().parents[2]
TINY_1 = ROOT / "scenarios" / "ci" / "tiny-1job.yaml"
TINY_2 = ROOT / "scenarios" / "ci" / "tiny-2jobs.yaml"
VERL = ROOT / "examples" / "onramp" / "verl-grpo-qwen2.5-7b.yaml"
#: a folder no process can create (procfs takes no new entries, root included)
NO_FOLDER = "/proc/rl-planner-no-such-folder"


def test_admit_refuses_a_plan_made_for_another_scenario_on_a_cluster_named_alike(tmp_path):
    """tiny-2jobs' plan against a scenario of other jobs on the same cluster: `plan --current` refused
    it ("places none of ... jobs"), `admit --current` wrote a plan with exit 0, its jobs "left out of
    the new plan, their nodes freed"."""
    plan = tmp_path / "two.json"
    rc, output, _cpu, _rss = run_inprocess(["plan", str(TINY_2), "-o", str(plan)])
    assert rc == 0, output[-2000:]
    other = yaml.safe_load(TINY_2.read_text())
    other["jobs"][0]["name"] = "fresh-a"
    other["jobs"][1]["name"] = "fresh-b"
    s = tmp_path / "other.yaml"
    s.write_text(yaml.safe_dump(other, sort_keys=False))
    out = tmp_path / "admitted.json"
    rc, output, _cpu, rss = run_inprocess(["admit", str(s), "--current", str(plan), "--job", "fresh-a", "-o", str(out)])
    _refused(rc, output, rss, str(plan), "places none")
    assert not out.exists()


@pytest.mark.parametrize("argv", [
    ["simulate", str(TINY_1), "--policy", "static", "--iterations", "1", "--out", NO_FOLDER],
    ["whatif", str(TINY_2), "--no-minimums", "--time-limit", "5", "--out", NO_FOLDER],
], ids=["simulate", "whatif"])
def test_an_output_folder_that_cannot_be_created_is_refused_before_any_work(argv):
    """Permission bits passed it (root, or /proc's own bits): the folder was made after the whole run
    and failed as `internal error: FileNotFoundError` (exit 1)."""
    if not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    rc, output, _cpu, rss = run_inprocess(argv)
    _refused(rc, output, rss, "--out", "cannot create the folder")
    assert "wrote" not in output and "points in" not in output  # refused before the work


def test_simulate_snapshots_without_an_out_folder_is_refused(tmp_path):
    """--snapshots writes snapshots.jsonl into --out: without --out the run ended with exit 0 and no snapshots."""
    rc, output, _cpu, rss = run_inprocess(["simulate", str(TINY_1), "--policy", "static", "--iterations", "1", "--snapshots"])
    _refused(rc, output, rss, "--snapshots", "--out")


@pytest.mark.parametrize("extra", [["--workers", "2"], ["--ray-address", "local"]], ids=["workers", "ray-address"])
def test_whatif_sweep_options_without_a_sweep_are_refused(extra):
    """--workers and --ray-address run a sweep's points; without --sweep they were ignored with exit 0."""
    rc, output, _cpu, rss = run_inprocess(["whatif", str(TINY_2), "--no-minimums", "--time-limit", "5", *extra])
    _refused(rc, output, rss, extra[0], "--sweep")


def _trace_scenario(tmp_path: Path, rows: str) -> Path:
    (tmp_path / "t.csv").write_text("r,t\n" + rows)
    d = yaml.safe_load(TINY_1.read_text())
    d["jobs"][0]["rollout"]["response_lengths"] = {"source": "trace", "path": "t.csv", "column": "r"}
    s = tmp_path / "s.yaml"
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    return s


def test_a_trace_row_with_more_fields_than_the_header_is_refused_naming_its_line(tmp_path):
    """`a,b` under `r,t` with a third value (an unquoted separator shifts the fields) was read in silence."""
    s = _trace_scenario(tmp_path, "100,1\n200,1,7\n300,1\n")
    rc, output, _cpu, rss = run_inprocess(["validate", str(s)])
    _refused(rc, output, rss, "t.csv:3", "3 fields", "header 2")


def test_a_trace_row_with_a_trailing_separator_is_still_read(tmp_path):
    s = _trace_scenario(tmp_path, "100,1,\n200,1,\n300,1\n")
    rc, output, _cpu, _rss = run_inprocess(["validate", str(s)])
    assert rc == 0, output[-2000:]


def test_a_one_job_policy_on_a_scenario_with_no_jobs_says_so(tmp_path):
    """It said "pick one with --job (one of: )"."""
    d = yaml.safe_load(TINY_1.read_text())
    d["jobs"] = []
    s = tmp_path / "none.yaml"
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    rc, output, _cpu, rss = run_inprocess(["simulate", str(s), "--policy", "static"])
    _refused(rc, output, rss, "no jobs", "add a job")
    assert "one of: )" not in output


def test_init_refuses_an_empty_name(tmp_path):
    """--name '' took the experiment's name in silence (an empty path option is refused the same way)."""
    out = tmp_path / "s.yaml"
    rc, output, _cpu, rss = run_inprocess(["init", "--from", "verl", str(VERL), "--name", "", "-o", str(out)])
    _refused(rc, output, rss, "--name")
    assert not out.exists()


def test_a_time_limit_under_a_tenth_of_a_second_is_refused_without_a_contradiction():
    """`plan --time-limit 0.001` on an unestimated scenario said the estimates need "about 0.0 s ...,
    more than the 0.0 s" the limit leaves: both rounded to one decimal (the refusal built directly,
    no clock)."""
    from planner.commands.plan import _compile_refusal
    from planner.instances.placement import CompileCut

    cut = CompileCut({}, total=2, missing=2, rest_s=0.02, measured=False, before=True, elapsed_s=0.0)
    text = _compile_refusal(cut, 0.001, True, 0.3, False).render()
    assert "needs about 0.02 s" in text and "more than the 0.0 s" in text, text
