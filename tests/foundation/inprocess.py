"""Run several planner commands in one process (one start-up instead of one per command).

``python tests/foundation/inprocess.py [--block-extras] '[["validate", "S.yaml"], ...]'`` runs each
argv through :func:`planner.cli.main` and prints one JSON line: each command's exit status and
output, and which of torch, ray and scipy got imported. ``--block-extras``: as on a core install,
a ``sys.meta_path`` finder refuses those three packages (and ``importlib.util.find_spec`` answers
None for them, as on an install without them).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import io
import json
import sys

BLOCKED = {"torch", "ray", "scipy"}


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not in the core install)", name=name)
        return None


def block() -> None:
    sys.meta_path.insert(0, _Refuse())
    real = importlib.util.find_spec

    def find_spec(name, package=None):
        return None if name.partition(".")[0] in BLOCKED else real(name, package)

    importlib.util.find_spec = find_spec


def import_all(packages: list[str]) -> list[str]:
    """Import every module of ``packages``; the ones that fail, with why."""
    import importlib
    import pkgutil

    failed = []
    for top in packages:
        pkg = importlib.import_module(top)
        for info in pkgutil.walk_packages(pkg.__path__, top + "."):
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # noqa: BLE001 - reported
                failed.append(f"{info.name}: {exc!r}")
    return failed


def main() -> int:
    args = sys.argv[1:]
    if args[0] == "--block-extras":
        block()
        args = args[1:]
    if args[0] == "--import-all":  # every module of the core packages imports
        failed = import_all(args[1:])
        print(json.dumps({"failed": failed, "imported": sorted({m.partition(".")[0] for m in sys.modules} & BLOCKED)}))
        return 0
    from planner.cli import main as planner

    results = []
    for argv in json.loads(args[0]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = planner(argv)
            except SystemExit as exc:  # argparse
                rc = exc.code
        results.append({"argv": argv, "rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()[-4000:]})
    imported = sorted({m.partition(".")[0] for m in sys.modules} & BLOCKED)
    print(json.dumps({"results": results, "imported": imported}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
