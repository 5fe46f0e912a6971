"""Writing output files safely: a whole file or nothing, and never a device or link replaced.

:func:`write_atomic` (text or bytes) and :func:`replacing` (a temporary path a writer such as
matplotlib's ``savefig`` fills) share one rule for the target:

* missing or a regular file: write a temporary file in the same folder, ``fsync`` it and rename
  it over the target (a failed write never leaves half a file); the new file keeps the old one's
  permission bits, or is created ``0600`` when ``private`` (state) and per the umask otherwise;
* a character device (``/dev/null``, a terminal) or a FIFO/pipe, also through a symbolic link
  such as ``/dev/stdout``: written in place, as a shell redirection would (renaming over a device
  node would replace it with a regular file when run as root);
* a symbolic link to anything else, a directory, a block device or a socket: refused
  (:class:`UserError`, exit 2), nothing written.

The temporary file is removed however the write ends: an exception, Ctrl-C, or SIGTERM. SIGTERM's
default action ends the process at once, without a ``finally``, and left ``.NAME.*.tmp`` files
behind (``planner whatif --out`` killed while writing its folder). So while a temporary file of
:func:`replacing` exists, a SIGTERM that would have ended the process (its action the default,
in the main thread) raises :class:`Terminated` instead: the ``finally`` blocks between it and the
outermost write remove their temporary files, and then SIGTERM is delivered again with its
default action, so the process still ends by SIGTERM (status 143), as it would have. The handler
only sets a flag and raises; a second SIGTERM while the files are being removed waits for that.
A process that handles SIGTERM itself (the daemon) or ignores it keeps its handler.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator, Union

from planner.errors import Problem, UserError


def _refuse(p: Path, why: str, where: str) -> UserError:
    return UserError(Problem(where, f"refusing to write {p}: {why}", "give the path of a regular file (or of a new one) to write"))


def target_kind(path: Union[str, Path], where: str = "") -> str:
    """``"replace"`` (missing or regular: atomic rename) or ``"stream"`` (a character device or a
    FIFO: written in place); anything else is refused. A path given as text that ends in a slash
    names a folder (``Path`` drops the slash: ``out/`` was written as a file ``out``): refused."""
    p = Path(path)
    text = os.fspath(path)
    if text.endswith(("/", os.sep)) and not p.is_dir():
        stem = text.rstrip("/" + os.sep)
        raise UserError(Problem(where, f"refusing to write {text}: it ends in '/', so it names a folder, and this output is a file",
                                f"give a file's path: {stem}/FILE once the folder {stem} exists, or {stem} without the '/'"))
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        if not p.parent.is_dir():
            raise UserError(Problem(where, f"cannot write {p}: the folder {p.parent} does not exist", "create the folder first")) from None
        return "replace"
    except NotADirectoryError:
        raise UserError(Problem(where, f"cannot write {p}: a part of the path above it is a file, not a folder",
                                "give the path of a file in an existing folder")) from None
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        try:
            real = os.stat(p)
        except OSError:
            raise _refuse(p, "it is a dangling symbolic link", where) from None
        if stat.S_ISCHR(real.st_mode) or stat.S_ISFIFO(real.st_mode):
            return "stream"
        raise _refuse(p, "it is a symbolic link (renaming over it would replace the link, writing through it could clobber "
                         f"{os.path.realpath(p)})", where)
    if stat.S_ISREG(mode):
        return "replace"
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "stream"
    if stat.S_ISDIR(mode):
        raise _refuse(p, "it is a directory", where)
    raise _refuse(p, "it is a block device or a socket", where)


def _stream(p: Path, data: bytes, where: str) -> None:
    import fcntl

    try:  # O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging; then blocking writes
        fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise UserError(Problem(where, f"cannot write {p}: {exc.strerror or exc}", "check the path (a FIFO needs a reader)")) from None
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as exc:
        raise UserError(Problem(where, f"cannot write {p}: {exc.strerror or exc}", "check the path")) from None
    finally:
        os.close(fd)


class Terminated(BaseException):
    """SIGTERM arrived while :func:`replacing` had a temporary file (see the module's notes). A
    ``BaseException``, like ``KeyboardInterrupt``: ``except Exception`` does not swallow it."""


class _TermState:
    """The SIGTERM handler's state (main thread only: where signal handlers are set and run)."""

    depth = 0  # nested writes inside the outermost, which installed the handler
    previous: Any = None  # the action before it
    pending = False  # a SIGTERM came: delivered again once the outermost write is left


_term = _TermState()


def _on_sigterm(signum, frame) -> None:
    if not _term.pending:  # the first one raises; another, while the temporary files are removed, waits for it
        _term.pending = True
        raise Terminated()


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While inside: SIGTERM raises :class:`Terminated` when its action was the default (the
    outermost of nested writes installs the handler and, on leaving, restores the previous one and
    delivers a SIGTERM that came). Elsewhere than the main thread, or when SIGTERM has a handler or
    is ignored: nothing changes."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _term.depth == 0:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            yield
            return
        _term.previous, _term.pending = signal.signal(signal.SIGTERM, _on_sigterm), False
    _term.depth += 1
    try:
        yield
    finally:
        _term.depth -= 1
        if _term.depth == 0:
            signal.signal(signal.SIGTERM, _term.previous if _term.previous is not None else signal.SIG_DFL)
            if _term.pending:  # every temporary file is gone: end as SIGTERM would have
                _term.pending = False
                os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT held back (blocked in this thread) for a few system calls: one that comes
    is delivered when they are done."""
    import signal

    held = {signal.SIGTERM, signal.SIGINT}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextlib.contextmanager
def replacing(path: Union[str, Path], *, private: bool = False, where: str = "", suffix: str = "") -> Iterator[Path]:
    """A temporary path to fill; on a clean exit it becomes ``path`` (see the module's rules)."""
    p = Path(path)
    kind = target_kind(path, where)  # (the text as given: Path drops a trailing slash)
    folder = p.parent if kind == "replace" else None
    tmp: Path | None = None
    with _sigterm_raises():
        try:
            with _signals_held():  # a signal now would leave the file before the `finally` knows it
                try:
                    fd, name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=f".tmp{suffix}", dir=folder)
                except OSError as exc:
                    raise UserError(Problem(where, f"cannot write into {p.parent}: {exc.strerror or exc}",
                                            "give a folder you can write to")) from None
                tmp = Path(name)
                os.close(fd)
            yield tmp
            _finish(p, tmp, kind, private, where)
        finally:
            if tmp is not None:
                with _signals_held(), contextlib.suppress(FileNotFoundError):
                    tmp.unlink()


def _finish(p: Path, tmp: Path, kind: str, private: bool, where: str) -> None:
    """The filled temporary file ``tmp`` made ``p``: renamed over it, or streamed into a device or FIFO."""
    if kind == "stream":
        _stream(p, tmp.read_bytes(), where)
        return
    try:
        old = os.stat(p).st_mode & 0o7777
    except FileNotFoundError:
        old = None
    if private:
        mode = 0o600
    elif old is not None:
        mode = old
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.chmod(tmp, mode)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, p)


