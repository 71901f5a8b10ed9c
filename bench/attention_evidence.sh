#!/usr/bin/env bash
# Issue 29's evidence in one device call (about 7 minutes on an H100): a default attention
# search as a user runs it (bench/default_rate.py: `kernelladder optimize attention --device
# cuda --max-attempts 40 --gate approve`, profiles and the end's re-measure on), then that
# run's best head to head against every baseline, 15 rounds a shape, with the other
# families' starts (bench/attention_search.py --no-probe --from-run). Prints the rate table,
# then the head-to-head table; under $OUT (a temporary directory when unset): rate/ (the
# run, runs.tar.gz, table.txt) and h2h.txt. Points of flash-wgmma given after the budgets
# (JSON over its start) join the head to head.
#   bash bench/attention_evidence.sh [SEARCH_BUDGET_S [H2H_BUDGET_S [POINT ...]]]
#   (budgets default to 200 and 320 s; e.g. ... 200 360 '{"KV_PAIRS": true}')
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/rate"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
git log -1 --format='code %h' 2>/dev/null || true
python3 bench/default_rate.py --ops attention --budget-s "${1:-200}" --out "$OUT/rate" \
    >"$OUT/rate/out.txt" 2>&1
echo "default search: rc $?"
cat "$OUT/rate/table.txt" 2>/dev/null || tail -20 "$OUT/rate/out.txt"
runs=$(mktemp -d)
tar xzf "$OUT/rate/runs.tar.gz" -C "$runs" 2>/dev/null
run="$runs/runs/attention"
if [ ! -f "$run/events.jsonl" ]; then
    echo "no saved attention run under $OUT/rate/runs.tar.gz: no head to head"
    exit 1
fi
points=("${@:3}")
OUT="$OUT/h2h" python3 bench/attention_search.py --no-probe --from-run "$run" \
    --budget-s "${2:-320}" ${points[@]+--points "${points[@]}"} >"$OUT/h2h.txt" 2>&1
echo "head to head: rc $?"
tail -32 "$OUT/h2h.txt"
