"""Outside audit C of ``planner apply`` / ``planner status`` on the simulated backend: state files
damaged in ways the earlier rounds did not cover, each refused with exit 2 naming the file's flag."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.hardening.test_hostile_inputs import run_inprocess


ROOT = Path(__file__).resolve().parents[2]
TWO_JOBS = ROOT / "scenarios" / "executor" / "two-jobs-target.yaml"  # a trainer: rows that span many pages


@pytest.fixture
def applied(tmp_path) -> tuple[Path, Path]:
    """A real sim state and its journal after one apply of the shipped two-jobs target."""
    (tmp_path / "p.yaml").write_bytes(TWO_JOBS.read_bytes())
    rc, out, _, _ = run_inprocess(["apply", str(tmp_path / "p.yaml"), "--sim-state", str(tmp_path / "s.db")])
    assert rc == 0, out
    return tmp_path / "s.db", tmp_path / "s.db.journal"


@pytest.mark.parametrize("cmd", ["status", "apply", "rollback"])
def test_a_sim_state_cut_short_at_its_end_is_exit_2(applied, cmd):
    """A file cut short inside its last pages (a copy that did not finish, a full disk): SQLite opens
    it and starts the read, and reports the damage both on the rows and again when the read ends.
    The second report replaced the refusal: 'internal error: DatabaseError: database disk image is
    malformed', exit 1."""
    sim, _ = applied
    c = sqlite3.connect(sim)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    with open(sim, "r+b") as f:
        f.truncate(sim.stat().st_size - 100)
    before = sim.read_bytes()
    argv = {"status": ["status", "--sim-state", str(sim)],
            "apply": ["apply", str(sim.parent / "p.yaml"), "--sim-state", str(sim)],
            "rollback": ["apply", "--rollback", "--sim-state", str(sim)]}[cmd]
    rc, out, _, _ = run_inprocess(argv)
    assert rc == 2 and "--sim-state" in out and "malformed" in out and "internal error" not in out, out[-1500:]
    assert sim.read_bytes() == before, "the damaged file is left as it was"


@pytest.mark.parametrize("which", ["--sim-state", "--journal"])
def test_a_state_file_made_through_a_link_to_nothing_is_private(tmp_path, which):
    """A --sim-state or --journal that is a link to a file not there yet (a state file moved away,
    its link kept): the file SQLite makes at the link's target was 0644 under the usual umask,
    while the docs promise 0600 (the cluster's state, the journal)."""
    import os

    (tmp_path / "p.yaml").write_bytes(TWO_JOBS.read_bytes())
    link, target = tmp_path / "link.db", tmp_path / "target.db"
    link.symlink_to(target.name)
    argv = ["apply", str(tmp_path / "p.yaml"), "--sim-state", str(tmp_path / "s.db")]
    argv += ["--sim-state", str(link)] if which == "--sim-state" else ["--journal", str(link)]
    old = os.umask(0o022)
    try:
        rc, out, _, _ = run_inprocess(argv)
    finally:
        os.umask(old)
    assert rc == 0, out[-1500:]
    assert link.is_symlink() and target.is_file(), "the link is left a link, its target made"
    assert target.stat().st_mode & 0o777 == 0o600, oct(target.stat().st_mode)


@pytest.mark.parametrize("swap", ["journal-as-sim-state", "sim-state-as-journal"])
@pytest.mark.parametrize("cmd", ["status", "apply", "rollback"])
def test_the_journal_and_the_sim_state_swapped_are_named_as_what_they_are(applied, swap, cmd):
    """The two files an apply writes, each passed as the other: the refusal called the journal 'a table
    'applies' that rl-planner did not create' with the fix 'move the file away (the simulated cluster it
    held is lost)', the way to throw the only record of an interrupted apply away. It says now what
    the file is and which flag takes it; neither file changes."""
    sim, journal = applied
    for p in (sim, journal):  # (each file whole, with no -wal beside it)
        c = sqlite3.connect(p)
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        c.close()
    if swap == "journal-as-sim-state":
        flags, expect = ["--sim-state", str(journal)], ("--sim-state", "is an apply journal", "pass it as --journal")
    else:
        flags, expect = ["--sim-state", str(sim), "--journal", str(sim)], ("journal", "is a simulated cluster's state file",
                                                                           "pass it as --sim-state")
    argv = {"status": ["status"], "apply": ["apply", str(sim.parent / "p.yaml")], "rollback": ["apply", "--rollback"]}[cmd] + flags
    before = {p.name: p.read_bytes() for p in (sim, journal)}
    rc, out, _, _ = run_inprocess(argv)
    assert rc == 2 and all(e in out for e in expect), out[-1500:]
    assert "is lost" not in out and "did not create" not in out, out[-1500:]
    assert {p.name: p.read_bytes() for p in (sim, journal)} == before


@pytest.mark.parametrize("flag", ["--sim-state", "--journal"])
def test_a_path_inside_a_file_is_refused_as_not_a_folder(applied, flag):
    """``--journal s.db.journal/x.db`` (a path under a file): the refusal said the folder was 'not
    writable' and its fix was 'chmod u+rwx' on the file; for --sim-state it named --journal (the
    default journal, made from the sim state's path, was checked first)."""
    sim, journal = applied
    inside = (journal if flag == "--journal" else sim) / "x.db"
    argv = ["apply", str(sim.parent / "p.yaml"), "--sim-state", str(sim)]
    argv += ["--journal", str(inside)] if flag == "--journal" else []
    if flag == "--sim-state":
        argv[argv.index(str(sim))] = str(inside)
    before = {p.name: p.read_bytes() for p in sim.parent.iterdir()}
    rc, out, _, _ = run_inprocess(argv)
    assert rc == 2 and f"error: {flag}:" in out and "is not a folder" in out and "chmod" not in out, out[-1500:]
    assert {p.name: p.read_bytes() for p in sim.parent.iterdir()} == before


def test_status_with_an_empty_journal_file_lists_no_applies(applied):
    """An empty --journal file (made by 'touch', as apply accepts it and writes its tables in it): status
    called it damaged ('OperationalError: no such table: applies') and told to move it aside."""
    sim, _ = applied
    empty = sim.parent / "empty.db"
    empty.touch()
    rc, out, _, _ = run_inprocess(["status", "--sim-state", str(sim), "--journal", str(empty)])
    assert rc == 0 and "damaged" not in out and "apply #" not in out, out[-1500:]
    assert empty.stat().st_size == 0 and not empty.with_name("empty.db-wal").exists(), "status wrote nothing"
