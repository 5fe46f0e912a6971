"""Side by side: ``planner plan FILE --time-limit L --allow-unplaced`` on two checkouts, alternately.

    python -m benchmarks.placement.ab_plan --before DIR --after DIR --limit L [--repeat N] [--backend B] FILE...

Each run is its own process under ``nice -n 10`` with ``PYTHONPATH`` and the working directory at
the checkout and ``OPENBLAS_NUM_THREADS=1``; wall seconds and CPU seconds (user + system, from the
child's resource usage) are taken from outside, the plan is judged by ``planner validate-plan``
(the checkout's own), and the one-minute load average is recorded. One JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(code: str, path: str, limit: str, out: str, backend: str = "auto") -> dict:
    env = {**os.environ, "PYTHONPATH": code, "OPENBLAS_NUM_THREADS": "1"}
    c0, t0 = _cpu(), time.perf_counter()
    subprocess.run(["nice", "-n", "10", sys.executable, "-m", "planner", "plan", path, "--time-limit", limit, "--allow-unplaced",
                    "--backend", backend, "-o", os.devnull, "--out", out], cwd=code, env=env, capture_output=True, text=True, check=True)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    with open(out) as f:
        doc = json.load(f)
    v = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "planner", "validate-plan", path, out], cwd=code, env=env,
                       capture_output=True)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "cost": doc["body"]["cost_per_hour"],
            "unplaced": len(doc["body"]["unplaced"]), "valid": v.returncode == 0, "load": round(os.getloadavg()[0], 2),
            "message": doc["solver"]["message"][:200]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--limit", default="1")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for path in a.files:
            for _ in range(a.repeat):
                for name, code in (("before", a.before), ("after", a.after)):
                    row = run(os.path.abspath(code), os.path.abspath(path), a.limit, os.path.join(tmp, f"{name}.plan.json"), a.backend)
                    print(json.dumps({"file": os.path.basename(path), "code": name, "limit_s": a.limit, "backend": a.backend, **row}),
                          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
