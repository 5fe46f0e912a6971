"""Where a job's reference (log-prob) engine goes (``planner.apply.layout.job_components``): beside the
trainer only where the trainer keeps the replicas it needs.

Found running the daemon on Ray (2026-12-07): a job with ``trainer.tp`` 8 on one 8-GPU training node
and ``rollout.tp`` 8 got its reference on the trainer's 8 GPUs, the trainer data parallelism 0, and
the executor target failed pydantic's check inside the daemon's apply: the plan stuck ``applying``
and no other job could be placed after it."""

from __future__ import annotations

import pytest

from planner.apply.layout import Pools, job_components
from planner.errors import UserError
from planner.schema.scenario import JobSpec


def _spec(rtp: int, ttp: int, **trainer) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "model": "qwen2.5-1.5b",
                                   "rollout": {"batch_prompts": 32, "group_size": 4, "max_response_tokens": 2048, "tp": rtp},
                                   "trainer": {"tp": ttp, **trainer}})


def _pools(train_nodes: int = 1, rollout_nodes: int = 1) -> Pools:
    return Pools("g0", "H20", tuple(f"h20-{i}" for i in range(rollout_nodes)), 8,
                 "H800", tuple(f"h800-{i}" for i in range(train_nodes)), 8)


def _by_name(comps: list[dict]) -> dict[str, dict]:
    return {c["name"].split("/", 1)[1]: c for c in comps}


def _gpus(c: dict) -> int:
    return sum(c["placement"].values()) * c["gpus_per_worker"]


@pytest.mark.parametrize("rtp, ttp, train_nodes, ref_on_training, dp", [
    (1, 1, 1, True, 7),     # the default job: the reference takes one GPU beside seven ranks
    (4, 4, 1, True, 1),     # a tp-4 reference beside one tp-4 replica
    (8, 8, 2, True, 1),     # two tp-8 replicas' nodes: one holds the reference, the trainer keeps one
    (4, 8, 1, False, 1),    # the trainer needs the whole node: the reference takes a rollout engine slot
])
def test_the_reference_goes_where_the_trainer_keeps_what_it_needs(rtp, ttp, train_nodes, ref_on_training, dp):
    comps = _by_name(job_components(_spec(rtp, ttp), _pools(train_nodes), (1.0, 1.0)))
    trainer, ref = comps["trainer"], comps["reference"]
    assert trainer["layout"]["dp"] == dp and trainer["layout"]["dp"] >= 1
    assert (ref["gpu_type"] == "H800") is ref_on_training, ref
    used: dict[str, int] = {}
    for c in comps.values():
        for node, k in c.get("placement", {}).items():
            used[node] = used.get(node, 0) + k * c["gpus_per_worker"]
    assert all(v <= 8 for v in used.values()), used  # no node holds more GPUs than it has
    assert _gpus(trainer) == dp * ttp


def test_no_room_for_the_reference_is_refused_naming_the_job_not_laid_out_with_no_trainer():
    with pytest.raises(UserError) as e:
        job_components(_spec(8, 8), _pools(1), (1.0, 1.0))  # one engine per rollout node, one replica per training node
    p = e.value.problems[0]
    assert p.where == "job j" and "reference" in p.message and "more nodes" in p.fix
