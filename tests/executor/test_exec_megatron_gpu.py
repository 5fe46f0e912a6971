"""The ``megatron`` trainer's checkpoints against a real Megatron-core training run on a GPU, with
Megatron's **distributed optimizer** (skipped without CUDA or without ``megatron-core``).

megatron-core's ``DistributedOptimizer`` allocates its buffers on CUDA, so the CPU test
(``test_exec_megatron_core.py``) can only check the model's parameters; this one checks the Adam
state too, on a real training run (``tests/executor/megatron_gpu_rank.py``, one GPU, NCCL):

1. Megatron trains the tiny ``GPTModel`` for two real steps and saves model and optimizer with
   ``dist_checkpointing`` (``fully_reshardable``: Adam's moments in model space);
2. ``megatron`` worker ranks of TP2, TP1 x PP2, TP1 x DP2 and TP2 x PP2 load that checkpoint through
   their P2P (DCP) path: every parameter and both moments equal Megatron's, bit for bit;
3. the TP2 worker ranks write a checkpoint (``write_checkpoint(..., main_params=True)``); a fresh
   Megatron process loads model and distributed optimizer from it and runs the third step on the
   same batch as the first process did after its save: the loaded state is equal bit for bit and the
   parameters after that step agree to 1e-6, so the worker's checkpoint resumes Megatron's training.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from executor.workers import shardstate
from executor.workers.megatron_trainer import MegatronRank, write_checkpoint

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="Megatron's distributed optimizer allocates on CUDA: needs a GPU")
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from megatron_core_rank import DIMS  # noqa: E402
from megatron_gpu_rank import STEPS  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _megatron(mode: str, ckpt: Path, out: Path) -> dict:
    pytest.importorskip("megatron.core")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port()), "RANK": "0", "WORLD_SIZE": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen([sys.executable, str(HERE / "megatron_gpu_rank.py"), mode, str(ckpt), str(out)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = p.communicate(timeout=900)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, log[-4000:]
    return torch.load(out / f"{mode}.pt", weights_only=False)


def _coord(method: str, *args):
    return 1 if method == "lease" else True


def _ranks(layout: dict) -> list[MegatronRank]:
    world = layout.get("tp", 1) * layout.get("pp", 1) * layout.get("dp", 1)
    return [MegatronRank(f"t{r}", 1, "job/trainer", layout, r, DIMS, _coord, init="empty") for r in range(world)]


def _full(ranks: list[MegatronRank]) -> dict[str, torch.Tensor]:
    """The ranks' parameters and moments as global tensors, by checkpoint key."""
    return shardstate.assemble([r.state() for r in ranks])


def _max_diff(a: dict, b: dict, keys) -> dict[str, float]:
    return {k: float((a[k].float() - b[k].float()).abs().max()) for k in keys}


def test_real_distributed_optimizer_state_round_trips_through_the_worker(tmp_path):
    real = _megatron("train", tmp_path / "megatron", tmp_path / "out")
    print("megatron train:", json.dumps(real["report"]))
    model, moments = real["model"], {k: v for k, v in real["optimizer"].items() if ".exp_avg" in k}
    assert model and len(moments) == 2 * len(model), sorted(real["optimizer"])
    for layout in ({"tp": 2}, {"tp": 1, "pp": 2}, {"tp": 1, "dp": 2}, {"tp": 2, "pp": 2}):
        ranks = _ranks(layout)
        for r in ranks:
            r.load_shards([str(tmp_path / "megatron")])
        got = _full(ranks)
        want = {**model, **moments}
        assert sorted(got) == sorted(want), (layout, sorted(set(got) ^ set(want)))
        bad = {k: d for k, d in _max_diff(got, want, want).items() if d != 0.0}
        assert not bad, f"layout {layout}: worker state differs from Megatron's: {bad}"
        if layout == {"tp": 2}:
            tp2 = ranks
    write_checkpoint([r.state() for r in tp2], str(tmp_path / "worker"), main_params=True)
    (tmp_path / "worker" / "rl_planner_step.json").write_text(json.dumps({"step": STEPS, "rank": 0}))
    resumed = _megatron("resume", tmp_path / "worker", tmp_path / "out")
    print("megatron resume:", json.dumps(resumed["report"]))
    assert resumed["report"]["worker_step"] == STEPS
    diff = _max_diff(resumed["model"], real["model"], real["model"])
    assert max(diff.values()) == 0.0, f"Megatron loaded from the worker's checkpoint differs: {diff}"
    # the step after: the same kernels on the same inputs; an op without a deterministic CUDA kernel
    # (the embedding's backward adds repeated tokens' gradients atomically) may differ in the last bits
    diff = _max_diff(resumed["after_step"], real["after_step"], real["after_step"])
    print("max |difference| after the resumed step:", max(diff.values()))
    assert max(diff.values()) <= 1e-6, f"the step after resuming from the worker's checkpoint differs: {diff}"
    assert resumed["report"]["next_loss"] == pytest.approx(real["report"]["next_loss"], rel=1e-6)
