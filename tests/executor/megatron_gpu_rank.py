"""One process of a real Megatron-core training job on a GPU (tests/executor/test_exec_megatron_gpu.py).

``python tests/executor/megatron_gpu_rank.py MODE CKPT OUT`` with ``MASTER_ADDR`` / ``MASTER_PORT``
set, on a machine with CUDA: one rank (world size 1, NCCL) builds the tiny ``GPTModel`` of
``megatron_core_rank.DIMS`` on the GPU, wraps it in Megatron's ``DistributedDataParallel`` and
builds the **distributed optimizer** (``get_megatron_optimizer`` with
``use_distributed_optimizer=True``: the path that allocates on CUDA and so cannot run on CPU), then

* ``train``: runs ``STEPS`` real forward / backward / optimizer steps on seeded token batches, saves
  model and optimizer with ``dist_checkpointing.save`` (optimizer state in the ``fully_reshardable``
  model-space format: ``optimizer.state.{param,exp_avg,exp_avg_sq}.<model key>``), then runs one
  more step on the batch ``STEPS``;
* ``resume``: loads model and optimizer from CKPT (written by the executor's ``megatron`` worker
  ranks, ``write_checkpoint(..., main_params=True)``), setting Adam's step count from the worker's
  ``rl_planner_step.json``, and runs that same step.

Either way it writes ``OUT/<MODE>.pt``: the model's parameters after the save / load (stacked global
tensors, by checkpoint key), the optimizer's model-space state, and the parameters after the next
step, so the test can compare the two processes. Everything is Megatron-core as shipped;
deterministic cuBLAS / cuDNN settings make the two processes' steps comparable.
"""

from __future__ import annotations

import json
import os
import sys

STEPS = 2


def _torch_adam_step_fix(dopt) -> None:
    """megatron-core 0.16.1 cannot load a ``fully_reshardable`` optimizer state into torch's Adam
    (its fallback when neither Transformer Engine nor Apex is installed, as on this test's GPU
    machine): ``load_parameter_state_from_fully_reshardable`` leaves Adam's per-parameter ``step``
    out of the tensors it hands to ``_set_main_param_and_optimizer_states``, which then copies every
    key of the live state, ``step`` included (``KeyError: 'step'``; Megatron's own checkpoint fails
    the same way). ``load_state_dict`` has already set ``step`` from the param groups, so the one
    change is to copy the tensors it was given and keep that ``step``. With TE's or Apex's
    FusedAdam (what GPU clusters run) there is no per-parameter ``step`` and nothing is changed.

    The same fallback has a second defect: ``DistributedOptimizer.load_state_dict`` gives every
    parameter's state *one shared* ``step`` tensor, which torch's Adam increments in place once per
    parameter, so after the first resumed step the bias correction uses step ``2 + n`` instead of
    3 (the resumed run's parameters then differ by ~20% of the learning rate); the caller gives each
    parameter its own copy after loading."""
    from megatron.core.optimizer import distrib_optimizer as m

    if m.HAVE_APEX_OR_TE or dopt.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8:
        return

    def set_states(model_param, tensors):
        group_index, group_order = dopt.model_param_group_index_map[model_param]
        main_param = dopt.optimizer.param_groups[group_index]["params"][group_order]
        for key, dst in {"param": main_param, **dopt.optimizer.state[main_param]}.items():
            if key != "step":
                dst.copy_(tensors[key])

    dopt._set_main_param_and_optimizer_states = set_states


