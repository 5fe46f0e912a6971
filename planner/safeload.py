"""The one hardened reader for every file and body rl-planner reads (scenarios, instances, plans,
snapshots, telemetry): bounded, and every failure a :class:`UserError` (exit 2) naming
``file:line`` and the fix.

Limits (each a :class:`Limits` field; the defaults fit every real input with a wide margin and
keep a hostile one to a few seconds and well under 1 GB):

* ``max_bytes`` -- a file is read through a bounded ``read`` (so ``/dev/zero`` or a growing file
  cannot exhaust memory); only regular files are read (no directories, devices, FIFOs);
* ``max_depth`` -- nesting of mappings/sequences (YAML and JSON), checked while composing, so a
  deeply nested document fails before any recursion;
* ``max_nodes`` -- YAML nodes composed (the largest real inputs, a snapshot of 4,096 workers or a
  scenario of 1,024 jobs, hold under 100,000; YAML costs about 2 us a node, JSON far less);
* ``max_alias_nodes`` -- nodes an alias may add when it is expanded: a "billion laughs" document
  (each anchor aliasing the previous one ten times) needs :math:`10^k` nodes for :math:`k`
  levels, so it stops after ``max_alias_nodes`` of them, in under a second; recursive
  aliases (``&a [*a]``) are refused. As many as ``max_nodes``: a 1,000-job scenario written by
  PyYAML's dumper (which writes an anchor for every shared value) expands 20,000-odd values and was
  refused at 20,000.

Text must be UTF-8 (a UTF-8 BOM is skipped; UTF-16/32 and NUL bytes are refused with the fix).
YAML is YAML 1.1 "safe" (no Python objects): standard tags only (no base-60 numbers: ``1:05`` is
refused rather than read as 65), merge keys ``<<: *anchor`` and
``<<: [*a, *b]`` work as in YAML (explicit keys win, then the first merged mapping). Duplicate
keys in one mapping are an error (YAML would silently keep the last). JSON is strict: ``NaN``
and ``Infinity`` are refused.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser as _PyParser  # the pure-Python parts: the fallback without libyaml
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from planner.errors import Problem, UserError

PathKey = tuple  # a path into the document: ("jobs", 3, "rollout")


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 8 << 20
    max_depth: int = 64
    max_nodes: int = 200_000
    max_alias_nodes: int = 200_000


LIMITS = Limits()


class Document:
    """Parsed data plus the source line of every path."""

    def __init__(self, data: Any, lines: dict[PathKey, int], filename: str) -> None:
        self.data = data
        self.lines = lines
        self.filename = filename
        #: what the depth check of a JSON text saw of its numbers in the same walk (None: not
        #: known): (every float finite, some boolean); :func:`check_numbers` need not walk again
        self.numbers: Optional[tuple[bool, bool]] = None
        #: ``file:line`` of the paths whose values came from another file (a scenario's ``include:``)
        self.origins: dict[PathKey, str] = {}

    def where(self, path: PathKey) -> str:
        """``file:line`` of the deepest known prefix of ``path`` (in this file, or in the file it was
        merged in from)."""
        for n in range(len(path), -1, -1):
            key = tuple(path[:n])
            line = self.lines.get(key)
            if line is not None:
                return f"{self.filename}:{line}"
            origin = self.origins.get(key)
            if origin is not None:
                return origin
        return self.filename


def fmt_path(path: PathKey) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def _bad(message: str, fix: str, source: str, where: str = "") -> UserError:
    return UserError(Problem(where, message, fix, source=source))


# ------------------------------------------------------------------------------------ files
def read_bytes(path: str | Path, *, what: str = "file", limits: Limits = LIMITS, where: str = "") -> bytes:
    """The bytes of a regular file, at most ``limits.max_bytes`` of them."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise _bad(f"{what} not found: {p}", "check the path", str(p), where) from None
    except OSError as exc:
        raise _bad(f"cannot read {what} {p}: {exc.strerror or exc}", "check the path and its permissions", str(p), where) from None
    if stat.S_ISDIR(st.st_mode):
        raise _bad(f"{p} is a directory, not a {what}", "pass the path of a file inside it", str(p), where)
    if not stat.S_ISREG(st.st_mode):
        raise _bad(f"{p} is not a regular file (a device, FIFO or socket)", f"pass a regular {what}", str(p), where)
    if st.st_size > limits.max_bytes:
        raise _too_big(p, st.st_size, what, limits, where)
    try:
        # O_NONBLOCK: a file swapped for a FIFO after the stat cannot block the open
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise _bad(f"cannot read {what} {p}: {exc.strerror or exc}", "check the path and its permissions", str(p), where) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _bad(f"{p} is not a regular file", f"pass a regular {what}", str(p), where)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limits.max_bytes + 1)
    except OSError as exc:
        raise _bad(f"cannot read {what} {p}: {exc.strerror or exc}", "check the file", str(p), where) from None
    finally:
        os.close(fd)
    if len(data) > limits.max_bytes:
        raise _too_big(p, len(data), what, limits, where)
    return data


