"""The sim backend's incremental saves: what changed in the world since the file last took it, as rows.

:class:`executor.backends.sim.SimBackend` writes its coordinator whole (the ``coordinator`` row of
its ``world`` table) only now and then; between those saves it writes, to its ``coord`` table, one
row per thing that changed: a registry record, a request, a lease, a checkpoint, a component's
active set, a count of creations, a whole small attribute, an item appended to the rejected effects, illegal transitions
or commits. A load reads the coordinator row and then those rows over it (:func:`apply_rows`), and
gets what a whole save would have written, down to the order of every mapping:

* a row's key is a JSON list: ``["kv", NAME]``, ``[MAP, KEY]``, ``[LIST, INDEX]``,
  ``["commits", COMPONENT, INDEX]``;
* its blob a :mod:`executor.safestate` blob of a tuple: ``(value,)`` sets the key where it is,
  ``(value, seq)`` puts it after every key of the coordinator row (new keys, and keys that left and
  came back, in the order of ``seq``), ``()`` deletes it.

What changed is told by the coordinator (:class:`executor.workers.coordinator.Changes`: every
method that changes it records what) and found by diffing what cannot tell (leases and creation
counts by their items, the append-only lists by their lengths). :class:`Saved` is what the file
holds as of the last load or save; where it cannot say what a load would rebuild (a mapping whose
order no longer follows, a list that shrank, a change the coordinator could not name, another
coordinator object) :meth:`Saved.rows` answers None and the backend writes the whole world.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from executor import safestate
from executor.workers import rawtensor

KV = ("next_epoch", "generation", "dead_nodes", "parked", "pgs", "writer", "restarts")  # rewritten whole
MAPS = ("registry", "requests", "leases", "checkpoints", "active", "creates")  # one row per key ("creates": the backend's own record)
LISTS = ("rejected", "illegal")  # append-only, one row per item (and "commits": per component)
MAX_ROWS = 1 << 21


def _key(*parts: Any) -> str:
    return json.dumps(list(parts), separators=(",", ":"))


class Saved:
    """What the state file holds as of our last load or save (beside the workers' rows)."""

    def __init__(self, coord: Any, creates: dict, nodes: dict, base_bytes: int, delta_bytes: int,
                 seqs: Optional[dict[str, dict[str, Optional[int]]]] = None) -> None:
        self.coord = coord  # the coordinator object those are of (another one is written whole)
        self.leases = dict(coord.leases)
        self.active = {c: tuple(v) for c, v in coord.active.items()}
        self.creates = dict(creates)
        self.nodes = dict(nodes)  # (executor.state.Node is frozen)
        self.lens = {name: len(getattr(coord, name)) for name in LISTS}
        self.commits = {c: len(v) for c, v in coord.commits.items()}
        self.base_bytes, self.delta_bytes = base_bytes, delta_bytes
        maps = {m: self._map(m, creates) for m in MAPS}
        # per mapping: key -> None (where the coordinator row puts it) or its seq (after them); and the keys in order
        self.seqs = seqs if seqs is not None else {m: dict.fromkeys(d) for m, d in maps.items()}
        self.order = {m: list(d) for m, d in maps.items()}
        self.next_seq = 1 + max((s for d in self.seqs.values() for s in d.values() if s is not None), default=0)
        self._pending: dict[str, tuple[list, dict]] = {}  # what rows() found, for commit()
        self._next: tuple = ()
        self._fresh = 0

    def _map(self, name: str, creates: dict) -> dict:
        return creates if name == "creates" else getattr(self.coord, name)

    def rows(self, changes: Any, creates: dict) -> Optional[list[tuple[str, bytes]]]:
        """The rows that bring the file to the coordinator's and ``creates``'s state, or None when
        only a whole save can. Changes nothing here (:meth:`commit` does, once they are written)."""
        co = self.coord
        if changes.full or any(n not in KV and n != "active" for n in changes.names):
            return None
        if any(len(getattr(co, n)) < self.lens[n] for n in LISTS) or any(len(co.commits.get(c, ())) < n for c, n in self.commits.items()):
            return None
        rows: list[tuple[str, bytes]] = []
        for n in sorted(changes.names - {"active"}):
            rows.append((_key("kv", n), safestate.dumps((getattr(co, n),))))
        changed = {"registry": changes.registry, "requests": changes.requests, "checkpoints": changes.checkpoints,
                   "leases": {k for k, _ in co.leases.items() ^ self.leases.items()},
                   "active": ({c for c in co.active.keys() | self.active.keys() if tuple(co.active.get(c, ())) != self.active.get(c)}
                              if "active" in changes.names else set()),
                   "creates": {k for k, _ in creates.items() ^ self.creates.items()}}
        self._pending = {}
        for m in MAPS:
            d, seqs = self._map(m, creates), self.seqs[m]
            keys = changed[m]
            if not keys:
                continue
            gone = {k for k in keys if k not in d}
            new = [k for k in keys if k in d and k not in seqs]
            kept = [k for k in self.order[m] if k not in gone] if gone else self.order[m]
            order = list(d)
            if len(order) != len(kept) + len(new) or order[:len(kept)] != kept:
                return None  # a key left and came back, or one changed unsaid: its place is the whole save's to keep
            upd: dict[str, Optional[int]] = {}
            for k in order[len(kept):]:
                upd[k] = self.next_seq + len(upd)
            for k in sorted(keys, key=str):
                if k in gone:
                    rows.append((_key(m, k), safestate.dumps(())))
                    continue
                v = rawtensor.encode(d[k]) if m == "checkpoints" else d[k]
                s = upd.get(k, seqs.get(k))
                rows.append((_key(m, k), safestate.dumps((v,) if s is None else (v, s))))
            self._pending[m] = (order, {**{k: None for k in gone}, **upd})
        for n in LISTS:
            items = getattr(co, n)
            rows += [(_key(n, i), safestate.dumps((items[i],))) for i in range(self.lens[n], len(items))]
        fresh = 0
        for c, items in co.commits.items():
            first = self.commits.get(c)
            if first is None:  # a component's first commit: it comes after those the file holds, in this order
                rows.append((_key("commits", c, 0), safestate.dumps((items[0], self.next_seq + fresh))))
                fresh, first = fresh + 1, 1
            rows += [(_key("commits", c, i), safestate.dumps((items[i],))) for i in range(first, len(items))]
        self._fresh = fresh
        # what the file holds once these rows are in it (commit() takes it then)
        self._next = (dict(co.leases), dict(creates), {n: len(getattr(co, n)) for n in LISTS}, {c: len(v) for c, v in co.commits.items()},
                      {c: tuple(co.active[c]) if c in co.active else None for c in changed["active"]})
        return rows

    def commit(self, rows: list[tuple[str, bytes]]) -> None:
        """The rows :meth:`rows` gave are in the file."""
        for m, (order, upd) in self._pending.items():
            seqs = self.seqs[m]
            for k, s in upd.items():
                if s is None:
                    seqs.pop(k, None)
                else:
                    seqs[k] = s
                    self.next_seq = max(self.next_seq, s + 1)
            self.order[m] = order
        self._pending = {}
        self.next_seq += self._fresh
        self.leases, self.creates, self.lens, self.commits, active = self._next
        for c, ids in active.items():
            if ids is None:
                self.active.pop(c, None)
            else:
                self.active[c] = ids
        self.delta_bytes += sum(len(k) + len(b) for k, b in rows)


def apply_rows(coord: Any, creates: dict, rows: list[tuple[Any, Any]], lenient: bool = False) -> dict[str, dict[str, Optional[int]]]:
    """Read the coord table's rows over a loaded coordinator and creation counts (both already
    checked: the caller checks them again after). Returns each mapping's keys -> seq (None: where
    the coordinator row put them), what :class:`Saved` starts from. :class:`safestate.BadState`
    for a row that is not one a save writes."""
    seqs: dict[str, dict[str, Optional[int]]] = {m: dict.fromkeys(creates if m == "creates" else getattr(coord, m)) for m in MAPS}
    moved: dict[str, list[tuple[int, str, Any]]] = {m: [] for m in MAPS}
    appended: dict[tuple, dict[int, Any]] = {}
    first_seq: dict[str, int] = {}  # a component's first commit: its place among the components
    for key, blob in rows:
        k: Any = None
        try:
            k = json.loads(key) if isinstance(key, str) else None
        except ValueError:
            pass
        part = k[0] if type(k) is list and k else None
        ok = ((part == "kv" and len(k) == 2 and k[1] in KV) or (part in MAPS and len(k) == 2 and isinstance(k[1], str))
              or (part in LISTS and len(k) == 2 and type(k[1]) is int and k[1] >= 0)
              or (part == "commits" and len(k) == 3 and isinstance(k[1], str) and type(k[2]) is int and k[2] >= 0))
        if not ok:
            raise safestate.BadState(f"its coordinator's changes hold a row of key {str(key)[:80]!r}, which no save writes")
        v = safestate.loads(blob, lenient=lenient)
        want = (0, 1, 2) if part in MAPS else (1, 2) if part == "commits" and k[2] == 0 else (1,)
        if not (type(v) is tuple and len(v) in want and (len(v) < 2 or (type(v[1]) is int and v[1] >= 0))):
            raise safestate.BadState(f"its coordinator's change {str(key)[:80]!r} is malformed")
        if part == "kv":
            setattr(coord, k[1], v[0])
        elif part in MAPS:
            d = creates if part == "creates" else getattr(coord, part)
            val = rawtensor.decode(v[0]) if part == "checkpoints" and v else (v[0] if v else None)
            if len(v) == 0:
                d.pop(k[1], None)
                seqs[part].pop(k[1], None)
            elif len(v) == 1:
                d[k[1]] = val
                seqs[part][k[1]] = None
            else:
                moved[part].append((v[1], k[1], val))
        else:
            appended.setdefault(tuple(k[:-1]), {})[k[-1]] = v[0]
            if len(v) == 2:
                first_seq[k[1]] = v[1]
    for m, items in moved.items():
        d = creates if m == "creates" else getattr(coord, m)
        for s, name, val in sorted(items, key=lambda t: (t[0], t[1])):
            d.pop(name, None)
            d[name] = val
            seqs[m][name] = s
    for where, by_index in sorted(appended.items(), key=lambda a: (a[0][0], first_seq.get(a[0][1], -1) if a[0][0] == "commits" else 0,
                                                                  a[0])):
        target = getattr(coord, where[0]) if where[0] != "commits" else coord.commits.setdefault(where[1], [])
        if sorted(by_index) != list(range(len(target), len(target) + len(by_index))):
            raise safestate.BadState(f"its coordinator's changes append to {'/'.join(map(str, where))[:80]!r} out of order")
        target.extend(by_index[i] for i in sorted(by_index))
    seqs["commits"] = dict(first_seq)  # (only their largest counts: Saved.next_seq)
    return seqs
