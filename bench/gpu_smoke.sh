#!/usr/bin/env bash
# One short device call after changes to the search templates, the worker or resume: every
# search family's starting point verified on the GPU suite, then a 4-attempt headless run
# resumed to 6 (the plain view's resume line), then a worker killed with -9 and the next
# worker's start sweeping its scratch dir.
#
#   bash bench/gpu_smoke.sh            # SKIP_TEMPLATES=1 skips the templates' part
#   REMOTE=1 bash bench/gpu_smoke.sh   # also the SSH runner end to end on loopback
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ -z "$SKIP_TEMPLATES" ]; then
  timeout 200 python3 bench/gpu_search_smoke.py --budget 170 2>&1 | grep -v Warning | tail -25
fi
timeout 120 python3 -m kernelladder optimize rmsnorm --device cuda --max-attempts 4 --branches 2 \
  --gate approve --run-dir /tmp/runs/smoke > /tmp/smoke1.log 2>&1; echo "optimize exit $?"; tail -3 /tmp/smoke1.log
timeout 120 python3 -m kernelladder optimize --resume /tmp/runs/smoke --max-attempts 6 \
  > /tmp/smoke2.log 2>&1; echo "resume exit $?"; head -4 /tmp/smoke2.log; tail -2 /tmp/smoke2.log
grep -o '"kind": *"attempt_started"[^}]*' /tmp/runs/smoke/events.jsonl | grep -o '"slot": *"[^"]*"' | sort | uniq -c
python3 - <<'PY'
import asyncio, os, subprocess, sys
from kernelladder.verifier.host.client import LocalTransport
# a caller that starts a GPU worker, then is killed with -9 together with its worker
child = """
import asyncio, os, signal
from kernelladder.verifier.host.client import LocalTransport
async def main():
    t = LocalTransport('cuda'); await t.start()
    print(t.home, flush=True)
    os.killpg(t.pid, signal.SIGKILL); os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""
home = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True).stdout.strip()
print("caller and worker killed with -9; scratch dir left:", home, os.path.isdir(home))
async def main():
    t = LocalTransport("cuda"); await t.start()
    print("after the next worker start, the stale dir is still there:", os.path.isdir(home))
    await t.kill()
asyncio.run(main())
PY
# REMOTE=1 needs the wheels of .whl/ (git-ignored): run the device call with carry [".whl"].
if [ -n "$REMOTE" ]; then  # the SSH runner end to end through an SSH server on loopback
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site
  timeout 150 python3 bench/remote_rate.py --op rmsnorm --attempts 3 --repeats 2 --out /tmp/remote \
    > /tmp/remote.log 2>&1; echo "remote_rate exit $?"; tail -18 /tmp/remote.log
  grep -rho '"slot": *"[^"]*"' /tmp/remote 2>/dev/null | sort | uniq -c | head
fi
