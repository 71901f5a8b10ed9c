#!/usr/bin/env bash
# One device call for attention: the probe of both kernel kinds (pointer loads and
# tensor descriptors) against SDPA, then a 40-attempt headless search with a branch per
# attention family, its replay summary and its per-shape table (search_bar.py).
#   OPT_LIMIT=240 bash bench/archive/2026-11-30-attention-search/attention_search.sh
cd "$(dirname "$0")/../../.."  # the repository root
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=160
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import sys,torch,triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'
[ -n "$SKIP_PROBE" ] || timeout ${PROBE_LIMIT:-200} python3 bench/archive/2026-11-30-attention-search/attention_points.py > $OUT/attention-probe.log 2>&1
echo "probe exit $?"
mkdir -p /tmp/runs
timeout $((${OPT_LIMIT:-240} + 30)) python3 -m kernelladder optimize attention --device cuda \
  --max-attempts 40 --branches ${BRANCHES:-4} --time-limit ${OPT_LIMIT:-240} --gate approve \
  --run-dir /tmp/runs/attention --json > /tmp/runs/attention.json 2> /tmp/runs/attention.log
echo "optimize attention exit $?"
python3 -m kernelladder replay /tmp/runs/attention > $OUT/replay-attention.txt 2>&1
python3 bench/search_bar.py /tmp/runs/attention > $OUT/bar-attention.md 2>&1
tar czf $OUT/attention-run.tgz -C /tmp/runs attention attention.json attention.log
tail -16 $OUT/attention-probe.log
head -14 $OUT/replay-attention.txt | tail -8; tail -6 $OUT/replay-attention.txt
cat $OUT/bar-attention.md | head -12
