"""The sandbox on a GPU: do the walls let honest kernels through, and what do they cost?

    python3 bench/sandbox_overhead.py [--repeats 5] [--device cuda]

1. The five starting candidates, verified with `--sandbox require` (all must pass), an
   @triton.autotune kernel with three configs (Triton benchmarks them and writes its
   cache inside the walls; must pass) and one wall cheat (it must fail at anti-cheat
   naming the wall: the walls hold for root on the GPU box too).
2. The warm verify time of rmsnorm's starting candidate with the sandbox on and off,
   side by side: two workers on the same GPU, each warmed by one verify (the open one
   during step 1, to fit the time), then alternating (on, off, off, on, ...) for --repeats rounds each; medians and ratio.
   Both use the same unseen-shape seed, so they check the same shapes.

Logs (hello lines, every verdict) go to $OUT (a temp dir when unset); the table is
printed last. Needs only torch and triton (and this repository).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelladder.ops.registry import BUILTIN_OPS, get_op  # noqa: E402
from kernelladder.verifier.host.client import LocalTransport, WorkerClient  # noqa: E402

CHEATS = ROOT / "tests" / "cheats"
UNSEEN_SEED = 20261201  # the same unseen shapes for both sides of the timing


def _client(device: str, sandbox: str) -> WorkerClient:
    gpu = 0 if device == "cuda" else None
    return WorkerClient(lambda: LocalTransport(device, cuda_device=gpu, sandbox=sandbox))


async def _verify(client: WorkerClient, op: str, source: str, device: str, **extra) -> tuple:
    started = time.perf_counter()
    request = {"op": op, "source": source, "device": device, **extra}
    verdict = await client.verify(request, timeout_s=300)
    return verdict, time.perf_counter() - started


def _save(out: Path, name: str, obj: object) -> None:
    (out / f"{name}.json").write_text(json.dumps(obj, indent=1, default=str))


async def main(args: argparse.Namespace) -> int:
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="sandbox-overhead-"))
    out.mkdir(parents=True, exist_ok=True)
    device = args.device
    walled, open_ = _client(device, "require"), _client(device, "off")
    rows: list[tuple[str, str, str]] = []
    ok = True
    rms_source = Path(get_op("rmsnorm").starting_candidate).read_text()
    # the open worker starts and warms up (baselines compiled) while the walled one works
    warm_off = asyncio.ensure_future(
        _verify(open_, "rmsnorm", rms_source, device, unseen_seed=UNSEEN_SEED)
    )
    try:
        hello = await walled.hello()
        _save(out, "hello_sandbox_on", hello)
        print(f"sandbox: {hello.get('sandbox')}", flush=True)
        for op in BUILTIN_OPS:
            source = Path(get_op(op).starting_candidate).read_text()
            v, took = await _verify(walled, op, source, device, baselines=False)
            _save(out, f"start_{op}", v.to_dict())
            ok &= v.verdict == "pass"
            rows.append((f"{op} starting candidate", v.verdict, f"{took:.1f} s"))
            print(f"{op}: {v.verdict} {v.gate or ''} in {took:.1f} s", flush=True)
        autotune = (CHEATS / "honest_autotune_rmsnorm.py").read_text()
        v, took = await _verify(walled, "rmsnorm", autotune, device, baselines=False)
        _save(out, "autotune_rmsnorm", v.to_dict())
        ok &= v.verdict == "pass"
        rows.append(("rmsnorm @triton.autotune (3 configs)", v.verdict, f"{took:.1f} s"))
        cheat = (CHEATS / "wall_write_package.py").read_text()
        v, took = await _verify(walled, "rmsnorm", cheat, device, baselines=False)
        _save(out, "wall_write_package", v.to_dict())
        held = v.gate == "anti-cheat" and "sandbox: write to" in v.gates["anti-cheat"].detail
        ok &= held
        rows.append(
            (
                "wall cheat (write gates.py)",
                f"{v.verdict} at {v.gate}",
                "held" if held else "NOT HELD",
            )
        )

        source = rms_source
        timing = {"on": [], "off": []}
        clients = {"on": walled, "off": open_}
        warm = {"on": await _verify(walled, "rmsnorm", source, device, unseen_seed=UNSEEN_SEED)}
        warm["off"] = await warm_off
        for side, (v, took) in warm.items():  # warm: baselines compiled, kernels cached
            _save(out, f"warmup_{side}", v.to_dict())
            print(f"warm-up sandbox {side}: {v.verdict} in {took:.1f} s", flush=True)
        for r in range(args.repeats):
            for side in ("on", "off") if r % 2 == 0 else ("off", "on"):
                v, took = await _verify(
                    clients[side], "rmsnorm", source, device, unseen_seed=UNSEEN_SEED
                )
                _save(out, f"timed_{side}_{r}", v.to_dict())
                ok &= v.verdict == "pass"
                timing[side].append(took)
                print(f"round {r + 1} sandbox {side}: {took:.2f} s ({v.verdict})", flush=True)
    finally:
        if not warm_off.done():
            warm_off.cancel()
        await asyncio.gather(walled.close(), open_.close(), return_exceptions=True)
    _save(out, "timing", timing)
    on, off = statistics.median(timing["on"]), statistics.median(timing["off"])
    print()
    print(f"{'check':44s} {'verdict':18s} time")
    for name, verdict, took in rows:
        print(f"{name:44s} {verdict:18s} {took}")
    print()
    print(f"warm rmsnorm verify, {args.repeats} alternating rounds each ({device}):")
    print(f"  sandbox on : median {on:.3f} s  runs {', '.join(f'{t:.2f}' for t in timing['on'])}")
    print(f"  sandbox off: median {off:.3f} s  runs {', '.join(f'{t:.2f}' for t in timing['off'])}")
    print(f"  on / off   : {on / off:.3f}  ({'within' if on <= off * 1.05 else 'NOT within'} 5%)")
    print(f"logs: {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    sys.exit(asyncio.run(main(parser.parse_args())))
