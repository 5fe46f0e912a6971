"""A status line for long commands: a rich spinner with a message and the elapsed time on stderr
when stderr is a terminal, nothing at all when it is piped or redirected (scripts and logs see
only the command's answer). ``RL_PLANNER_PROGRESS=1`` forces it on, ``=0`` off.

    with status("plan: column generation on 60 jobs") as st:
        ...
        st.update("plan: integer master")
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator, Optional


def enabled() -> bool:
    forced = os.environ.get("RL_PLANNER_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return sys.stderr.isatty()


class Status:
    """What the ``with`` block gets: :meth:`update` changes the message (a no-op when disabled). On a
    terminal the line shows the seconds elapsed, counting (rich re-renders it with the spinner)."""

    def __init__(self, live=None) -> None:
        self._live = live
        self.t0 = time.monotonic()
        self.message = ""

    def __rich__(self):
        from rich.text import Text

        return Text(f"{self.message} ({time.monotonic() - self.t0:.0f} s)")

    def update(self, message: str) -> None:
        self.message = message


@contextmanager
def status(message: str) -> Iterator[Status]:
    if not enabled():
        st = Status()
        st.message = message
        yield st
        return
    from rich.console import Console

    st = Status()
    st.message = message
    # forced on (RL_PLANNER_PROGRESS=1), it shows where stderr is no terminal too: rich alone draws
    # nothing there, so the variable forced nothing where it was needed (a pipe, a log, a test)
    forced = os.environ.get("RL_PLANNER_PROGRESS") == "1"
    with Console(stderr=True, force_terminal=True if forced else None).status(st):
        yield st


def note(message: str) -> None:
    """One line on stderr, only where a status line would show (a terminal)."""
    if enabled():
        print(message, file=sys.stderr)


def eta(seconds: Optional[float]) -> str:
    """A duration to announce: ``37 s``, ``3 min``."""
    if seconds is None:
        return "an unknown time"
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{seconds / 60:.0f} min"
