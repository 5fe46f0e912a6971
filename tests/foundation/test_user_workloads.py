"""Users' own workloads: trace files and quantile tables in a scenario, calibration folders.

A user's trace file (``scenarios/own-trace.yaml`` with ``scenarios/traces/own-trace.csv``) drives
``planner plan`` and ``planner simulate``; bad traces and tables are answered with exit status 2,
the field and the fix; ``estimators.calibrate`` writes only where told, works on partial data, and
a scenario's ``calibration`` folder is what the estimators then read.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SCENARIOS, run_cli

TRACE = SCENARIOS / "traces" / "own-trace.csv"


def _copy_scenario(tmp_path: Path, edit=lambda s: s) -> Path:
    (tmp_path / "traces").mkdir(parents=True, exist_ok=True)
    shutil.copy(TRACE, tmp_path / "traces" / TRACE.name)
    p = tmp_path / "own.yaml"
    p.write_text(edit((SCENARIOS / "own-trace.yaml").read_text()))
    return p


def _trace_column(name: str) -> np.ndarray:
    import csv

    with open(TRACE, newline="") as fh:
        return np.array([float(r[name]) for r in csv.DictReader(fh)])


# ------------------------------------------------------------------------------ distributions
def test_trace_table_reproduces_the_trace_quantiles_and_mean():
    from estimators import traces
    from estimators.lengths import LengthDistribution

    vals = _trace_column("response_tokens")
    dist = LengthDistribution("table", table=traces.table_from_values(traces.read_column(TRACE, "response_tokens")))
    draws = dist.sample(40_000, np.random.default_rng(1))
    for q in (0.1, 0.5, 0.9, 0.99):
        assert np.quantile(draws, q) == pytest.approx(np.quantile(vals, q), rel=0.05), q
    assert draws.mean() == pytest.approx(vals.mean(), rel=0.03)
    assert draws.max() <= vals.max() and draws.min() >= vals.min()


def test_quantile_table_interpolates_between_its_points():
    from estimators import traces

    t = np.asarray(traces.table_from_quantiles({0: 0, 0.5: 100, 1: 1100}.items()))
    grid = np.linspace(0, 1, t.size)
    assert np.interp(0.25, grid, t) == pytest.approx(50)
    assert np.interp(0.75, grid, t) == pytest.approx(600)
    assert traces.table_mean(t) == pytest.approx((50 * 0.5 + 600 * 0.5), rel=1e-3)  # mean of the two uniform halves


def test_jsonl_and_gzip_traces_read_like_csv(tmp_path):
    import gzip

    from estimators import traces

    vals = _trace_column("tool_s")
    lines = "\n".join(json.dumps({"tool_s": v, "other": 1}) for v in vals) + "\n"
    (tmp_path / "t.jsonl").write_text(lines)
    with gzip.open(tmp_path / "t.jsonl.gz", "wt") as fh:
        fh.write(lines)
    for name in ("t.jsonl", "t.jsonl.gz"):
        np.testing.assert_allclose(np.sort(traces.read_column(tmp_path / name, "tool_s")), np.sort(vals))
    with pytest.raises(traces.TraceError, match="no line has the key 'x'"):
        traces.read_column(tmp_path / "t.jsonl", "x")


def test_scenario_trace_reaches_the_profile_and_the_simulator():
    from planner.instances.common import job_profile
    from planner.schema import load_scenario
    from simulator.job import setup_from_profile
    from estimators.phases import PoolShape
    from estimators import gpus
    from simulator.workload import make_requests

    sc = load_scenario(SCENARIOS / "own-trace.yaml")
    job = sc.jobs[0]
    prompts = _trace_column("prompt_tokens")
    assert job.rollout.prompt_tokens == pytest.approx(prompts.mean(), abs=2)  # defaulted to the trace's mean
    prof = job_profile(job)
    assert prof.lengths.kind == "table" and prof.prompt_table is not None
    pool = PoolShape(gpus.get("H20"), 1, 8)
    setup = setup_from_profile(prof, pool, PoolShape(gpus.get("H800"), 1, 8))
    reqs = make_requests(setup.workload, np.random.default_rng(0))
    drawn = np.array([r.prompt_tokens for r in reqs])
    assert len(set(drawn)) > 5  # prompts vary per group ...
    groups = drawn.reshape(-1, prof.group_size)
    assert (groups == groups[:, :1]).all()  # ... and a group's samples share theirs
    tools = job_profile(sc.jobs[1]).tool_latency_table
    assert tools is not None and np.mean(tools) == pytest.approx(_trace_column("tool_s").mean(), rel=0.05)


# --------------------------------------------------------------------------------------- CLI
def test_own_trace_drives_plan_and_simulate(tmp_path):
    sc = _copy_scenario(tmp_path)
    r = run_cli("plan", str(sc), "--out", str(tmp_path / "plan.yaml"))
    assert r.returncode == 0, r.stderr
    assert "2 job(s) in " in r.stderr and "not placed" not in r.stderr
    plan = (tmp_path / "plan.yaml").read_text()
    assert "from-trace" in plan and "from-table" in plan and "unplaced: []" in plan
    longest = {}
    quarter = _copy_scenario(tmp_path / "q", lambda s: s.replace("column: response_tokens}", "column: response_tokens, scale: 0.25}"))
    tokens = {}
    for name, path in (("x1", sc), ("quarter", quarter)):
        out = tmp_path / f"sim-{name}"
        r = run_cli("simulate", str(path), "--job", "from-trace", "--policy", "static", "--iterations", "1", "--out", str(out))
        assert r.returncode == 0, r.stderr
        m = json.loads((out / "summary.json").read_text())["metrics"]
        longest[name], tokens[name] = m["iteration_s"][0], m["response_tokens"]
    # a quarter of the trace's lengths: about a quarter of the tokens, a much shorter iteration (the trace drives it)
    assert tokens["quarter"] == pytest.approx(0.25 * tokens["x1"], rel=0.1), tokens
    assert longest["quarter"] < 0.6 * longest["x1"], longest


@pytest.mark.parametrize("edit,needle", [
    (lambda s: s.replace("column: response_tokens", "column: resp"), "no column 'resp'"),
    (lambda s: s.replace("path: traces/own-trace.csv, column: prompt_tokens", "path: traces/none.csv, column: prompt_tokens"),
     "not found"),
    (lambda s: s.replace("0.9: 2000", "0.9: 200"), "must not decrease"),
    (lambda s: s.replace("{0: 20, ", "{"), "span 0 to 1"),
    (lambda s: s + "calibration: no-such-folder\n", "calibration folder"),
    (lambda s: s.replace("latency: {source: trace,", "latency: {source: trcae,"), "needs source: trace or source: quantiles"),
    # prompts whose mean (prompt_tokens' default) is past the most a prompt may have: was an internal error (exit 1)
    (lambda s: s.replace("prompt_lengths: {source: trace, path: traces/own-trace.csv, column: prompt_tokens}",
                         "prompt_lengths: {source: quantiles, quantiles: {0: 1, 1: 10000000}}"),
     "rollout.prompt_lengths: the prompts' mean length, which prompt_tokens defaults to, is 5,000,000 tokens"),
    # tool calls past fixed_latency_s's bound (a day): a table reached 1e9 s, the SLO 2e9 s (past the 1e8 s bound of times)
    (lambda s: s.replace("latency: {source: trace, path: traces/own-trace.csv, column: tool_s}",
                         "latency: {source: quantiles, quantiles: {0: 1, 0.5: 10, 1: 1000000000}}"),
     "rollout.tools.latency: the longest tool call it gives is 1,000,000,000.0 s (scale applied); a tool call may take at "
     "most 86,400 s, as fixed_latency_s"),
    (lambda s: s.replace("latency: {source: trace, path: traces/own-trace.csv, column: tool_s}",
                         "latency: {source: quantiles, quantiles: {0: 1, 1: 100}, scale: 1000}"),
     "rollout.tools.latency: the longest tool call it gives is 100,000.0 s (scale applied)"),
    # every response (or prompt) 0 tokens long: was planned and simulated as a rollout that generates nothing
    (lambda s: s.replace("quantiles: {0: 20, 0.5: 700, 0.9: 2000, 0.99: 3500, 1: 4096}", "quantiles: {0: 0, 1: 0}"),
     "rollout.response_lengths: every response length is 0 tokens"),
    (lambda s: s.replace("prompt_lengths: {source: trace, path: traces/own-trace.csv, column: prompt_tokens}",
                         "prompt_lengths: {source: quantiles, quantiles: {0: 0, 1: 0}}"),
     "rollout.prompt_lengths: every prompt length is 0 tokens"),
])
def test_bad_workload_exit_2_naming_the_field(tmp_path, edit, needle):
    sc = _copy_scenario(tmp_path, edit)
    out = tmp_path / "plan.yaml"
    r = run_cli("plan", str(sc), "--out", str(out))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert "jobs[" in r.stderr or "calibration" in r.stderr
    assert not out.exists()


def test_tool_latencies_of_a_trace_are_bounded_like_fixed_latency_s(tmp_path):
    """A trace's tool latencies past 86,400 s (fixed_latency_s's bound) are refused naming the field; up to it they plan."""
    def edit(s):
        return s.replace("traces/own-trace.csv, column: tool_s", "traces/slow.csv, column: tool_s")

    sc = _copy_scenario(tmp_path, edit)
    (tmp_path / "traces" / "slow.csv").write_text("tool_s\n0.5\n2\n200000\n")
    r = run_cli("validate", str(sc))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "].rollout.tools.latency: the longest tool call it gives is 200,000.0 s" in r.stderr and "Fix:" in r.stderr, r.stderr
    (tmp_path / "traces" / "slow.csv").write_text("tool_s\n0.5\n2\n86400\n")
    r = run_cli("validate", str(sc))
    assert r.returncode == 0, r.stderr


def test_bad_trace_row_names_file_and_line(tmp_path):
    sc = _copy_scenario(tmp_path, lambda s: s.replace("traces/own-trace.csv, column: response_tokens",
                                                      "traces/bad.csv, column: n"))
    (tmp_path / "traces" / "bad.csv").write_text("n\n10\n20\nlots\n")
    r = run_cli("validate", str(sc))
    assert r.returncode == 2 and "bad.csv:4" in r.stderr and "not a number" in r.stderr, r.stderr
    assert "lots" not in r.stderr, "a value of the file is never echoed"


# ------------------------------------------------------------------------------- calibration
def _tool_data(root: Path, values) -> Path:
    d = root / "data" / "rollpacker-tool-latency"
    d.mkdir(parents=True)
    (d / "time_list.json").write_text(json.dumps({"a": list(values)}))
    return root / "data"


def test_calibrate_needs_out_and_never_writes_into_the_package(tmp_path):
    from estimators import calibrate

    data = _tool_data(tmp_path, [1.0, 2.0])
    assert calibrate.main(["--data", str(data)]) == 2
    pkg = Path(calibrate.__file__).parent / "data"
    before = {p.name: p.stat().st_mtime_ns for p in pkg.iterdir()}
    assert calibrate.main(["--data", str(data), "--out", str(pkg)]) == 2
    assert {p.name: p.stat().st_mtime_ns for p in pkg.iterdir()} == before


def test_calibrate_partial_data_writes_what_it_has(tmp_path, capsys):
    from estimators import calibrate

    data = _tool_data(tmp_path, [3.0, 1.0, 2.0])
    out = tmp_path / "cal"
    assert calibrate.main(["--data", str(data), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["tool_latency.json"]
    assert json.loads((out / "tool_latency.json").read_text())["seconds"] == [1.0, 2.0, 3.0]
    said = capsys.readouterr().out
    assert "skipped" in said and "lengths" in said and "kernels H100" in said


@pytest.mark.parametrize("setup", ["empty", "malformed"])
def test_calibrate_bad_data_exit_2_nothing_written(tmp_path, capsys, setup):
    from estimators import calibrate

    data = tmp_path / "data"
    data.mkdir()
    if setup == "malformed":
        (data / "rollpacker-tool-latency").mkdir()
        (data / "rollpacker-tool-latency" / "time_list.json").write_text("{not json")
    out = tmp_path / "cal"
    assert calibrate.main(["--data", str(data), "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err
    assert not out.exists()


def test_scenario_calibration_folder_is_what_the_estimators_read(tmp_path):
    from estimators import calibrate, datadir, lengths, phases
    from planner.instances.common import job_profile
    from planner.schema import load_scenario

    out = tmp_path / "cal"
    assert calibrate.main(["--data", str(_tool_data(tmp_path, [40.0, 60.0])), "--out", str(out)]) == 0
    shipped = lengths.tool_latencies_s().copy()
    edit = lambda s: s.replace("latency: {source: trace, path: traces/own-trace.csv, column: tool_s}", "latency: rollpacker")  # noqa: E731
    try:
        sc = load_scenario(_copy_scenario(tmp_path, lambda s: edit(s) + "calibration: cal\n"))
        assert datadir.selected() == out.resolve()
        np.testing.assert_allclose(lengths.tool_latencies_s(), [40.0, 60.0])
        assert phases.tool_latency_s(job_profile(sc.jobs[1]), conservative=False) == pytest.approx(50.0)
        load_scenario(_copy_scenario(tmp_path, edit))  # a scenario without the field: the shipped tables again
        np.testing.assert_allclose(lengths.tool_latencies_s(), shipped)
    finally:
        datadir.select(None)


def test_simulator_calibrate_takes_model_gpu_and_lengths(tmp_path):
    from simulator import calibrate

    small = {"model": "qwen2.5-1.5b", "gpu": "H20", "engines": 4, "prompts": 8, "group_size": 4, "max_tokens": 4096}
    a = calibrate.rollout_shape(3.0, 1.0, 0, setup={**small, "lengths": f"trace:{TRACE}:response_tokens"})
    b = calibrate.rollout_shape(3.0, 1.0, 0, setup={**small, "lengths": "fixed:100"})
    assert a["longest_s"] > 3 * b["longest_s"]  # the trace's long tail against 100-token answers
    assert calibrate.main(["--lengths", "bogus", "--out", str(tmp_path / "o")]) == 2
    assert calibrate.main(["--model", "qwen2.5-1.5b"]) == 2  # another set-up needs --out
    assert not (tmp_path / "o").exists()


def test_the_estimators_refuse_a_tool_latency_trace_edited_past_its_bound_after_it_was_checked(tmp_path):
    """A scenario (or a daemon's job) is checked when loaded; the estimators and the simulator read its trace again
    through job_profile, which took whatever the file then held: a file edited to a 200,000 s call reached them. Now
    they refuse it (TraceError, a ValueError: what a file damaged meanwhile raises), quoting no value of the file."""
    from estimators.traces import TraceError
    from planner.instances.common import job_profile
    from planner.schema import load_scenario

    sc = _copy_scenario(tmp_path, lambda s: s.replace("traces/own-trace.csv, column: tool_s", "traces/slow.csv, column: tool_s"))
    slow = tmp_path / "traces" / "slow.csv"
    slow.write_text("tool_s\n0.5\n2\n86400\n")
    job = next(j for j in load_scenario(sc).jobs if j.rollout.tools is not None)
    assert max(job_profile(job).tool_latency_table) == pytest.approx(86400.0)
    was = slow.stat().st_mtime_ns
    slow.write_text("tool_s\n0.5\n2\n200000\n")
    os.utime(slow, ns=(was + 10**9, was + 10**9))  # a new mtime however coarse the file system's clock (reads are cached by it)
    with pytest.raises(TraceError) as exc:
        job_profile(job)
    assert "longer than 86,400 s" in exc.value.message and "200" not in exc.value.message
