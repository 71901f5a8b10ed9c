#!/usr/bin/env python3
"""Attention on the H200 in one command: the search's attention families probed, a default
attention search, then its best and the new families' start points head to head against
every baseline. Needs a GPU; just under 8 minutes on one H200 (--budget-s bounds it:
the search gets what the probe's 75 s and the head to head's 225 s leave, about 170 s,
which at the 18 verified attempts a minute measured on 2026-12-02 reaches 40 attempts).

    PYTHONPATH=. python3 bench/attention_search.py [--budget-s 470] [--search-s 200]
                                                   [--rounds 15] [--probe-only]
                                                   [--no-search] [--families F ...]
                                                   [--no-probe] [--points JSON ...]
                                                   [--from-run RUN]

1. Probe: every family's start point and the Hopper families' warp-specialised points
   (with 64 and with 128 query rows) compiled, checked against the op's reference and
   timed once at each GPU shape, in a child process so a compile that crashes or hangs is
   named and the rest go on (--probe-only: those and the Hopper families' other notable
   points, then stop: the fast way to find compile failures, about a minute).
2. Search: `kernelladder optimize attention --device cuda --max-attempts 40` (3 branches,
   the search proposer, --gate approve, --profile off, a --time-limit so it fits), as
   bench/standing_searches.py runs it; the end's re-measure confirms its best.
3. Head to head (bench/head_to_head.py's rounds): the run's best, then each new family's
   start, flash-tma's start (the earlier families' best point), each family's fastest
   probed point at the first GPU shape, then the warp-specialised points the probe passed
   (while time is left), --rounds back-to-back rounds per shape
   against every baseline: SDPA as torch picks it, SDPA's cuDNN and FlashAttention
   backends forced, torch.compile of the reference.

--no-search skips step 2: the named families' every probe point, then their head to head.
With --no-probe as well, only the first named family's start and the --points given
(parameters over its start) are timed head to head: the quick way to compare a few
points. --points also join the head to head of a search or of --from-run (points of
flash-wgmma unless --families names another).

The table printed last has, per kernel and shape: the kernel's median ms, the fastest
baseline and its ms, vs best (that baseline's time over the kernel's, median of the
rounds' ratios), the standing by the sign test over rounds (faster / tie / slower),
TFLOP/s (causal FLOPs) and the fraction of the floor (the verifier's measured ceilings).

Under $OUT (a temporary directory when unset): probe.jsonl, attention/ (the run),
attention.stderr, attention.json (its replay summary), family-starts/ (the sources timed),
h2h.json (every round), table.txt.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

PROBE_CONFIG_S = 90.0  # one point: compile at two head dims, check and time four shapes
HOPPER = ("flash-wgmma", "flash-ring", "flash-persistent")


def _json_point(text: str) -> dict:
    """A --points value: one JSON object (a shell that split it gives one clear line)."""
    try:
        point = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r} ({exc.msg})") from None
    if not isinstance(point, dict):
        raise argparse.ArgumentTypeError(f"not a JSON object: {text!r}")
    return point


def probe_points(full: bool, only: list[str] | None = None) -> list[tuple[str, dict]]:
    """(family, params): every family's start, then the Hopper families' warp-specialised
    points, then (full) their other notable points; `only`: these families' alone."""
    from kernelladder.ops.registry import catalog

    families = {f.name: f for f in catalog()["attention"]}
    points = [(f.name, dict(f.start)) for f in families.values()]
    extra = {
        "flash-wgmma": [
            {"NUM_STAGES": 3},
            {"HEAD_GROUP": 4},
            {"BLOCK_N": 64, "NUM_STAGES": 3},
            {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 2},
            {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 3},
            {"WS": False},
            {"WS": False, "BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 2},
            {"WS": False, "BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 3},
            {"EPILOGUE": "tma"},
            {"HEAD_GROUP": 4, "EPILOGUE": "tma"},
        ],
        "flash-ring": [
            {"WS": True},
            {"BLOCK_N": 128},
            {"BLOCK_N": 128, "NUM_STAGES": 2},
            {"BLOCK_M": 128, "NUM_WARPS": 8},
            {"BLOCK_M": 128, "NUM_WARPS": 8, "WS": True},
            {"HEAD_GROUP": 1},
            {"HEAD_GROUP": 64},
            {"NUM_STAGES": 2},
            {"NUM_STAGES": 4},
            {"BLOCK_M": 128, "BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 2},
        ],
        "flash-persistent": [
            {"WS": "inner"},
            {"WS": "outer"},
            {"BLOCK_M": 128, "NUM_WARPS": 8, "PROGRAMS_PER_SM": 1, "NUM_STAGES": 2},
            {"PROGRAMS_PER_SM": 1},
            {"BLOCK_N": 128, "NUM_STAGES": 2},
        ],
    }
    for name, overs in extra.items():
        for over in overs if full else [o for o in overs if o.get("WS") not in (None, "off")]:
            point = {**families[name].start, **over}
            if families[name].valid(point):
                points.append((name, point))
    return [pt for pt in points if only is None or pt[0] in only]


def _label(family: str, params: dict) -> str:
    from kernelladder.ops.registry import catalog

    start = next(f for f in catalog()["attention"] if f.name == family).start
    moved = ",".join(f"{k}={v}" for k, v in params.items() if start.get(k) != v)
    return f"{family} {moved or 'start'}"


# --- 1. probe (children) -------------------------------------------------------------------


def probe_child(first: int, full: bool, only: list[str] | None = None) -> int:
    """Points first.. of probe_points(full), one JSON line as each starts and ends."""
    import torch

    from kernelladder.ops.registry import get_op
    from kernelladder.verifier.worker import candidate
    from kernelladder.verifier.worker.timing import GpuTimer

    spec = get_op("attention")
    timer = GpuTimer("cuda")
    scratch = tempfile.mkdtemp(prefix="kl-attn-probe-")
    inputs = {s.label: spec.make_inputs(s, 0, "cuda") for s in spec.gpu_shapes}
    expected: dict = {}  # the reference's outputs, once per shape
    if first == 0:
        sdpa = spec.library_baselines()["sdpa"]
        ms = {label: timer.time(lambda i=i: sdpa(i), 10).median_ms for label, i in inputs.items()}
        print(json.dumps({"i": -1, "event": "done", "label": "sdpa", "ms": ms}), flush=True)
    from kernelladder.ops.registry import catalog

    families = {f.name: f for f in catalog()["attention"]}
    for i, (name, params) in enumerate(probe_points(full, only)):
        if i < first:
            continue
        label = _label(name, params)
        print(json.dumps({"i": i, "event": "start", "label": label}), flush=True)
        result: dict = {}
        t0 = time.monotonic()
        try:
            loaded = candidate.load(
                families[name].render(params), spec, scratch, "cuda", f"probe{i:04d}"
            )
        except Exception as exc:
            result["load"] = f"{type(exc).__name__}: {exc}"[:300]
            loaded = None
        for shape in spec.gpu_shapes if loaded else ():
            args = [inputs[shape.label][n] for n in spec.arg_names]
            try:
                out = loaded.call(*args)
                torch.cuda.synchronize()
            except Exception as exc:
                result[shape.label] = f"error: {type(exc).__name__}: {exc}"[:300]
                continue
            given = inputs[shape.label]
            if shape.label not in expected:
                expected[shape.label] = spec.reference_hp(given)
            bad = spec.compare([out], expected[shape.label], given, shape)
            if bad is not None:
                result[shape.label] = f"wrong: {bad}"[:300]
                continue
            result[shape.label] = timer.time(lambda a=args, c=loaded.call: c(*a), 10).median_ms
        line = {"i": i, "event": "done", "label": label, "family": name, "params": params}
        print(json.dumps({**line, "ms": result, "s": time.monotonic() - t0}), flush=True)
    return 0


def probe(
    out: Path, env: dict, deadline: float, full: bool, only: list[str] | None = None
) -> list[dict]:
    """Run the probe children until every point has a line; a child that dies or hangs
    marks its point and the next child starts after it."""
    points = probe_points(full, only)
    done: list[dict] = []
    log = (out / "probe.jsonl").open("w")
    first = 0
    while first < len(points) and time.monotonic() < deadline:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--probe-child", str(first)]
        cmd += ["--probe-full"] if full else []
        cmd += ["--families", *only] if only else []
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        lines: queue.Queue = queue.Queue()

        def read(stream=proc.stdout, sink=lines) -> None:
            for raw in stream:
                sink.put(raw)
            sink.put(None)  # the child closed its output

        threading.Thread(target=read, daemon=True).start()
        current, why = None, ""
        limit = time.monotonic() + PROBE_CONFIG_S + 60  # the child's start and SDPA's times
        while True:
            try:
                raw = lines.get(timeout=max(1.0, min(limit, deadline) - time.monotonic()))
            except queue.Empty:
                why = "hung" if time.monotonic() < deadline else "out of time"
                proc.kill()
                break
            if raw is None:
                why = f"the child exited, rc {proc.wait()}"
                break
            try:
                msg = json.loads(raw)
            except json.JSONDecodeError:
                print(f"  probe: {raw.rstrip()}"[:300], flush=True)
                continue
            log.write(raw)
            log.flush()
            if msg["event"] == "start":
                current, limit = msg["i"], time.monotonic() + PROBE_CONFIG_S
                continue
            done.append(msg)
            _print_probe_line(msg)
            current = None
        proc.wait()
        if current is None:
            break  # every point had its line, or the child failed before the first one
        name, params = points[current]
        msg = {"i": current, "event": "done", "label": _label(name, params),
               "family": name, "params": params, "ms": {"load": why}}  # fmt: skip
        done.append(msg)
        log.write(json.dumps(msg) + "\n")
        _print_probe_line(msg)
        first = current + 1
    log.close()
    return done


def _print_probe_line(msg: dict) -> None:
    ms = msg["ms"]
    cells = [f"{v:.4f}" if isinstance(v, float) else str(v)[:60] for v in ms.values()]
    print(f"probe {msg['label']}: " + " | ".join(cells), flush=True)


# --- 3. head to head ------------------------------------------------------------------------


def _spec_with_backends():
    """The attention spec whose baselines also force SDPA's cuDNN and FlashAttention
    backends (the op's own list has SDPA as torch picks it)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernelladder.ops.registry import get_op

    spec = copy.copy(get_op("attention"))
    own = spec.library_baselines

    def forced(backend):
        def run(inputs):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(
                    inputs["q"], inputs["k"], inputs["v"], is_causal=True
                )

        return run

    def baselines():
        return {
            **own(),
            "sdpa-cudnn": forced(SDPBackend.CUDNN_ATTENTION),
            "sdpa-flash": forced(SDPBackend.FLASH_ATTENTION),
        }

    spec.library_baselines = baselines
    return spec


def table(record: list[dict], labels: dict, timer) -> str:
    from kernelladder.ops.registry import get_op

    spec = get_op("attention")
    shapes = {s.label: s for s in spec.gpu_shapes}
    rows = [["kernel", "shape", "ms", "fastest baseline", "ms", "vs best", "standing",
             "TFLOP/s", "floor"]]  # fmt: skip
    geo: dict[str, list[float]] = {}
    kernels = []
    for r in record:
        key = (r["run"], r["attempt"])
        if key not in kernels:
            kernels.append(key)
    for key in kernels:
        mine = [r for r in record if (r["run"], r["attempt"]) == key]
        for label, shape in shapes.items():
            per = [r for r in mine if r["shape"] == label and r["rounds"]]
            if not per:
                rows.append([labels.get(key, str(key)), label, "not measured"] + [""] * 6)
                continue

            def med(xs):
                return statistics.median(x for x in xs if not math.isnan(x))

            fastest = min(per, key=lambda r: med(r["baseline_ms"]))
            k_ms = med(fastest["kernel_ms"])
            ratio = statistics.median(
                b / k
                for k, b in zip(fastest["kernel_ms"], fastest["baseline_ms"], strict=True)
                if not (math.isnan(k) or math.isnan(b))
            )
            geo.setdefault(labels.get(key, str(key)), []).append(math.log(ratio))
            flops = spec.flops(shape)
            floor = timer.floor_ms(spec.bytes_moved(shape), flops.count, flops.unit)
            rows.append([
                labels.get(key, str(key)), label, f"{k_ms:.4f}", fastest["baseline"],
                f"{med(fastest['baseline_ms']):.4f}", f"{ratio:.3f}x",
                f"{fastest['verdict']} ({fastest['won']}/{fastest['rounds']})",
                f"{flops.count / k_ms / 1e9:.0f}",
                "-" if not floor else f"{floor / k_ms:.0%}",
            ])  # fmt: skip
    for name, logs in geo.items():
        rows.append([name, "geomean", "", "", "", f"{math.exp(sum(logs) / len(logs)):.3f}x"]
                    + [""] * 3)  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def head_to_head(
    out: Path, best: int | None, probed: list[dict], args, deadline: float, run_dir=None
):
    import head_to_head as h2h_module

    from kernelladder.ops.family import parse_header
    from kernelladder.ops.registry import catalog

    spec = _spec_with_backends()
    real_get_op = h2h_module.get_op
    h2h_module.get_op = lambda name: spec if name == "attention" else real_get_op(name)
    ns = argparse.Namespace(target_ms=args.target_ms, win=args.win, rounds=args.rounds)
    h2h = h2h_module.HeadToHead(ns)
    labels: dict = {}
    run_dir = run_dir or out / "attention"
    failures = []
    if best is not None:
        header = parse_header((run_dir / "attempts" / f"{best}.py").read_text()) or {}
        labels[(str(run_dir), best)] = f"best #{best} ({header.get('family', 'not a template')})"
        h2h.measure(run_dir, "attention", best, args.rounds, "")
    starts = out / "family-starts"
    (starts / "attempts").mkdir(parents=True, exist_ok=True)
    families = {f.name: f for f in catalog()["attention"]}
    # the probe's points that compiled and were right at every shape (each point once)
    passed = [
        m for m in probed if "family" in m and all(isinstance(v, float) for v in m["ms"].values())
    ]
    todo = [(name, dict(families[name].start)) for name in HOPPER]
    todo.append(("flash-tma", dict(families["flash-tma"].start)))  # the earlier families' best
    # each family's fastest passing point at the suite's first GPU shape
    fastest: dict = {}
    for m in passed:
        first = next(iter(m["ms"].values()))
        if m["family"] not in fastest or first < fastest[m["family"]][0]:
            fastest[m["family"]] = (first, m["params"])
    todo += [(name, params) for name, (_, params) in fastest.items() if (name, params) not in todo]
    # the warp-specialised points that passed
    todo += [
        (m["family"], m["params"])
        for m in passed
        if m["family"] in HOPPER and m["params"].get("WS") not in (False, "off")
    ]
    if args.no_search and args.families:  # the named families alone
        todo = [(name, params) for name, params in todo if name in args.families]
    # and the --points of the first named family (else flash-wgmma), each over its start
    first_family = args.families[0] if args.families else HOPPER[0]
    for over in args.points or []:
        point = (first_family, {**families[first_family].start, **over})
        todo += [point] if point not in todo else []
    for n, (name, params) in enumerate(todo, start=9001):
        label = _label(name, params)
        if time.monotonic() + 40 > deadline:
            failures.append(f"{label}: not timed (out of time)")
            continue
        (starts / "attempts" / f"{n}.py").write_text(families[name].render(params))
        labels[(str(starts), n)] = label
        try:
            h2h.measure(starts, "attention", n, args.rounds, "")
        except Exception as exc:  # a family start that does not compile here: say so, go on
            failures.append(f"{label}: {type(exc).__name__}: {exc}"[:300])
    (out / "h2h.json").write_text(json.dumps(h2h.record, indent=1))
    print("\n".join(h2h.lines), flush=True)
    return table(h2h.record, labels, h2h.timer), failures


# --- main ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=470.0, help="the whole command")
    parser.add_argument("--search-s", type=float, default=200.0, help="the search's --time-limit")
    parser.add_argument("--rounds", type=int, default=15, help="head-to-head rounds per shape")
    parser.add_argument("--win", type=int, default=13, help="rounds won of 15 to call it faster")
    parser.add_argument("--target-ms", type=float, default=25.0, help="per timing")
    parser.add_argument("--probe-only", action="store_true", help="stop after the probe")
    parser.add_argument("--no-probe", action="store_true", help="skip the probe")
    parser.add_argument(
        "--no-search",
        action="store_true",
        help="no search: head to head the family starts and each family's fastest probed point",
    )
    parser.add_argument("--families", nargs="+", default=None, help="probe these families only")
    parser.add_argument(
        "--points",
        nargs="+",
        default=None,
        type=_json_point,
        metavar="JSON",
        help="also these points of the first --families F (else flash-wgmma) head to head, "
        'each its start with the JSON\'s parameters over it (e.g. \'{"EPILOGUE": "tma"}\')',
    )
    parser.add_argument(
        "--from-run", type=Path, default=None, help="no search: this saved run's best head to head"
    )
    parser.add_argument("--probe-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-full", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe_child is not None:
        return probe_child(args.probe_child, args.probe_full, args.families)
    started = time.monotonic()
    deadline = started + args.budget_s
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="attention-search-"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    probed: list[dict] = []
    if not args.no_probe:
        # alone, every point; before a search, the starts and WS points in 75 s at most
        probe_deadline = deadline if args.probe_only else min(started + 75, deadline - 330)
        if args.no_search:  # the named families' every probe point, half of the budget
            probe_deadline = started + args.budget_s / 2
        full = args.probe_only or args.no_search
        probed = probe(out, env, probe_deadline, full=full, only=args.families)
    probe_lines = [
        f"{m['label']}: "
        + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v)[:50] for v in m["ms"].values())
        for m in probed
    ]
    if args.probe_only:
        print(f"logs: {out}\nprobe (ms per GPU shape, suite order, or why not):")
        print("\n".join(probe_lines))
        return 0
    from standing_searches import replay_summary, run_search

    if args.no_search:  # the family points alone, head to head
        run_dir, summary, how = None, {}, "no search"
    elif args.from_run is not None:  # a saved run's best, head to head: no search
        run_dir, summary = args.from_run, replay_summary(args.from_run, env)
        how = f"run: {args.from_run}"
    else:
        # after the search's limit: its end (the re-measure, about a minute), then about
        # two minutes of head to head (torch.compile's reference compiled per shape, six
        # kernels)
        search_s = max(60.0, min(args.search_s, deadline - time.monotonic() - 225))
        print(f"attention search: --time-limit {search_s:.0f}", flush=True)
        result = run_search("attention", out, search_s, search_s + 90, env)
        run_dir, summary = None, result["summary"]
        attempts = summary.get("attempts") or {}
        how = (
            f"search: {attempts.get('judged', 0)}/{attempts.get('total', 0)} judged in "
            f"{result['wall_s']:.0f}s rc {result['rc']}"
        )
    b = summary.get("best") or {}
    h2h_table, failures = head_to_head(out, b.get("attempt"), probed, args, deadline, run_dir)
    lines = [
        f"logs: {out}",
        f"{how}; best #{b.get('attempt', '-')} {b.get('vs_best', '-')}x vs "
        f"{b.get('versus', '-')} ({b.get('confirmed') or 'not re-measured'}), "
        f"floor {b.get('floor_fraction', '-')}",
        *(["probe (ms per GPU shape, suite order, or why not):", *probe_lines] if probed else []),
        *(f"not timed head to head: {f}" for f in failures),
        f"head to head, {args.rounds} rounds per shape (standing: rounds won of the fastest "
        "baseline's; TFLOP/s over the causal half; floor: the measured ceiling's time over "
        f"the kernel's); whole command {time.monotonic() - started:.0f}s",
        h2h_table,
    ]
    (out / "table.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if summary or args.no_search else 1


if __name__ == "__main__":
    sys.exit(main())
