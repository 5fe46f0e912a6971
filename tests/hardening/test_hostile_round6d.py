"""Gaps left by rounds 5 and 6 (docs/security.md, Round 6 (d)): a flow-style YAML snapshot reported
as bad JSON by ``realloc``; the daemon starting with a read-only executor file beside its state
(every apply then raised and was retried each cycle); ``validate-plan`` taking a plan's
``moved_jobs``, ``critical`` and ``solver.phase_time_estimate`` on trust. Each: exit 2, the file
or field named with the fix, no traceback, nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.hardening.test_hostile_inputs import run_inprocess
from tests.hardening.test_hostile_round3 import ROOT, _refused

MICRO = ROOT / "scenarios" / "weave-micro.yaml"
HETERO = ROOT / "scenarios" / "realloc" / "hetero-h20-h100.json"  # the snapshots tests/realloc/test_cli.py plans on
HETERO_SCENARIO = ROOT / "scenarios" / "realloc" / "hetero.yaml"


# ------------------------------------------------------------------ 1. a flow-style YAML snapshot
def _realloc(snapshots: Path, tmp_path: Path) -> tuple[int, str]:
    rc, output, _cpu, _rss = run_inprocess(["realloc", str(snapshots), "--scenario", str(HETERO_SCENARIO), "--backend", "cpsat",
                                            "--out", str(tmp_path / f"{snapshots.stem}.plan.json")])
    return rc, output


def test_a_flow_style_yaml_snapshot_is_read_as_yaml_and_planned_as_the_block_style_one(tmp_path):
    """``{snapshots: [{job: ...}]}`` (YAML, starting with '{') was refused as "cannot parse as JSON"."""
    data = json.loads(HETERO.read_text())
    (tmp_path / "block.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "flow.yaml").write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=True))
    flow = (tmp_path / "flow.yaml").read_text()
    assert flow.startswith("{") and "\n" in flow.strip()
    with pytest.raises(json.JSONDecodeError):
        json.loads(flow)  # YAML, not JSON
    seen, plans = [], []
    for name in ("block", "flow"):
        rc, output = _realloc(tmp_path / f"{name}.yaml", tmp_path)
        assert rc == 0, output[-2000:]
        output = re.sub(r"status (\w+), [\d.]+ m?s", r"status \1", output)  # (the solve's own time)
        seen.append("".join(output.split()).replace(f"{name}.plan.json", "OUT"))  # (the tables wrap a long path)
        body = json.loads((tmp_path / f"{name}.plan.json").read_text())["body"]
        body.pop("timings_ms")
        plans.append(body)
    assert seen[0] == seen[1]
    assert plans[0] == plans[1] and plans[0]["committed"]


def test_a_broken_flow_style_snapshot_is_a_yaml_problem_and_a_json_file_stays_json(tmp_path):
    (tmp_path / "flow.yaml").write_text("{snapshots: [{job: rl,\n  time_s: 1,\n  components: [}]}\n")
    rc, output = _realloc(tmp_path / "flow.yaml", tmp_path)
    _refused(rc, output, 0, f"{tmp_path}/flow.yaml:3", "not valid YAML")
    assert "JSON" not in output, output[-2000:]
    (tmp_path / "flow.json").write_text("{job: rl, time_s: 1}\n")  # a file named .json is JSON
    rc, output = _realloc(tmp_path / "flow.json", tmp_path)
    _refused(rc, output, 0, "flow.json:1", "cannot parse as JSON")
    assert not list(tmp_path.glob("*.plan.json")), "nothing written"


def test_safeload_auto_is_yaml_as_its_docstring_says():
    """``parse(fmt="auto")`` is YAML whatever the text (its docstring said JSON for text starting with
    '{'); picking JSON by the text is :func:`safeload.parse_json_or_yaml`'s."""
    from planner import safeload
    from planner.errors import UserError

    assert "YAML whatever the text" in (safeload.parse.__doc__ or "")
    doc = safeload.parse('{"a": [1, 2]}\n', "x.json")
    assert doc.data == {"a": [1, 2]} and doc.lines  # read by the YAML reader: line numbers
    assert safeload.parse_json_or_yaml('{"a": [1, 2]}', "x").lines == {}  # JSON syntax: the JSON reader
    assert safeload.parse_json_or_yaml("{a: [1, 2]}", "x.yaml").data == {"a": [1, 2]}
    with pytest.raises(UserError, match="cannot parse as JSON"):
        safeload.parse_json_or_yaml("{a: [1, 2]}", "x.JSON")
