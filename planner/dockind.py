"""Which kind of document a file holds, found before any command reads it as its own input.

A plan given to ``validate`` used to draw 16 "unknown key" errors, and one given to ``realloc`` an
18 KB error quoting the whole plan: each command now calls :func:`expect` first, and a document of
another kind gets one line naming what it is and which command takes it.

Kinds, from the file's top level (nothing is validated here):

* a plan document: its ``kind`` (``PlacementPlan``, ``ReallocPlan``, ``ExecutorTarget``,
  ``CapacityPlan``) or ``PlacementInstance`` (a numbers-only placement instance);
* ``snapshot``: a telemetry snapshot (``job``, ``time_s``, ``components``), a list of them,
  ``{snapshots: [...]}`` or a ``.jsonl`` file;
* ``scenario``: anything else with ``jobs``, ``cluster``, ``gpu_types`` or ``include`` at the top.

A file that cannot be read or parsed, or that matches none of these, is left to the command's own
reader (which names the problem in detail).

A file whose kind is found by parsing it (a scenario always is) is read once: :func:`sniff` and
:func:`expect` hand the parsed document on (:class:`Sniffed`), and the scenario loader takes it
(``load_scenario(path, parsed=...)``) instead of reading and parsing the file a second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from planner.errors import Problem, UserError

if TYPE_CHECKING:
    from planner.safeload import Document

SCENARIO, SNAPSHOT, INSTANCE = "scenario", "snapshot", "PlacementInstance"

# kind -> (what it is, in words; which commands take it)
KINDS: dict[str, tuple[str, str]] = {
    SCENARIO: ("a scenario", "planner validate / estimate / plan / simulate / whatif / admit take it "
                             "(and --scenario of apply, realloc and daemon)"),
    INSTANCE: ("a numbers-only placement instance (PlacementInstance)", "planner plan / admit / validate-plan take it"),
    SNAPSHOT: ("a telemetry snapshot", "planner realloc SNAPSHOT takes it"),
    "PlacementPlan": ("a placement plan (PlacementPlan)",
                      "planner apply PLAN --scenario S or planner validate-plan INPUT PLAN take it (and --current of plan and admit)"),
    "ReallocPlan": ("a reallocation plan (ReallocPlan)", "planner apply PLAN takes it"),
    "ExecutorTarget": ("an executor target (ExecutorTarget)", "planner apply PLAN takes it"),
    "CapacityPlan": ("a capacity plan (CapacityPlan, the answer of planner whatif)",
                     "no command reads it back: it is a report (planner whatif SCENARIO writes it)"),
}

_SNAPSHOT_KEYS = {"components", "time_s"}
_SCENARIO_KEYS = {"jobs", "cluster", "gpu_types", "include"}


_KIND_LINE = None


def _head_kind(path: Path) -> Optional[str]:
    """A top-level ``kind: X`` (YAML) in the first 64 KiB or a JSON document whose first key is ``kind``: plan documents
    and instances name their kind up front, so a large one is not parsed twice."""
    import re

    global _KIND_LINE
    if _KIND_LINE is None:
        _KIND_LINE = re.compile(r'^kind:[ \t]*"?([A-Za-z]+)"?[ \t]*$', re.M)  # a top-level YAML key (column 0)
    try:
        with open(path, "rb") as f:
            head = f.read(65536).decode("utf-8", errors="replace")
    except OSError:
        return None
    m = _KIND_LINE.search(head)
    if m:
        return m.group(1)
    j = re.match(r'\s*\{\s*"kind"\s*:\s*"([A-Za-z]+)"', head)  # JSON whose first key is kind
    return j.group(1) if j else None


@dataclass(frozen=True)
class Sniffed:
    """The kind of a file (None: unknown) and the document parsed to find it (None: the kind came
    from the file's first lines, or the file could not be parsed)."""

    kind: Optional[str]
    parsed: Optional[Document] = None  # JSON included (its data and number scan)
    lines: bool = False  # ``parsed`` has line numbers (parsed as YAML, not as JSON)

    @property
    def doc(self) -> Optional[Document]:
        """The parsed document to hand to a reader that reports line numbers (None for JSON: such
        readers parse it themselves, as YAML)."""
        return self.parsed if self.lines else None

    @property
    def data(self) -> Any:
        """The parsed data, JSON included (for readers that need no line numbers)."""
        return self.parsed.data if self.parsed is not None else None


def _load(path: Path) -> Optional[Document]:
    """The file parsed through the bounded loader (:mod:`planner.safeload`: size, depth and alias
    limits), or None when it cannot be read as data (the command's own reader then says why)."""
    from planner import safeload

    if not path.is_file():
        return None
    return safeload.try_load(path, what="input file")


def _is_snapshot(d: Any) -> bool:
    return isinstance(d, dict) and _SNAPSHOT_KEYS <= set(d)


def _kind_of(data: Any) -> Optional[str]:
    if isinstance(data, list):
        return SNAPSHOT if data and all(_is_snapshot(d) for d in data) else None
    if not isinstance(data, dict):
        return None
    kind = data.get("kind")
    if isinstance(kind, str):
        return kind
    if isinstance(data.get("snapshots"), list) or _is_snapshot(data):
        return SNAPSHOT
    if _SCENARIO_KEYS & set(data):
        return SCENARIO
    return None


def sniff(path: str | Path) -> Sniffed:
    """The kind of document at ``path`` (see the module docstring) and the document parsed to find it."""
    p = Path(path)
    kind = _head_kind(p) if p.is_file() else None
    if kind:
        return Sniffed(kind)
    doc = _load(p)
    if doc is None:
        return Sniffed(None)
    # a document parsed as JSON has no line numbers: the readers parse those as YAML themselves
    return Sniffed(_kind_of(doc.data), doc, lines=p.suffix.lower() not in (".json", ".jsonl"))


def detect(path: str | Path) -> Optional[str]:
    """The kind of document at ``path`` (see the module docstring), or None when unknown."""
    return sniff(path).kind


def describe(kind: str) -> str:
    return KINDS.get(kind, (f"a {kind} document", ""))[0]


def expect(path: str | Path, accepted: Iterable[str], where: str, command: str) -> Sniffed:
    """Refuse, in one line, a document whose kind ``command`` does not take; else what :func:`sniff` found."""
    accepted = tuple(accepted)
    found = sniff(path)
    kind = found.kind
    if kind is None or kind in accepted:
        return found
    takes = KINDS.get(kind, ("", f"no command here takes a {kind}"))[1]
    wanted = " or ".join(describe(a) for a in accepted)
    raise UserError(Problem(where, f"{path} is {describe(kind)}, not {wanted}: planner {command} cannot read it",
                            f"{takes}; give planner {command} {wanted}"))
