"""The small items of issue 24's first hour: each one a newcomer hit."""

from __future__ import annotations

import json

import yaml

from tests.conftest import SCENARIOS

TINY = SCENARIOS / "ci" / "tiny-2jobs.yaml"


def test_calibrate_refuses_a_list_shaped_tool_latency_file_with_exit_2(tmp_path, capsys):
    from estimators.calibrate import main

    f = tmp_path / "data" / "rollpacker-tool-latency" / "time_list.json"
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps([1.0, 2.5]))
    rc = main(["--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "time_list.json" in err and "got a list" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_the_slo_a_refusal_suggests_is_then_accepted(tmp_path, capsys):
    """An SLO below the solo time names a minimum; that minimum passes (it was rounded down)."""
    import re

    from planner.cli import main

    doc = yaml.safe_load(TINY.read_text())
    doc["jobs"][0]["slo"] = {"iteration_s": 3}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    m = re.search(r"raise slo.iteration_s to at least (\d+)", err)
    assert m, err
    doc["jobs"][0]["slo"] = {"iteration_s": int(m.group(1))}
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(good)]) == 0, capsys.readouterr().err


def test_sweep_axes_name_their_unit():
    from planner.whatif.report import axis_label

    assert axis_label("price.H100") == "price.H100 ($ per GPU-hour)"
    assert "$/h" in axis_label("budget") and "factor" in axis_label("slo")
    assert axis_label("max_nodes.H20").endswith("(nodes available)")


def test_plan_current_names_a_plan_file_not_a_scenario(capsys):
    import contextlib

    from planner.cli import main

    with contextlib.suppress(SystemExit):
        main(["plan", "--help"])
    assert "--current CURRENT_PLAN" in capsys.readouterr().out


def test_the_expected_cycles_of_one_group_read_as_one_share_not_a_range(tmp_path, capsys):
    """tiny-2jobs plans one group: its summary read "cycles 85-85% of the planned ones"."""
    import re

    from planner.cli import main

    assert main(["plan", str(TINY), "--out", str(tmp_path / "p.yaml")]) == 0
    err = capsys.readouterr().err
    m = re.search(r"simulated expectation: cycles (\S+)% of the planned ones", err)
    assert m and "-" not in m.group(1), err


def test_progress_forced_on_shows_the_status_line_where_stderr_is_no_terminal():
    """RL_PLANNER_PROGRESS=1 "forces it" (first-hour.md, item 4), but rich draws a status only on a
    terminal: piped, the forced line was empty."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = "import time\nfrom planner.statusline import status\nwith status('plan: forced line'):\n    time.sleep(0.2)\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT), RL_PLANNER_PROGRESS="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "plan: forced line" in r.stderr, r.stderr
    env["RL_PLANNER_PROGRESS"] = "0"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_progress_forced_on_shows_the_solvers_line_too(tmp_path):
    """`planner plan`'s solver line (phase, plan, bound, gap: after 2 s) looked at isatty() alone, so
    RL_PLANNER_PROGRESS=1 did not show it."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, SCENARIOS

    env = dict(os.environ, PYTHONPATH=str(ROOT), RL_PLANNER_PROGRESS="1")
    r = subprocess.run([sys.executable, "-m", "planner", "plan", str(SCENARIOS / "instances" / "weave-trace-60.yaml"),
                        "--time-limit", "5", "-o", str(tmp_path / "p.yaml")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.replace("\r", "\n").splitlines() if ln.startswith("[") and " s] " in ln]
    assert lines and "bound" in lines[-1], r.stderr[-2000:]
