"""A write ended by SIGTERM or Ctrl-C leaves no temporary file (an outside check: SIGTERM during
``planner whatif ... --out DIR`` left ``.capacity-plan.yaml.*.tmp.yaml`` files behind).

Each command runs in a subprocess whose ``os.fsync`` is patched: its first call from
:mod:`planner.safewrite` (the temporary file is written and not yet renamed) creates a marker file
and then blocks. The test waits for the marker (no sleeping on the clock: a deadline only bounds
the wait, and says what it waited for), sees the temporary files there, sends the signal, and
checks that the process ended by it and that nothing but the folder's earlier files is left. The
process is killed in a ``finally`` whatever happens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from planner import safewrite
from tests.conftest import ROOT, SCENARIOS

DEADLINE_S = float(os.environ.get("RL_PLANNER_TEST_DEADLINE_S", "300"))

LAUNCHER = """\
import os, signal, sys, time

# Ctrl-C as at a terminal: a shell's background job starts with SIGINT ignored, which Python keeps
signal.signal(signal.SIGINT, signal.default_int_handler)

marker, real = os.environ["RLP_MID_WRITE_MARKER"], os.fsync


def fsync(fd):
    if sys._getframe(1).f_code.co_filename.endswith(os.path.join("planner", "safewrite.py")) and not os.path.exists(marker):
        with open(marker + ".part", "w") as f:
            f.write(str(os.getpid()))
        os.rename(marker + ".part", marker)  # whole when it appears
        while True:  # mid-write until a signal ends it; short sleeps: a signal whose handler ran after the loop's
            time.sleep(0.05)  # last check but before the sleep's system call began would not end a long one (CI hung)
    return real(fd)


os.fsync = fsync
from planner.cli import entry

sys.argv = ["planner", *sys.argv[1:]]
raise SystemExit(entry())
"""

ONE_JOB = {
    "name": "one-forecast",
    "gpu_types": {"H20": {"price_per_gpu_hour": 1.0, "max_nodes": 4}, "H800": {"price_per_gpu_hour": 2.0, "max_nodes": 4}},
    "cluster": {"node_groups": [{"name": "h20", "gpu_type": "H20", "count": 0}, {"name": "h800", "gpu_type": "H800", "count": 0}]},
    "jobs": [{"name": "math-7b", "model": "qwen2.5-7b", "slo": {"ratio_to_solo": 1.3},
              "rollout": {"batch_prompts": 64, "group_size": 8, "max_response_tokens": 4096, "gpu_types": ["H20"]},
              "trainer": {"tp": 2, "gpu_types": ["H800"]}}],
    "solver": {"time_limit_s": 10},
}


def _commands(tmp: Path) -> dict[str, tuple[list[str], Path]]:
    """Command line and the folder it writes into, per command that writes through planner.safewrite."""
    sc = tmp / "one.yaml"
    sc.write_text(yaml.safe_dump(ONE_JOB))
    out = tmp / "out"
    out.mkdir()
    (out / "keep.txt").write_text("the user's own file\n")
    tiny = str(SCENARIOS / "ci" / "tiny-1job.yaml")
    return {"whatif": (["whatif", str(sc), "--out", str(out)], out),  # a folder of files, each through replacing()
            "plan": (["plan", tiny, "--backend", "greedy", "--out", str(out / "plan.yaml")], out),  # one write_atomic()
            "init": (["init", str(ROOT / "examples" / "onramp" / "verl-grpo-qwen2.5-7b.yaml"), "--from", "verl", "--price", "2.5",
                      "--out", str(out / "s.yaml")], out)}


def _run_until_mid_write(tmp: Path, argv: list[str]) -> tuple[subprocess.Popen, Path]:
    launcher = tmp / "launch.py"
    launcher.write_text(LAUNCHER)
    marker = tmp / "mid-write"
    env = dict(os.environ, RLP_MID_WRITE_MARKER=str(marker), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = open(tmp / "log.txt", "w+")
    proc = subprocess.Popen([sys.executable, str(launcher), *argv], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]
    return proc, marker


def _wait_for_marker(proc: subprocess.Popen, marker: Path, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited ({proc.returncode}) before it began writing:\n{_output(proc)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {DEADLINE_S} s waiting for {what} to begin writing (the marker {marker}):\n"
                                 f"{_output(proc)}")
        time.sleep(0.05)


def _output(proc: subprocess.Popen) -> str:
    proc.log.flush()  # type: ignore[attr-defined]
    proc.log.seek(0)  # type: ignore[attr-defined]
    return proc.log.read()[-4000:]  # type: ignore[attr-defined]


def _wait_exit(proc: subprocess.Popen, what: str) -> int:
    try:
        return proc.wait(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"timed out after {DEADLINE_S} s waiting for {what} to exit after the signal:\n{_output(proc)}") from None


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*") if ".tmp" in p.name)


@pytest.mark.parametrize("command", ["whatif", "plan", "init"])
@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_write_leaves_no_temporary_file(tmp_path, command, sig, status):
    argv, out = _commands(tmp_path)[command]
    proc, marker = _run_until_mid_write(tmp_path, argv)
    try:
        _wait_for_marker(proc, marker, f"planner {command}")
        during = _temporaries(out)
        assert during, f"the hook fired but no temporary file is in {out}: {sorted(p.name for p in out.rglob('*'))}"
        proc.send_signal(sig)
        rc = _wait_exit(proc, f"planner {command}")
        assert rc == status, (rc, _output(proc))
        left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
        assert _temporaries(out) == [], f"temporary files left after {sig.name}: {left} (there were {during})"
        assert "Traceback" not in _output(proc) and "internal error" not in _output(proc), _output(proc)
        assert (out / "keep.txt").read_text() == "the user's own file\n"
        if command != "whatif":  # one file, not yet renamed: not there (whatif's folder may hold points/, made before)
            assert left == ["keep.txt"], left
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.log.close()  # type: ignore[attr-defined]


def test_the_handler_is_only_lent_for_the_write(tmp_path):
    """In process: SIGTERM raises Terminated only while a temporary file exists, and only where its action
    was the default; a process's own handler (the daemon's) is kept, and so is an ignored SIGTERM."""
    before = signal.getsignal(signal.SIGTERM)
    seen = []
    try:
        for action in (signal.SIG_DFL, signal.SIG_IGN, lambda s, f: None):
            signal.signal(signal.SIGTERM, action)
            with safewrite.replacing(tmp_path / "x.txt") as tmp:
                tmp.write_text("x")
                seen.append(signal.getsignal(signal.SIGTERM))
            assert signal.getsignal(signal.SIGTERM) is action  # restored (or never changed)
        assert seen[0] is safewrite._on_sigterm and seen[1] is signal.SIG_IGN and seen[2] is not safewrite._on_sigterm
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with pytest.raises(RuntimeError, match="writer failed"):
            with safewrite.replacing(tmp_path / "y.txt") as tmp:
                tmp.write_text("half")
                raise RuntimeError("writer failed")
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]
    finally:
        signal.signal(signal.SIGTERM, before)
