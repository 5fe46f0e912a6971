# slime arguments of a disaggregated GRPO job, as in slime's example scripts
# (scripts/run-*.sh; `planner init --from slime` reads the ones it needs, ignores the rest).
CKPT_ARGS=(
   --hf-checkpoint Qwen/Qwen2.5-3B-Instruct
   --ref-load /root/Qwen2.5-3B_torch_dist
)

ROLLOUT_ARGS=(
   --prompt-data /root/dapo-math-17k/dapo-math-17k.jsonl
   --input-key prompt
   --apply-chat-template
   --rollout-shuffle
   --num-rollout 3000
   --rollout-batch-size 64
   --n-samples-per-prompt 8
   --rollout-max-response-len 8192
   --rollout-temperature 0.8
   --global-batch-size 512
)

GRPO_ARGS=(
   --advantage-estimator grpo
   --use-kl-loss
   --kl-loss-coef 0.00
)

PERF_ARGS=(
   --tensor-model-parallel-size 2
   --pipeline-model-parallel-size 1
   --use-dynamic-batch-size
   --max-tokens-per-gpu 9216
)

SGLANG_ARGS=(
   --rollout-num-gpus-per-engine 2
   --sglang-mem-fraction-static 0.7
)

ray job submit --address="http://127.0.0.1:8265" -- python3 train.py \
   --actor-num-nodes 1 \
   --actor-num-gpus-per-node 8 \
   --rollout-num-gpus 16 \
   "${CKPT_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${GRPO_ARGS[@]}" "${PERF_ARGS[@]}" "${SGLANG_ARGS[@]}"
