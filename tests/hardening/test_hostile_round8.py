"""Round 8: hostile shapes the seven earlier rounds missed. A trace or calibration file holding a
400-digit integer (an OverflowError, "a bug in rl-planner"), JSON's ``true`` read as the number 1,
a client id ``'²'``, a CSV header naming the column twice, a byte-order mark before a trace's header
("no column 'n'" for a header that shows one); a path with a name longer than any file system holds
(an internal error from every command, a 500 from the API); a ``whatif --sweep --out`` interrupted
while plotting (the new table beside the previous sweep's plots, its points already deleted). Each
refusal: exit 2 (HTTP 422), the field, file or option named, no traceback, nothing written."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.hardening import corpus
from tests.hardening.test_api_files import make_client  # noqa: F401 - the fixture
from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import SCENARIO, _refused

HUGE = "1" + "0" * 400  # an integer past any float: float() and math.isfinite() raise OverflowError


def _scenario(tmp_path: Path, **rollout) -> Path:
    d = copy.deepcopy(corpus.BASE_SCENARIO)
    d["jobs"][0]["rollout"].update(rollout)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def _with_trace(tmp_path: Path, name: str, content: bytes) -> Path:
    (tmp_path / name).write_bytes(content)
    return _scenario(tmp_path, response_lengths={"source": "trace", "path": name, "column": "n"})


@pytest.mark.parametrize("name, content, words", [
    ("big.jsonl", f'{{"n": {HUGE}}}\n{{"n": 5}}\n'.encode(), ("big.jsonl:1", "not finite")),
    ("bool.jsonl", b'{"n": true}\n{"n": false}\n{"n": 7}\n', ("bool.jsonl:1", "boolean")),
    ("twice.csv", b"n,n\n1,2\n3,4\n", ("twice.csv", "'n' 2 times")),
], ids=["jsonl-400-digit-int", "jsonl-true", "csv-column-twice"])
def test_a_trace_value_past_any_float_a_boolean_or_a_column_named_twice_is_refused(name, content, words, tmp_path):
    """A 400-digit integer ended in ``internal error: OverflowError``; ``true`` was read as 1; of two
    columns named ``n`` the first was read without a word."""
    s = _with_trace(tmp_path, name, content)
    before = sorted(tmp_path.iterdir())
    rc, output, _cpu, rss = run_inprocess(["validate", str(s)])
    _refused(rc, output, rss, "response_lengths", *words)
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("name, content", [
    ("bom.csv", b"\xef\xbb\xbfn\n100\n200\n"),
    ("bom.jsonl", b'\xef\xbb\xbf{"n": 100}\n{"n": 200}\n'),
], ids=["csv", "jsonl"])
def test_a_trace_with_a_byte_order_mark_reads_as_the_scenario_does(name, content, tmp_path):
    """A spreadsheet's "CSV UTF-8" starts with a BOM: the header read as '\\ufeffn' ("no column 'n'"),
    a JSONL file's first line as bad JSON. The YAML reader skips it; the trace reader does now too."""
    s = _with_trace(tmp_path, name, content)
    rc, output, _cpu, _rss = run_inprocess(["validate", str(s)])
    assert rc == 0, output[-2000:]


@pytest.mark.parametrize("name, content, words", [
    ("calibration.json", json.dumps({"kernels": {"H100": {"gemm": {"p": 1}}}}).replace("1}}}", HUGE + "}}}"), ("gemm.p",)),
    ("tool_latency.json", '{"seconds": [1, ' + HUGE + "]}", ("seconds[1]",)),
    ("lengths.json", json.dumps({"mixture": {"input_quantiles": [1, 2], "output_quantiles": [1, 2]},
                                 "clients": {"\u00b2": {"output_quantiles": [1, 2]}}}), ("clients.", "client ids are numbers")),
], ids=["calibration-400-digit-int", "tool-latency-400-digit-int", "lengths-client-superscript-two"])
def test_a_calibration_value_past_any_float_or_a_superscript_client_id_is_refused(name, content, words, tmp_path):
    """``math.isfinite`` of a 400-digit integer raised OverflowError; ``'²'.isdigit()`` is true but
    ``int('²')`` raised ValueError: both "a bug in rl-planner" (exit 1)."""
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / name).write_text(content)
    d = copy.deepcopy(corpus.BASE_SCENARIO)
    d["calibration"] = "cal"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    try:
        rc, output, _cpu, rss = run_inprocess(["validate", str(tmp_path / "s.yaml")])
    finally:
        from estimators import datadir

        datadir.select(None)
    _refused(rc, output, rss, "calibration", name, *words)


LONG = "a" * 300  # a name no Linux file system holds (255 bytes at most): every call on it is ENAMETOOLONG


@pytest.mark.parametrize("argv, option", [
    (["validate", "{d}/" + LONG + ".yaml"], "SCENARIO"),
    (["plan", str(SCENARIO), "-o", "{d}/" + LONG + ".yaml"], "--out"),
    (["plan", str(SCENARIO), "-o", "{d}/p.yaml", "--current", "{d}/" + LONG], "--current"),
    (["realloc", "{d}/" + LONG + ".json"], "SNAPSHOT"),
    (["simulate", str(SCENARIO), "--policy", "solo-d", "--out", "{d}/" + LONG], "--out"),
    (["whatif", str(SCENARIO), "--out", "{d}/" + LONG], "--out"),
    (["status", "--sim-state", "{d}/" + LONG], "--sim-state"),
    (["apply", "{d}/p.yaml", "--dry-run", "--journal", "{d}/" + LONG], "--journal"),
    (["plan", str(SCENARIO), "-o", "{d}/" + "x/" * 2100 + "p.yaml"], "--out"),
], ids=["validate", "plan-o", "plan-current", "realloc", "simulate-out", "whatif-out", "status-sim-state", "apply-journal",
        "plan-o-path-too-long"])
