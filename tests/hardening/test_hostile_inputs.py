"""The hostile-input corpus (corpus.py) against every command that reads files and the API bodies.

Each case: exit status 2 (HTTP 4xx for the API), the error names the field (or ``file:line``), no
traceback and no "internal error", nothing new in the case's folder, within 10 s of CPU time (CPU, not
wall time: a loaded machine slows a case down but does not make it burn more CPU; a runaway burns CPU,
and a hang is stopped by a wall-clock guard of HANG_S); memory: the
process's peak RSS grows by less than 1 GB in-process, and a handful of cases run as real
subprocesses whose own peak RSS is measured. Most cases call ``planner.cli.main`` in-process
(with a SIGALRM guard) to keep the default run short.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.hardening import corpus

LIMIT_S = 10.0  # CPU seconds a case may take
HANG_S = 300.0  # wall seconds after which a case is stopped as hung (a deadline, reached only on failure)
LIMIT_RSS_KB = 1 << 20  # 1 GB

CASES = corpus.cases()
FLAG_CASES = corpus.flag_cases()


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _cpu() -> float:
    """CPU seconds (user + system) of this process, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's reaped children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _materialise(case: corpus.Case, d: Path) -> None:
    for name, content in case.files.items():
        p = d / name
        if callable(content):
            content(p)
        else:
            p.write_bytes(content)


def _listing(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")} | {p.name for p in d.iterdir()}


def _argv(case: corpus.Case, d: Path, sim: str = "") -> list[str]:
    return [a.replace("{d}", str(d)).replace("{sim}", sim) for a in case.argv]


def run_inprocess(argv: list[str]) -> tuple[int, str, float, int]:
    """(exit status, stdout+stderr, CPU seconds, peak-RSS growth in KB) of ``planner.cli.main(argv)``.
    Stopped after LIMIT_S CPU seconds (SIGPROF) or HANG_S wall seconds (SIGALRM)."""
    from planner.cli import main

    out, err = io.StringIO(), io.StringIO()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    old = signal.signal(signal.SIGALRM, _alarm)
    old_prof = signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    signal.setitimer(signal.ITIMER_PROF, LIMIT_S)
    t0 = _cpu()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as exc:  # argparse
                rc = exc.code if isinstance(exc.code, int) else 2
    except _Timeout:
        rc = -1
        err.write(f"\n[still running after {LIMIT_S} CPU s or {HANG_S} wall s]")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, old_prof)
        signal.signal(signal.SIGALRM, old)
    cpu = _cpu() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    return rc, out.getvalue() + err.getvalue(), cpu, rss


def _check(case: corpus.Case, rc: int, output: str, cpu: float, before: set[str], d: Path) -> None:
    assert rc == 2, f"{case.id}: exit {rc}, expected 2\n{output[-2000:]}"
    assert "Traceback" not in output and "internal error" not in output, f"{case.id}:\n{output[-2000:]}"
    assert case.expect in output, f"{case.id}: the error does not name {case.expect!r}:\n{output[-2000:]}"
    assert cpu < LIMIT_S, f"{case.id}: took {cpu:.1f} CPU s"
    assert _listing(d) == before, f"{case.id}: wrote {sorted(_listing(d) - before)}"


@pytest.fixture(scope="module")
def sim_state(tmp_path_factory):
    """A saved simulated cluster (for the journal cases, which must get past opening the backend)."""
    from planner.cli import main

    d = tmp_path_factory.mktemp("hostile-sim")
    (d / "p.yaml").write_bytes(corpus.dump(corpus.BASE_PLAN))
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["apply", str(d / "p.yaml"), "--journal", str(d / "j.db"), "--sim-state", str(d / "sim.db")]) == 0
    return str(d / "sim.db")


def test_the_corpus_is_large_and_covers_every_reader():
    assert len(CASES) + len(FLAG_CASES) + len(corpus.api_cases()) >= 200
    commands = {c.argv[0] for c in CASES}
    assert commands >= {"validate", "estimate", "plan", "admit", "validate-plan", "whatif", "simulate", "realloc", "apply", "status"}
    assert len({c.id for c in CASES}) == len(CASES), "case ids are unique"


def test_the_base_documents_are_valid(tmp_path):
    """The mutations, not the bases, make the cases fail: the bases pass."""
    (tmp_path / "s.yaml").write_bytes(corpus.dump(corpus.BASE_SCENARIO))
    (tmp_path / "snap.yaml").write_bytes(corpus.dump(corpus.BASE_SNAPSHOT))
    (tmp_path / "p.yaml").write_bytes(corpus.dump(corpus.BASE_PLAN))
    assert run_inprocess(["validate", str(tmp_path / "s.yaml")])[0] == 0
    from planner import plandoc
    from planner.instances.realloc import load_snapshots

    assert len(load_snapshots(tmp_path / "snap.yaml")) == 1
    assert plandoc.read(tmp_path / "p.yaml").kind == "ExecutorTarget"


