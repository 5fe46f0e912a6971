"""Checks of the solver options several commands share (exit 2 with the option named)."""

from __future__ import annotations


def check_solver_args(args) -> None:
    """``--time-limit`` > 0, ``0 <= --mip-gap < 1`` and ``--threads`` >= 1, where the command has them."""
    from planner.errors import Problem, UserError

    limit = getattr(args, "time_limit", None)
    if limit is not None and not limit > 0:
        raise UserError(Problem("--time-limit", f"must be positive seconds, got {limit}", "pass e.g. --time-limit 30"))
    gap = getattr(args, "mip_gap", None)
    if gap is not None and not 0 <= gap < 1:
        raise UserError(Problem("--mip-gap", f"must be in [0, 1), got {gap}", "pass e.g. --mip-gap 0.01"))
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        raise UserError(Problem("--threads", f"must be at least 1, got {threads}", "pass e.g. --threads 2"))


def command_argv(args, name: str) -> list[str]:
    """The arguments this command was run with (for the ``command`` line its outputs record); when
    it was called from code rather than the shell, the input and policy from ``args``."""
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == name:
        return sys.argv[2:]
    return [args.scenario, "--policy", args.policy]
