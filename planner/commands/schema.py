"""planner schema: print the scenario JSON Schema."""

from __future__ import annotations

NAME = "schema"
HELP = "print the JSON Schema of scenario files"


def add_arguments(p) -> None:
    pass


def run(args) -> int:
    from planner.schema.__main__ import generate

    print(generate(), end="")
    return 0
