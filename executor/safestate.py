"""Saved state that cannot run code: typed JSON plus raw tensor bytes, versioned and checksummed.

The simulated backend's file (``--sim-state``) used to hold pickles, and unpickling a crafted file
runs whatever it names (``planner status`` was enough). This codec reads and writes the same
object graphs without pickle:

* JSON for the structure: ``None``, bools, ints, strings, lists and string-keyed dicts as
  themselves; floats as themselves, non-finite ones as ``{"$f": "nan"}``; tuples ``{"$t": [...]}``,
  sets ``{"$s": [...]}``, other dicts ``{"$d": [[k, v], ...]}`` (``OrderedDict``: ``"$od"``); a
  long list met twice is written once (``{"$list": n, "items": [...]}``, then ``{"$lref": n}``);
* bytes, numpy arrays and tensors as raw bytes after the JSON (``{"$b": i}``, ``{"$nd": ...}``,
  ``{"$tensor": ...}``: dtype, shape, index), never through ``numpy.load``/``torch.load``;
* objects only of the classes in :data:`ALLOWED` (the workers, the coordinator, their records):
  ``{"$obj": NAME, "ref": n, "state": ...}``, rebuilt by ``cls.__new__`` and the class's own
  ``__setstate__`` (or ``__dict__``); a name that is not in the table is an error, never an
  import. An object met twice is written once and referenced (``{"$ref": n}``), so shared
  requests stay shared.

A blob is ``MAGIC`` (8 bytes, with the format version), the SHA-256 of the rest (32 bytes), the
JSON's length (8 bytes, little-endian), the JSON, the raw bytes. A blob that is not one, or whose
checksum does not match, raises :class:`BadState` (the backend turns it into exit status 2 with
what to do).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from collections import OrderedDict
from typing import Any, Callable

VERSION = 2  # 1 was pickle
MAGIC = b"RLPS\x00\x00\x00" + bytes([VERSION])
MAX_DEPTH = 200


class BadState(Exception):
    """A saved blob that is not this format, is damaged, or names something it may not."""


# The only classes a saved state may hold: name -> module (imported on first use; the trainer's needs torch).
ALLOWED = {"Layout": "executor.state", "Node": "executor.state", "Raw": "executor.workers.rawtensor",
           "Coordinator": "executor.workers.coordinator", "EngineConfig": "executor.workers.engine", "Req": "executor.workers.engine",
           "RolloutEngine": "executor.workers.engine", "ModelSpec": "executor.workers.model", "ServiceWorker": "executor.workers.service",
           "TrainerRank": "executor.workers.trainer", "LMEngine": "executor.workers.lm_engine",
           "LMTrainerRank": "executor.workers.lm_trainer", "LMSpec": "executor.workers.tinylm", "PSpec": "executor.workers.tinylm"}


def allowed_class(name: str, *, load: bool = True) -> type[object] | None:
    """The class of that name if a saved state may hold it (``load=False``: only if its module is imported already)."""
    mod = ALLOWED.get(name)
    if mod is None:
        return None
    if mod not in sys.modules:
        if not load:
            return None
        import importlib

        importlib.import_module(mod)
    return getattr(sys.modules[mod], name, None)


def _has_own(cls: type, name: str) -> bool:
    return any(name in vars(k) for k in cls.__mro__ if k is not object)


# ----------------------------------------------------------------------------- encode
_PLAIN = frozenset((int, str, bool, type(None)))  # exact types JSON writes and reads back as themselves
SHARE_MIN = 8  # a list of at least this many items met twice (GRPO prompts shared by a group) is written once


def _plain_seq(x) -> bool:
    return set(map(type, x)) <= _PLAIN


class _Enc:
    def __init__(self) -> None:
        self.blobs: list[bytes] = []
        self.refs: dict[int, int] = {}
        self.lists: dict[int, int] = {}
        self.keep: list[Any] = []  # objects whose id() is memoised stay alive while encoding

    def blob(self, b: bytes) -> int:
        self.blobs.append(b)
        return len(self.blobs) - 1

    def enc(self, x: Any, depth: int = 0) -> Any:
        t = type(x)
        if t in _PLAIN:  # the bulk of a world (token lists, ids, counters) goes through here untouched
            return x
        if t is float:
            return x if math.isfinite(x) else {"$f": repr(x)}
        if depth > MAX_DEPTH:
            raise BadState(f"nesting deeper than {MAX_DEPTH}")
        d = depth + 1
        if t is list:
            if len(x) >= SHARE_MIN:
                n = self.lists.get(id(x))
                if n is not None:
                    return {"$lref": n}
                n = self.lists[id(x)] = len(self.lists)
                self.keep.append(x)
                return {"$list": n, "items": x if _plain_seq(x) else [self.enc(v, d) for v in x]}
            return x if _plain_seq(x) else [self.enc(v, d) for v in x]
        if t is dict:
            if all(type(k) is str and not k.startswith("$") for k in x):
                return {k: (v if type(v) in _PLAIN else self.enc(v, d)) for k, v in x.items()}
            return {"$d": [[self.enc(k, d), self.enc(v, d)] for k, v in x.items()]}
        if t is tuple:
            return {"$t": list(x) if _plain_seq(x) else [self.enc(v, d) for v in x]}
        if x is None or isinstance(x, bool):
            return x
        if isinstance(x, int):
            return int(x)
        if isinstance(x, str):
            return str(x)
        if isinstance(x, float):
            return self.enc(float(x), depth)
        if isinstance(x, list):
            return [self.enc(v, d) for v in x]
        if isinstance(x, (set, frozenset)):
            return {"$s": [self.enc(v, d) for v in x], "frozen": isinstance(x, frozenset)}
        if isinstance(x, (bytes, bytearray, memoryview)):
            return {"$b": self.blob(bytes(x))}
        if isinstance(x, OrderedDict):
            return {"$od": [[self.enc(k, d), self.enc(v, d)] for k, v in x.items()]}
        if isinstance(x, dict):
            return self.enc(dict(x), depth)
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.ndarray):
            a = np.ascontiguousarray(x)
            if a.dtype.hasobject:
                raise BadState("a numpy array of Python objects cannot be saved")
            return {"$nd": {"dtype": a.dtype.str, "shape": list(a.shape), "blob": self.blob(a.tobytes())}}
        if np is not None and isinstance(x, np.generic):
            return self.enc(x.item(), depth)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            a = x.detach().cpu().contiguous().numpy()
            return {"$tensor": {"dtype": a.dtype.str, "shape": list(a.shape), "blob": self.blob(a.tobytes()),
                                "grad": bool(x.requires_grad)}}
        cls = type(x)
        name = cls.__name__
        if allowed_class(name, load=False) is not cls:
            raise BadState(f"an object of type {cls.__module__}.{cls.__qualname__} is not among the types a saved state may hold")
        if id(x) in self.refs:
            return {"$ref": self.refs[id(x)]}
        n = self.refs[id(x)] = len(self.refs)
        self.keep.append(x)
        if _has_own(cls, "__getstate__"):
            state = x.__getstate__()
        elif hasattr(x, "__dict__"):
            state = dict(x.__dict__)
        else:
            state = {s: getattr(x, s) for s in getattr(cls, "__slots__", ()) if hasattr(x, s)}
        return {"$obj": name, "ref": n, "state": self.enc(state, d)}


def dumps(obj: Any) -> bytes:
    e = _Enc()
    doc = json.dumps(e.enc(obj), separators=(",", ":"), allow_nan=False).encode()
    body = struct.pack("<Q", len(doc)) + doc + b"".join(struct.pack("<Q", len(b)) + b for b in e.blobs)
    return MAGIC + hashlib.sha256(body).digest() + body


# ----------------------------------------------------------------------------- decode
_JSON_SCALARS = frozenset((int, str, bool, float, type(None)))  # what json.loads gives that is final as it is

class Unloaded:
    """What a lenient :func:`loads` gives for an object whose class needs a package this install
    lacks (a trainer rank needs torch): its class name only. Reading a cluster's state to show or
    diff it (``status``, ``apply --dry-run``) needs no worker's insides."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Unloaded({self.name!r})"


