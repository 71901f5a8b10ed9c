"""tune finds a kernel's knobs by the role each value plays: tiles whose names carry no
hint (BM/BN/BK, `R`, `TILE`, a block pointer's shape), tl.dot's M/N/K, a program-order
swizzle, launch options and autotune configs; a name alone never makes a knob."""

from __future__ import annotations

from helpers import ROOT

from kernelladder.engine.proposers.tune.knobs import (
    STAGES,
    SWIZZLE,
    TILE,
    WARPS,
    find,
    with_config,
)

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"


def _roles(source: str) -> dict[str, tuple[str, bool, str | None]]:
    return {k.key: (k.role, k.pow2, k.dot) for k in find(source).knobs}


def test_a_matmul_with_bm_bn_bk_gets_dot_roles_and_its_swizzle():
    source = (ROOT / "examples" / "tune-matmul-fp16" / "kernel.py").read_text()
    roles = _roles(source)
    assert roles["_mm.BM"] == (TILE, True, "M")
    assert roles["_mm.BN"] == (TILE, True, "N")
    assert roles["_mm.BK"] == (TILE, True, "K")
    assert roles["_mm.GM"] == (SWIZZLE, False, None)
    assert roles["_mm.num_warps"][0] == WARPS and roles["_mm.num_stages"][0] == STAGES


def test_a_one_letter_tile_in_tl_arange_is_a_knob():
    source = HEADER + (
        "@triton.jit\n"
        "def k(X, Y, n, R: tl.constexpr):\n"
        "    offs = tl.program_id(0) * R + tl.arange(0, R)\n"
        "    tl.store(Y + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)\n\n"
        "def kernel(x):\n"
        "    y = torch.empty_like(x)\n"
        "    k[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), R=256)\n"
        "    return y\n"
    )
    roles = _roles(source)
    assert roles["k.R"] == (TILE, True, None)
    # num_warps and num_stages are absent from the launch: tune may add num_warps; a
    # kernel without a loop has nothing to pipeline, so num_stages stays out of the space
    assert {"k.num_warps", "k.num_stages"} <= set(roles)
    (r,) = [k for k in find(source).knobs if k.key == "k.R"]
    changed = with_config(source, find(source).knobs, {"k.R": 1024, "k.num_warps": 8})
    assert "R=1024" in changed and "triton.cdiv(x.numel(), 1024)" in changed
    assert "num_warps=8" in changed
    compile(changed, "k.py", "exec")


def test_a_tile_used_as_a_loop_step_is_a_knob_and_the_loop_count_too():
    source = HEADER + (
        "@triton.jit\n"
        "def k(X, Y, n, TILE: tl.constexpr, REPS: tl.constexpr, FLAG: tl.constexpr):\n"
        "    row = tl.program_id(0)\n"
        "    for start in range(0, n, TILE):\n"
        "        cols = start + tl.arange(0, TILE)\n"
        "        x = tl.load(X + row * n + cols, mask=cols < n)\n"
        "        for _ in range(REPS):\n"
        "            x = x * 1.0\n"
        "        if FLAG == 1:\n"
        "            x = x + 0.0\n"
        "        tl.store(Y + row * n + cols, x, mask=cols < n)\n\n"
        "def kernel(x):\n"
        "    y = torch.empty_like(x)\n"
        "    k[(x.shape[0],)](x, y, x.shape[1], TILE=64, REPS=2, FLAG=1, num_warps=2)\n"
        "    return y\n"
    )
    roles = _roles(source)
    assert roles["k.TILE"] == (TILE, True, None)
    assert roles["k.REPS"] == (TILE, False, None)  # sizes work, no power of two needed
    assert "k.FLAG" not in roles  # a switch, whatever its value: not a knob
    assert find(source).kernels["k"].has_loop


