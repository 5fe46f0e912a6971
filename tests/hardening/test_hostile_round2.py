"""The second round's hostile shapes (issue 25): calibration folders and trace files read through
the bounded readers. Each case: exit 2, the error names the field (or what is wrong), no traceback,
nothing written, within 10 CPU s and 1 GB, and no value of the file in the output."""

from __future__ import annotations

import pytest

from tests.hardening import corpus
from tests.hardening.test_hostile_inputs import LIMIT_RSS_KB, _argv, _check, _listing, _materialise, run_inprocess

CASES = corpus.round2_cases()
SMALLER = corpus.smaller_cases()
MAX_OUTPUT = 20_000  # characters an error may print (a 4,097-worker snapshot's used to be 931 KB)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_round2_hostile_input(case, tmp_path):
    _materialise(case, tmp_path)
    before = _listing(tmp_path)
    rc, output, cpu, rss = run_inprocess(_argv(case, tmp_path))
    _check(case, rc, output, cpu, before, tmp_path)
    assert rss < LIMIT_RSS_KB, f"{case.id}: peak RSS grew by {rss // 1024} MB"
    assert corpus.SECRET not in output, f"{case.id}: a value of the file was echoed:\n{output[-1000:]}"
    if case.id.startswith("cal-"):
        assert "calibration" in output
    else:
        assert "response_lengths" in output


def test_a_gzip_trace_that_expands_past_the_cap_stops_there(tmp_path, monkeypatch):
    """The decompressed-size bound (256 MiB by default; lowered here to keep the test small)."""
    import gzip

    from estimators import traces

    monkeypatch.setattr(traces, "MAX_TRACE_DECOMPRESSED", 1 << 20)
    traces._read_column_cached.cache_clear()
    with gzip.open(tmp_path / "t.csv.gz", "wb") as f:
        f.write(b"n\n" + b"1\n" * (2 << 20))
    (tmp_path / "x.yaml").write_bytes(corpus._scenario_with(corpus._set(
        "jobs[0].rollout.response_lengths", {"source": "trace", "path": "t.csv.gz", "column": "n"})))
    rc, output, _, _ = run_inprocess(["validate", str(tmp_path / "x.yaml")])
    assert rc == 2 and "expands to more than" in output and "response_lengths" in output, output


@pytest.mark.parametrize("case", SMALLER, ids=lambda c: c.id)
def test_smaller_hostile_shapes(case, tmp_path):
    _materialise(case, tmp_path)
    before = _listing(tmp_path)
    rc, output, cpu, rss = run_inprocess(_argv(case, tmp_path))
    _check(case, rc, output, cpu, before, tmp_path)
    assert rss < LIMIT_RSS_KB, f"{case.id}: peak RSS grew by {rss // 1024} MB"
    assert "\x1b" not in output, f"{case.id}: an ESC reached the terminal"
    assert len(output) < MAX_OUTPUT, f"{case.id}: printed {len(output):,} characters"


@pytest.mark.parametrize("name", ["inst.yaml", "inst.json"])
def test_save_instance_reads_back(tmp_path, name):
    """--save-instance writes only what plan reads back (YAML, or JSON for a .json name)."""
    rc, out, _, _ = run_inprocess(["plan", corpus.TINY, "--save-instance", str(tmp_path / name), "--out", str(tmp_path / "a.yaml")])
    assert rc == 0, out
    rc, out, _, _ = run_inprocess(["plan", str(tmp_path / name), "--out", str(tmp_path / "b.yaml")])
    assert rc == 0, out
