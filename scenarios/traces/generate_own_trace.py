"""Write ``own-trace.csv``: a small stand-in for a user's own rollout log (400 requests).

    python scenarios/traces/generate_own_trace.py

Columns: ``prompt_tokens`` (log-normal, median 300), ``response_tokens`` (a two-class heavy tail
none of the shipped tables has: 75% short answers, median 600, and 25% long reasoning, median
3,500, clipped at 8,192) and ``tool_s`` (seconds of a tool call: log-normal, median 0.4 s).
Seeded: the same file every time.
"""

from pathlib import Path

import numpy as np


def main() -> None:
    rng = np.random.default_rng(20261201)
    n = 400
    long = rng.random(n) < 0.25
    resp = np.where(long, rng.lognormal(np.log(3500), 0.5, n), rng.lognormal(np.log(600), 0.6, n))
    resp = np.clip(np.round(resp), 16, 8192).astype(int)
    prompt = np.clip(np.round(rng.lognormal(np.log(300), 0.4, n)), 32, 2048).astype(int)
    tool = np.round(rng.lognormal(np.log(0.4), 1.0, n), 3)
    out = Path(__file__).with_name("own-trace.csv")
    lines = ["request_id,prompt_tokens,response_tokens,tool_s"]
    lines += [f"{i},{p},{r},{t}" for i, (p, r, t) in enumerate(zip(prompt, resp, tool))]
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
