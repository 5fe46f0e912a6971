"""A job's lifecycle in the daemon: its states and the one table of legal transitions.

Every change of a job's state goes through :func:`check` (the store calls it inside the same
transaction that writes the change and its event row), so an illegal move -- a completed job
admitted again, a cancelled job started -- is refused with the reason instead of corrupting the
state. The table is the whole contract; nothing else decides what may follow what::

    pending ──admit──▶ admitted ──apply──▶ running ──finish──▶ completed
       │                  │                   │
       ├──reject──▶ rejected                  ├──fail──▶ failed
       │                  ├──cancel──▶ cancelling ──removed──▶ cancelled
       └──cancel──────────┴────────────────────────────────────▶ cancelled

* ``pending``: submitted, waiting for its arrival time or for room in the fleet;
* ``admitted``: placed in the daemon's target plan, not yet confirmed running by the executor
  (in dry-run mode jobs stay here: nothing is applied);
* ``running``: the executor applied a plan that runs it;
* ``cancelling``: a cancel was requested for a placed job; the next plan drops it and, once the
  executor has removed it (or, in dry-run, once that plan is recorded), it is ``cancelled``;
* terminal: ``completed`` (the backend reports it finished), ``failed`` (the backend reports it
  failed, its placement could not be applied, or a file its spec names -- a trace, a model's
  config.json -- can no longer be read: from pending, admitted or running), ``rejected`` (no
  placement can ever meet its SLO, or it waited for room longer than the admission deadline),
  ``cancelled``.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    PENDING = "pending"
    ADMITTED = "admitted"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def placed(self) -> bool:
        """In the target plan (holds nodes)."""
        return self in (JobState.ADMITTED, JobState.RUNNING)


TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.REJECTED, JobState.CANCELLED})

S = JobState
# (from, to) -> what the move means. The only legal moves.
TRANSITIONS: dict[tuple[JobState, JobState], str] = {
    (S.PENDING, S.ADMITTED): "placed in the target plan",
    (S.PENDING, S.REJECTED): "cannot be placed within its SLO, or waited past the admission deadline",
    (S.PENDING, S.CANCELLED): "cancelled before admission",
    (S.PENDING, S.FAILED): "a file its spec names can no longer be read",
    (S.ADMITTED, S.RUNNING): "the executor applied a plan that runs it",
    (S.ADMITTED, S.CANCELLING): "cancel requested after admission",
    (S.ADMITTED, S.FAILED): "its placement could not be applied, or a file its spec names can no longer be read",
    (S.ADMITTED, S.PENDING): "displaced from the target plan (an apply failed); waits for admission again",
    (S.RUNNING, S.COMPLETED): "the backend reports it finished",
    (S.RUNNING, S.FAILED): "the backend reports it failed, or a file its spec names can no longer be read",
    (S.RUNNING, S.CANCELLING): "cancel requested while running",
    (S.CANCELLING, S.CANCELLED): "removed from the cluster (or, in dry-run, from the recorded plan)",
    (S.CANCELLING, S.COMPLETED): "finished before the cancel was carried out",
    (S.CANCELLING, S.FAILED): "failed before the cancel was carried out",
}

# What a cancel request does in each state (None: not cancellable, the job is terminal).
CANCEL_TARGET: dict[JobState, JobState | None] = {
    S.PENDING: S.CANCELLED,
    S.ADMITTED: S.CANCELLING,
    S.RUNNING: S.CANCELLING,
    S.CANCELLING: S.CANCELLING,
    S.COMPLETED: None,
    S.FAILED: None,
    S.REJECTED: None,
    S.CANCELLED: None,
}


class IllegalTransition(Exception):
    """A state change the table does not allow."""

    def __init__(self, job: str, src: JobState, dst: JobState) -> None:
        allowed = sorted(t.value for (f, t) in TRANSITIONS if f is src)
        nxt = ", ".join(allowed) if allowed else "nothing (terminal)"
        super().__init__(f"job '{job}' cannot go from {src.value} to {dst.value}; from {src.value} it may go to {nxt}")
        self.job, self.src, self.dst = job, src, dst


def check(job: str, src: JobState | str, dst: JobState | str) -> str:
    """The meaning of the move ``src → dst``; raises :class:`IllegalTransition` when it is not legal."""
    a, b = JobState(src), JobState(dst)
    meaning = TRANSITIONS.get((a, b))
    if meaning is None:
        raise IllegalTransition(job, a, b)
    return meaning
