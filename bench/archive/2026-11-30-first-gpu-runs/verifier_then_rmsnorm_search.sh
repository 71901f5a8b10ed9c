#!/usr/bin/env bash
# One device call: the verifier's GPU evidence, then a headless search run on rmsnorm.
cd "$(dirname "$0")/../../.."  # the repository root
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import sys,torch,triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'
KL_BENCH_BUDGET_S=${VERIFIER_BUDGET:-300} timeout 380 python3 bench/gpu_verifier.py 2>&1 | tee $OUT/gpu_verifier_stdout.log
for op in ${OPS:-rmsnorm}; do
  timeout $((${OPT_LIMIT:-170} + 40)) python3 -m kernelladder optimize $op --device cuda --max-attempts 40 \
    --branches 3 --time-limit ${OPT_LIMIT:-170} --gate approve --run-dir /tmp/runs/$op --json \
    > $OUT/optimize_$op.json 2> $OUT/optimize_$op.log
  echo "optimize $op exit $?"; tail -c 1500 $OUT/optimize_$op.json; echo
done
tar czf $OUT/runs.tgz -C /tmp runs 2>/dev/null
