"""Users' own workloads: a column of a trace file, or a quantile table, as a quantile grid.

A workload distribution (response lengths in tokens, prompt lengths in tokens, tool-call latencies
in seconds) is carried as ``GRID_POINTS`` values ``v_i = F^{-1}(i / (GRID_POINTS - 1))`` of its
inverse CDF on a uniform grid, the same shape as the shipped ServeGen tables
(:class:`estimators.lengths.LengthDistribution` ``kind="table"``); sampling draws ``u ~ U(0, 1)``
and interpolates linearly between grid points.

* **trace file** (:func:`read_column`): CSV (header row) or JSONL (one object per line), optionally
  gzip-compressed (``.gz``); one named numeric column. The grid is the empirical quantile function
  of its values (:func:`table_from_values`: ``numpy.quantile``, linear interpolation), so a trace
  of ``n`` values is reproduced exactly at its order statistics.
* **quantile table** (:func:`table_from_quantiles`): points ``(q_k, v_k)`` with ``q`` from 0 to 1
  and ``v`` non-decreasing; the inverse CDF is the piecewise-linear interpolation between them.

Errors are :class:`TraceError` (a ``ValueError``) with a message that names the file, the line or
column and the fix; the planner turns them into its user errors.
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

GRID_POINTS = 1001


class TraceError(ValueError):
    """A trace file or a quantile table the estimators cannot use; ``fix`` says what to change."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def _kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".jsonl") or name.endswith(".ndjson"):
        return "jsonl"
    if name.endswith(".csv") or name.endswith(".tsv"):
        return "csv"
    raise TraceError(f"{path}: unknown trace format (the name must end in .csv, .tsv, .jsonl or .ndjson, optionally .gz)",
                     "save the trace as CSV with a header row or as JSON Lines")


def _number(raw, path: Path, line: int, column: str) -> float:
    if isinstance(raw, bool):  # JSON's true/false: float() would read them as 1 and 0
        raise TraceError(f"{path}:{line}: column '{column}' holds a boolean (true/false), not a number",
                         "every row of the column must be a number (remove or fix that row)")
    try:
        v = float(raw)
    except OverflowError:  # an integer past any float (a 400-digit JSON integer)
        v = math.inf
    except (TypeError, ValueError):
        raise TraceError(f"{path}:{line}: column '{column}' holds something that is not a number",
                         "every row of the column must be a number (remove or fix that row)") from None
    if not math.isfinite(v) or v < 0 or v > MAX_TRACE_VALUE:
        raise TraceError(f"{path}:{line}: column '{column}' holds a value that is not finite, >= 0 and <= {MAX_TRACE_VALUE:g}",
                         "remove or fix that row")
    return v


MAX_TRACE_BYTES = 256 << 20  # on disk
MAX_TRACE_DECOMPRESSED = 256 << 20  # a .gz file after decompression
MAX_TRACE_LINE = 4 << 20     # bytes in one line
MAX_TRACE_DEPTH = 64         # nesting of a JSONL line
MAX_TRACE_ROWS = 5_000_000   # values read (also bounds a gzip file that expands without end)
MAX_TRACE_VALUE = 1e9        # tokens or seconds