def _too_big(p: Path, size: int, what: str, limits: Limits, where: str) -> UserError:
    return _bad(f"{p} is {size:,} bytes or more; a {what} may have at most {limits.max_bytes:,}",
                "split the input or pass the right file", str(p), where)


def decode(data: bytes, source: str) -> str:
    """UTF-8 text (a leading BOM dropped); UTF-16/32 and binary data refused with the fix."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if data[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff") or data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise _bad("the file is UTF-16 or UTF-32 encoded", "save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)", source)
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise _bad("the file holds NUL bytes: binary data or UTF-16 without a byte-order mark",
                   "pass a UTF-8 text file (YAML or JSON)", f"{source}:{line}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _bad(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                   "save the file as UTF-8", f"{source}:{line}") from None


def read_text(path: str | Path, *, what: str = "file", limits: Limits = LIMITS, where: str = "") -> str:
    return decode(read_bytes(path, what=what, limits=limits, where=where), str(path))


# ------------------------------------------------------------------------------------- YAML
try:  # libyaml's scanner and parser (C), with the Python composer below (bounded depth)
    from yaml._yaml import CParser as _Parser

    _C = True
except ImportError:  # pragma: no cover - PyYAML without libyaml
    _C = False


class _Limit(Exception):
    def __init__(self, message: str, fix: str, line: int) -> None:
        super().__init__(message)
        self.message, self.fix, self.line = message, fix, line


if _C:
    class _Loader(Composer, _Parser, Resolver):  # type: ignore[misc, valid-type]
        def __init__(self, text: str, limits: Limits) -> None:
            _Parser.__init__(self, text)
            Composer.__init__(self)
            Resolver.__init__(self)
            self._limits, self._depth, self._nodes = limits, 0, 0

        def compose_node(self, parent, index):
            return _compose_node(self, parent, index)
else:  # pragma: no cover
    class _Loader(Reader, Scanner, _PyParser, Composer, Resolver):  # type: ignore[no-redef]
        def __init__(self, text: str, limits: Limits) -> None:
            Reader.__init__(self, text)
            Scanner.__init__(self)
            _PyParser.__init__(self)
            Composer.__init__(self)
            Resolver.__init__(self)
            self._limits, self._depth, self._nodes = limits, 0, 0

        def compose_node(self, parent, index):
            return _compose_node(self, parent, index)


# YAML 1.2's floats without a dot or an exponent sign (1e3, 1.5e-3, 2E+6): YAML 1.1 reads them as text, and a
# number field then said "Input should be a valid number (got '1e3')" of a valid number. Every writer of YAML
# this reader reads back registers it too (:func:`reads_exponent_floats`), so that the text '1e3' is quoted.
FLOAT_EXPONENT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")


def reads_exponent_floats(cls):
    """Register :data:`FLOAT_EXPONENT` as a float on a PyYAML resolver, loader or dumper class (returned)."""
    cls.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_EXPONENT, list("-+0123456789"))
    return cls


reads_exponent_floats(_Loader)


class SafeDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """PyYAML's safe dumper (libyaml's emitter where there is one) quoting what this module reads as a number."""


reads_exponent_floats(SafeDumper)
_OCTAL = re.compile(r"^[-+]?0[0-9_]+$")  # YAML 1.1 reads 010 as 8 (octal)


def _compose_node(self, parent, index):
    self._nodes += 1
    if self._nodes > self._limits.max_nodes:
        raise _Limit(f"more than {self._limits.max_nodes:,} YAML nodes", "split the input", self.peek_event().start_mark.line + 1)
    self._depth += 1
    try:
        if self._depth > self._limits.max_depth:
            raise _Limit(f"nested more than {self._limits.max_depth} levels deep",
                         "flatten the document (no real input nests this deep)", self.peek_event().start_mark.line + 1)
        return Composer.compose_node(self, parent, index)
    finally:
        self._depth -= 1


_STD_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "merge", "timestamp")}
_MERGE = "tag:yaml.org,2002:merge"
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class _Builder:
    """Nodes -> plain data (dict/list/scalars) with line numbers, merge keys, alias budget."""

    def __init__(self, filename: str, limits: Limits, composed: int) -> None:
        self.filename = filename
        self.lines: dict[PathKey, int] = {}
        self.budget = composed + limits.max_alias_nodes
        self.limits = limits
        self.built = 0
        self.active: set[int] = set()
        self.scalar = SafeConstructor()

    def src(self, node) -> str:
        return f"{self.filename}:{node.start_mark.line + 1}"

    def build(self, node, path: PathKey, record: bool = True) -> Any:
        self.built += 1
        if self.built > self.budget:
            raise _bad(f"aliases expand to more than {self.limits.max_alias_nodes:,} extra values (an alias bomb?)",
                       "use fewer nested aliases (anchors referring to anchors)", self.src(node))
        if record:
            self.lines.setdefault(path, node.start_mark.line + 1)
        if node.tag not in _STD_TAGS:
            raise _bad(f"unsupported YAML tag {node.tag!r}", "remove the tag: only plain YAML values are read",
                       self.src(node), fmt_path(path))
        if isinstance(node, yaml.ScalarNode):
            if node.tag in _NUMBER_TAGS and ":" in node.value:
                raise _bad(f"{node.value[:40]!r} is a YAML 1.1 base-60 number (1:05 would be read as 65)",
                           "write the number in base 10, or quote the text", self.src(node), fmt_path(path))
            if node.tag in _NUMBER_TAGS and _OCTAL.match(node.value) and not node.style:  # (plain: None, or "" from libyaml)
                raise _bad(f"{node.value[:40]!r} has a leading zero: YAML 1.1 reads it as an octal number (010 would be 8)",
                           "write the number without the leading zero, or quote the text", self.src(node), fmt_path(path))
            try:
                return self.scalar.construct_object(node)
            except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
                raise _bad(f"cannot read {node.value[:40]!r} as {node.tag.rsplit(':', 1)[-1]}: {_first_line(exc)}",
                           "fix the value or drop its tag", self.src(node), fmt_path(path)) from None
            finally:
                self.scalar.constructed_objects.clear()
        want = "seq" if isinstance(node, yaml.SequenceNode) else "map"
        if node.tag != f"tag:yaml.org,2002:{want}":
            raise _bad(f"unsupported YAML tag {node.tag!r} on a {'list' if want == 'seq' else 'mapping'}",
                       "remove the tag: only plain YAML values are read", self.src(node), fmt_path(path))
        if id(node) in self.active:
            raise _bad("recursive alias: a value contains itself", "remove the alias that refers to its own anchor",
                       self.src(node), fmt_path(path))
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(v, path + (i,), record) for i, v in enumerate(node.value)]
            return self.mapping(node, path, record)
        finally:
            self.active.discard(id(node))

    def mapping(self, node, path: PathKey, record: bool) -> dict:
        out: dict = {}
        merged: dict = {}
        for knode, vnode in node.value:
            if knode.tag == _MERGE:
                sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
                for s in sources:
                    if not isinstance(s, yaml.MappingNode):
                        raise _bad("a merge key '<<' takes a mapping or a list of mappings", "merge an anchored mapping: <<: *name",
                                   self.src(s), fmt_path(path))
                    for k, v in self.build(s, path, record=False).items():
                        merged.setdefault(k, v)
                continue
            if not isinstance(knode, yaml.ScalarNode):
                raise _bad("mapping keys must be plain scalars", "write the key as a plain word", self.src(knode), fmt_path(path))
            key = self.build(knode, path, record=False)
            if isinstance(key, (list, dict)) or not isinstance(key, (str, int, float, bool, type(None))):
                raise _bad("mapping keys must be plain scalars", "write the key as a plain word", self.src(knode), fmt_path(path))
            if key in out:
                raise _bad(f"duplicate key '{key}' (YAML would silently keep the last one)", "remove one of the two entries",
                           self.src(knode), fmt_path(path + (key,)))
            out[key] = self.build(vnode, path + (key,), record)
        for k, v in merged.items():
            out.setdefault(k, v)
        return out


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "problem", None) or exc)
    return text.splitlines()[0] if text else type(exc).__name__


def parse_yaml(text: str, filename: str = "<input>", *, limits: Limits = LIMITS) -> Document:
    """One YAML document (JSON is YAML too) -> :class:`Document`; every error a :class:`UserError`."""
    if len(text) > limits.max_bytes:
        raise _bad(f"the input has {len(text):,} characters; at most {limits.max_bytes:,} are read", "split the input", filename)
    loader = _Loader(text, limits)
    try:
        node = loader.get_single_node()
    except _Limit as exc:
        raise _bad(exc.message, exc.fix, f"{filename}:{exc.line}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        src = f"{filename}:{mark.line + 1}" if mark else filename
        if filename.lower().endswith(".json"):  # read as YAML (JSON's superset) for the line numbers
            raise _bad(f"not valid JSON (cannot parse it): {_first_line(exc)}",
                       "check the brackets, commas and quotes near that line (is the file cut short?)", src) from None
        raise _bad(f"not valid YAML (cannot parse it): {_first_line(exc)}", "check indentation and quoting near that line", src) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # libyaml's reader (e.g. unprintable characters)
        raise _bad(f"not valid YAML (cannot parse it): {_first_line(exc)}", "check the file's characters", filename) from None
    finally:
        loader.dispose()
    if node is None:
        return Document(None, {}, filename)
    b = _Builder(filename, limits, loader._nodes)
    data = b.build(node, ())
    return Document(data, b.lines, filename)


# ------------------------------------------------------------------------------------- JSON
def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _no_duplicates(pairs: list) -> dict:
    out = dict(pairs)  # in C; a key given twice leaves fewer entries than pairs
    if len(out) != len(pairs):
        seen: set = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {k!r} (JSON readers would silently keep one of them)")
            seen.add(k)
    return out


class NotJSON(UserError):
    """The text is not JSON syntax (a reader that takes YAML too may parse it as that: flow-style
    YAML starts with ``{`` as JSON does)."""


def parse_json(text: str, filename: str = "<input>", *, limits: Limits = LIMITS) -> Any:
    """Strict JSON (no NaN/Infinity), at most ``limits.max_depth`` levels deep."""
    return _parse_json(text, filename, limits)[0]


def _parse_json(text: str, filename: str, limits: Limits) -> tuple[Any, tuple[bool, bool]]:
    """:func:`parse_json`, and what its depth check saw of the numbers (:func:`_scan`)."""
    if len(text) > limits.max_bytes:
        raise _bad(f"the input has {len(text):,} characters; at most {limits.max_bytes:,} are read", "split the input", filename)
    try:
        data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise NotJSON(Problem("", f"cannot parse as JSON: {exc.msg} (column {exc.colno})", "check the brackets, commas and quotes near that line",
                              source=f"{filename}:{exc.lineno}")) from None
    except ValueError as exc:
        raise _bad(f"cannot parse as JSON: {exc}", "write finite numbers (JSON has no NaN or Infinity) and each key once",
                   filename) from None
    except RecursionError:
        raise _bad(f"nested more than {limits.max_depth} levels deep", "flatten the document", filename) from None
    return data, _scan(data, filename, limits)


def check_depth(data: Any, filename: str = "<input>", limits: Limits = LIMITS) -> None:
    """Refuse data nested deeper than ``limits.max_depth`` (iterative: no recursion; only
    containers are pushed, so a plan of 10,000 jobs is walked in well under 0.1 s)."""
    _scan(data, filename, limits)


def _scan(data: Any, filename: str, limits: Limits) -> tuple[bool, bool]:
    """:func:`check_depth`, and in the same walk over every value: (every float finite, some
    boolean), exact for data of plain types (as JSON parses to); a value of another type (a
    subclass) counts as a non-finite float, so that :func:`check_numbers` walks carefully."""
    import math

    isfinite = math.isfinite
    finite, some_bool = True, False
    t = type(data)
    if t is not dict and t is not list:
        if t is float:
            return isfinite(data), False
        return t in _PLAIN_SCALARS, t is bool
    stack = [(data, 1)]
    while stack:
        v, d = stack.pop()
        if d > limits.max_depth:
            raise _bad(f"nested more than {limits.max_depth} levels deep", "flatten the document", filename)
        for x in (v.values() if type(v) is dict else v):
            tx = type(x)
            if tx is dict or tx is list:
                stack.append((x, d + 1))
            elif tx is float:
                if not isfinite(x):
                    finite = False
            elif tx is bool:
                some_bool = True
            elif tx is not str and tx is not int and x is not None:
                finite = False  # not a plain type: check_numbers decides
    return finite, some_bool


_PLAIN_SCALARS = (str, int, bool, type(None))


def check_numbers(data: Any, doc: Optional[Document] = None, *, bools: bool = True, where: str = "") -> None:
    """Refuse NaN and infinities anywhere in ``data``, and booleans too unless ``bools`` (for
    formats with no boolean field, where ``true`` can only be a mistaken number). Iterative; names
    the path. (Run it on validated data too: a lax number field turns the text "inf" into inf.)"""
    import math

    if doc is not None and doc.numbers is not None and _part_of(data, doc.data):  # seen by the document's depth check
        finite, some_bool = doc.numbers
        if finite and (bools or not some_bool):
            return
    elif _numbers_clean(data, bools):  # the common case, without building a path for every value
        return
    stack: list = [(data, ())]
    while stack:
        v, path = stack.pop()
        bad = None
        if isinstance(v, bool):
            if not bools:
                bad = f"{str(v).lower()} is a boolean, not a number"
        elif isinstance(v, float) and not math.isfinite(v):
            bad = f"{v} is not a finite number"
        elif isinstance(v, dict):
            stack.extend((x, path + (k,)) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, path + (i,)) for i, x in enumerate(v))
        if bad:
            src = doc.where(path) if doc is not None else where
            raise UserError(Problem(fmt_path(path), bad, "write a finite number", source=src))


def _part_of(data: Any, whole: Any) -> bool:
    """``data`` is ``whole``, or a mapping of some of ``whole``'s top-level entries (the same objects)."""
    if data is whole:
        return True
    return type(data) is dict and type(whole) is dict and all(k in whole and whole[k] is v for k, v in data.items())


def _numbers_clean(data: Any, bools: bool) -> bool:
    """Whether ``data`` holds no NaN, no infinity and (unless ``bools``) no boolean: one pass over
    the containers; :func:`check_numbers` walks again with paths only to name a bad value."""
    import math

    isfinite = math.isfinite
    stack = [data]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict or t is list:
            for x in (v.values() if t is dict else v):
                tx = type(x)
                if tx is float:
                    if not isfinite(x):
                        return False
                elif tx is dict or tx is list:
                    stack.append(x)
                elif tx is bool:
                    if not bools:
                        return False
                elif tx is not int and tx is not str and x is not None:
                    if isinstance(x, (bool, float, dict, list)):  # subclasses: the careful walk decides
                        return False
        elif t is float:
            return isfinite(v)
        elif t is bool:
            return bools
        elif isinstance(v, (float, dict, list)):
            return False
    return True


# --------------------------------------------------------------------------------- together
# Unicode's bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) count
# as control characters: printed, a name holding U+202E showed its text reversed ('Trojan Source';
# a scenario named "weave<U+202E>micro" was validated and echoed as it was: an outside audit)
BIDI_CONTROLS = frozenset(chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_CONTROL = (frozenset(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]) - {"\t", "\n", "\r"}) | BIDI_CONTROLS
_LINE_BREAKS = frozenset("\n\r\t")


def check_text(doc: Document) -> None:
    """Refuse control characters (ESC, NUL, C1 codes) in any string of a document, and line breaks
    or tabs in keys and in names (values of keys called ``name`` or ``*_name``, ``job``, ``gpu_type``,
    ``base``, ``cluster``): printed, they could move the cursor or forge lines of output."""
    stack: list[tuple[Any, PathKey]] = [(doc.data, ())]
    while stack:
        v, path = stack.pop()
        if type(v) is dict:
            for k, x in v.items():
                if isinstance(k, str) and (_CONTROL.intersection(k) or _LINE_BREAKS.intersection(k)):
                    _text_error(doc, path + (k,), "a key")
                if isinstance(x, str):
                    named = isinstance(k, str) and (k in ("name", "job", "gpu_type", "base", "cluster") or k.endswith("_name"))
                    if _CONTROL.intersection(x) or (named and _LINE_BREAKS.intersection(x)):
                        _text_error(doc, path + (k,), "a name" if named else "a text")
                elif type(x) is dict or type(x) is list:
                    stack.append((x, path + (k,)))
        elif type(v) is list:
            for i, x in enumerate(v):
                if isinstance(x, str) and _CONTROL.intersection(x):
                    _text_error(doc, path + (i,), "a text")
                elif type(x) is dict or type(x) is list:
                    stack.append((x, path + (i,)))


# what a JSON text must hold for some string parsed from it to hold a control character, a line
# break or a tab: the character itself (strict JSON refuses raw ones below 0x20 inside strings, so
# only DEL and the C1 codes can be raw there) or an escape (\b \f \n \r \t, or \u00XX for XX
# below 0x20 or from 0x7F to 0x9F), or a bidirectional control (raw, or \u202A-\u202E and
# \u2066-\u2069). A text with none of them needs no walk; one with some (or an escaped backslash
# before such a letter) is walked by :func:`check_text`, which names the path.
_JSON_RAW = None
_JSON_ESCAPE = None


def json_text_clean(text: str) -> bool:
    """Whether no string parsed from the JSON ``text`` can hold a character :func:`check_text`
    refuses (a few milliseconds for a 10 MB text, against a walk of every string)."""
    import re

    global _JSON_RAW, _JSON_ESCAPE
    if _JSON_RAW is None:
        _JSON_RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
        _JSON_ESCAPE = re.compile(r"\\(?:[bfnrt]|u00(?:[01][0-9a-fA-F]|7[fF]|[89][0-9a-fA-F])|u20(?:2[a-eA-E]|6[6-9]))")
    if _JSON_RAW.search(text):
        return False
    return "\\" not in text or _JSON_ESCAPE.search(text) is None


def _text_error(doc: Document, path: PathKey, what: str) -> None:
    raise _bad(f"{what} holds control characters (ESC, NUL, line breaks in a name, bidirectional overrides...)",
               "remove them: names are plain printable text", doc.where(path), fmt_path(path))


def parse(text: str, filename: str = "<input>", *, fmt: str = "auto", limits: Limits = LIMITS) -> Document:
    """``fmt``: ``json`` (strict), ``jsonl`` (one JSON value a line), ``yaml``, or ``auto``, which
    is YAML whatever the text or the file name (YAML reads JSON text too, with line numbers).
    :func:`load` picks the format by the file's name; :func:`parse_json_or_yaml` by the text."""
    if fmt == "json":
        data, numbers = _parse_json(text, filename, limits)
        doc = Document(data, {}, filename)
        doc.numbers = numbers
        return doc
    if fmt == "jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                out.append(parse_json(line, f"{filename}:{n}", limits=limits))
        return Document(out, {}, filename)
    return parse_yaml(text, filename, limits=limits)


def parse_json_or_yaml(text: str, filename: str = "<input>", *, limits: Limits = LIMITS,
                       json_limits: Optional[Limits] = None, starts: tuple[str, ...] = ("{", "[")) -> Document:
    """A text that starts with one of ``starts`` (after blanks) and is JSON syntax parsed as JSON
    (in C, under ``json_limits``, default ``limits``); any other text as YAML, including flow-style
    YAML (``{kind: ..., body: {...}}``, as ``yaml.safe_dump(default_flow_style=True)`` writes it),
    which starts with ``{`` as JSON does and is reported with its line as YAML. A file named
    ``.json`` (``filename``, any case) stays JSON: its JSON syntax errors are reported as such."""
    if text.lstrip().startswith(starts):
        try:
            return parse(text, filename, fmt="json", limits=json_limits or limits)
        except NotJSON:
            if filename.lower().endswith(".json"):
                raise
    return parse(text, filename, fmt="yaml", limits=limits)


def load(path: str | Path, *, what: str = "file", fmt: str = "auto", limits: Limits = LIMITS, where: str = "") -> Document:
    """Read and parse one file (YAML or JSON) through every limit above."""
    p = Path(path)
    if fmt == "auto":
        fmt = {".json": "json", ".jsonl": "jsonl"}.get(p.suffix.lower(), "yaml")
    text = read_text(p, what=what, limits=limits, where=where)
    doc = parse(text, str(p), fmt=fmt, limits=limits)
    if not (fmt in ("json", "jsonl") and json_text_clean(text)):  # JSON without such characters: nothing to walk
        check_text(doc)
    return doc


def try_load(path: str | Path, **kw) -> Optional[Document]:
    """:func:`load`, or None when the file cannot be read as data (for sniffing a file's kind)."""
    try:
        return load(path, **kw)
    except UserError:
        return None


def with_limits(**kw) -> Limits:
    return replace(LIMITS, **kw)


__all__ = ["Document", "LIMITS", "Limits", "NotJSON", "check_depth", "check_numbers", "decode", "fmt_path", "load", "parse", "parse_json",
           "parse_json_or_yaml", "parse_yaml", "read_bytes", "read_text", "try_load", "with_limits"]
