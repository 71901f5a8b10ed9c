#!/usr/bin/env bash
# Session 4, one device call: which SDPA backend the attention baseline is and a probe of
# flash-tma with the longest query blocks first (REVERSE), then fresh 40-attempt searches
# for int8_matmul and kv_quant with the current verifier (speed gate's rounds, int8
# ceiling = max(torch._int_mm, 2x bf16)), each checked per shape by search_bar.py.
#   bash bench/archive/2026-11-30-attention-backends-int8-kv/attention_backends_int8_kv_searches.sh            (SKIP_PROBE=1 / OPS="kv_quant" / OPT_LIMIT=170)
cd "$(dirname "$0")/../../.."  # the repository root
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import sys,torch,triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'
if [ -z "$SKIP_PROBE" ]; then
  timeout 150 python3 bench/archive/2026-11-30-attention-search/attention_points.py --backends --rounds 5 \
    --point flash-tma,64,64,4,3 --point flash-tma,64,64,4,3,REVERSE=True \
    --point flash-tma,64,64,4,4,REVERSE=True --point flash-tma,128,64,8,3,REVERSE=True \
    --point flash-tma,128,128,8,2,REVERSE=True > $OUT/attention-probe.log 2>&1
  echo "attention probe exit $?"
fi
mkdir -p /tmp/runs
for op in ${OPS:-int8_matmul kv_quant}; do
  timeout $((${OPT_LIMIT:-170} + 30)) python3 -m kernelladder optimize $op --device cuda \
    --max-attempts 40 --branches 3 --time-limit ${OPT_LIMIT:-170} --gate approve \
    --run-dir /tmp/runs/$op --json > $OUT/summary-$op.json 2> $OUT/optimize-$op.log
  echo "optimize $op exit $?"
  python3 bench/search_bar.py /tmp/runs/$op > $OUT/bar-$op.md 2>&1
done
tar czf $OUT/runs.tgz -C /tmp runs
echo; grep "sdpa backends" $OUT/attention-probe.log; tail -9 $OUT/attention-probe.log
for op in ${OPS:-int8_matmul kv_quant}; do tail -11 $OUT/bar-$op.md; done
