#!/usr/bin/env bash
# The executor's checks that need a real GPU, in one run (results: results/executor/ray-gpu.md and
# results/executor/megatron-gpu.md). Made for a lent GPU machine that reaches no package index and
# whose python3 already holds torch (CUDA), pytest, psutil, pyyaml, numpy, msgpack, protobuf,
# click, filelock, requests, attrs, aiohttp; everything else comes in a bundle:
#
#   1. on a machine with network, from the repository root:  bash tests/executor/gpu_bundle.sh .gpu
#      (.gpu/ray-site.tar.xz: Ray's cp312 wheel stripped to what the executor uses, about 20 MB;
#      .gpu/whl/: jsonschema, pydantic and their needs, megatron-core 0.16.1; see that script)
#   2. on the GPU machine, from the repository root, with .gpu beside it:
#        OUT=/some/dir bash tests/executor/gpu_checks.sh
#      (this workplace's device tool: run(command="bash tests/executor/gpu_checks.sh", carry=[".gpu"],
#      timeout_s=420); the logs land in $OUT.)
#
# Steps, each under its own timeout and all within BUDGET seconds (default 400):
#   ray-gpu   tests/executor/test_exec_ray_gpu.py: a single-node Ray on the real GPU; a one-GPU trainer
#             rank through the executor (Ray's GPU '0', CUDA_VISIBLE_DEVICES, torch in the actor) and a
#             Reboot migration off the GPU and back, state bit-identical (toy and tinylm trainers)
#   megatron  tests/executor/test_exec_megatron_gpu.py, test_exec_megatron_core.py (RL_PLANNER_MEGATRON=1),
#             test_exec_megatron.py: a real megatron-core GPTModel + DistributedOptimizer run on CUDA
#             against the `megatron` worker's checkpoints
#   lm-ray    tests/executor/test_exec_lm.py::test_real_workers_on_ray_migrate_bit_identically
#             (RL_PLANNER_RAY_FAULTS=1): the three migrations with tinylm workers on a local
#             multi-node Ray cluster of *fake* GPUs, here only to try the stripped Ray more widely
#             (it runs if time is left)
# SKIP_STEPS="megatron lm-ray" leaves steps out. Exit status: 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu-checks-out}
BUNDLE=${BUNDLE:-.gpu}
SITE=${SITE:-/tmp/site}
BUDGET=${BUDGET:-400}
mkdir -p "$OUT" "$SITE"
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 RAY_DEDUP_LOGS=0
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

{
  date -u
  nvidia-smi
  nvidia-smi --query-gpu=name,memory.total,driver_version,uuid --format=csv
  python3 -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), 'devices', torch.cuda.device_count()); \
p = torch.cuda.get_device_properties(0); print(torch.cuda.get_device_name(0), p.total_memory // 2**20, 'MiB', \
p.multi_processor_count, 'SMs')"
  echo "cpus $(nproc)"; free -g; uname -r
} > "$OUT/machine.txt" 2>&1

t0=$SECONDS
{
  tar -C "$SITE" -xJf "$BUNDLE/ray-site.tar.xz" &&
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$BUNDLE"/whl/*.whl &&
  PYTHONPATH=$SITE python3 -c "import ray, pydantic, jsonschema, megatron.core as mc; \
print('ray', ray.__version__, ray.__file__); print('pydantic', pydantic.VERSION); print('megatron-core', mc.__version__)"
} > "$OUT/install.log" 2>&1
rc=$?
note "install: rc=$rc in $((SECONDS - t0)) s"
[ "$rc" = 0 ] || { cat "$OUT/install.log"; exit 2; }
export PYTHONPATH=$SITE

status=0
step() {  # step NAME MAX_SECONDS [VAR=value...] COMMAND...: under min(MAX, what is left of BUDGET - 10)
  local name=$1 max=$2 vars=()
  shift 2
  case " ${SKIP_STEPS:-} " in *" $name "*) note "$name: skipped (SKIP_STEPS)"; return ;; esac
  while [ $# -gt 0 ] && [[ $1 == *=* ]]; do vars+=("$1"); shift; done
  local left=$((BUDGET - SECONDS - 10))
  if [ "$left" -lt 30 ]; then
    note "$name: not run (only ${left} s of the budget left)"
    return
  fi
  local limit=$((max < left ? max : left)) start=$SECONDS
  env ${vars[@]+"${vars[@]}"} timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  note "$name: rc=$rc in $((SECONDS - start)) s (limit ${limit} s)$([ "$rc" = 124 ] && echo ': TIMED OUT')"
  [ "$rc" = 0 ] || status=1
}

PYTEST=(python3 -m pytest -p no:cacheprovider -n 0 -rA -s --durations=0)
step ray-gpu 150 "${PYTEST[@]}" tests/executor/test_exec_ray_gpu.py
if grep -q "FAILED\|ERROR" "$OUT/ray-gpu.log" 2>/dev/null; then  # Ray's own logs, for the failure
  tar -C /tmp/ray -czhf "$OUT/ray-logs.tgz" session_latest/logs 2>/dev/null || true
fi
step megatron 240 RL_PLANNER_MEGATRON=1 "${PYTEST[@]}" tests/executor/test_exec_megatron_gpu.py \
  tests/executor/test_exec_megatron_core.py tests/executor/test_exec_megatron.py
step lm-ray 120 RL_PLANNER_RAY_FAULTS=1 "${PYTEST[@]}" "tests/executor/test_exec_lm.py::test_real_workers_on_ray_migrate_bit_identically"
note "all: status=$status in $SECONDS s"
exit $status
