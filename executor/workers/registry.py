"""Worker implementations by name: the built-in ones, those registered in code, and those
installed packages declare as entry points in the group ``rl_planner.workers``.

A component chooses its implementation with ``impl: <name>`` in the target (default ``toy``).
An implementation is an :class:`Impl`: one factory per role it supports, each called as
``factory(args, epoch, coord, fail_start)`` where ``args`` is the create step's arguments
(``worker`` {id, component, node, index, ...}, ``role``, ``layout``, ``model``, ``engine``, ...)
and returning an object that follows :mod:`executor.workers.protocol`.

A framework registers its own in code::

    from executor.workers.registry import Impl, register
    register(Impl("myrl", rollout=make_engine, trainer=make_rank, p2p="dcp"))

or from its package metadata (``pyproject.toml``)::

    [project.entry-points."rl_planner.workers"]
    myrl = "myrl.planner_workers:IMPL"       # an Impl, or a function returning one

Importing this module imports neither torch nor Ray (the core planner stays light).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

GROUP = "rl_planner.workers"
DEFAULT = "toy"

Factory = Callable[[dict, int, Callable[..., Any], bool], Any]


@dataclass(frozen=True)
class Impl:
    name: str
    rollout: Optional[Factory] = None
    trainer: Optional[Factory] = None
    service: Optional[Factory] = None
    # How a P2P migration copies trainer state: "wire" (the backend packs the toy shards and
    # sends them over a gloo migration group) or "dcp" (the ranks' save_shards / load_shards).
    p2p: str = "wire"
    description: str = ""

    def factory(self, role: str) -> Factory:
        f = getattr(self, role, None) if role in ("rollout", "trainer", "service") else None
        if f is None:
            raise ValueError(f"worker implementation {self.name!r} has no {role} worker; pick another impl for this "
                             f"component (registered: {', '.join(names())})")
        return f


_REGISTRY: dict[str, Impl] = {}
_loaded_entry_points = False


def register(impl: Impl, *, replace: bool = False) -> Impl:
    if impl.p2p not in ("wire", "dcp"):
        raise ValueError(f"{impl.name}: p2p must be 'wire' or 'dcp', not {impl.p2p!r}")
    if impl.name in _REGISTRY and not replace and _REGISTRY[impl.name] is not impl:
        raise ValueError(f"worker implementation {impl.name!r} is registered already; pass replace=True to override it")
    _REGISTRY[impl.name] = impl
    return impl


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _load_entry_points() -> None:
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=GROUP):
        if ep.name in _REGISTRY:
            continue
        obj = ep.load()
        impl = obj() if callable(obj) and not isinstance(obj, Impl) else obj
        if not isinstance(impl, Impl):
            raise TypeError(f"entry point {ep.name} = {ep.value} in group {GROUP} gives {type(impl).__name__}, not an Impl")
        register(impl if impl.name == ep.name else Impl(**{**impl.__dict__, "name": ep.name}))


def names() -> list[str]:
    _builtins()
    _load_entry_points()
    return sorted(_REGISTRY)


def get(name: str = "") -> Impl:
    _builtins()
    name = name or DEFAULT
    if name not in _REGISTRY:
        _load_entry_points()
    if name not in _REGISTRY:
        raise ValueError(f"unknown worker implementation {name!r} (registered: {', '.join(sorted(_REGISTRY))}); register it "
                         f"with executor.workers.registry.register() or an entry point in group {GROUP!r}")
    return _REGISTRY[name]


# ----------------------------------------------------------------------------- built-ins
def _toy_rollout(args, epoch, coord, fail_start):
    from executor.workers.engine import RolloutEngine

    return RolloutEngine(args["worker"]["id"], epoch, coord, args.get("engine"), fail_start=fail_start)


def _toy_trainer(args, epoch, coord, fail_start):
    from executor.workers.trainer import TrainerRank

    w = args["worker"]
    return TrainerRank(w["id"], epoch, w["component"], args["layout"], w["index"], args.get("model") or {}, coord,
                       init=args.get("init", "fresh"), fail_start=fail_start)


def _service(args, epoch, coord, fail_start):
    from executor.workers.service import ServiceWorker

    return ServiceWorker(args["worker"]["id"], epoch, coord, fail_start=fail_start)


def _lm_rollout(args, epoch, coord, fail_start):
    from executor.workers.lm_engine import LMEngine

    return LMEngine(args["worker"]["id"], epoch, coord, args.get("engine"), fail_start=fail_start, model=args.get("model"))


def _lm_trainer(args, epoch, coord, fail_start):
    from executor.workers.lm_trainer import LMTrainerRank

    w = args["worker"]
    return LMTrainerRank(w["id"], epoch, w["component"], args["layout"], w["index"], args.get("model") or {}, coord,
                         init=args.get("init", "fresh"), fail_start=fail_start)


def _sglang_rollout(args, epoch, coord, fail_start):
    from executor.workers.sglang_worker import make

    return make(args, epoch, coord, fail_start)


def _megatron_trainer(args, epoch, coord, fail_start):
    from executor.workers.megatron_trainer import make

    return make(args, epoch, coord, fail_start)


def _builtins() -> None:
    if "toy" not in _REGISTRY:
        register(Impl("toy", _toy_rollout, _toy_trainer, _service, "wire",
                      "stand-ins: tokens are a function of (seed, position); a 4-layer MLP trainer with Adam"))
    if "tinylm" not in _REGISTRY:
        register(Impl("tinylm", _lm_rollout, _lm_trainer, _service, "dcp",
                      "a small transformer on CPU: KV-cache decoding with logprobs; GRPO loss, AdamW, TP/DP; DCP resharding"))
    if "sglang" not in _REGISTRY:
        register(Impl("sglang", rollout=_sglang_rollout, description="rollout engines: one SGLang server each, launched on the "
                      "worker's GPUs (engine.launch) or attached (engine.url); the sglang extra"))
    if "megatron" not in _REGISTRY:
        register(Impl("megatron", trainer=_megatron_trainer, service=_service, p2p="dcp",
                      description="trainer ranks in Megatron-LM's dist_checkpointing layout (GPTModel keys, stacked layers); "
                                  "P2P reshard through torch_dist checkpoints"))
