"""Gaps left by rounds 5 and 6 (docs/security.md, Round 6 (d)): a flow-style YAML snapshot reported
as bad JSON by ``realloc``; the daemon starting with a read-only executor file beside its state
(every apply then raised and was retried each cycle); ``validate-plan`` taking a plan's
``moved_jobs``, ``critical`` and ``solver.phase_time_estimate`` on trust. Each: exit 2, the file
or field named with the fix, no traceback, nothing written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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


# ------------------------------------------------------------------ 3. read-only executor files at the daemon's start
def _unprivileged() -> list[str]:
    """A command prefix under which file permissions apply (root: setpriv without the capabilities that bypass them)."""
    import shutil

    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file permissions cannot be made to apply to the daemon")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-all"]


def test_the_daemon_refuses_a_read_only_executor_file_at_start_naming_it_and_the_chmod(tmp_path):
    """A read-only STATE.journal, STATE.executor-sim or STATE.sim was opened read-only: every apply
    raised and was retried each cycle. Now the start is refused, before the state file is created."""
    from planner.daemon.adapters import executor as ex
    from tests.daemon.daemonproc import DEADLINE_S, env, write_cluster

    prefix = _unprivileged()
    cluster = write_cluster(tmp_path)
    state = tmp_path / "st.sqlite"
    files = [(".sim", "simulated cluster's state")]
    if ex.available() is None:
        files += [(".journal", "executor's journal"), (".executor-sim", "executor's simulated cluster")]
    for suffix, what in files:
        f = state.with_name(state.name + suffix)
        f.write_bytes(b"")  # an empty file is one the daemon would take (and fill)
        f.chmod(0o400)
        try:
            r = subprocess.run([*prefix, sys.executable, "-m", "planner", "daemon", "--state", str(state), "--scenario", str(cluster),
                                "--listen", "127.0.0.1:0", "--period-s", "0.2", "--max-cycles", "1"],
                               cwd=ROOT, env=env(), capture_output=True, text=True, timeout=DEADLINE_S)
        finally:
            f.chmod(0o600)
        assert r.returncode == 2, (suffix, r.stdout + r.stderr)
        assert f"--state: {what} file not writable: {f}; check its permissions" in r.stderr, r.stderr
        assert f"chmod u+rw {f}" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([cluster.name, f.name]), "something was created"
        assert f.read_bytes() == b""
        f.unlink()
