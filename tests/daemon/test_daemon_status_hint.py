"""`planner status` after `planner daemon --backend sim`: the daemon's cluster is not where status
looks by default (`.rl-planner/sim-state.sqlite`), so its refusal names the daemon's files, and the
command it names shows the daemon's cluster and applies."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from planner.cli import main as cli_main
from tests.conftest import ROOT


def test_status_names_the_daemons_cluster_and_the_command_it_names_shows_it(tmp_path, monkeypatch, capsys):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), RL_PLANNER_CACHE="0")
    r = subprocess.run([sys.executable, "-m", "planner", "daemon", "--scenario", str(ROOT / "scenarios/ci/tiny-1job.yaml"),
                        "--state", "d.sqlite", "--clock", "virtual", "--max-cycles", "1", "--listen", "127.0.0.1:0"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    monkeypatch.chdir(tmp_path)
    assert cli_main(["status"]) == 2
    err = capsys.readouterr().err
    # before: "apply a plan first ..., or pass --sim-state of an existing cluster", nothing about the daemon's
    hint = "planner status --sim-state d.sqlite.executor-sim --journal d.sqlite.journal"
    assert hint in err and "Traceback" not in err, err
    assert cli_main(shlex.split(hint)[1:]) == 0
    out = capsys.readouterr().out
    assert "daemon plan 1" in out and "done" in out, out[-2000:]


def test_without_a_daemons_files_here_status_still_says_where_a_daemon_keeps_its_cluster(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["status"]) == 2
    err = capsys.readouterr().err
    assert "nothing was applied" in err and "--sim-state STATE.executor-sim --journal STATE.journal" in err, err
