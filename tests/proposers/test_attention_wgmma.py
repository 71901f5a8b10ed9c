"""attention's flash-wgmma family (a Gluon kernel for Hopper's warpgroup MMA).

Gluon has no CPU interpreter, so two things are checked here, each for real:
- every candidate the family writes passes the verifier in the interpreter at the CPU
  suite and unseen shapes; on the CPU that is its pointer kernel, the path a candidate
  takes wherever the Gluon kernel cannot run (and `_wgmma_ok` says so for CPU tensors);
- the Gluon kernels (warp-specialised and not, each head dim and dtype the GPU suite has:
  every point at D=128, each kernel and switch at D=64) compile for sm_90a with the
  installed Triton, which compiles for a target without the device, and the PTX has the overlap the kernel is written for: a wait that leaves one
  warpgroup MMA in flight (the next Q K^T done while P V still runs), warp-specialised,
  the loader's registers given to the consumers, with EPILOGUE "tma" O's TMA store, and with
DIAG_HALF the diagonal block's 64-key MMAs, with PINGPONG the consumers' turns, with
KV_PAIRS one barrier for a key block's K and the V before.
Their speed and their results on an H100/H200 are bench/attention_search.py's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from helpers import load_source

from kernelladder.engine.protocols import VerifyRequest
from kernelladder.ops.registry import catalog
from kernelladder.verifier.host.client import verify_sync

FAMILY = next(f for f in catalog()["attention"] if f.name == "flash-wgmma")
# the start (warp-specialised: two consumers of 64 rows, 128-key blocks; persistent; O by
# TMA store; the first consumer on half the diagonal block), then without persistence, with
# the pointer store, with one consumer, and the kernel whose warps all load and compute
OLD = {"PERSISTENT": False, "EPILOGUE": "ptr", "DIAG_HALF": False}
ONE = {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 3, "DIAG_HALF": False}
POINTS = [
    {},
    OLD,
    {**OLD, **ONE},
    {**OLD, "WS": False, "BLOCK_M": 64, "BLOCK_N": 64, "NUM_STAGES": 2},
    {**OLD, "WS": False},
    {"PERSISTENT": False, "DIAG_HALF": False},
    {"PERSISTENT": False, **ONE},
    {"PERSISTENT": False, "WS": False, "DIAG_HALF": False},
    {
        "PERSISTENT": False,
        "WS": False,
        "BLOCK_M": 64,
        "BLOCK_N": 64,
        "NUM_STAGES": 2,
        "DIAG_HALF": False,
    },
    {"EPILOGUE": "ptr"},
    ONE,
    {"DIAG_HALF": False},
    {"DIAG_HALF": False, "EPILOGUE": "ptr"},
    {"PINGPONG": True},
    {"PINGPONG": True, "DIAG_HALF": False},
    {"EARLY_RESCALE": True},
    {"EARLY_RESCALE": True, "PINGPONG": True},
    {"KV_PAIRS": True},
    {"KV_PAIRS": True, "DIAG_HALF": False},
    {"KV_PAIRS": True, "PINGPONG": True},
    {"KV_PAIRS": True, **ONE},
]
# At head dim 64 (fp16) each kernel (persistent warp-specialised, warp-specialised, all
# warps alike; one consumer or two) and each overlap switch once: the PTX's structure does
# not change with the head dim, the shared memory it needs grows with it (D=128 has all).
HEAD64 = [
    {},
    {**OLD, **ONE},
    {**OLD, "WS": False},
    POINTS[8],
    {"PINGPONG": True},
    {"EARLY_RESCALE": True, "PINGPONG": True},
    {"KV_PAIRS": True, "PINGPONG": True},
    {"KV_PAIRS": True, **ONE},
]
CASES = {(128, "bfloat16"): POINTS, (64, "float16"): HEAD64}


def _load(point: dict, tmp_path, name: str):
    return load_source(FAMILY.render({**FAMILY.start, **point}), tmp_path, name)


def test_the_family_leads_the_attention_search_and_every_point_fits_shared_memory():
    assert catalog()["attention"][0] is FAMILY
    points = list(FAMILY.points())
    assert FAMILY.start in points and len(points) > 10
    assert all(FAMILY.valid({**FAMILY.start, **over}) for over in POINTS)
    # Q and the K and V rings of the largest point within an SM's 227 KiB at D=128
    assert not FAMILY.valid({**FAMILY.start, **OLD, "NUM_STAGES": 4})
    # persistent points are warp-specialised, and stage O apart for the TMA store
    assert not FAMILY.valid({**FAMILY.start, "PERSISTENT": True, "WS": False})
    assert not FAMILY.valid({**FAMILY.start, "PERSISTENT": True, "EPILOGUE": "tma",
                             "NUM_STAGES": 3})  # fmt: skip
    for p in points:
        o_rows = p["BLOCK_M"] if p["PERSISTENT"] and p["EPILOGUE"] == "tma" else 0
        rows = p["BLOCK_M"] + o_rows + 2 * p["NUM_STAGES"] * p["BLOCK_N"]
        assert 2 * 128 * rows <= 227 * 1024


@pytest.mark.parametrize("over", [POINTS[i] for i in (0, 1, 2, 3, 10)], ids=str)
def test_a_flash_wgmma_candidate_passes_the_verifier_at_the_cpu_suite_and_unseen_shapes(over):
    source = FAMILY.render({**FAMILY.start, **over})
    request = VerifyRequest(op="attention", source=source, device="cpu", unseen_seed=31)
    verdict = verify_sync(request, timeout_s=600).to_dict()
    gates = verdict["gates"]
    assert verdict["verdict"] == "pass", (verdict["gate"], gates.get(verdict["gate"]))
    assert "2 unseen shapes" in gates["correctness"]["detail"]


def test_the_gluon_kernel_is_not_taken_where_it_cannot_run(tmp_path):
    module = _load({}, tmp_path, "wgmma_cpu")
    q = torch.randn(1, 2, 128, 64, dtype=torch.bfloat16)
    assert not module._wgmma_ok(q, q, q)  # CPU tensors


@pytest.mark.parametrize(("B", "H", "S", "over"), [
    (4, 32, 2048, {}),
    (1, 8, 4096, {"HEAD_GROUP": 4}),
    (3, 5, 77, {"BLOCK_M": 64, "BLOCK_N": 64}),
])  # fmt: skip
def test_the_persistent_schedule_deals_every_tile_once_in_launch_order(B, H, S, over, tmp_path):
    # on the CPU a candidate's SM count is a stand-in (2); the GPU's is its own
    module = _load(over, tmp_path, "wgmma_schedule")
    module._num_sms = lambda device: 132
    n_m = -(-S // module.BLOCK_M)
    table = module._schedule(B * H, n_m, module.BLOCK_M, S, torch.device("cpu"))
    # made once per shape
    assert module._schedule(B * H, n_m, module.BLOCK_M, S, torch.device("cpu")) is table
    rows = [[t for t in row if t >= 0] for row in table.tolist()]
    assert len(rows) == min(132, B * H * n_m)
    for row, full in zip(rows, table.tolist(), strict=True):
        assert row == sorted(row) and full[len(row) :] == [-1] * (len(full) - len(row))
    assert sorted(t for row in rows for t in row) == list(range(B * H * n_m))

    # the programs' key blocks (and one per tile) within one long tile of each other
    def cost(t):
        group = module.HEAD_GROUP
        g, r = divmod(t, group * n_m)
        m = n_m - 1 - r // min(B * H - g * group, group)
        return -(-min((m + 1) * module.BLOCK_M, S) // module.BLOCK_N) + 1

    loads = [sum(cost(t) for t in row) for row in rows]
    assert max(loads) - min(loads) <= -(-S // module.BLOCK_N) + 1


def test_the_persistent_schedule_is_made_without_torch_compute(tmp_path):
    # the verifier's fence (a built-in op): torch may allocate and copy, not compute
    from kernelladder.verifier.worker.fence import FenceRecorder

    module = _load({}, tmp_path, "wgmma_schedule_fence")
    with FenceRecorder(frozenset(), builtin=True) as fence:
        for BH, S in ((128, 2048), (32, 1000), (15, 77)):
            module._schedule(BH, -(-S // 128), 128, S, torch.device("cpu"))
    assert not fence.violations, fence.violations


def test_the_persistent_schedule_keeps_the_latest_shapes_tables_only(tmp_path):
    module = _load({}, tmp_path, "wgmma_schedule_kept")
    cpu = torch.device("cpu")
    first = module._schedule(2, 1, 128, 100, cpu)
    for S in range(128, 128 * (module._SCHEDULE_KEPT + 5), 128):
        module._schedule(2, S // 128, 128, S, cpu)
    assert len(module._SCHEDULES) == module._SCHEDULE_KEPT
    assert module._schedule(2, 1, 128, 100, cpu) is not first  # dropped, made again
    latest = module._schedule(2, 3, 128, 384, cpu)
    assert module._schedule(2, 3, 128, 384, cpu) is latest


def _gluon_hopper():
    try:
        from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma  # noqa: F401
    except ImportError:
        return False
    return True


# Run in a child without TRITON_INTERPRET (this suite's CPU tests set it, and under it
# Triton's own jit helpers that Gluon code calls become interpreter functions): one child
# per head dim and dtype compiles every point's candidate, a JSON line each (torch and
# Triton imported once, not once a point).
COMPILE = """
import importlib.util, json, sys, traceback
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import mangle_type

