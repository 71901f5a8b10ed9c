#!/usr/bin/env bash
# What a GPU session checks, in order of what is worth most if the machine is lost
# midway, each step's results written under $OUT as it finishes:
#   1. the judge's walls (bench/judge_walls.py): SDPA's backends switched off by a
#      candidate leave attention's baselines; a candidate patching the timer gets its time
#   2. default runs of rmsnorm and attention (bench/default_rate.py: `kernelladder
#      optimize OP --device cuda --max-attempts 40 --gate approve`)
#   3. their best kernels inside the Llama-3-8B-shaped model (bench/deploy_table.py,
#      recorded into the runs, so their replays show it)
#   4. default runs of softmax, kv_quant and int8_matmul
#   5. the own-kernel tune example (bench/record_examples.py --ops own-kernel)
# then every run directory in $OUT/runs.tar.gz (named as examples/ names them, after the
# GPU) and a short table last. Longer than one device call: run it detached,
#   bash bench/detached.sh start gpu bash bench/gpu_evidence.sh
#   bash bench/detached.sh wait gpu
# DEPLOY_S (default 600: two deploys took about 540 s on an H100) bounds the deploy table, RATE_S (300) each default_rate call.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-$(mktemp -d)}
export OUT
mkdir -p "$OUT"
runs="$OUT/runs"
mkdir -p "$runs"
status=()
step() {  # step NAME SECONDS CMD...: runs it, logs to $OUT/NAME.txt, notes its exit code
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    status+=("$(printf '%-14s rc %-3s %4ss' "$name" "$rc" $((SECONDS - t0)))")
    printf '%s\n' "${status[-1]}" >>"$OUT/steps.txt"
}
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
    python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -1
    git log -1 --format='code %h' 2>/dev/null || echo "code: see the commit named with this run"
    date -u +'%Y-%m-%d %H:%M UTC'
} >"$OUT/machine.txt" 2>&1
prefix=$(python3 -c 'import sys; sys.path.insert(0, "bench"); from record_examples import gpu_prefix; print(gpu_prefix("cuda"))' 2>/dev/null || echo gpu)

step walls 240 python3 bench/judge_walls.py
step rate-1 "${RATE_S:-300}" python3 bench/default_rate.py --ops rmsnorm attention \
    --budget-s "${RATE_S:-300}" --out "$OUT/rate-1"
tar xzf "$OUT/rate-1/runs.tar.gz" -C "$runs" --strip-components=1 2>/dev/null
deploy_runs=()
for op in rmsnorm attention; do
    [ -f "$runs/$op/events.jsonl" ] && deploy_runs+=("$runs/$op")
done
if [ ${#deploy_runs[@]} -gt 0 ]; then
    step deploy "${DEPLOY_S:-600}" python3 bench/deploy_table.py --record \
        --timeout "${DEPLOY_S:-600}" "${deploy_runs[@]}"
fi
step rate-2 "${RATE_S:-300}" python3 bench/default_rate.py --ops softmax kv_quant int8_matmul \
    --budget-s "${RATE_S:-300}" --out "$OUT/rate-2"
tar xzf "$OUT/rate-2/runs.tar.gz" -C "$runs" --strip-components=1 2>/dev/null
step own-kernel 200 python3 bench/record_examples.py --ops own-kernel --budget-s 180
for f in "$OUT"/*own-kernel*.tar.gz; do [ -f "$f" ] && tar xzf "$f" -C "$runs"; done
# the default runs named as examples/ names them
for op in rmsnorm softmax attention int8_matmul kv_quant; do
    [ -d "$runs/$op" ] && mv "$runs/$op" "$runs/$prefix-${op//_/-}-search"
done
tar czf "$OUT/runs.tar.gz" -C "$runs" . && rm -rf "$runs"

echo "== $(tr '\n' ' ' <"$OUT/machine.txt")"
printf '%s\n' "${status[@]}"
for t in rate-1 rate-2; do head -8 "$OUT/$t/table.txt" 2>/dev/null; done
tail -25 "$OUT/deploy.txt" 2>/dev/null
tail -15 "$OUT/walls.txt" 2>/dev/null
