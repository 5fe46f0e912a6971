"""rl-planner: the user-facing service (CLI, scenario schema, plan documents, daemon, API)."""

import time as _time

__version__ = "0.1.0"

#: when this process first imported the planner (``time.perf_counter``): the origin of the CLI's
#: "whole command" time limits, so that importing the command modules counts against them too
#: (only the interpreter's own start, ~20 ms, comes before it)
STARTED_AT = _time.perf_counter()
