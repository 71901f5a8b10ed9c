#!/usr/bin/env bash
# A bench longer than one device call (10 minutes at most) run across two calls: the
# first starts it in its own session, so the call can end while it runs; the second,
# made while the machine is still held (it is let go about 30 s after a call ends),
# waits for it and copies what it wrote to $OUT.
#
#   bash bench/detached.sh start NAME CMD [ARGS...]   # CMD runs with $OUT set to its folder
#   bash bench/detached.sh wait NAME [SECONDS]        # up to SECONDS (default 570), then
#                                                     # NAME's folder is copied to $OUT/NAME
#
# e.g. the issue-16 bench (about 17 minutes):
#   bash bench/detached.sh start paths python3 bench/verify_paths.py
#   bash bench/detached.sh wait paths
set -euo pipefail

ROOT_DIR=/tmp/kernelladder-detached
cmd=${1:-}
name=${2:-}
if [[ -z "$cmd" || -z "$name" ]]; then
    echo "usage: bench/detached.sh start NAME CMD [ARGS...] | wait NAME [SECONDS]" >&2
    exit 2
fi
dir="$ROOT_DIR/$name"

case "$cmd" in
start)
    shift 2
    if [[ $# -eq 0 ]]; then
        echo "bench/detached.sh: start needs a command" >&2
        exit 2
    fi
    mkdir -p "$dir/out"
    rm -f "$dir/rc"
    # its own session: it outlives this call; $OUT is its folder while it runs
    OUT="$dir/out" setsid nohup bash -c '"$@" >"$0/log" 2>&1; echo $? >"$0/rc"' \
        "$dir" "$@" </dev/null >/dev/null 2>&1 &
    echo "started $name (pid $!): log $dir/log"
    ;;
wait)
    limit=${3:-570}
    waited=0
    while [[ ! -f "$dir/rc" && $waited -lt $limit ]]; do
        sleep 5
        waited=$((waited + 5))
    done
    if [[ -n "${OUT:-}" ]]; then
        mkdir -p "$OUT/$name"
        cp -r "$dir/." "$OUT/$name/" 2>/dev/null || true
    fi
    if [[ -f "$dir/rc" ]]; then
        echo "$name finished (rc $(cat "$dir/rc")) after waiting ${waited}s"
        tail -n 30 "$dir/log"
        exit 0
    fi
    echo "$name still running after ${waited}s: call wait again (within 30 s)"
    tail -n 5 "$dir/log"
    ;;
*)
    echo "bench/detached.sh: unknown command $cmd (start or wait)" >&2
    exit 2
    ;;
esac
