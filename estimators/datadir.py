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


MAX_FILE_BYTES = 8 << 20  # a calibration file (the shipped ones are under 64 KB)
MAX_DEPTH = 16
MAX_QUANTILES = 100_000  # points of one quantile table
MAX_VALUE = 1e12


def check_folder(path: str | Path) -> Path:
    """``path`` as a folder holding at least one calibration file, each of which reads (bounded) and
    has the shape and values the estimators need; ValueError naming the file and field otherwise."""
    p = Path(path)
    try:
        folder = p.is_dir()
    except OSError as exc:  # a name longer than the file system holds (ENAMETOOLONG), a loop of links...
        raise ValueError(f"calibration folder {p} cannot be opened: {exc.strerror or type(exc).__name__}") from None
    if not folder:
        raise ValueError(f"calibration folder {p} not found")
    if not any((p / f).is_file() for f in FILES):
        raise ValueError(f"calibration folder {p} holds none of {', '.join(FILES)}")
    for name in FILES:
        if (p / name).exists():
            _own(p / name)
    return p


def _read_own(path: Path) -> dict:
    from estimators.boundedio import BoundedReadError, json_file

    try:
        data = json_file(path, max_bytes=MAX_FILE_BYTES, max_depth=MAX_DEPTH, what="calibration file")
    except BoundedReadError as exc:
        raise ValueError(f"{exc.message} ({exc.fix})" if exc.fix else exc.message) from None
    if not isinstance(data, dict):
        raise ValueError(f"calibration file {path} must hold a JSON object, not {type(data).__name__}")
    return data


def _own(path: Path) -> dict:
    """A calibration file of a folder, read bounded and checked (``calibration.json`` as merged
    over the shipped one, which is what the estimators use)."""
    mine = _read_own(path)
    if path.name == "calibration.json":
        check_calibration(deep_merge(_shipped("calibration.json"), mine), path)
    elif path.name == "lengths.json":
        check_lengths(mine, path)
    else:
        check_tool_latency(mine, path)
    return mine


def _shipped(name: str) -> dict:
    return json.loads(resources.files("estimators").joinpath("data").joinpath(name).read_text())


def _number(v, where: str, path: Path, *, positive: bool = False, hi: float = MAX_VALUE, lo: float = 0.0) -> float:
    import math

    # (an int is compared exactly: math.isfinite of a 400-digit integer raises OverflowError)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise ValueError(f"calibration file {path}: {where} must be a finite number")
    if (v <= 0 if positive else v < 0) or v > hi or v < lo:
        low = f">= {lo:g}" if lo > 0 else ("> 0" if positive else ">= 0")
        raise ValueError(f"calibration file {path}: {where} must be {low} and <= {hi:g}")
    return float(v)


def _mapping(v, where: str, path: Path) -> dict:
    if not isinstance(v, dict):
        raise ValueError(f"calibration file {path}: {where} must be an object (mapping), not {type(v).__name__}")
    return v


def _quantiles(v, where: str, path: Path) -> None:
    if not isinstance(v, list) or not 2 <= len(v) <= MAX_QUANTILES:
        raise ValueError(f"calibration file {path}: {where} must be a list of 2 to {MAX_QUANTILES} numbers")
    prev = -1.0
    for i, x in enumerate(v):
        x = _number(x, f"{where}[{i}]", path)
        if x < prev:
            raise ValueError(f"calibration file {path}: {where} must be non-decreasing (a quantile table); [{i}] is smaller than [{i - 1}]")
        prev = x


# kernel -> (fields that must be > 0, fields that must be >= 0); each required where the kernel is
KERNEL_FIELDS = {"gemm": (("eff_compute", "eff_memory", "p"), ("c0_ms",)),
                 "decode_attention": ((), ("c0_ms", "kv_coef", "bh_coef")),
                 "prefill_attention": ((), ("c0_ms", "flops_coef", "bytes_coef"))}
