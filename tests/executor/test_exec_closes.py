"""planner apply and planner status run in process (planner.cli.main) close every SQLite connection
they open: the apply journals (also those made only to read the unfinished apply) and the simulated
cluster's state file, on success, on a dry run, on --rollback and on a refused plan. They were held
in reference cycles and stayed open until a garbage collection (two more per apply)."""

from __future__ import annotations

import gc
import sqlite3

import pytest

from planner.cli import main
from tests.executor.helpers import write_target

pytest.importorskip("torch")  # the sim backend's workers (a real apply needs the executor extra)


def _plan(tmp_path, name, rollout_gpus):
    body = {"nodes": [{"name": "h20-0", "gpu_type": "H20", "gpus": 8, "dram_gb": 512},
                      {"name": "h100-0", "gpu_type": "H100", "gpus": 8, "dram_gb": 1024}],
            "components": [{"name": "job/rollout", "role": "rollout", "gpu_type": "H20", "placement": {"h20-0": rollout_gpus},
                            "dram_gb_per_worker": 20},
                           {"name": "job/trainer", "role": "trainer", "gpu_type": "H100", "layout": {"tp": 2},
                            "placement": {"h100-0": 2}, "model": {"hidden": 16, "ffn": 32, "layers": 2, "vocab": 32}}]}
    return str(write_target(tmp_path / name, body))


def _open_connections() -> int:
    """Live connections that still answer (gc.get_objects without a collection: objects kept by cycles count)."""
    n = 0
    for o in gc.get_objects():
        if type(o) is sqlite3.Connection:
            try:
                o.execute("SELECT 1")
                n += 1
            except sqlite3.ProgrammingError:  # closed
                pass
    return n


@pytest.fixture
def no_collection():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_apply_and_status_in_process_close_their_connections(tmp_path, capsys, no_collection):
    a = ["--journal", str(tmp_path / "j.db"), "--sim-state", str(tmp_path / "sim.db")]
    p1, p2, bad = _plan(tmp_path, "p1.yaml", 4), _plan(tmp_path, "p2.yaml", 2), _plan(tmp_path, "bad.yaml", 9)
    base = _open_connections()
    runs = [(["apply", p1, *a], 0), (["apply", p1, *a], 0), (["apply", p2, "--dry-run", *a], 0),
            (["apply", p2, "--json", *a], 0), (["apply", "--rollback", *a], 0), (["apply", bad, *a], 2),
            (["status", *a], 0), (["status", "--json", *a], 0)]
    for argv, rc in runs:
        assert main(argv) == rc, argv
        assert _open_connections() == base, f"{argv} left SQLite connections open"
    capsys.readouterr()


def test_a_journal_opened_before_an_error_is_closed(tmp_path, capsys, no_collection):
    """An interrupted apply of another plan is refused (exit 2) after the journal was read: closed."""
    a = ["--journal", str(tmp_path / "j.db"), "--sim-state", str(tmp_path / "sim.db")]
    assert main(["apply", _plan(tmp_path, "p1.yaml", 4), *a]) == 0
    from executor.journal import Journal

    j = Journal(tmp_path / "j.db")
    j.open_apply("digest-of-another-plan", "other.yaml", "sim", [])  # an apply left running (as by a crash)
    j.close()
    base = _open_connections()
    assert main(["apply", _plan(tmp_path, "p2.yaml", 2), *a]) == 2
    assert "interrupted" in capsys.readouterr().err
    assert _open_connections() == base


def test_a_ray_backend_is_not_closed():
    """close_backend closes the sim backend's file only: a Ray cluster given by --address is the user's."""
    from planner.commands.apply import close_backend

    class FakeRay:
        name = "ray"
        closed = False

        def close(self):
            self.closed = True

    b = FakeRay()
    close_backend(b)
    assert not b.closed
