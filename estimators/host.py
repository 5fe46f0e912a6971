"""What this host says about processes and files, one rule each, for every layer.

* :func:`pid_gone`: the liveness rule of the executor journal's lock and the daemon's applier
  lease: a pid is gone when no process has it or when it is a zombie (exited, not yet reaped: it
  will never act again). A process of another user (``EPERM``) is alive.
* :func:`create_private`: state files (journals, the simulated cluster, the daemon's state and
  token) are created mode 0600 whatever the umask: they hold the cluster's state or secrets.
"""

from __future__ import annotations

import os
from pathlib import Path


def pid_gone(pid: int) -> bool:
    """True when no live process has this pid on this host (a zombie counts as gone)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def create_private(path: str | Path) -> None:
    """Create ``path`` empty with mode 0600 unless something is there already (then leave it). A
    link to nothing (a state file moved away, its link kept) makes its target 0600 too: SQLite
    follows the link and would create the target with the umask's mode (0644)."""
    if str(path) == ":memory:" or os.path.exists(path):
        return
    dangling = os.path.islink(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | (0 if dangling else os.O_EXCL), 0o600))
    except FileExistsError:
        pass
