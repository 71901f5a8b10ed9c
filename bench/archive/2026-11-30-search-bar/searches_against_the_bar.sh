#!/usr/bin/env bash
# One device call per op for issue 3's bar: a 40-attempt headless search with the current
# verifier, the per-shape check of its verdicts (search_bar.py), then the kernels it found
# against every baseline, interleaved round by round (head_to_head.py).
#   OPS="rmsnorm" OPT_LIMIT=220 bash bench/archive/2026-11-30-search-bar/searches_against_the_bar.sh
cd "$(dirname "$0")/../../.."  # the repository root
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import sys,torch,triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'
mkdir -p /tmp/runs
for op in ${OPS:-rmsnorm softmax}; do
  timeout $((${OPT_LIMIT:-200} + 30)) python3 -m kernelladder optimize $op --device cuda \
    --max-attempts 40 --branches 3 --time-limit ${OPT_LIMIT:-200} --gate approve \
    --run-dir /tmp/runs/$op --json > /tmp/runs/$op.json 2> /tmp/runs/$op.log
  echo "optimize $op exit $?"
  python3 bench/search_bar.py /tmp/runs/$op | tee $OUT/bar-$op.md
  timeout ${H2H_LIMIT:-150} python3 bench/head_to_head.py /tmp/runs/$op --attempts ${H2H_ATTEMPTS:-4} \
    --rounds 11 --win 10 --target-ms 20 --confirm 25 --json $OUT/h2h-$op.json > $OUT/h2h-$op.log 2>&1
  echo "head_to_head $op exit $?"
done
tar czf $OUT/runs.tgz -C /tmp runs
for op in ${OPS:-rmsnorm softmax}; do cat $OUT/bar-$op.md | tail -12; grep -A13 "confirmation" $OUT/h2h-$op.log | tail -14; done
