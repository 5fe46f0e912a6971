"""A flag of the other backend is refused, not ignored (found by hand, 2026-12-08): ``planner apply
TARGET --address local`` without ``--backend ray`` applied the target to the simulated cluster in
``.rl-planner/`` (the default backend) and said nothing of the Ray cluster the user asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = str(ROOT / "scenarios" / "executor" / "two-jobs-target.yaml")
CLUSTER = str(ROOT / "scenarios" / "ci" / "tiny-1job.yaml")


@pytest.mark.parametrize("argv, flag", [
    (["apply", TARGET, "--address", "local"], "--address"),
    (["apply", TARGET, "--backend", "ray", "--sim-state", "s.sqlite"], "--sim-state"),
    (["status", "--address", "127.0.0.1:6379"], "--address"),
    (["daemon", "--scenario", CLUSTER, "--state", "d.sqlite", "--ray-address", "local", "--insecure"], "--ray-address"),
])
def test_a_flag_of_the_other_backend_is_refused_before_anything_is_written(cli, tmp_path, argv, flag):
    r = cli(*argv, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"error: {flag}:") and "Fix:" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []  # no simulated cluster, journal or state file made
