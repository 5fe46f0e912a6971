"""Benchmarks and instance generators: commands that measure the planners and write tables to
``results/<area>/`` with the command that made them. Never part of the test run; nothing in the
planner imports this package."""
