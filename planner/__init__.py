"""rl-planner: the user-facing service (CLI, scenario schema, plan documents, daemon, API)."""

import time as _time

__version__ = "0.1.0"



def _process_start(now: float) -> float:
    """When this process started, on the ``time.perf_counter`` clock: its start time from
    ``/proc/self/stat`` (Linux, 10 ms ticks), else the CPU seconds it has used (the interpreter's
    start is CPU-bound). A process that has run longer than a second before importing the planner
    (a program that imports it as a library) is not a command's start: ``now`` then."""
    elapsed = None
    try:
        import os

        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        ticks = int(stat[stat.rindex(b")") + 2:].split()[19])  # field 22, starttime
        elapsed = _time.clock_gettime(_time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    if elapsed is None or elapsed < 0:
        elapsed = _time.process_time()
    return now - elapsed if elapsed <= 1.0 else now


#: when this process started (``time.perf_counter``), the interpreter's own start included: the
#: origin of the CLI's "whole command" time limits, so that starting Python and importing the
#: command modules count against them too
STARTED_AT = _process_start(_time.perf_counter())
