#!/usr/bin/env bash
# One device call for issue 3's bar: 40-attempt headless searches on rmsnorm and softmax
# with the current verifier, then the per-shape check against every baseline.
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for op in ${OPS:-rmsnorm softmax}; do
  timeout $((${OPT_LIMIT:-200} + 30)) python3 -m kernelladder optimize $op --device cuda \
    --max-attempts 40 --branches 3 --time-limit ${OPT_LIMIT:-200} --gate approve \
    --run-dir /tmp/runs/$op --json > /tmp/runs-$op.json 2> /tmp/runs-$op.log
  echo "optimize $op exit $?"
done
tar czf $OUT/runs.tgz -C /tmp runs
python3 bench/search_bar.py /tmp/runs/* | tee $OUT/bar.md