def write_atomic(path: Union[str, Path], data: Union[str, bytes], *, private: bool = False, where: str = "") -> None:
    """Write ``data`` (text is UTF-8) to ``path``: all of it or nothing (see the module's rules)."""
    raw = data.encode() if isinstance(data, str) else data
    with replacing(path, private=private, where=where) as tmp:
        tmp.write_bytes(raw)


def probe_folder(path: Union[str, Path], where: str) -> None:
    """Before any work, that an output folder (``simulate --out DIR``, ``whatif --out DIR``) takes
    files: an existing one gets a temporary file created and removed in it, a missing one is
    created and removed again (its parent exists: the caller checked). Permission bits alone do
    not say it (root passes ``os.access`` on ``/proc`` and ``/sys``, where ``mkdir`` fails): the
    folder was made only after minutes of simulation or search, and failed as an internal error."""
    p = Path(path)
    try:
        if p.is_dir():
            fd, name = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=p)
            os.close(fd)
            os.unlink(name)
        else:
            os.mkdir(p)
            os.rmdir(p)
    except OSError as exc:
        what = f"cannot write into the folder {p}" if p.is_dir() else f"cannot create the folder {p}"
        raise UserError(Problem(where, f"{what}: {exc.strerror or exc}", "give a folder you can write to")) from None


