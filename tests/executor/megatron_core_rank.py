"""One rank of a real Megatron-core job on CPU over gloo (tests/executor/test_exec_megatron_core.py).

``python tests/executor/megatron_core_rank.py MODE TP PP CKPT OUT`` with ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT`` set: builds a tiny ``GPTModel`` (local layer spec, RMSNorm,
gated MLP, rotary, qkv bias, untied output layer) under ``parallel_state.initialize_model_parallel(TP, PP)``,
then ``save``s its sharded state with ``dist_checkpointing.save`` to CKPT, or ``load``s it from
CKPT with ``dist_checkpointing.load``; writes ``OUT/rank<r>.pt``: the rank's local
``state_dict`` tensors and its sharded keys with their global shapes.

Only two CUDA-only calls are avoided, both in ``dist_checkpointing``'s torch_dist writer on a CPU
machine: ``torch.cuda.synchronize()`` after staging tensors to host memory (nothing to wait for:
they are on the CPU) and ``torch.cuda.current_device()`` as the device of a failure flag that is
all-reduced (the CPU, over gloo). Everything else is Megatron-core as shipped.
"""

from __future__ import annotations

import os
import sys

DIMS = dict(hidden=32, ffn=64, layers=4, heads=4, kv_heads=2, vocab=64, seed=11)


def main() -> None:
    import time

    t0 = time.time()

    def say(what: str) -> None:
        print(f"[megatron-core rank {os.environ.get('RANK')}] {what} at {time.time() - t0:.1f} s", file=sys.stderr, flush=True)

    mode, tp, pp, ckpt, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    import torch
    import torch.distributed as dist

    torch.cuda.synchronize = lambda *a, **k: None  # CUDA-only call 1 (see the module docstring)
    torch.cuda.current_device = lambda: "cpu"  # CUDA-only call 2
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig

    say("imported")
    ps.initialize_model_parallel(tp, pp)
    d = DIMS
    cfg = TransformerConfig(num_layers=d["layers"], hidden_size=d["hidden"], num_attention_heads=d["heads"],
                            num_query_groups=d["kv_heads"], ffn_hidden_size=d["ffn"], use_cpu_initialization=True,
                            params_dtype=torch.float32, pipeline_dtype=torch.float32, gated_linear_unit=True,
                            normalization="RMSNorm", add_bias_linear=False, add_qkv_bias=True, bias_activation_fusion=False,
                            masked_softmax_fusion=False, persist_layer_norm=False, bias_dropout_fusion=False,
                            apply_rope_fusion=False, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    torch.manual_seed(d["seed"] + rank)
    model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=d["vocab"],
                     max_sequence_length=64, pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                     share_embeddings_and_output_weights=False, position_embedding_type="rope")
    sharded = {k: v for k, v in model.sharded_state_dict().items() if not isinstance(v, ShardedObject)}
    say("built")
    if mode == "save":
        dist_checkpointing.save(sharded, ckpt)
    else:
        loaded = dist_checkpointing.load(sharded, ckpt)
        missing, unexpected = model.load_state_dict(loaded, strict=False)
        assert not [k for k in missing if not k.endswith("_extra_state")], missing
    say(mode)
    keys = {}
    for v in model.sharded_state_dict().values():
        if isinstance(v, ShardedTensor):
            keys[v.key] = list(v.global_shape)
        elif not isinstance(v, ShardedObject):  # a factory (the gated fc1): its tensors' global shape
            built = v.build()
            for t in (built if isinstance(built, list) else [built]):
                keys[t.key] = list(t.global_shape)
    state = {k: t.detach().clone() for k, t in model.state_dict().items() if isinstance(t, torch.Tensor) and "_extra_state" not in k}
    torch.save({"state": state, "keys": keys, "pp_rank": ps.get_pipeline_model_parallel_rank(),
                "tp_rank": ps.get_tensor_model_parallel_rank()}, os.path.join(out, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