def test_a_path_no_file_system_holds_is_refused_naming_the_option(argv, option, tmp_path):
    """``-o <300 characters>.yaml`` (and every other path option) ended in
    ``internal error: OSError: [Errno 36] File name too long``."""
    rc, output, _cpu, rss = run_inprocess([a.format(d=tmp_path) for a in argv])
    _refused(rc, output, rss, option, "at most", "give a shorter path")
    assert not list(tmp_path.iterdir()), "something was written"


def test_a_scenario_naming_a_trace_or_calibration_folder_no_file_system_holds_is_refused(tmp_path):
    s = _scenario(tmp_path, response_lengths={"source": "trace", "path": LONG + ".csv", "column": "n"})
    rc, output, _cpu, rss = run_inprocess(["validate", str(s)])
    _refused(rc, output, rss, "response_lengths", "cannot be opened", "File name too long")
    d = copy.deepcopy(corpus.BASE_SCENARIO)
    d["calibration"] = LONG
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    try:
        rc, output, _cpu, rss = run_inprocess(["validate", str(s)])
    finally:
        from estimators import datadir

        datadir.select(None)
    _refused(rc, output, rss, "calibration", "cannot be opened", "File name too long")


def test_the_api_answers_422_not_500_for_a_trace_name_no_file_system_holds(make_client, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    data.mkdir()
    c = make_client(data)
    job = copy.deepcopy(corpus.BASE_SCENARIO["jobs"][0])
    job["name"] = "a"
    job["rollout"]["response_lengths"] = {"source": "trace", "path": LONG + ".csv", "column": "n"}
    r = c.post("/v1/jobs", json=job)
    assert r.status_code == 422, (r.status_code, r.text[:500])
    assert "rollout.response_lengths.path" in r.text, r.text[:500]


def test_a_sweep_interrupted_while_plotting_leaves_the_previous_sweep_whole(tmp_path, monkeypatch):
    """The points were deleted and rewritten, then sweep.csv and sweep.md, then each plot: a Ctrl-C
    (or SIGTERM, or a failed plot) in the plotting left the new table beside the old plots."""
    out = tmp_path / "out"
    argv = ["whatif", str(SCENARIO), "--workers", "1", "--no-minimums", "--out", str(out)]
    rc, output, _cpu, _rss = run_inprocess(argv + ["--sweep", "price.H20=1:2:2"])
    assert rc == 0, output[-2000:]
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert len([p for p in before if p.parts[0] == "points"]) == 2

    from planner.whatif import report

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "plot_fleet", interrupted)
    rc, output, _cpu, _rss = run_inprocess(argv + ["--sweep", "price.H20=3:5:3"])
    assert rc == 130, output[-2000:]
    after = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert after == before, f"the folder changed: {sorted(set(after) ^ set(before)) or 'contents'}"


def test_a_subnormal_price_is_refused_by_the_scenario_init_and_a_sweep(tmp_path):
    """``price_per_gpu_hour: 1e-320`` (> 0, within every bound) was planned with numpy's "overflow
    encountered in divide" from the column generation's cost ratios on the terminal (bound / cost = inf)."""
    d = copy.deepcopy(corpus.BASE_SCENARIO)
    d["gpu_types"]["H20"]["price_per_gpu_hour"] = 1e-320
    s = tmp_path / "s.yaml"
    s.write_text(yaml.safe_dump(d, sort_keys=False))
    rc, output, _cpu, rss = run_inprocess(["plan", str(s), "-o", str(tmp_path / "p.yaml")])
    _refused(rc, output, rss, "gpu_types.H20.price_per_gpu_hour", "1e-06")
    rc, output, _cpu, rss = run_inprocess(["whatif", str(SCENARIO), "--sweep", "price.H20=1e-320:1:2", "--out", str(tmp_path / "w")])
    _refused(rc, output, rss, "--sweep", "1e-06")
    verl = corpus.ROOT / "examples" / "onramp" / "verl-grpo-qwen2.5-7b.yaml"
    rc, output, _cpu, rss = run_inprocess(["init", "--from", "verl", str(verl), "--price", "1e-320", "-o", str(tmp_path / "i.yaml")])
    _refused(rc, output, rss, "--price", "1e-06")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_a_sim_state_node_with_an_integer_past_any_float_is_malformed_not_an_overflow():
    """A hand-made sim-state (its checksum right) whose node holds a 400-digit ``dram_gb`` or ``gpus``:
    refused as a malformed node (BadState, which the commands turn into exit 2), not an OverflowError
    from ``math.isfinite``."""
    from types import SimpleNamespace

    from executor import safestate
    from executor.backends.sim import check_nodes

    big = 10 ** 400
    good = dict(name="n0", gpu_type="H100", gpus=8, dram_gb=1024, alive=True)
    check_nodes({"n0": SimpleNamespace(**good)})
    for field in ("dram_gb", "gpus"):
        with pytest.raises(safestate.BadState, match="malformed"):
            check_nodes({"n0": SimpleNamespace(**{**good, field: big})})
