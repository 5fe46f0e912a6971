"""Checks of the options several commands share (exit 2 with the option named), the one argparse
type for numeric options: :func:`number` (finite, in a range, never NaN or inf), and the one for
options and arguments that name a file or folder: :func:`path` (never empty)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, overload

SECONDS = 1e8           # about 3 years: the most any duration/horizon option takes
TIME_LIMIT_S = 86400.0  # one day: the most a solver or a call may be given
MAX_THREADS = 256
MAX_WORKERS = 256


@overload
def number(lo: Optional[float] = None, hi: Optional[float] = None, *, kind: type[int],
           lo_open: bool = False, hi_open: bool = False) -> Callable[[str], int]: ...
@overload
def number(lo: Optional[float] = None, hi: Optional[float] = None, *, kind: type[float] = float,
           lo_open: bool = False, hi_open: bool = False) -> Callable[[str], float]: ...
def number(lo: Optional[float] = None, hi: Optional[float] = None, *, kind: type = float,
           lo_open: bool = False, hi_open: bool = False) -> Callable[[str], Any]:
    """An argparse ``type=``: ``kind`` (float or int) parsed from the text, finite, and in
    ``[lo, hi]`` (``lo_open``/``hi_open``: that end excluded). argparse turns a refusal into
    ``argument --flag: ...`` and exit status 2."""
    import argparse

    if lo is not None and hi is not None:
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    elif hi is not None:
        rng = f"{'below' if hi_open else 'at most'} {hi:g}"
    elif lo is not None:
        rng = f"{'above' if lo_open else 'at least'} {lo:g}"
    else:
        rng = "any finite number"

    def parse(text: str) -> Any:
        try:
            v = kind(text.strip())
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} (allowed: {rng})") from None
        if isinstance(v, float) and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number (allowed: {rng})")
        if lo is not None and (v < lo or (lo_open and v == lo)) or hi is not None and (v > hi or (hi_open and v == hi)):
            raise argparse.ArgumentTypeError(f"{text} is out of range (allowed: {rng})")
        return v

    parse.__name__ = "int" if kind is int else "number"
    return parse


def path(text: str) -> str:
    """An argparse ``type=`` for every option or argument that names a file or folder: the text as
    given (a trailing ``/`` kept, :func:`planner.safewrite.target_kind` reads it), refused when
    empty or blank (``--plot ''`` drew nothing, ``--current ''`` planned from scratch and
    ``--sim-state ''`` took the default file, all without a word). argparse turns the refusal into
    ``argument --flag: ...`` and exit status 2."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty, not a path: give a path, or leave the option out (its default)")
    problem = name_too_long(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}: give a shorter path")
    return text


NAME_MAX = 255    # bytes in one file name (every Linux file system)
PATH_MAX = 4095   # bytes in a path the kernel takes


def name_too_long(text: str) -> Optional[str]:
    """Why no file system holds ``text`` as a path (a name over NAME_MAX bytes, the whole over
    PATH_MAX), else None: every call on such a path raises ENAMETOOLONG (``-o`` with a 300-character
    name ended in an internal error)."""
    import os

    try:
        raw = os.fsencode(text)
    except UnicodeError:
        return None  # (the OS call names that)
    if len(raw) > PATH_MAX:
        return f"the path is {len(raw):,} bytes long; a path has at most {PATH_MAX:,}"
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        return f"a name in the path is {len(longest):,} bytes long; a file or folder name has at most {NAME_MAX}"
    return None


def file_path(text: str) -> Path:
    """:func:`path` as a :class:`pathlib.Path` (the options whose code takes one)."""
    return Path(path(text))


def seconds(hi: float = SECONDS, *, zero: bool = False) -> Callable[[str], float]:
    """Positive (or, with ``zero``, non-negative) finite seconds, at most ``hi``."""
    return number(0.0, hi, lo_open=not zero)


def count(lo: int = 1, hi: int = 1 << 30) -> Callable[[str], int]:
    return number(lo, hi, kind=int)


