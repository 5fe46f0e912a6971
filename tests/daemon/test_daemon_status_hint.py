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


def test_a_daemons_own_files_given_to_status_are_named_as_such_not_called_foreign_files_to_move(tmp_path, capsys):
    """`planner status --sim-state STATE` (or STATE.sim, or --journal STATE) said the file 'holds a table
    ... that rl-planner did not create' and told the operator to move it away: the daemon's state file."""
    from daemonproc import write_cluster

    from planner.daemon.adapters.simcluster import SimCluster, Truth
    from planner.daemon.store import Store
    from planner.schema import load_scenario

    state = tmp_path / "d.sqlite"
    Store(state).close()
    SimCluster(tmp_path / "d.sqlite.sim", load_scenario(write_cluster(tmp_path)), lambda n: None, Truth()).db.close()
    hint = f"planner status --sim-state {state}.executor-sim --journal {state}.journal"
    for args in (["--sim-state", str(state)], ["--sim-state", f"{state}.sim"]):
        files = lambda: {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and not p.name.endswith(("-wal", "-shm"))}  # noqa: E731
        before = files()
        assert cli_main(["status", *args]) == 2
        err = capsys.readouterr().err
        assert "replanning daemon's" in err and hint in err, err
        assert "did not create" not in err and "mv " not in err and "Traceback" not in err, err
        assert files() == before, "the daemon's files are left as they were"
    import pytest

    from estimators.errors import UserError
    from executor.journal import Journal

    before = files()
    for path in (state, tmp_path / "d.sqlite.sim"):  # what status --journal STATE reads (read-only) and what apply writes
        for ro in (True, False):
            with pytest.raises(UserError) as e:
                Journal(path, readonly=ro)
            msg = str(e.value)
            assert "replanning daemon's" in msg and hint in msg and "mv " not in msg, msg
    assert files() == before
