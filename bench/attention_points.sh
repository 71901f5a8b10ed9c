#!/usr/bin/env bash
# flash-wgmma's points on a GPU, one command: each point's candidate through `kernelladder
# check --no-baselines --min-speedup 0` (correctness, determinism and honesty gates, and its
# time, with a time limit, so a kernel that hangs is named and the rest go on), then the
# start and the points that passed head to head against every baseline (15 rounds a shape).
#   bench/attention_points.sh '{"DIAG_HALF": false}' '{"HEAD_GROUP": 8}'
# Logs and candidates under $OUT (a temporary directory when unset).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/points"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
n=0
passed=()
for point in "$@"; do
    n=$((n + 1))
    python3 bench/wgmma_point.py "$point" "$OUT/points/$n.py"
    timeout "${CHECK_S:-120}" python3 -m kernelladder check attention "$OUT/points/$n.py" \
        --device cuda --no-baselines --min-speedup 0 >"$OUT/points/$n.check" 2>&1
    rc=$?
    echo "check $point: rc $rc"
    head -14 "$OUT/points/$n.check"
    [ $rc -eq 0 ] && passed+=("$point")
done
[ ${#passed[@]} -gt 0 ] || passed=('{}')
timeout "${H2H_S:-420}" python3 bench/attention_search.py --no-search --no-probe \
    --families flash-wgmma --points "${passed[@]}" >"$OUT/h2h.txt" 2>&1
echo "head to head: rc $?"
tail -30 "$OUT/h2h.txt"
