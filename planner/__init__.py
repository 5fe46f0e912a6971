"""rl-planner: the user-facing service (CLI, scenario schema, plan documents, daemon, API)."""

__version__ = "0.1.0"
