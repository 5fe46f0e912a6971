"""Telemetry posted after a lull reaches the loop.

Found driving the daemon on Ray by hand (2026-12-07): a job's snapshots posted more than the retention (120 s) after
its last ones were never read. The loop prunes the snapshots it has read once they are older than the retention, and
the table numbered its rows by SQLite rowid: an emptied table numbers the next row 1, at or below the loop's cursor
(the id of the last row read), so every post until the ids passed the cursor again was skipped (no donor, no
reallocation, no phase times learned). The pruning now keeps the newest row, so ids never go back; a state an older
release left with ids below its cursor is read from its first row.
"""

from __future__ import annotations

from test_daemon_cycle import World, _telemetry

from planner.daemon.lifecycle import JobState
from planner.daemon.store import Store


def test_ids_of_snapshots_posted_after_the_table_was_pruned_stay_above_the_cursor(tmp_path):
    st = Store(tmp_path / "s.sqlite")
    ids = [st.add_telemetry("j", 0.0, float(k), 1, {"k": k}) for k in range(3)]
    with st.tx() as c:
        st.prune_telemetry(c, ids[-1], older_than_wall=1.0)  # all read, all old
    assert st.telemetry_count() == 1, "the newest row is kept"
    new = st.add_telemetry("j", 5.0, 9.0, 1, {"k": 9})
    assert new > ids[-1] and [r[0] for r in st.telemetry_after(ids[-1])] == [new]


class Seen:
    """A reallocation decision that records the snapshots the loop hands it and commits nothing."""

    def __init__(self):
        self.times: list[float] = []

    def decide(self, ctx, job, snapshots):
        from planner.daemon.ports import ReallocOutcome

        self.times += [s.time_s for s in snapshots]
        return ReallocOutcome(job, False, "kept (test)", [], 1.0, 1.0, {}, {}, 0.0)

    def forget(self, job):
        pass

    def predictor_error(self):
        return None


def test_the_loop_reads_telemetry_posted_after_its_read_snapshots_were_pruned(tmp_path):
    w = World(tmp_path)  # (_telemetry's rows were received at wall time 0: past the retention, pruned once read)
    w.loop.reallocator = seen = Seen()
    w.submit("a")
    w.cycle(0.0)
    assert w.state("a") is JobState.RUNNING
    for t in (10.0, 11.0, 12.0):
        _telemetry(w.store, "a", t)
    w.cycle(60.0)
    assert seen.times == [10.0, 11.0, 12.0]
    _telemetry(w.store, "a", 20.0)  # after the lull
    w.cycle(120.0)
    assert seen.times[3:] == [20.0], "the snapshot posted after the prune reached the decision"


def test_a_state_whose_ids_went_back_below_the_cursor_is_read_from_its_first_row(tmp_path):
    """What an older release left: the table emptied, the cursor at 3, the next posts numbered from 1."""
    w = World(tmp_path)
    w.loop.reallocator = seen = Seen()
    w.submit("a")
    w.cycle(0.0)
    w.loop.cursor = 3
    _telemetry(w.store, "a", 30.0)
    _telemetry(w.store, "a", 31.0)
    w.cycle(60.0)
    assert seen.times == [30.0, 31.0] and w.loop.cursor == 2
