"""planner apply (sim backend) with files it may not write, under real file permissions: refused before
the first step (exit 2 naming the file and the chmod), nothing touched; the apply goes on once fixed.

A killed apply leaves the journal's and the simulated cluster's -wal and -shm files behind; read-only
ones (another user's, or a mode an older tool left) made the resume or rollback an internal error, and
a --journal or --sim-state in a missing folder under a read-only one a PermissionError (both found
after the read-only-file check of session 45)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, unprivileged
from tests.executor.test_exec_cli import _plan

DEADLINE_S = 300.0  # a sim apply takes seconds; this only bounds a hung one
#: each case runs real applies (4-6 s): the default suite takes the first of each list, RL_PLANNER_SLOW=1 all
SLOW = os.environ.get("RL_PLANNER_SLOW") == "1"


def _cases(*cases: str) -> list[str]:
    return list(cases) if SLOW else list(cases[:1])



def _unprivileged() -> list[str]:
    return unprivileged('planner apply')


def _apply(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    try:  # (subprocess.run kills the process at the deadline)
        return subprocess.run([*_unprivileged(), sys.executable, "-m", "planner", "apply", *args], cwd=ROOT, env=e,
                              capture_output=True, text=True, timeout=DEADLINE_S)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(f"planner apply {' '.join(args)} did not end within {DEADLINE_S} s: {exc.stdout} {exc.stderr}") from None


def _applied_once(tmp_path: Path) -> tuple[Path, list[str], Path]:
    """A first plan applied with the journal and the simulated cluster in ``tmp_path/s``: (that folder, the
    apply's file options, a second plan that changes the layout)."""
    _unprivileged()
    d = tmp_path / "s"
    d.mkdir()
    a = ["--journal", str(d / "j.db"), "--sim-state", str(d / "sim.db")]
    p1 = _plan(tmp_path, "p1.yaml", {"h20-0": 4}, {"tp": 2}, {"h100-0": 2})
    r = _apply(str(p1), *a)
    assert r.returncode == 0, r.stderr[-3000:]
    return d, a, _plan(tmp_path, "p2.yaml", {"h20-0": 2}, {"tp": 1, "dp": 2}, {"h100-0": 2})


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _refused(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr[-3000:])
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


@pytest.mark.parametrize("which", _cases("j.db", "sim.db"))
def test_read_only_wal_and_shm_left_by_a_killed_apply_are_refused_before_the_resume_or_rollback(tmp_path, which):
    d, a, p2 = _applied_once(tmp_path)
    r = _apply(str(p2), *a, env={"RL_PLANNER_EXECUTOR_CRASH_AT": "reshard:after"})
    assert r.returncode == 137, (r.returncode, r.stderr[-3000:])
    wal, shm = d / f"{which}-wal", d / f"{which}-shm"
    assert wal.exists() and shm.exists(), "the killed apply left no -wal/-shm to make read-only"
    for side in (wal, shm):
        side.chmod(0o444)
    before = _snapshot(d)
    flag = "--journal" if which == "j.db" else "--sim-state"
    for argv in ([str(p2), *a], ["--rollback", *a]):
        r = _apply(*argv)
        _refused(r, flag, f"sidecar {wal} (mode 0444) and {shm} (mode 0444) are not writable", f"chmod u+rw {wal} {shm}")
        assert _snapshot(d) == before, f"a refused {' '.join(argv[:1])} changed the journal or the simulated cluster"
    for side in (wal, shm):  # the fix the message gives
        side.chmod(0o600)
    r = _apply(str(p2), *a)
    assert r.returncode == 0 and "(resumed)" in r.stdout, (r.stdout, r.stderr[-3000:])


@pytest.mark.parametrize("flag", _cases("--journal", "--sim-state"))
def test_a_missing_folder_under_a_read_only_one_is_refused_naming_it(tmp_path, flag):
    _unprivileged()
    ro = tmp_path / "ro"
    ro.mkdir()
    ok = tmp_path / "ok"
    paths = {"--journal": ok / "j.db", "--sim-state": ok / "sim.db"}
    paths[flag] = ro / "sub" / paths[flag].name
    a = [x for f, p in paths.items() for x in (f, str(p))]
    p1 = _plan(tmp_path, "p1.yaml", {"h20-0": 4}, {"tp": 2}, {"h100-0": 2})
    ro.chmod(0o555)
    try:
        for argv in ([str(p1), *a], ["--rollback", *a]):
            r = _apply(*argv)
            _refused(r, flag, f"cannot create the folder {ro / 'sub'}", f"{ro} is not writable", f"chmod u+rwx {ro}")
            assert not (ro / "sub").exists() and not ok.exists(), "a refused apply created a file or folder"
    finally:
        ro.chmod(0o755)
    r = _apply(str(p1), *a)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("what", _cases("folder", "sim.db", "j.db"))
def test_a_read_only_file_or_folder_is_refused_with_the_chmod_and_nothing_touched(tmp_path, what):
    """The same check as test_exec_cli's (which fakes os.access), under real permissions."""
    d, a, p2 = _applied_once(tmp_path)
    target = d if what == "folder" else d / what
    mode = 0o555 if what == "folder" else 0o444
    before = _snapshot(d)
    target.chmod(mode)
    try:
        for argv in ([str(p2), *a], ["--rollback", *a]):
            r = _apply(*argv)
            if what == "folder":
                _refused(r, "--journal", f"apply journal folder not writable: {d}", f"chmod u+rwx {d}")
            else:
                _refused(r, "--journal" if what == "j.db" else "--sim-state", f"file not writable: {d / what}",
                         f"chmod u+rw {d / what}")
            assert _snapshot(d) == before
    finally:
        target.chmod(0o755 if what == "folder" else 0o600)
    r = _apply(str(p2), *a)
    assert r.returncode == 0, r.stderr[-3000:]
