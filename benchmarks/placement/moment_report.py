"""The command line and the report file shared by the per-moment packing estimates
(:mod:`benchmarks.placement.rollout_sharing`, :mod:`benchmarks.placement.training_discipline`)."""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path


def parse(doc: str, default_out: str, argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--moments", type=int, default=30)
    ap.add_argument("--out", default=default_out)
    return ap.parse_args(argv)


def head(title: str, module: str, moments: int, doc: str, columns: list[str], align: list[str]) -> list[str]:
    """The report's title, command, machine, the module docstring's body and the table's header."""
    return [f"# {title}", "", f"Command: `python -m {module} --moments {moments}`  ",
            f"Machine: `{' '.join(platform.uname())}`, {os.cpu_count()} CPUs (the figures do not depend on it).", "",
            doc.split("\n\n", 1)[1].strip(), "", "| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]


def write(out: str, lines: list[str]) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