def read_column(path: str | Path, column: str) -> np.ndarray:
    """The numeric values of ``column`` in a CSV or JSONL trace file (empty cells are skipped; a CSV
    row with fewer fields than the header is refused, naming its line and the missing fields, and
    one with more that are not empty, naming its line)."""
    p = Path(path)
    try:
        regular = p.is_file()  # also refuses directories, devices and FIFOs (/dev/zero)
    except OSError as exc:  # a name longer than the file system holds (ENAMETOOLONG), a loop of links...
        raise TraceError(f"trace file {p} cannot be opened: {exc.strerror or type(exc).__name__}",
                         "check the path (a relative path is relative to the scenario file)") from None
    if not regular:
        raise TraceError(f"trace file {p} not found or not a regular file",
                         "check the path (a relative path is relative to the scenario file)")
    size = p.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise TraceError(f"trace file {p} has {size} bytes; at most {MAX_TRACE_BYTES} are read",
                         "sample the trace down (a few hundred thousand rows give the distribution)")
    return _read_column_cached(str(p.resolve()), column, p.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _read_column_cached(path: str, column: str, _mtime_ns: int) -> np.ndarray:
    """Read through :func:`estimators.boundedio.lines` (size on disk, decompressed size and line
    length bounded). Messages name the file, line and column, never a value of the file."""
    from estimators.boundedio import BoundedReadError, lines, loads

    p = Path(path)
    kind = _kind(p)
    vals: list[float] = []
    rows = lines(p, max_bytes=MAX_TRACE_BYTES, max_decompressed=MAX_TRACE_DECOMPRESSED, max_line=MAX_TRACE_LINE, what="trace file")
    try:
        if kind == "csv":
            reader = csv.reader((text + "\n" for _, text in rows), delimiter="\t" if ".tsv" in p.name.lower() else ",")
            header = [h.strip() for h in next(reader, [])]
            if column not in header:
                raise TraceError(f"{p}: no column '{column}' in the header row ({len(header)} column(s))",
                                 "name one of the header's columns in 'column'")
            if header.count(column) > 1:  # which of them would be read?
                raise TraceError(f"{p}: the header row names the column '{column}' {header.count(column)} times",
                                 "give each header column a distinct name")
            at = header.index(column)
            for row in reader:
                i = reader.line_num  # the file's line (a quoted field may span lines)
                if len(row) < len(header):
                    if not any(f.strip() for f in row):
                        continue  # a blank line
                    missing = header[len(row):]
                    raise TraceError(f"{p}:{i}: the row has {len(row)} of the header's {len(header)} fields: no "
                                     + ", ".join(f"'{m}'" for m in missing[:5]) + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""),
                                     "give every row a field for each header column (an empty field between the separators "
                                     "is skipped), or remove that row")
                if len(row) > len(header) and any(f.strip() for f in row[len(header):]):
                    # (a field holding an unquoted separator: the fields after it, the column's among them, are shifted)
                    raise TraceError(f"{p}:{i}: the row has {len(row)} fields, the header {len(header)}: its fields do not "
                                     "line up with the header's columns",
                                     "quote a field that holds the separator, give the extra columns a header name, or "
                                     "remove that row")
                raw = row[at].strip()
                if raw:
                    vals.append(_number(raw, p, i, column))
                if i > MAX_TRACE_ROWS:
                    raise TraceError(f"{p}: more than {MAX_TRACE_ROWS} rows", "sample the trace down")
        else:
            seen_column = False
            for i, line in rows:
                if not line.strip():
                    continue
                obj = loads(line, f"{p}:{i}", MAX_TRACE_DEPTH)
                if not isinstance(obj, dict):
                    raise TraceError(f"{p}:{i}: a line must be a JSON object, got {type(obj).__name__}",
                                     "write one JSON object per line")
                if column in obj:
                    seen_column = True
                if obj.get(column) is not None:
                    vals.append(_number(obj[column], p, i, column))
                if i > MAX_TRACE_ROWS:
                    raise TraceError(f"{p}: more than {MAX_TRACE_ROWS} lines", "sample the trace down")
            if not vals and not seen_column:
                raise TraceError(f"{p}: no line has the key '{column}'", "name one of the lines' keys in 'column'")
    except BoundedReadError as exc:
        raise TraceError(exc.message, exc.fix) from None
    except csv.Error as exc:
        raise TraceError(f"cannot read trace file {p}: {str(exc).split(':')[0]}", "check that the file is CSV text (or gzip)") from None
    if len(vals) < 2:
        raise TraceError(f"{p}: column '{column}' has {len(vals)} value(s); a distribution needs at least 2",
                         "use a trace with more rows")
    return np.asarray(vals, dtype=float)


def table_from_values(values, points: int = GRID_POINTS) -> tuple[float, ...]:
    """The empirical quantile function of ``values`` on a uniform grid of ``points`` probabilities."""
    v = np.asarray(values, dtype=float)
    return tuple(float(x) for x in np.quantile(v, np.linspace(0.0, 1.0, points)))


def check_quantiles(pairs) -> list[tuple[float, float]]:
    """Sorted ``(q, v)`` points of a quantile table; raises :class:`TraceError` naming what is wrong."""
    pts = sorted((float(q), float(v)) for q, v in pairs)
    if len(pts) < 2:
        raise TraceError(f"a quantile table needs at least 2 points, got {len(pts)}",
                         "give at least the shortest (0) and the longest (1), e.g. {0: 50, 0.5: 800, 1: 16000}")
    for q, v in pts:
        if not 0.0 <= q <= 1.0:
            raise TraceError(f"quantile {q:g} is outside [0, 1]", "write quantiles as fractions (0.99, not 99)")
        if not math.isfinite(v) or v < 0 or v > MAX_TRACE_VALUE:
            raise TraceError(f"the value at quantile {q:g} is {v:g}; values must be finite and >= 0", "fix that value")
    if pts[0][0] != 0.0 or pts[-1][0] != 1.0:
        raise TraceError(f"the table covers quantiles {pts[0][0]:g} to {pts[-1][0]:g}; it must span 0 to 1",
                         "add the shortest value at 0 and the longest at 1")
    for (q0, v0), (q1, v1) in zip(pts, pts[1:]):
        if v1 < v0:
            raise TraceError(f"the value falls from {v0:g} at quantile {q0:g} to {v1:g} at {q1:g}",
                             "values must not decrease as the quantile grows")
    return pts


def table_from_quantiles(pairs, points: int = GRID_POINTS) -> tuple[float, ...]:
    """The piecewise-linear inverse CDF through the points of a quantile table, on the uniform grid."""
    pts = check_quantiles(pairs)
    q = np.array([p[0] for p in pts])
    v = np.array([p[1] for p in pts])
    return tuple(float(x) for x in np.interp(np.linspace(0.0, 1.0, points), q, v))


def table_mean(table) -> float:
    """Mean of the distribution whose inverse CDF is piecewise linear through ``table`` (trapezoids)."""
    t = np.asarray(table, dtype=float)
    return float(np.mean((t[1:] + t[:-1]) / 2.0))
