"""Per-node capacity: the one rule the diff, the state and the sim backend count GPUs and DRAM by.

Co-execution groups (Weave) share their pools' GPUs *in time*: inside a group a round-robin
runs one member's rollout (or training) at a time on the whole pool, so the members' engines and
ranks on a pool node never run at once. The rule:

* every worker pins its **host DRAM** on its node, always (members' weights and optimizer state
  stay resident in host DRAM side by side: that is what makes a switch warm);
* a **reservation** worker (its component ``reserves`` group ``G``) holds GPUs of its node for
  ``G``: the pool's GPUs on that node;
* a worker with ``share = G`` runs *inside* ``G``'s reservation on its node: its GPUs count
  against that reservation, per job — the GPUs one member's workers hold on a node (all its
  components together: they run concurrently inside its phase) must fit in what ``G`` reserves
  there; other members' workers there take the same GPUs at other times;
* any other worker holds its GPUs on its node.

A node's GPUs in use are its reservations plus the workers outside any reservation. Capacity is
kept as a map of *slots* (``("gpus", node)`` and ``("dram", node)``: free on the node;
``("res", G, node)``: GPUs ``G`` reserves there; ``("use", G, job, node)``: GPUs the job's members
hold inside it), which :func:`take` and :func:`give` change one worker at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

EPS = 1e-9

Slots = dict


@dataclass(frozen=True)
class Need:
    """What one worker holds: its node, GPUs, host DRAM, and how its GPUs are counted."""

    node: str
    gpus: int
    dram_gb: float
    share: str = ""  # runs inside this group's reservation on the node
    job: str = ""
    reserves: str = ""  # this worker is that group's reservation of the node's GPUs

    @classmethod
    def of_args(cls, args: Mapping) -> "Need":
        """From a step's (or a worker record's) arguments: ``{"worker": {...}, "job", "reserves"}``."""
        w = args["worker"] if "worker" in args else args
        return cls(w["node"], int(w["gpus"]), float(w["dram_gb"]), w.get("share", "") or "", args.get("job", "") or "",
                   args.get("reserves", "") or "")


def initial(nodes: Mapping, needs: Iterable[Need], dead_free_zero: bool = False) -> Slots:
    """Slots of ``nodes`` (name -> object with ``gpus``, ``dram_gb``, ``alive``) with ``needs`` held.

    ``dead_free_zero``: a dead node offers nothing (what the diff plans with), whatever runs there."""
    s: Slots = {}
    for name, n in nodes.items():
        s[("gpus", name)] = int(n.gpus)
        s[("dram", name)] = float(n.dram_gb)
    for need in needs:
        if need.node in nodes:
            take(s, need)
    if dead_free_zero:
        for name, n in nodes.items():
            if not getattr(n, "alive", True):
                s[("gpus", name)], s[("dram", name)] = 0, 0.0
    return s


def take(s: Slots, need: Need) -> Optional[str]:
    """Start holding ``need`` (changes ``s``); the reason it does not fit, or None."""
    why = None
    dram = s.get(("dram", need.node), 0.0) - need.dram_gb
    s[("dram", need.node)] = dram
    if dram < -EPS:
        why = f"{-dram:g} GB host DRAM short on node {need.node}"
    if need.share:
        key = ("use", need.share, need.job, need.node)
        used = s.get(key, 0) + need.gpus
        s[key] = used
        res = s.get(("res", need.share, need.node), 0)
        if used > res and why is None:
            why = (f"{used - res} GPU(s) short inside group {need.share}'s reservation on node {need.node} "
                   f"(job {need.job} would hold {used} of the {res} it reserves)")
    else:
        g = s.get(("gpus", need.node), 0) - need.gpus
        s[("gpus", need.node)] = g
        if g < 0 and why is None:
            why = f"{-g} GPU(s) short on node {need.node}"
    if need.reserves:
        rkey = ("res", need.reserves, need.node)
        s[rkey] = s.get(rkey, 0) + need.gpus
    return why


def give(s: Slots, need: Need) -> Optional[str]:
    """Stop holding ``need`` (changes ``s``); the reason the result is not valid, or None (a
    reservation cannot end while members still run inside it)."""
    s[("dram", need.node)] = s.get(("dram", need.node), 0.0) + need.dram_gb
    if need.share:
        key = ("use", need.share, need.job, need.node)
        s[key] = s.get(key, 0) - need.gpus
    else:
        s[("gpus", need.node)] = s.get(("gpus", need.node), 0) + need.gpus
    if need.reserves:
        rkey = ("res", need.reserves, need.node)
        left = s.get(rkey, 0) - need.gpus
        s[rkey] = left
        over = [(k[2], v) for k, v in s.items() if k[0] == "use" and k[1] == need.reserves and k[3] == need.node and v > left]
        if over:
            job, v = over[0]
            return (f"group {need.reserves}'s reservation on node {need.node} would end while job {job}'s workers still hold "
                    f"{v} GPU(s) inside it")
    return None


def no_worse(before: Slots, after: Slots) -> bool:
    """``after`` leaves every slot at least as free as ``before`` (a change that only gives back)."""
    for k, v in after.items():
        b = before.get(k, 0)
        if k[0] == "use":
            if v > b:
                return False
        elif v < b - EPS:
            return False
    return True


def violations(nodes: Mapping, needs: Iterable[Need]) -> list[str]:
    """Over-full nodes and reservations when ``needs`` are all held at once (one message each)."""
    s = initial(nodes, [])
    for need in needs:
        if need.node in nodes:
            take(s, need)
    out = []
    for k, v in sorted(s.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        if k[0] == "gpus" and v < 0:
            out.append(f"node {k[1]}: {nodes[k[1]].gpus - v} GPUs in use, has {nodes[k[1]].gpus}")
        elif k[0] == "dram" and v < -EPS:
            out.append(f"node {k[1]}: {nodes[k[1]].dram_gb - v:g} GB host DRAM in use, has {nodes[k[1]].dram_gb:g}")
        elif k[0] == "use" and v > s.get(("res", k[1], k[3]), 0):
            out.append(f"node {k[3]}: job {k[2]} holds {v} GPUs inside group {k[1]}'s reservation of "
                       f"{s.get(('res', k[1], k[3]), 0)}")
    return out
