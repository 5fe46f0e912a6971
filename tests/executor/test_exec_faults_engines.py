"""The fault matrix against the ``sglang`` rollout worker (on SGLang stand-in servers) and the
``megatron`` trainer (Megatron-LM's dist_checkpointing layout, resharded through torch_dist
checkpoints on CPU), as it runs against ``toy``: every fault kind for every migration at a step
where it bites (executor.faultlib.representative_cases). RL_PLANNER_FULL_FAULTS=1 runs every step
at a rotating point (faultlib.rotating_cases) for both."""

from __future__ import annotations

import contextlib
import os

import pytest

from executor import faultlib
from executor.backends import sim
from executor.faultlib import representative_cases, rotating_cases, run_case
from tests.executor.sglang_standin import StandIn, reference

FULL = os.environ.get("RL_PLANNER_FULL_FAULTS") == "1"
MEGATRON = rotating_cases("toy+megatron") if FULL else representative_cases("toy+megatron")
# A workload migration moves the SGLang engines' requests; P2P and reboot move the trainer while
# the engines serve on (run with RL_PLANNER_FULL_FAULTS=1).
SGLANG = rotating_cases("sglang+toy") if FULL else [c for c in representative_cases("sglang+toy") if c.migration == "workload"]


@pytest.mark.parametrize("case", MEGATRON, ids=[c.id for c in MEGATRON])
def test_fault_megatron(case):
    out = run_case(case, lambda: sim.SimBackend(faultlib.NODES, ticks_per_call=1))
    assert out.fired, f"the fault never fired: {case.id}"
    assert out.problems == [], out
    if case.fault == "kill_controller":
        assert out.resumed and out.status == "done"
    if case.fault == "fail_destination_start":
        assert out.status == "rolled_back" and out.layout == "old"


@pytest.fixture
def sglang_backend(monkeypatch):
    """Sim backends whose rollout workers are ``sglang`` workers, each on its own stand-in; and a
    function that lets the stand-ins decode on. Each stand-in holds its requests after 2 tokens
    until then, so the migration always finds requests in flight, however fast the machine (without
    the hold they usually ended before the handoff, and the path that moves them ran only under load)."""
    from executor.workers import sglang_worker

    with contextlib.ExitStack() as stack:
        free: list = []
        made: list = []
        servers: list = []
        real = sim.make_worker

        def make_worker(args, epoch, coord, fail_start=False):
            if args["role"] != "rollout":
                return real(args, epoch, coord, fail_start=fail_start)
            if not free:
                free.append(stack.enter_context(StandIn()))
                free[-1].hold(2)
                servers.append(free[-1])
            srv = free.pop(0)
            args = {**args, "engine": {**(args.get("engine") or {}), "url": srv.url, "drain_grace_s": 0.5}}
            w = sglang_worker.make(args, epoch, coord, fail_start)
            made.append(w)
            return w

        def release() -> None:
            for srv in servers:
                srv.hold(None)

        monkeypatch.setattr(sim, "make_worker", make_worker)
        try:
            yield (lambda: sim.SimBackend(faultlib.NODES, ticks_per_call=1)), release
        finally:
            for w in made:
                w.close()


def _expect(r: dict):
    return reference(r["prompt"], {"max_new_tokens": r["target_len"]}, with_logprobs=True)[:2]


@pytest.mark.parametrize("case", SGLANG, ids=[c.id for c in SGLANG])
def test_fault_sglang(case, sglang_backend):
    make, release = sglang_backend
    out = run_case(case, make, requests=24, prompt_len=8, expect=_expect, after_apply=release)
    assert out.fired, f"the fault never fired: {case.id}"
    assert out.problems == [], out
    if case.fault == "kill_controller":
        assert out.resumed and out.status == "done"
    if case.fault == "fail_destination_start":
        assert out.status == "rolled_back"


def test_registry_lists_every_engine_and_the_megatron_layout_refuses_what_it_cannot_split():
    from executor.workers import registry
    from executor.workers.megatron_trainer import MegatronRank, dims_of

    assert {"toy", "tinylm", "sglang", "megatron"} <= set(registry.names())
    assert registry.get("megatron").p2p == "dcp"
    with pytest.raises(ValueError, match="kv_heads .* not divisible by tp 4"):
        MegatronRank("t0", 1, "job/trainer", {"tp": 4}, 0, {"kv_heads": 2}, lambda *a: True)
    hf = os.path.join(os.path.dirname(__file__), "..", "foundation", "hf_configs", "Qwen2.5-0.5B-Instruct")
    d = dims_of({"hf_config": hf})
    assert (d.hidden, d.layers, d.heads, d.kv_heads, d.ffn, d.tie, d.qkv_bias) == (896, 24, 14, 2, 4864, True, True)
