"""Errors a user can fix: the vocabulary every layer shares.

It sits at the bottom of the dependency order (``planner → (formulation, executor, simulator) →
estimators``) so that any layer can raise it without importing ``planner``; ``planner.errors``
re-exports it with the CLI's exit statuses.

A :class:`UserError` carries everything a person needs to act: *where* (a field path such as
``jobs[3].rollout.max_response_tokens`` or a job name), *what* is wrong (the bad value and what is
allowed) and *how to fix it*. The CLI prints it without a traceback and exits with status 2.
Anything else escaping a command is an internal error (status 1).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable, Sequence


@dataclass
class Problem:
    """One thing wrong with an input: where, what, and how to fix it."""

    where: str
    message: str
    fix: str = ""
    source: str = ""  # e.g. "scenario.yaml:12"

    def render(self) -> str:
        loc = f"{safe_text(self.source)}: " if self.source else ""
        msg = safe_text(self.message, MAX_MESSAGE)
        text = f"{loc}{safe_text(self.where)}: {msg}" if self.where else f"{loc}{msg}"
        if self.fix:
            sep = " " if text.rstrip().endswith((".", "?", "!", ":")) else ". "
            text = text.rstrip() + f"{sep}Fix: {safe_text(self.fix)}"
        return text


MAX_MESSAGE = 2000  # characters of one problem's message as printed (a 4,097-worker list is cut, not printed whole)
MAX_PROBLEMS = 50  # problems printed of one error
MAX_FIELD = 500  # characters of a field path, a source or a fix


def _unsafe(c: str) -> bool:
    o = ord(c)
    return o < 0x20 or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xDFFF or 0x202A <= o <= 0x202E or 0x2066 <= o <= 0x2069


def safe_text(s: object, limit: int = MAX_FIELD) -> str:
    """Text for a terminal, a log or a JSON answer: control characters (ESC, newlines, C1 codes,
    Unicode's bidirectional overrides and isolates) escaped, so a name from an input file cannot move
    the cursor, forge lines or show text reversed, and lone surrogates
    (``"\\ud800"`` in a JSON key), which no UTF-8 output can encode, escaped too; cut at ``limit``
    characters."""
    t = str(s)
    if any(_unsafe(c) for c in t):
        t = "".join(c if not _unsafe(c) else (repr(c)[1:-1] if ord(c) < 0xD800 else f"\\u{ord(c):04x}") for c in t)
    if len(t) > limit:
        t = t[:limit] + f"... ({len(t) - limit:,} more characters)"
    return t


class UserError(Exception):
    """Bad input: reported to the user as one or more problems, exit status 2."""

    def __init__(self, problems: Problem | str | Sequence[Problem], *, title: str = "") -> None:
        if isinstance(problems, str):
            problems = [Problem(where="", message=problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        self.title = title
        super().__init__(self.render())

    def render(self) -> str:
        lines = [safe_text(self.title)] if self.title else []
        if len(self.problems) == 1 and not self.title:
            return self.problems[0].render()
        lines += [f"  - {p.render()}" for p in self.problems[:MAX_PROBLEMS]]
        if len(self.problems) > MAX_PROBLEMS:
            lines.append(f"  ... and {len(self.problems) - MAX_PROBLEMS} more problem(s) of the same input")
        return "\n".join(lines)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' Did you mean 'x'?' suffix, or '' when nothing is close."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


@dataclass
class ProblemList:
    """Collects problems during a cross-field check and raises them together."""

    problems: list[Problem] = field(default_factory=list)

    def add(self, where: str, message: str, fix: str = "") -> None:
        self.problems.append(Problem(where, message, fix))

    def raise_if_any(self, title: str = "") -> None:
        if self.problems:
            raise UserError(self.problems, title=title)