def check_solver_args(args) -> None:
    """``--time-limit`` > 0, ``0 <= --mip-gap < 1`` and ``--threads`` >= 1, where the command has them."""
    from planner.errors import Problem, UserError

    limit = getattr(args, "time_limit", None)
    if limit is not None and not limit > 0:
        raise UserError(Problem("--time-limit", f"must be positive seconds, got {limit}", "pass e.g. --time-limit 30"))
    gap = getattr(args, "mip_gap", None)
    if gap is not None and not 0 <= gap < 1:
        raise UserError(Problem("--mip-gap", f"must be in [0, 1), got {gap}", "pass e.g. --mip-gap 0.01"))
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        raise UserError(Problem("--threads", f"must be at least 1, got {threads}", "pass e.g. --threads 2"))


def command_argv(args, name: str) -> list[str]:
    """The arguments this command was run with (for the ``command`` line its outputs record); when
    it was called from code rather than the shell, the input and policy from ``args``."""
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == name:
        return sys.argv[2:]
    return [args.scenario, "--policy", args.policy]


def check_outputs(args, *names: str, inputs: Sequence[tuple[str, Optional[str]]] = ()) -> None:
    """Refuse, before any work, an output option (``args.<name>``) that names a directory, a
    symbolic link or a folder that does not exist (:func:`planner.safewrite.target_kind`), one that
    names the same file as another output (one would overwrite the other in silence), and one that
    names an input file (``inputs``: its label and path): ``planner plan S.yaml -o S.yaml`` replaced
    the scenario by its plan, exit 0 (an outside audit)."""
    from planner.errors import Problem, UserError
    from planner.safewrite import target_kind

    seen: list[tuple[str, str, tuple]] = []
    for name in names:
        path = getattr(args, name, None)
        if path and path != "-":
            opt = f"--{name.replace('_', '-')}"
            if target_kind(path, opt) != "replace":
                continue  # a device or a pipe (/dev/null, /dev/stdout): written in place, as a redirection would
            key = _file_key(path)
            for label, ipath in inputs:
                if ipath and ipath != "-" and _file_key(ipath) == key:
                    raise UserError(Problem(opt, f"{path} is the command's input ({label}): writing there would replace it",
                                            f"give {opt} another file"))
            for other, opath, okey in seen:
                if okey == key:
                    raise UserError(Problem(opt, f"{path} is the file {other} writes too ({opath}): one would overwrite the other",
                                            f"give {opt} and {other} different files"))
            seen.append((opt, path, key))


def same_file(a: str, b: str) -> bool:
    """Whether the paths ``a`` and ``b`` name one file (another spelling or a link of it included)."""
    return _file_key(a) == _file_key(b)


def _file_key(path: str) -> tuple:
    """What identifies the file ``path`` names: its device and inode when it exists (a link or
    another spelling of the same file compares equal), else its absolute, resolved path."""
    import os

    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", st.st_dev, st.st_ino)


def check_backend_flags(args, address_flag: str = "--address") -> None:
    """Refuse flags of the other backend instead of ignoring them: ``--address local`` with the
    default ``--backend sim`` applied to the simulated cluster in ``.rl-planner/`` while the user
    meant a Ray cluster (found by hand, 2026-12-08), and ``--sim-state`` with ``--backend ray``
    named a file nothing read."""
    from planner.errors import Problem, UserError

    address = getattr(args, address_flag.lstrip("-").replace("-", "_"), None)
    if args.backend == "sim" and address:
        raise UserError(Problem(address_flag, f"'{address}' names a Ray cluster, but the backend is sim (the default), which "
                                              "never reads it", f"add --backend ray to use that cluster, or drop {address_flag}"))
    if args.backend != "sim" and getattr(args, "sim_state", None):
        raise UserError(Problem("--sim-state", f"names a simulated cluster's file, but the backend is {args.backend}, which "
                                               "never reads it", "drop --sim-state, or use --backend sim"))