class _Dec:
    def __init__(self, blobs: list[memoryview], lenient: bool = False) -> None:
        self.lenient = lenient
        self.blobs = blobs
        self.refs: dict[int, Any] = {}
        self.lists: dict[int, list] = {}

    def blob(self, i: Any) -> memoryview:
        if not isinstance(i, int) or not 0 <= i < len(self.blobs):
            raise BadState(f"a reference to raw bytes #{i!r} that are not in the file")
        return self.blobs[i]

    def array(self, spec: Any):
        import numpy as np

        if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list):
            raise BadState("a malformed array record")
        try:
            dt = np.dtype(str(spec["dtype"]))
        except TypeError:
            raise BadState(f"unknown dtype {spec.get('dtype')!r}") from None
        if dt.hasobject:
            raise BadState("an array of Python objects")
        data = self.blob(spec["blob"])
        shape = [int(s) for s in spec["shape"]]
        if any(s < 0 for s in shape) or math.prod(shape) * dt.itemsize != len(data):
            raise BadState(f"an array of shape {shape} and dtype {dt} does not match its {len(data)} bytes")
        return np.frombuffer(data, dtype=dt).reshape(shape).copy()

    def dec(self, x: Any, depth: int = 0) -> Any:
        t = type(x)
        if t in _JSON_SCALARS:
            return x
        if depth > MAX_DEPTH:
            raise BadState(f"nesting deeper than {MAX_DEPTH}")
        d = depth + 1
        if t is list:
            return x if set(map(type, x)) <= _JSON_SCALARS else [self.dec(v, d) for v in x]
        if t is not dict:
            raise BadState(f"an unexpected JSON value {t.__name__}")
        tag = next((k for k in x if k.startswith("$")), None)
        if tag is None:
            return {k: (v if type(v) in _JSON_SCALARS else self.dec(v, d)) for k, v in x.items()}
        v = x[tag]
        if tag == "$f":
            if v not in ("nan", "inf", "-inf"):
                raise BadState(f"a float {v!r}")
            return float(v)
        if tag == "$t":
            return tuple(self.dec(i, d) for i in _list(v))
        if tag == "$s":
            items = [self.dec(i, d) for i in _list(v)]
            return frozenset(items) if x.get("frozen") else set(items)
        if tag in ("$d", "$od"):
            pairs = [_pair(p) for p in _list(v)]
            mapping: dict[Any, Any] = OrderedDict() if tag == "$od" else {}
            for k, val in pairs:
                mapping[_hashable(self.dec(k, d))] = self.dec(val, d)
            return mapping
        if tag == "$list":
            if not isinstance(v, int) or v in self.lists:
                raise BadState("a shared list with a missing or repeated number")
            shared: list[Any] = []
            self.lists[v] = shared
            shared.extend(self.dec(_list(x.get("items")), d))
            return shared
        if tag == "$lref":
            if v not in self.lists:
                raise BadState(f"a reference to list #{v!r} before it is defined")
            return self.lists[v]
        if tag == "$b":
            return bytes(self.blob(v))
        if tag == "$nd":
            return self.array(v)
        if tag == "$tensor":
            import torch

            tensor = torch.from_numpy(self.array(v))
            return tensor.requires_grad_(True) if v.get("grad") else tensor
        if tag == "$ref":
            if v not in self.refs:
                raise BadState(f"a reference to object #{v!r} before it is defined")
            return self.refs[v]
        if tag == "$obj":
            try:
                cls = allowed_class(v) if isinstance(v, str) else None
            except ImportError:
                if not self.lenient:
                    raise
                ref = x.get("ref")
                if not isinstance(ref, int) or ref in self.refs:
                    raise BadState("an object record with a missing or repeated reference number") from None
                self.refs[ref] = Unloaded(str(v))
                return self.refs[ref]
            if cls is None:
                raise BadState(f"an object of type {v!r}, which a saved state may not hold")
            ref = x.get("ref")
            if not isinstance(ref, int) or ref in self.refs:
                raise BadState("an object record with a missing or repeated reference number")
            obj: Any = cls.__new__(cls)  # the class's own __new__ at run time
            self.refs[ref] = obj
            state = self.dec(x.get("state"), d)
            if _has_own(cls, "__setstate__"):
                obj.__setstate__(state)
            elif hasattr(obj, "__dict__"):
                if not isinstance(state, dict):
                    raise BadState(f"the state of a {v} is not a mapping")
                obj.__dict__.update(state)
            else:
                for k, val in state.items():
                    setattr(obj, k, val)
            return obj
        raise BadState(f"an unknown tag {tag!r}")


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise BadState("a malformed record (a list was expected)")
    return v


