#!/usr/bin/env bash
# The last device call of a session: the verifier's GPU evidence (five starting candidates,
# repeat check, the side-stream cheat, warm verify time, the measured ceilings), a run killed
# with -9 mid-flight and resumed (the log's writer lock on this filesystem), and a short
# attention search (linked moves).
cd "$(dirname "$0")/../../.."  # the repository root
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=160
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import sys,torch,triton; print(sys.version.split()[0], torch.__version__, triton.__version__)'
timeout ${VERIFIER_LIMIT:-240} python3 bench/gpu_verifier.py --parts a b c d --no-cli > $OUT/verifier.log 2>&1
echo "gpu_verifier exit $?"
mkdir -p /tmp/runs
setsid python3 -m kernelladder optimize rmsnorm --device cuda --max-attempts 8 --branches 2 \
  --gate approve --run-dir /tmp/runs/killed > /tmp/killed1.log 2>&1 &
pid=$!; sleep ${KILL_AFTER:-25}; kill -9 -- -$pid; wait $pid 2>/dev/null
echo "killed with -9 after ${KILL_AFTER:-25} s: $(grep -c . /tmp/runs/killed/events.jsonl) events"
timeout 150 python3 -m kernelladder optimize --resume /tmp/runs/killed --max-attempts 10 \
  > /tmp/killed2.log 2>&1; echo "resume exit $?"; head -2 /tmp/killed2.log; tail -2 /tmp/killed2.log
python3 - <<'PY'
from kernelladder.engine.log import read_log
events = read_log("/tmp/runs/killed").events
started = [e.attempt for e in events if e.kind == "attempt_started"]
verdicts = sorted({e.attempt for e in events if e.kind == "verdict_ready"})
seqs = [e.seq for e in events]
print(f"events {len(events)}, seq unique and in order: {seqs == sorted(set(seqs))}")
print(f"attempts started {sorted(set(started))}, with verdicts {verdicts}")
print("last event:", events[-1].kind)
PY
timeout $((${OPT_LIMIT:-140} + 30)) python3 -m kernelladder optimize attention --device cuda \
  --max-attempts 40 --branches 3 --time-limit ${OPT_LIMIT:-140} --gate approve \
  --run-dir /tmp/runs/attention > /tmp/runs/attention.json 2> /tmp/runs/attention.log
echo "optimize attention exit $?"
python3 -m kernelladder replay /tmp/runs/attention > $OUT/replay-attention.txt 2>&1
grep -h "BLOCK_M .*NUM_WARPS\|NUM_WARPS .*BLOCK_M" $OUT/replay-attention.txt | head -6
tail -6 $OUT/replay-attention.txt
tar czf $OUT/runs.tgz -C /tmp runs killed1.log killed2.log
grep -E "^\|" $OUT/verifier.log | tail -30; grep -iE "rates|ceiling|warm|side stream|repeat|differ" $OUT/verifier.log | tail -8
