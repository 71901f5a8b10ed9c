#!/usr/bin/env bash
# One device call: remote (SSH) vs local rate, speed repeatability, and headless search
# runs on the ops not yet run. Each step has its own time limit.
cd "$(dirname "$0")/../../.."  # the repository root
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p /tmp/remote /tmp/runs
timeout ${REMOTE_LIMIT:-110} python3 bench/remote_rate.py --op rmsnorm --attempts 4 --repeats 3 --out /tmp/remote > /tmp/remote/stdout.log 2>&1
echo "remote_rate exit $?"; tail -25 /tmp/remote/stdout.log
KL_BENCH_BUDGET_S=45 timeout 60 python3 bench/gpu_verifier.py --parts b --no-baselines --no-cli 2>&1 | grep -E "\(b\)|\(d\)|    " | tail -12
for spec in ${RUNS:-rmsnorm:60 kv_quant:50 int8_matmul:55 attention:55}; do
  op=${spec%%:*}; lim=${spec##*:}
  timeout $((lim + 25)) python3 -m kernelladder optimize $op --device cuda --max-attempts 40 \
    --branches 3 --time-limit $lim --gate approve --run-dir /tmp/runs/$op --json \
    > /tmp/runs/$op.json 2> /tmp/runs/$op.log
  echo "optimize $op exit $?"
  python3 -c "import json,sys; s=json.load(open('/tmp/runs/$op.json')); b=s['best'] or {}; print('$op', s['attempts'], 'best', b.get('speedup'), 'floor', b.get('floor_fraction'), s['stop_reason'])" 2>&1 | tail -1
done
tar czf $OUT/remote.tgz -C /tmp remote; tar czf $OUT/runs2.tgz -C /tmp runs