# (low, high) where a fit outside is no measurement: an efficiency is a share of the datasheet peak (a boost
# clock may pass it a little; 1e-300 made a rollout phase 2e300 s), a kernel's fixed cost is under a second
KERNEL_RANGES = {"eff_compute": (1e-4, 1.5), "eff_memory": (1e-4, 1.5), "p": (0.0, 64.0), "c0_ms": (0.0, 1000.0)}


def check_calibration(doc: dict, path: Path) -> None:
    """The merged ``calibration.json``: every kernel and link fit complete, finite and in range
    (``eff_compute: 0`` divides by zero; a ``p`` beyond 64 overflows the power mean)."""
    for gpu, ks in _mapping(doc.get("kernels", {}), "kernels", path).items():
        for kernel, f in _mapping(ks, f"kernels.{gpu}", path).items():
            where = f"kernels.{gpu}.{kernel}"
            f = _mapping(f, where, path)
            pos, nonneg = KERNEL_FIELDS.get(kernel, ((), ()))
            for k in pos + nonneg:
                if k not in f:
                    raise ValueError(f"calibration file {path}: {where}.{k} is missing")
                lo, hi = KERNEL_RANGES.get(k, (0.0, MAX_VALUE))
                _number(f[k], f"{where}.{k}", path, positive=k in pos, hi=hi, lo=lo)
            for k, v in f.items():
                if k.startswith("fit_"):
                    _number(v, f"{where}.{k}", path)
    net = _mapping(doc.get("network", {}), "network", path)
    links = [(f"network.all_reduce_intra_node.{n}", f) for n, f in _mapping(net.get("all_reduce_intra_node", {}),
                                                                              "network.all_reduce_intra_node", path).items()]
    links += [(f"network.send_recv.{n}", f) for n, f in _mapping(net.get("send_recv", {}), "network.send_recv", path).items()]
    for where, f in links:
        f = _mapping(f, where, path)
        for k, positive in (("latency_ms", False), ("bandwidth_gb_per_s", True)):
            if k not in f:
                raise ValueError(f"calibration file {path}: {where}.{k} is missing")
            _number(f[k], f"{where}.{k}", path, positive=positive)


def check_lengths(doc: dict, path: Path) -> None:
    """``lengths.json``: ``mixture.{input,output}_quantiles`` and per client ``output_quantiles``
    and ``requests`` (what :mod:`estimators.lengths` reads)."""
    mix = _mapping(doc.get("mixture"), "mixture", path) if "mixture" in doc else None
    if mix is None:
        raise ValueError(f"calibration file {path}: mixture is missing (with input_quantiles and output_quantiles)")
    for k in ("input_quantiles", "output_quantiles"):
        if k not in mix:
            raise ValueError(f"calibration file {path}: mixture.{k} is missing")
        _quantiles(mix[k], f"mixture.{k}", path)
    for cid, c in _mapping(doc.get("clients", {}), "clients", path).items():
        c = _mapping(c, f"clients.{cid}", path)
        if not (str(cid).isascii() and str(cid).isdigit()):  # '²' is a digit to isdigit() but not to int()
            raise ValueError(f"calibration file {path}: clients.{cid}: client ids are numbers")
        if "output_quantiles" not in c:
            raise ValueError(f"calibration file {path}: clients.{cid}.output_quantiles is missing")
        _quantiles(c["output_quantiles"], f"clients.{cid}.output_quantiles", path)
        if "requests" in c:
            _number(c["requests"], f"clients.{cid}.requests", path)


def check_tool_latency(doc: dict, path: Path) -> None:
    """``tool_latency.json``: ``seconds``, a non-decreasing list of finite seconds."""
    if "seconds" not in doc:
        raise ValueError(f"calibration file {path}: seconds is missing (a sorted list of tool-call latencies)")
    _quantiles(doc["seconds"], "seconds", path)


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
    shipped = _shipped(name)
    folder = selected()
    if folder is None:
        return shipped
    own = folder / name
    if not own.exists():
        return shipped
    mine = _own(own)  # bounded and checked (also when the folder came from the environment)
    return deep_merge(shipped, mine) if name == "calibration.json" else mine
