#!/usr/bin/env bash
# rmsnorm's pipelined replay three times, in one device call (about 4 minutes):
#  1. empty caches (as in the bench of record);
#  2. again with the caches run 1 filled, in place (a user's second run of an op);
#  3. with a copy of those caches in another directory (a warm cache carried elsewhere:
#     before the relocatable Triton cache manager every candidate failed at anti-cheat,
#     Triton reading the kernels from the copy's origin under /tmp).
#   bash bench/archive/2026-12-01-verify-paths-final/warm_and_copied_cache.sh
set -u
OUT=${OUT:-/tmp/warm_and_copied_cache}
mkdir -p "$OUT"
export PYTHONPATH=.
replay() {  # NAME DIR
    timeout 170 python3 bench/verify_paths.py --parts paths --ops rmsnorm --paths pipelined --no-repeat \
        --path-limit-s 100 --out "$2" >"$OUT/$1.log" 2>&1
    mkdir -p "$OUT/$1"
    cp "$2/results.json" "$2/table.txt" "$2/rmsnorm-pipelined.stderr" "$OUT/$1/" 2>/dev/null
    tar czf "$OUT/$1/run.tgz" -C "$2" rmsnorm-pipelined
    echo "== $1"; tail -n 1 "$OUT/$1.log"; grep -c "FAIL at" "$2/rmsnorm-pipelined.stderr"
}
replay cold /tmp/vp
rm -rf /tmp/vp/rmsnorm-pipelined
replay warm-in-place /tmp/vp
mkdir -p /tmp/vp-copy && cp -r /tmp/vp/cache-rmsnorm-pipelined /tmp/vp-copy/
replay copied-cache /tmp/vp-copy