# ------------------------------------------------------------------ SQLite files a command will write
def can_write(path: Union[str, Path], folder: bool = False) -> bool:
    """Can this process write ``path`` (and search it, a folder; read it, a file)? Its effective ids
    and capabilities decide (root without CAP_DAC_OVERRIDE is refused as a user is)."""
    mode = os.W_OK | (os.X_OK if folder else os.R_OK)
    if os.access in os.supports_effective_ids:
        return os.access(path, mode, effective_ids=True)
    return os.access(path, mode)


def check_sqlite_writable(path: Path, where: str, what: str, *, who: str, make_folder: bool = False) -> None:
    """Before SQLite opens ``path`` to write it (WAL): the file (when there), its folder and its
    ``-wal`` and ``-shm`` files (when there, e.g. left by a killed process) are writable, else
    :class:`UserError` naming the path and the ``chmod``. SQLite would open a read-only file
    read-only (or make its sidecars with the file's mode) and fail at the first write, in the
    middle of whatever the command does. ``what`` names the file ("state": "state file not
    writable: PATH"); ``who`` the user it must be writable by; ``make_folder``: a missing folder is
    created by the caller, so the nearest existing folder above it must be writable instead."""
    folder = path.parent if str(path.parent) else Path(".")
    if os.path.exists(path) and not can_write(path):
        raise UserError(Problem(where, f"{what} file not writable: {path}; check its permissions",
                                f"make it readable and writable by {who} (chmod u+rw {path}), or pass another {where} path"))
    if make_folder and not folder.exists():
        above = folder
        while not above.exists() and above != above.parent:
            above = above.parent
        if not above.is_dir():
            raise UserError(Problem(where, f"cannot create the folder {folder} of the {what} file {path}: {above} is not a folder",
                                    f"pass a {where} path in a folder"))
        if not can_write(above, folder=True):
            raise UserError(Problem(where, f"cannot create the folder {folder} of the {what} file {path}: {os.path.abspath(above)} "
                                    "is not writable; check its permissions",
                                    f"make it writable by {who} (chmod u+rwx {above}), create {folder} yourself, or pass a "
                                    f"{where} path in another folder"))
        return
    if not folder.is_dir():  # (a file: 'not writable' and its chmod would be the wrong way out)
        raise UserError(Problem(where, f"{folder} is not a folder, so the {what} file {path} cannot be in it",
                                f"pass a {where} path in a folder (did you mean {folder} itself?)"))
    if not can_write(folder, folder=True):
        raise UserError(Problem(where, f"{what} folder not writable: {os.path.abspath(folder)}; check its permissions (SQLite "
                                f"creates {path.name}-wal and {path.name}-shm beside the {what} file)",
                                f"make the folder writable by {who} (chmod u+rwx {folder}), or pass a {where} path in "
                                "another folder"))
    bad = [side for side in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
           if os.path.lexists(side) and not (stat.S_ISREG(os.lstat(side).st_mode) and can_write(side))]
    if bad:
        which = " and ".join(f"{side} (mode {stat.S_IMODE(os.lstat(side).st_mode):04o})" for side in bad)
        raise UserError(Problem(where, f"the {what} file's sidecar {which} {'is' if len(bad) == 1 else 'are'} not writable; "
                                f"check {'its' if len(bad) == 1 else 'their'} permissions: the {what} file itself is not damaged",
                                f"make {'it' if len(bad) == 1 else 'them'} readable and writable by {who} "
                                f"(chmod u+rw {' '.join(str(b) for b in bad)}); never delete a -wal file: it holds committed "
                                "transactions"))


__all__ = ["Terminated", "can_write", "check_sqlite_writable", "replacing", "target_kind", "write_atomic"]