def test_block_pointer_shapes_are_tiles_and_reach_tl_dot():
    source = HEADER + (
        "@triton.jit\n"
        "def k(A, B, C, M, N, K, P: tl.constexpr, Q: tl.constexpr, S: tl.constexpr):\n"
        "    pm = tl.program_id(0)\n"
        "    pn = tl.program_id(1)\n"
        "    a_bp = tl.make_block_ptr(A, shape=(M, K), strides=(K, 1), offsets=(pm * P, 0),\n"
        "                             block_shape=(P, S), order=(1, 0))\n"
        "    b_bp = tl.make_block_ptr(B, shape=(K, N), strides=(N, 1), offsets=(0, pn * Q),\n"
        "                             block_shape=(S, Q), order=(1, 0))\n"
        "    acc = tl.zeros((P, Q), dtype=tl.float32)\n"
        "    for _ in range(0, K, S):\n"
        "        acc += tl.dot(tl.load(a_bp), tl.load(b_bp))\n"
        "        a_bp = tl.advance(a_bp, (0, S))\n"
        "        b_bp = tl.advance(b_bp, (S, 0))\n"
        "    c_bp = tl.make_block_ptr(C, shape=(M, N), strides=(N, 1), offsets=(pm * P, pn * Q),\n"
        "                             block_shape=(P, Q), order=(1, 0))\n"
        "    tl.store(c_bp, acc)\n\n"
        "def kernel(a, b):\n"
        "    c = torch.empty(a.shape[0], b.shape[1], device=a.device)\n"
        "    grid = lambda meta: (triton.cdiv(a.shape[0], meta['P']), triton.cdiv(b.shape[1], meta['Q']))\n"
        "    k[grid](a, b, c, a.shape[0], b.shape[1], a.shape[1], P=64, Q=64, S=32)\n"
        "    return c\n"
    )
    roles = _roles(source)
    assert roles["k.P"] == (TILE, True, "M")
    assert roles["k.Q"] == (TILE, True, "N")
    assert roles["k.S"] == (TILE, True, "K")
    # P and Q share the literal 64: a grid literal could not say whose it is, and the
    # grid here reads them by name (meta['P']), so only the launch's values change
    changed = with_config(source, find(source).knobs, {"k.P": 128})
    assert "P=128, Q=64" in changed


def test_a_name_that_sounds_tunable_is_not_a_knob_without_a_role():
    source = HEADER + (
        "@triton.jit\n"
        "def k(X, n, BLOCK_SIZE: tl.constexpr, WIDTH: tl.constexpr):\n"
        "    offs = tl.program_id(0) * WIDTH + tl.arange(0, WIDTH)\n"
        "    if BLOCK_SIZE > 0:\n"
        "        tl.store(X + offs, tl.load(X + offs, mask=offs < n) * 2, mask=offs < n)\n\n"
        "def kernel(x):\n"
        "    k[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK_SIZE=1, WIDTH=128)\n"
        "    return x\n"
    )
    roles = _roles(source)
    assert "k.BLOCK_SIZE" not in roles and roles["k.WIDTH"][0] == TILE


def test_a_value_computed_at_the_launch_is_scaled_as_a_whole():
    source = HEADER + (
        "@triton.jit\n"
        "def k(X, n, W: tl.constexpr):\n"
        "    offs = tl.arange(0, W)\n"
        "    tl.store(X + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)\n\n"
        "def kernel(x):\n"
        "    warps = 4 if x.numel() < 4096 else 8\n"
        "    k[(1,)](x, x.numel(), W=triton.next_power_of_2(x.numel()), num_warps=warps)\n"
        "    return x\n"
    )
    found = find(source)
    (w,) = [k for k in found.knobs if k.key == "k.W"]
    assert (w.role, w.scaled, w.value) == (TILE, "triton.next_power_of_2(x.numel())", 0)
    changed = with_config(source, found.knobs, {"k.W": 1, "k.num_warps": -1})
    assert "W=(triton.next_power_of_2(x.numel())) * 2" in changed
    assert "warps = max((4 if x.numel() < 4096 else 8) // 2, 1)" in changed
    assert w.show(1) == "x2" and w.show(-1) == "/2"


def test_every_integer_of_an_autotune_config_list_is_a_knob():
    source = HEADER + (
        "@triton.autotune(configs=[\n"
        "    triton.Config({'X1': 32, 'X2': 4}, num_warps=4, num_stages=2),\n"
        "    triton.Config({'X1': 64, 'X2': 8}, num_warps=8),\n"
        "], key=['n'])\n"
        "@triton.jit\n"
        "def k(X, n, X1: tl.constexpr, X2: tl.constexpr):\n"
        "    offs = tl.program_id(0) * X1 + tl.arange(0, X1)\n"
        "    for _ in range(X2):\n"
        "        tl.store(X + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)\n\n"
        "def kernel(x):\n"
        "    k[lambda meta: (triton.cdiv(x.numel(), meta['X1']),)](x, x.numel())\n"
        "    return x\n"
    )
    roles = _roles(source)
    assert set(roles) == {
        "k.config0.X1", "k.config0.X2", "k.config0.num_warps", "k.config0.num_stages",
        "k.config1.X1", "k.config1.X2", "k.config1.num_warps",
    }  # fmt: skip
    assert roles["k.config1.X1"] == (TILE, True, None)
    changed = with_config(source, find(source).knobs, {"k.config1.X1": 128})
    assert "{'X1': 128, 'X2': 8}" in changed and "{'X1': 32, 'X2': 4}" in changed


def test_a_name_bound_once_is_set_where_it_is_bound_so_the_grid_follows():
    source = (ROOT / "examples" / "own-kernel" / "kernel.py").read_text()
    found = find(source)
    changed = with_config(source, found.knobs, {"_bias_gelu.BLOCK_N": 256})
    assert "BLOCK_N = 256" in changed and "BLOCK_N=BLOCK_N" in changed
