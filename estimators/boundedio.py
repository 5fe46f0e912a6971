"""Bounded reading of the estimators' input files: trace files and calibration folders.

:mod:`planner.safeload` is the hardened reader of documents (scenarios, plans, snapshots); the
estimators sit below the planner and read two kinds of user files of their own, through this
module only:

* :func:`lines` -- the lines of a text file, optionally gzip: only a regular file (no device,
  FIFO or directory; opened non-blocking), at most ``max_bytes`` on disk, at most
  ``max_decompressed`` bytes after decompression (a 3 MB ``.gz`` that expands to 3 GB stops at
  the cap, reading in 1 MiB chunks), at most ``max_line`` bytes a line (a single 3 GB line stops
  at the cap instead of being assembled), UTF-8;
* :func:`json_file` -- a small JSON document (``max_bytes``) parsed strictly (no NaN/Infinity, no
  duplicate keys) and at most ``max_depth`` levels deep (a 200,000-deep document is refused before
  ``json`` recurses).

Errors are :class:`BoundedReadError` (a ``ValueError``) with a message naming the file and line
and a fix; they never quote the file's content.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any, Iterator

CHUNK = 1 << 20


class BoundedReadError(ValueError):
    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def _open_regular(p: Path, max_bytes: int, what: str) -> int:
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise BoundedReadError(f"{what} {p} not found", "check the path") from None
    except OSError as exc:
        raise BoundedReadError(f"cannot read {what} {p}: {exc.strerror or exc}", "check the path and its permissions") from None
    if not stat.S_ISREG(st.st_mode):
        raise BoundedReadError(f"{what} {p} is not a regular file", f"pass a regular {what}")
    if st.st_size > max_bytes:
        raise BoundedReadError(f"{what} {p} has {st.st_size:,} bytes; at most {max_bytes:,} are read",
                               "sample the file down (a few hundred thousand rows give a distribution)")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise BoundedReadError(f"cannot read {what} {p}: {exc.strerror or exc}", "check the path and its permissions") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BoundedReadError(f"{what} {p} is not a regular file", f"pass a regular {what}")
    return fd


def _chunks(fh, p: Path, gz: bool, max_bytes: int, max_decompressed: int, what: str) -> Iterator[bytes]:
    total = 0
    src = gzip.GzipFile(fileobj=fh, mode="rb") if gz else fh
    try:
        while True:
            b = src.read(CHUNK)
            if not b:
                return
            total += len(b)
            if total > (max_decompressed if gz else max_bytes):
                raise BoundedReadError(f"{what} {p} expands to more than {max_decompressed:,} bytes" if gz else
                                       f"{what} {p} has more than {max_bytes:,} bytes",
                                       "sample the file down (a few hundred thousand rows give a distribution)")
            yield b
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise BoundedReadError(f"cannot read {what} {p}: {type(exc).__name__}", "check that the file is readable text (or gzip)") from None


def lines(path: str | Path, *, max_bytes: int, max_decompressed: int, max_line: int, what: str = "file") -> Iterator[tuple[int, str]]:
    """(line number, text without the newline) of a text file (``.gz``: gzip), within the bounds."""
    p = Path(path)
    fd = _open_regular(p, max_bytes, what)
    with os.fdopen(fd, "rb") as fh:
        buf = b""
        no = 0
        for chunk in _chunks(fh, p, p.name.lower().endswith(".gz"), max_bytes, max_decompressed, what):
            buf += chunk
            parts = buf.split(b"\n")
            buf = parts.pop()
            for raw in parts:
                no += 1
                yield no, _decode(raw[3:] if no == 1 and raw.startswith(BOM) else raw, p, no, max_line, what)
            if len(buf) > max_line:
                raise BoundedReadError(f"{p}:{no + 1}: a line longer than {max_line:,} bytes", f"a {what} holds short lines (one row each)")
        if buf:
            no += 1
            yield no, _decode(buf[3:] if no == 1 and buf.startswith(BOM) else buf, p, no, max_line, what)


BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark (spreadsheets write one before a CSV's header): skipped, as planner.safeload skips it


def _decode(raw: bytes, p: Path, no: int, max_line: int, what: str) -> str:
    if len(raw) > max_line:
        raise BoundedReadError(f"{p}:{no}: a line longer than {max_line:,} bytes", f"a {what} holds short lines (one row each)")
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError:
        raise BoundedReadError(f"{p}:{no}: not UTF-8 text", "save the file as UTF-8") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _no_duplicates(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key is given twice in one object")
    return out


def depth(data: Any) -> int:
    """Nesting depth of parsed JSON data (iterative)."""
    best, stack = 0, [(data, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            best = max(best, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return best


def loads(text: str, where: str, max_depth: int) -> Any:
    """Strict JSON text at most ``max_depth`` deep; BoundedReadError naming ``where``."""
    try:
        data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise BoundedReadError(f"{where}: nested more than {max_depth} levels deep", "flatten the document") from None
    except json.JSONDecodeError as exc:
        raise BoundedReadError(f"{where}: not valid JSON ({exc.msg}, line {exc.lineno})", "write valid JSON") from None
    except ValueError as exc:
        raise BoundedReadError(f"{where}: not valid JSON ({exc})", "write finite numbers and each key once") from None
    if depth(data) > max_depth:
        raise BoundedReadError(f"{where}: nested more than {max_depth} levels deep", "flatten the document")
    return data


def json_file(path: str | Path, *, max_bytes: int, max_depth: int = 64, what: str = "file") -> Any:
    """A small strict JSON document, bounded in size and depth."""
    p = Path(path)
    fd = _open_regular(p, max_bytes, what)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise BoundedReadError(f"{what} {p} has more than {max_bytes:,} bytes", "pass the file the calibration wrote")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")  # a UTF-8 BOM is skipped, as safeload skips it
    except UnicodeDecodeError:
        raise BoundedReadError(f"{what} {p} is not UTF-8 text", "save it as UTF-8") from None
    return loads(text, str(p), max_depth)
