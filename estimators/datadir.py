"""Where the estimators read their calibration: the shipped tables, or a folder of the user's.

The package ships ``calibration.json`` (kernel and network fits), ``lengths.json`` (ServeGen
quantile tables) and ``tool_latency.json`` in ``estimators/data/``. A calibration folder written by
``python -m estimators.calibrate --out DIR`` may hold any of them (a partial calibration: e.g. only
H200 kernels, or only lengths). Selecting it (:func:`select`, the scenario field ``calibration``,
or the environment variable ``RL_PLANNER_CALIBRATION``) makes :func:`read_json` return, per file,

* ``calibration.json``: the shipped document deep-merged with the folder's (the folder's entries
  win key by key, so a folder with H200 kernels only keeps the shipped H100 fit);
* ``lengths.json`` and ``tool_latency.json``: the folder's file where it has one, else the shipped one.

The selection is process-wide (the estimators are plain functions with caches); :func:`select`
clears those caches.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

from estimators.merge import deep_merge

ENV = "RL_PLANNER_CALIBRATION"
FILES = ("calibration.json", "lengths.json", "tool_latency.json")
_selected: Path | None = None
_explicit = False


def shipped_dir() -> Path:
    return Path(str(resources.files("estimators").joinpath("data")))


def selected() -> Path | None:
    """The calibration folder in use (None: the shipped tables only)."""
    if _explicit:
        return _selected
    env = os.environ.get(ENV)
    return Path(env) if env else None


def check_folder(path: str | Path) -> Path:
    """``path`` as a folder holding at least one calibration file; ValueError saying what is missing."""
    p = Path(path)
    if not p.is_dir():
        raise ValueError(f"calibration folder {p} not found")
    if not any((p / f).is_file() for f in FILES):
        raise ValueError(f"calibration folder {p} holds none of {', '.join(FILES)}")
    return p


def select(path: str | Path | None) -> None:
    """Read calibration from ``path`` from now on (None: back to the environment / shipped tables)."""
    global _selected, _explicit
    new = check_folder(path).resolve() if path is not None else None
    if new == _selected and _explicit == (path is not None):
        return  # nothing changes: keep the caches
    _selected, _explicit = new, path is not None
    clear_caches()


_on_change: list = []  # the caches of what was read from the calibration files (the readers register them)


def on_change(*clear) -> None:
    """Register functions to call when the calibration folder changes (the readers' ``cache_clear``):
    the modules that read the tables register themselves, so this one imports none of them."""
    _on_change.extend(clear)


def clear_caches() -> None:
    for fn in _on_change:
        fn()


def read_json(name: str) -> dict:
    """The calibration file ``name`` (one of :data:`FILES`) as the estimators should use it."""
    shipped = json.loads(resources.files("estimators").joinpath("data").joinpath(name).read_text())
    folder = selected()
    if folder is None:
        return shipped
    own = folder / name
    if not own.is_file():
        return shipped
    try:
        mine = json.loads(own.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"calibration file {own} cannot be read: {exc}") from None
    return deep_merge(shipped, mine) if name == "calibration.json" else mine
