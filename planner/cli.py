"""The ``planner`` command line.

Every sub-command lives in its own module under :mod:`planner.commands` and is found by name:
a module there that defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args)``
becomes ``planner NAME``. Exit codes: 0 success, 2 bad input (a message naming the field and how
to fix it, never a traceback), 1 internal error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from typing import Sequence

from planner import __version__
from planner.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, UserError


def _command_modules():
    import planner.commands as pkg

    mods = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"planner.commands.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "run"):
            mods.append(mod)
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="planner",
        description="Optimising planner for RL post-training clusters.",
    )
    parser.add_argument("--version", action="version", version=f"rl-planner {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of internal errors (also RL_PLANNER_DEBUG=1)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _command_modules():
        p = sub.add_parser(
            mod.NAME,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse itself exits 2 on bad usage
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    debug = args.debug or os.environ.get("RL_PLANNER_DEBUG") == "1"
    try:
        rc = args._run(args)
        return int(rc or 0)
    except UserError as exc:
        print(f"error: {exc.render()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # noqa: BLE001 - the top of the program
        if debug:
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in rl-planner. Re-run with --debug for the traceback and report it.",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