def compiled(path, D, dtype):
    spec = importlib.util.spec_from_file_location("candidate", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    element = m.gl.bfloat16 if dtype == torch.bfloat16 else m.gl.float16
    flat = torch.empty(4096, D, dtype=dtype)  # only its dtype, shape and alignment are read
    signature = {}
    for name, rows in (("q_desc", 64 if m.WS else m.BLOCK_M), ("k_desc", m.BLOCK_N),
                       ("v_desc", m.BLOCK_N)):
        layout = m.gl.NVMMASharedLayout.get_default_for([rows, D], element)
        signature[name] = mangle_type(m.GluonDescriptor.from_tensor(flat, [rows, D], layout))
    consts = {}
    if m.EPILOGUE == "tma":  # O in Q's blocks
        signature["o_desc"] = signature["q_desc"]
    else:  # no descriptor: the kernels store O through pointers
        signature["o_desc"], consts["o_desc"] = "constexpr", None
    signature["O"] = mangle_type(flat)
    signature["sched"], signature["width"] = "*i32", "i32"  # the persistent kernel's table
    signature["sm_scale"] = "fp32"
    for name in ("H", "S", "BH", "N_M", "group", "sob", "soh", "sos", "sod"):
        signature[name] = "i32"
    maxnreg = m._ws_maxnreg(m.BLOCK_M)
    if m.WS and m.PERSISTENT:
        fn, options = m._gl_attn_fwd_pws, {"num_warps": 4, "maxnreg": maxnreg}
        consts.update({"D": D, "BLOCK_N": m.BLOCK_N, "STAGES": m.NUM_STAGES,
                       "CONSUMERS": m.BLOCK_M // 64, "CONSUMER_REGS": m.CONSUMER_REGS,
                       "LOADER_REGS": m.LOADER_REGS, "DIAG_HALF": m.DIAG_HALF,
                       "PINGPONG": m.PINGPONG, "EARLY_RESCALE": m.EARLY_RESCALE,
                       "KV_PAIRS": m.KV_PAIRS})
    elif m.WS:
        fn, options = m._gl_attn_fwd_ws, {"num_warps": 4, "maxnreg": maxnreg}
        consts.update({"D": D, "BLOCK_N": m.BLOCK_N, "STAGES": m.NUM_STAGES,
                       "CONSUMERS": m.BLOCK_M // 64, "GROUP": m.HEAD_GROUP,
                       "CONSUMER_REGS": m.CONSUMER_REGS})
    else:
        fn, options = m._gl_attn_fwd, {"num_warps": m.BLOCK_M // 16}
        consts.update({"D": D, "BLOCK_M": m.BLOCK_M, "BLOCK_N": m.BLOCK_N,
                       "STAGES": m.NUM_STAGES, "GROUP": m.HEAD_GROUP,
                       "num_warps": m.BLOCK_M // 16})
    signature.update(dict.fromkeys(consts, "constexpr"))
    signature = {name: signature[name] for name in fn.arg_names if name in signature}
    names = list(signature)
    source = GluonASTSource(fn, signature, constexprs={(names.index(k),): v for k, v in consts.items()})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return {"ptx": kernel.asm["ptx"], "shared": kernel.metadata.shared, "ws": bool(m.WS),
            "tma_store": m.EPILOGUE == "tma", "half": m.DIAG_HALF,
            "turns": bool(m.WS and m.PERSISTENT and m.PINGPONG and m.BLOCK_M == 128),
            "block_n": m.BLOCK_N, "pairs": bool(m.WS and m.PERSISTENT and m.KV_PAIRS),
            "kv_bytes": m.BLOCK_N * D * 2}

D, dtype = int(sys.argv[1]), getattr(torch, sys.argv[2])
for path in sys.argv[3:]:
    try:
        out = compiled(path, D, dtype)
    except Exception:
        out = {"error": traceback.format_exc()[-3000:]}
    print(json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def compiled_points(tmp_path_factory):
    """(D, dtype) -> each of its CASES' points compiled, in order (one child per pair)."""
    done: dict[tuple[int, str], list[dict]] = {}

    def get(D: int, dtype: str) -> list[dict]:
        if (D, dtype) not in done:
            folder = tmp_path_factory.mktemp(f"wgmma-{D}-{dtype}")
            paths = []
            for i, over in enumerate(CASES[(D, dtype)]):
                paths.append(folder / f"candidate_{i}.py")
                paths[-1].write_text(FAMILY.render({**FAMILY.start, **over}))
            env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
            env["TRITON_CACHE_DIR"] = str(folder / "triton-cache")
            child = subprocess.run(
                [sys.executable, "-c", COMPILE, str(D), dtype, *map(str, paths)],
                capture_output=True, text=True, env=env, timeout=1200,
            )  # fmt: skip
            assert child.returncode == 0, child.stderr[-3000:]
            lines = child.stdout.strip().splitlines()[-len(CASES[(D, dtype)]) :]
            done[(D, dtype)] = [json.loads(line) for line in lines]
        return done[(D, dtype)]

    return get


@pytest.mark.skipif(not _gluon_hopper(), reason="this Triton has no Gluon for Hopper")
@pytest.mark.parametrize(
    ("D", "dtype", "over"),
    [(D, dtype, over) for (D, dtype), points in CASES.items() for over in points],
    ids=str,
)
def test_the_gluon_kernel_compiles_for_hopper_with_its_overlap(D, dtype, over, compiled_points):
    out = compiled_points(D, dtype)[CASES[(D, dtype)].index(over)]
    assert "error" not in out, out.get("error")
    ptx = out["ptx"]
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert re.search(r"wgmma\.wait_group\.sync\.aligned 1;", ptx), "no MMA left in flight"
    assert ("setmaxnreg.inc" in ptx) == out["ws"]
    # O's tile from shared memory to global by TMA (EPILOGUE "tma"), else pointer stores only
    tma_store = re.search(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)
    assert bool(tma_store) == out["tma_store"]
    if D == 128 and out["block_n"] == 128:  # DIAG_HALF: the diagonal's first half, 64 keys
        assert bool(re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16", ptx)) == out["half"]
    # PINGPONG: each consumer waits for its turn on its own named barrier (8 or 9, both
    # consumers' 256 threads) and hands the turn to the other's
    turns = ("bar.sync 8, 256", "bar.sync 9, 256", "bar.arrive 8, 256", "bar.arrive 9, 256")
    assert all(t in ptx for t in turns) == out["turns"]
    assert any(t in ptx for t in turns) == out["turns"]
    # KV_PAIRS: K_(j+1) and V_j land on one barrier, which expects both blocks' bytes
    pair = re.search(rf"mbarrier\.arrive\.expect_tx\S* _, \[%r\d+\], {2 * out['kv_bytes']};", ptx)
    assert bool(pair) == out["pairs"]
    assert out["shared"] <= 227 * 1024
