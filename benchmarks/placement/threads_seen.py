"""The most threads a whole ``planner plan`` process runs (a command, never part of the test run).

    python -m benchmarks.placement.threads_seen INSTANCE [--checkout PATH] [--time-limit S]

Runs ``planner plan INSTANCE --time-limit S`` from ``--checkout`` (default: this one) with no
``*_NUM_THREADS`` variable set and polls ``/proc/PID/status`` every 5 ms for its thread count
(Linux only): a command whose time limit should hold in CPU seconds runs one thread (issue 26:
numpy's OpenBLAS started a second, spinning one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def most_threads(instance: str, checkout: Path, limit: float) -> int:
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}, "PYTHONPATH": str(checkout)}
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.Popen([sys.executable, "-m", "planner", "plan", instance, "--time-limit", f"{limit:g}",
                              "--out", str(Path(tmp) / "plan.json"), "--allow-unplaced"],
                             cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        most = 0
        while p.poll() is None:
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    for line in f:
                        if line.startswith("Threads"):
                            most = max(most, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.005)
    return most


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("instance")
    ap.add_argument("--checkout", default=str(ROOT))
    ap.add_argument("--time-limit", type=float, default=1.0)
    args = ap.parse_args(argv)
    print(f"{args.checkout}: at most {most_threads(os.path.abspath(args.instance), Path(args.checkout), args.time_limit)} thread(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
