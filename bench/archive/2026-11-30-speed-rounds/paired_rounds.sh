#!/usr/bin/env bash
# One device call for the speed gate's back-to-back rounds: `kernelladder check` of the
# committed best rmsnorm and softmax kernels, twice each (the table, then --json: do the
# rounds' words repeat?), then a fresh 40-attempt headless search per op whose verdicts
# carry the rounds, checked by bench/search_bar.py.
#   OPS="rmsnorm softmax" bash bench/archive/2026-11-30-speed-rounds/paired_rounds.sh    (SKIP_CHECKS=1: the searches only)
cd "$(dirname "$0")/../../.."  # the repository root
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=160
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import sys,torch,triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'
best() {  # the best attempt's source of the committed example run of an op
  local n; n=$(python3 -m kernelladder replay examples/h200-$1-search --json | python3 -c \
    'import json, sys; print(json.load(sys.stdin)["best"]["attempt"])')
  echo examples/h200-$1-search/attempts/$n.py
}
for op in $([ -n "$SKIP_CHECKS" ] || echo ${OPS:-rmsnorm softmax}); do
  start=$(date +%s%N)
  python3 -m kernelladder check $op $(best $op) --device cuda > $OUT/check-$op-1.txt 2>&1
  echo "check $op (table) exit $? wall $(( ($(date +%s%N) - start) / 1000000 )) ms"
  start=$(date +%s%N)
  python3 -m kernelladder check $op $(best $op) --device cuda --json > $OUT/check-$op-2.json 2>/dev/null
  echo "check $op (json) exit $? wall $(( ($(date +%s%N) - start) / 1000000 )) ms"
done
mkdir -p /tmp/runs
for op in ${OPS:-rmsnorm softmax}; do
  timeout $((${OPT_LIMIT:-200} + 30)) python3 -m kernelladder optimize $op --device cuda \
    --max-attempts 40 --branches 3 --time-limit ${OPT_LIMIT:-200} --gate approve \
    --run-dir /tmp/runs/$op --json > /tmp/runs/$op.json 2> /tmp/runs/$op.log
  echo "optimize $op exit $?"
  python3 -m kernelladder replay /tmp/runs/$op > $OUT/replay-$op.txt 2>&1
  python3 bench/search_bar.py /tmp/runs/$op > $OUT/bar-$op.md 2>&1
done
tar czf $OUT/runs.tgz -C /tmp runs
for op in $([ -n "$SKIP_CHECKS" ] || echo ${OPS:-rmsnorm softmax}); do
  grep -E "bf16|fp32|fp16" $OUT/check-$op-1.txt | tail -5
  python3 - $OUT/check-$op-2.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    v = json.load(open(path))
    v = v.get("verdict", v) if isinstance(v.get("verdict"), dict) else v
    print(path.rsplit("/", 1)[-1], v.get("verdict"), f"elapsed {v.get('elapsed_s', 0):.2f} s")
    for t in v.get("timings") or []:
        p = t.get("paired") or {}
        print(f"  {t['label']:18s} cand {t['candidate_ms']:.4f}  "
              + (f"{p['baseline']} {p['ratio']:.4f} won {p['won']}/{p['rounds']} {p['verdict']}" if p else "no rounds"))
PY
done
for op in ${OPS:-rmsnorm softmax}; do tail -7 $OUT/replay-$op.txt; tail -4 $OUT/bar-$op.md; done
