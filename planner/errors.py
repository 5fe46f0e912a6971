"""Errors a user can fix, and how the CLI reports them.

The vocabulary (:class:`Problem`, :class:`UserError`, :func:`did_you_mean`, :class:`ProblemList`)
is defined at the bottom of the dependency order, in :mod:`estimators.errors`, so that the
executor (and any other layer below ``planner``) can raise it without importing ``planner``;
this module re-exports it with the CLI's exit statuses.
"""

from __future__ import annotations

from estimators.errors import Problem, ProblemList, UserError, did_you_mean

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_OK", "Problem", "ProblemList", "UserError", "did_you_mean"]