@pytest.mark.parametrize("case", CASES + FLAG_CASES, ids=lambda c: c.id)
def test_hostile_input_exits_2_naming_the_field(case, tmp_path, request):
    sim = request.getfixturevalue("sim_state") if "{sim}" in " ".join(case.argv) else ""
    _materialise(case, tmp_path)
    before = _listing(tmp_path)
    rc, output, cpu, rss = run_inprocess(_argv(case, tmp_path, sim))
    _check(case, rc, output, cpu, before, tmp_path)
    assert rss < LIMIT_RSS_KB, f"{case.id}: peak RSS grew by {rss // 1024} MB"


SUBPROCESS = ["raw-billion-laughs-validate", "raw-deep-flow-validate", "raw-dev-zero-validate", "raw-utf16-bom-validate",
              "num-cluster.node_groups[0].count=True-validate", "include-dev-zero-validate"]


@pytest.mark.parametrize("cid", SUBPROCESS)
def test_hostile_input_in_a_real_process(cid, tmp_path):
    """The real entry point, with the child's own peak memory and CPU time (wait4)."""
    case = next(c for c in CASES if c.id == cid)
    _materialise(case, tmp_path)
    before = _listing(tmp_path)
    root = Path(corpus.ROOT)
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = _children_cpu()
    with subprocess.Popen([sys.executable, "-m", "planner", *_argv(case, tmp_path)], cwd=root, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        try:
            output, _ = proc.communicate(timeout=HANG_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # Popen reaped the child; its peak RSS is the largest of this process's children so far
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cpu = _children_cpu() - t0
    _check(case, proc.returncode, output.decode(errors="replace"), cpu, before, tmp_path)
    assert rss < LIMIT_RSS_KB, f"{cid}: the child's peak RSS was {rss // 1024} MB"


# ------------------------------------------------------------------ API bodies
@pytest.fixture(scope="module")
def api():
    """The daemon's FastAPI app in-process around a stand-in service that records writes: the
    hostile bodies must be refused by the body models before any handler runs."""
    import warnings
    from unittest import mock

    with warnings.catch_warnings():  # starlette's notice about its httpx transport, not ours
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from planner.daemon.api import create_app

    service = mock.MagicMock()
    with TestClient(create_app(service), raise_server_exceptions=False) as client:
        yield client, service


@pytest.mark.parametrize("cid,path,body,field", corpus.api_cases(), ids=lambda v: v if isinstance(v, str) and len(v) < 60 else None)
def test_hostile_api_body_is_refused(api, cid, path, body, field):
    client, service = api
    service.reset_mock()
    t0 = _cpu()
    if isinstance(body, bytes):
        r = client.post(path, content=body, headers={"content-type": "application/json"})
    else:
        r = client.post(path, json=body)
    assert 400 <= r.status_code < 500, f"{cid}: HTTP {r.status_code}: {r.text[:500]}"
    assert _cpu() - t0 < LIMIT_S, f"{cid}: took {_cpu() - t0:.1f} CPU s"
    if field:
        assert field in r.text, f"{cid}: the error does not name {field!r}: {r.text[:500]}"
    written = [c for c in service.mock_calls if any(w in str(c) for w in ("submit", "ingest", "cancel", "telemetry"))]
    assert not written, f"{cid}: reached the service: {written}"


def test_valid_api_bodies_reach_the_service(api):
    """The stand-in is reached by valid bodies (so 'not reached' above means refused)."""
    client, service = api
    service.reset_mock()
    client.post("/v1/jobs", json=corpus.BASE_SCENARIO["jobs"][0])
    assert any("submit" in str(c) for c in service.mock_calls), service.mock_calls


def test_yaml_merge_keys_are_read(tmp_path):
    """A standard ``<<: *anchor`` merge key works in a scenario (it used to be a ConstructorError):
    explicit keys win over merged ones, and the scenario validates."""
    base = {k: v for k, v in corpus.BASE_SCENARIO.items() if k != "jobs"}
    doc = (yaml.safe_dump(base, sort_keys=False) +
           "jobs:\n"
           "  - name: small-a\n    model: qwen2.5-1.5b\n"
           "    rollout: &r {batch_prompts: 32, group_size: 4, max_response_tokens: 2048, gpu_types: [H20]}\n"
           "    trainer: {gpu_types: [H800]}\n"
           "  - name: small-b\n    model: qwen2.5-1.5b\n    rollout: {<<: *r, group_size: 8}\n    trainer: {gpu_types: [H800]}\n")
    (tmp_path / "m.yaml").write_text(doc)
    from planner.schema import load_scenario

    sc = load_scenario(tmp_path / "m.yaml")
    r = sc.jobs[1].rollout
    assert (r.batch_prompts, r.group_size, r.max_response_tokens, r.gpu_types) == (32, 8, 2048, ["H20"])
