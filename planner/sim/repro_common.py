"""What every reproduction shares: where scenarios and results live, and the header of a results table.

Kept apart from :mod:`planner.sim.reproduce` (the driver that runs and checks every reproduction) so
that the reproductions in their own modules can use it without importing the driver back.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SC = ROOT / "scenarios"
OUT = ROOT / "results" / "reproductions"


def header(title: str, cmd: str, paper: str) -> list[str]:
    """The first lines of a reproduction's table: title, the command that made it, the machine, the paper."""
    return [f"# {title}", "", f"Command: `{cmd}`  ",
            f"Machine: `{' '.join(platform.uname())}`, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} "
            "(simulated times do not depend on the machine).  ", f"Published: {paper}", ""]
