"""A snapshot stream out of time order is refused naming the first snapshot that goes back, its field and the file
(an outside audit: the message said only "SNAPSHOT: snapshots are not in time order", not which one)."""

from __future__ import annotations

import copy
import json

import pytest

from planner.cli import main as cli_main
from tests.conftest import ROOT

TAIL = ROOT / "scenarios" / "realloc" / "tail-h100-16node.json"
SCENARIO = ROOT / "scenarios" / "dynarl" / "math-7b-128gpu.yaml"


def _stream(tmp_path, edit) -> str:
    snaps = copy.deepcopy(json.loads(TAIL.read_text())["snapshots"])
    assert len(snaps) >= 3
    edit(snaps)
    f = tmp_path / "stream.json"
    f.write_text(json.dumps({"snapshots": snaps}))
    return str(f)


CASES = {
    "time-back": (lambda s: s[-1].__setitem__("time_s", 1.0), "snapshots[3].time_s", "snapshots[3] (iteration 3, time_s 1)"),
    "iteration-back": (lambda s: s[2].__setitem__("iteration", 0), "snapshots[2].iteration",
                       "snapshots[2] (iteration 0, time_s 704) comes after snapshots[1] (iteration 3"),
}


@pytest.mark.parametrize("decision", ["planner", "completion"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_out_of_order_stream_names_the_snapshot(tmp_path, capsys, case, decision):
    edit, field, detail = CASES[case]
    path = _stream(tmp_path, edit)
    extra = ["--decision", "completion", "--context", str(tmp_path / "unread.json")] if decision == "completion" else []
    rc = cli_main(["realloc", path, "--scenario", str(SCENARIO), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"{path}: {field}: snapshots are not in time order" in err, err
    assert detail in err and "Fix: list them by iteration, then time_s" in err


def test_equal_times_in_order_are_accepted(tmp_path, capsys):
    path = _stream(tmp_path, lambda s: s[1].__setitem__("time_s", s[0]["time_s"]))
    assert cli_main(["realloc", path, "--scenario", str(SCENARIO), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "ReallocPlan"