def _pair(p: Any) -> tuple:
    if not isinstance(p, list) or len(p) != 2:
        raise BadState("a malformed mapping entry")
    return p[0], p[1]


def _hashable(k: Any) -> Any:
    try:
        hash(k)
    except TypeError:
        raise BadState("a mapping key that cannot be a key") from None
    return k


def loads(data: bytes, check: Callable[[Any], None] | None = None, *, lenient: bool = False) -> Any:
    """The object :func:`dumps` wrote; :class:`BadState` for anything else. ``lenient``: an object
    whose class cannot be imported here (torch missing) comes back as :class:`Unloaded`."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadState(f"a {type(data).__name__} where a saved blob was expected")
    buf = memoryview(data).cast("B")
    if bytes(buf[:8]) != MAGIC:
        head = bytes(buf[:8])
        if head[:1] == b"\x80":
            raise BadState("a pickle (the format of rl-planner before saved states became code-free): it is not read")
        if head[:6] == MAGIC[:6]:
            raise BadState(f"format version {head[7]} (this rl-planner reads version {VERSION})")
        raise BadState("not a saved state of rl-planner")
    body = buf[40:]  # views, not copies: a trainer rank's blob is megabytes
    if hashlib.sha256(body).digest() != bytes(buf[8:40]):
        raise BadState("the checksum does not match: the file is damaged")
    try:
        (n,) = struct.unpack_from("<Q", body, 0)
        doc = json.loads(bytes(body[8:8 + n]))
        blobs: list[memoryview] = []
        off = 8 + n
        while off < len(body):
            (m,) = struct.unpack_from("<Q", body, off)
            if off + 8 + m > len(body):
                raise ValueError("a raw section runs past the end")
            blobs.append(body[off + 8:off + 8 + m])
            off += 8 + m
    except (struct.error, ValueError, RecursionError) as exc:
        raise BadState(f"a malformed blob ({exc})") from None
    try:
        return _Dec(blobs, lenient).dec(doc)
    except BadState:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise BadState(f"a malformed record ({type(exc).__name__}: {exc})") from None