def main() -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    mode, ckpt, out = sys.argv[1], sys.argv[2], sys.argv[3]
    import torch
    import torch.distributed as dist

    sys.path.insert(0, os.path.dirname(__file__))
    from megatron_core_rank import DIMS

    torch.use_deterministic_algorithms(True, warn_only=True)  # an op without a deterministic kernel warns
    torch.backends.cudnn.benchmark = False
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer import TransformerConfig

    ps.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(DIMS["seed"])
    d = DIMS
    cfg = TransformerConfig(num_layers=d["layers"], hidden_size=d["hidden"], num_attention_heads=d["heads"],
                            num_query_groups=d["kv_heads"], ffn_hidden_size=d["ffn"], use_cpu_initialization=True,
                            params_dtype=torch.float32, pipeline_dtype=torch.float32, gated_linear_unit=True,
                            normalization="RMSNorm", add_bias_linear=False, add_qkv_bias=True, bias_activation_fusion=False,
                            masked_softmax_fusion=False, persist_layer_norm=False, bias_dropout_fusion=False,
                            apply_rope_fusion=False, hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(d["seed"])
    model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=d["vocab"],
                     max_sequence_length=64, pre_process=True, post_process=True,
                     share_embeddings_and_output_weights=False, position_embedding_type="rope").cuda()
    ddp = DistributedDataParallel(config=cfg, ddp_config=DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=True), module=model)
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-3, weight_decay=0.0, adam_beta1=0.9,
                                                 adam_beta2=0.999, adam_eps=1e-8, use_distributed_optimizer=True,
                                                 clip_grad=0.0), [ddp])
    meta = {"distrib_optim_sharding_type": "fully_reshardable"}
    report: dict = {"optimizer": type(opt).__name__, "inner": type(getattr(opt, "optimizer", opt)).__name__,
                    "device": torch.cuda.get_device_name(0)}

    def step(i: int) -> float:
        g = torch.Generator().manual_seed(1000 + i)
        tokens = torch.randint(0, d["vocab"], (2, 17), generator=g).cuda()
        inp, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        pos = torch.arange(inp.shape[1], device="cuda").unsqueeze(0).expand_as(inp)
        mask = torch.triu(torch.ones(1, 1, inp.shape[1], inp.shape[1], device="cuda", dtype=torch.bool), diagonal=1)
        ddp.zero_grad_buffer()
        opt.zero_grad()
        loss = ddp(inp, pos, mask, labels=labels).float().mean()
        loss.backward()
        ddp.finish_grad_sync()
        ok, _, _ = opt.step()
        assert ok, f"optimizer step {i} was skipped"
        return float(loss.detach())

    def sharded() -> dict:
        return {k: v for k, v in model.sharded_state_dict().items() if not isinstance(v, ShardedObject)}

    def tensors_of(tree) -> dict:
        """Every ShardedTensor (factories built) in a sharded state dict: key -> full global tensor."""
        out: dict = {}

        def visit(v):
            if isinstance(v, dict):
                for x in v.values():
                    visit(x)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    visit(x)
            elif isinstance(v, ShardedTensor):
                t = out.setdefault(v.key, torch.full(tuple(v.global_shape), float("nan")))
                sl = tuple(slice(o, o + n) for o, n in zip(v.global_offset, (1,) * v.prepend_axis_num + tuple(v.local_shape)))
                t[sl] = v.data.detach().float().cpu().reshape(t[sl].shape)
            elif hasattr(v, "build") and not isinstance(v, ShardedObject):
                visit(v.build())

        visit(tree)
        return out

    if mode == "train":
        os.makedirs(ckpt, exist_ok=True)
        report["losses"] = [step(i) for i in range(STEPS)]
        model_sd = sharded()
        opt_sd = opt.sharded_state_dict(model_sd, is_loading=False, metadata=meta)
        saved = {"model": tensors_of(model_sd), "optimizer": tensors_of(opt_sd.get("param_state", opt_sd))}
        dist_checkpointing.save({"model": model_sd, "optimizer": opt_sd}, ckpt)
        report["next_loss"] = step(STEPS)
    else:
        worker_step = json.load(open(os.path.join(ckpt, "rl_planner_step.json")))["step"]
        dopt = opt.chained_optimizers[0] if hasattr(opt, "chained_optimizers") else opt
        _torch_adam_step_fix(dopt)
        if len(dopt.optimizer.state) == 0:  # torch's Adam has no state before a step: allocate it (zero grads)
            dopt._init_optimizer_states_with_dummy_values()
        model_sd = sharded()
        opt_sd = opt.sharded_state_dict(model_sd, is_loading=True, metadata=meta)
        # The worker writes the sharded tensors only; Megatron's common state (param groups, Adam's
        # step count) is the live optimizer's with the worker's step.
        loaded = dist_checkpointing.load({"model": model_sd, "optimizer": {"param_state": opt_sd["param_state"]}}, ckpt)
        missing, _ = model.load_state_dict(loaded["model"], strict=False)
        assert not [k for k in missing if not k.endswith("_extra_state")], missing
        live = opt.state_dict()
        for grp in live["optimizer"]["param_groups"]:
            grp["step"] = worker_step
        live["param_state"] = loaded["optimizer"]["param_state"]
        live["param_state_sharding_type"] = "fully_reshardable"
        opt.load_state_dict(live)
        for st in dopt.optimizer.state.values():  # see _torch_adam_step_fix: one step tensor per parameter
            if isinstance(st.get("step"), torch.Tensor):
                st["step"] = st["step"].clone()
        report["worker_step"] = worker_step
        again = opt.sharded_state_dict(sharded(), is_loading=False, metadata=meta)
        saved = {"model": tensors_of(sharded()), "optimizer": tensors_of(again.get("param_state", again))}
        report["next_loss"] = step(STEPS)
    saved["after_step"] = tensors_of(sharded())
    saved["report"] = report
    torch.save(saved, os.path.join(out, f"{mode}.pt"))
    print(json.dumps(report), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
