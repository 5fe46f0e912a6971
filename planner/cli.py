"""The ``planner`` command line.

Every sub-command lives in its own module under :mod:`planner.commands` and is found by name:
a module there that defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args)``
becomes ``planner NAME``. Exit codes: 0 success, 2 bad input (a message naming the field and how
to fix it, never a traceback), 1 internal error.
"""

from __future__ import annotations

import argparse
import errno
import gc
import importlib
import os
import pkgutil
import sys
from typing import Sequence

from planner import STARTED_AT, __version__
from planner.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, UserError


def _command_modules(only: str | None = None):
    """The command modules, by name; ``only``: that command's module alone when it is one (the
    others are not imported: a quick command's time limit counts its start-up)."""
    import planner.commands as pkg

    mods = []
    names = sorted(info.name for info in pkgutil.iter_modules(pkg.__path__) if not info.name.startswith("_"))
    if only is not None and only.replace("-", "_") in names:
        names = [only.replace("-", "_")]
    for name in names:
        mod = importlib.import_module(f"planner.commands.{name}")
        if hasattr(mod, "NAME") and hasattr(mod, "run"):
            mods.append(mod)
    return mods


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; ``only``: of that command alone when it is one whose module
    declares that very name (else every command, so that a wrong name gets argparse's message)."""
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
    mods = _command_modules(only)
    if only is not None and [m.NAME for m in mods] != [only]:
        mods = _command_modules()
    for mod in mods:
        p = sub.add_parser(
            mod.NAME,
            help=mod.HELP,
            description=getattr(mod, "DESCRIPTION", mod.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _quick_exit=getattr(mod, "QUICK_EXIT", False), _pause_gc=getattr(mod, "PAUSE_GC", False))
    return parser


def main(argv: Sequence[str] | None = None, started: float | None = None, leave_quickly: bool = False) -> int:
    """Run one command. ``started`` (a ``time.perf_counter`` value) is when the command began for
    its time limits; the executable passes when the planner was imported (:func:`entry`),
    in-process callers (tests) leave it None and the command starts its clock itself.

    With ``leave_quickly`` (the executable), commands that declare ``QUICK_EXIT = True`` (they
    start no thread or process and write their files durably before returning: plan, admit,
    validate-plan) leave
    through ``os._exit`` once stdout and stderr are flushed, skipping the interpreter's teardown of
    what they built (about 0.1 s for a 2,000-job plan: part of a "whole command" time limit),
    unless a profiler, a tracer or coverage is watching the process (they write their data at
    exit)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    # the command named on the line: only its module is imported (the others cost ~20 ms);
    # the options before it take no values (--debug, --version, --help)
    pos = next((i for i, a in enumerate(args_list) if not a.startswith("-")), None)
    first = None if pos is None or {"-h", "--help"} & set(args_list[:pos]) else args_list[pos]
    parser = build_parser(first)
    args = parser.parse_args(args_list)  # argparse itself exits 2 on bad usage
    args._started = started
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    if leave_quickly and args._quick_exit:
        one_blas_thread()
    pause = args._pause_gc and gc.isenabled()
    if pause:  # see PAUSE_GC below
        gc.disable()
    try:
        rc = _run(args)
    finally:
        if pause:
            gc.enable()
    observed = sys.getprofile() is not None or sys.gettrace() is not None or "coverage" in sys.modules
    if leave_quickly and args._quick_exit and not observed:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, OSError):
            return rc  # the normal exit reports nothing more either
        os._exit(rc)
    return rc


#: A command module may declare ``PAUSE_GC = True``: it runs with Python's cyclic garbage collector
#: paused (reference counting still frees what it drops; the collector is resumed when it returns).
#: For commands of a fraction of a second that build hundreds of thousands of objects (parsed
#: JSON, models): the collector's passes over them were a fifth of ``planner admit`` against a
#: 2,000-job plan (0.1 s of ~0.55 s), and such a command leaves little cyclic garbage.

#: the BLAS / OpenMP thread pools numpy's linear algebra may start (OpenBLAS starts one thread per
#: core and its threads spin between calls: CPU seconds beyond the wall time of a time-limited command)
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> None:
    """One BLAS thread for the quick commands (plan, admit, validate-plan: their time limits hold in
    CPU seconds too, and their matrices are small), unless the caller set the variables. Effective
    only before numpy is imported (the executable imports it in the command)."""
    if "numpy" in sys.modules:
        return
    for var in BLAS_THREAD_VARS:
        os.environ.setdefault(var, "1")


def _run(args) -> int:
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
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS or debug:
            return _internal(exc, debug)
        # (the files a command writes are named by its own check; what reaches here is standard output:
        # `planner validate S > /dev/full`)
        where = f"{exc.filename}" if exc.filename else "standard output"
        print(f"error: cannot write {where}: {exc.strerror or exc}. Fix: free space there, or send the output elsewhere",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - the top of the program
        return _internal(exc, debug)


#: errors of a write that a user fixes (disk full, quota, file too large, read-only, I/O error)
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


def _internal(exc: BaseException, debug: bool) -> int:
    if debug:
        raise exc
    print(
        f"internal error: {type(exc).__name__}: {exc}\n"
        "This is a bug in rl-planner. Re-run with --debug for the traceback and report it.",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def entry() -> int:
    """The ``planner`` executable: time limits count from when the process imported the planner."""
    return main(started=STARTED_AT, leave_quickly=True)


if __name__ == "__main__":
    raise SystemExit(entry())
