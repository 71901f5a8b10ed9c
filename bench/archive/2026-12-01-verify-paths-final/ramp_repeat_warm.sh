#!/usr/bin/env bash
# Three follow-ups to the bench of record, in one device call (about 4 minutes):
#  1. where a cold worker's first speed stage goes (first_speed_stage.py, inductor warmed
#     first as a worker does);
#  2. the repeat check's spread over 5 verifications of rmsnorm's pipelined best (#14);
#  3. rmsnorm's pipelined replay again with empty caches (a second sample of the run's
#     rate), then once more with the caches that run filled (a user's second run of an op).
#   bash bench/archive/2026-12-01-verify-paths-final/ramp_repeat_warm.sh
set -u
D=bench/archive/2026-12-01-verify-paths-final
OUT=${OUT:-/tmp/ramp_repeat_warm}
mkdir -p "$OUT"
export PYTHONPATH=.

echo "== 1. first speed stage (a cold process, inductor warmed first)"
XDG_CACHE_HOME=/tmp/probe-cache timeout 120 python3 bench/archive/2026-12-01-verify-breakdown/first_speed_stage.py \
    --warm-inductor >"$OUT/first_speed_stage.log" 2>&1
tail -n 12 "$OUT/first_speed_stage.log"

echo "== 2. repeat spread (rmsnorm #14 of the pipelined run, 5 verifications)"
XDG_CACHE_HOME=/tmp/repeat-cache timeout 120 python3 "$D/repeat_spread.py" "$D/rmsnorm-pipelined/attempts/14.py" 5 \
    >"$OUT/repeat_spread.log" 2>&1
tail -n 14 "$OUT/repeat_spread.log"

echo "== 3. rmsnorm pipelined replay: empty caches, then the caches it filled"
timeout 170 python3 bench/verify_paths.py --parts paths --ops rmsnorm --paths pipelined --no-repeat --path-limit-s 100 \
    --out /tmp/vp-cold >"$OUT/cold.log" 2>&1
tail -n 3 "$OUT/cold.log"
mkdir -p /tmp/vp-warm && cp -r /tmp/vp-cold/cache-rmsnorm-pipelined /tmp/vp-warm/
timeout 170 python3 bench/verify_paths.py --parts paths --ops rmsnorm --paths pipelined --no-repeat --path-limit-s 100 \
    --out /tmp/vp-warm >"$OUT/warm.log" 2>&1
tail -n 3 "$OUT/warm.log"
tar czf "$OUT/runs.tgz" --exclude='cache-*' --exclude='dealt-*' -C /tmp vp-cold vp-warm
