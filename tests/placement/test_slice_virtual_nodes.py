"""The slice experiment's scenario transform and its packer-limit patch (``benchmarks.placement.slice_virtual_nodes``):
cheap, no simulation."""

from __future__ import annotations

import copy

from benchmarks.placement.slice_virtual_nodes import _member_nodes, half_data, pinned_limits

DATA = {
    "name": "t",
    "cluster": {"node_groups": [
        {"name": "h20", "gpu_type": "H20", "count": 4, "gpus_per_node": 8, "host_dram_gb": 2048},
        {"name": "h800", "gpu_type": "H800", "count": 2, "gpus_per_node": 8, "host_dram_gb": 1024}]},
    "jobs": [{"name": "a", "rollout": {"nodes": 1, "tp": 2}, "trainer": {"nodes": 2, "tp": 8}}],
}


def test_half_data_splits_nodes_and_keeps_gpus():
    before = copy.deepcopy(DATA)
    d = half_data(DATA)
    assert DATA == before  # the input is not changed
    g20, g800 = d["cluster"]["node_groups"]
    assert (g20["count"], g20["gpus_per_node"], g20["host_dram_gb"]) == (8, 4, 1024)
    assert (g800["count"], g800["gpus_per_node"], g800["host_dram_gb"]) == (4, 4, 512)
    job = d["jobs"][0]
    assert (job["rollout"]["nodes"], job["trainer"]["nodes"]) == (2, 4)  # the same GPUs as the Solo-D pools
    assert (job["rollout"]["tp"], job["trainer"]["tp"]) == (2, 8)
    assert d["name"] == "t-half-nodes"


def test_member_nodes_of_labels():
    assert _member_nodes("1xH20+2xH800") == 1
    assert _member_nodes("5x(1xH20)+2xH800") == 1
    assert _member_nodes("2x(4xH20)+4xH800") == 4
    assert _member_nodes("6xH20(own sizes)+2xH800") is None


def test_pinned_limits_scale_and_restore():
    from formulation.placement import evaluate as ev

    old = ev.PINNED_MAX_ROLLOUT_NODES, ev.PINNED_MAX_TRAIN_NODES
    with pinned_limits(2):
        assert (ev.PINNED_MAX_ROLLOUT_NODES, ev.PINNED_MAX_TRAIN_NODES) == (2 * old[0], 2 * old[1])
    assert (ev.PINNED_MAX_ROLLOUT_NODES, ev.PINNED_MAX_TRAIN_NODES) == old
