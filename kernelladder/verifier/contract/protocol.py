"""The worker's JSON-lines protocol (local subprocess today, an SSH channel for remotes).

One JSON object per line, UTF-8. The worker keeps a private copy of its original stdout
for protocol lines and points fd 1 at stderr, so whatever a candidate prints goes to
stderr (the attempt's log) and can never corrupt the protocol.

worker -> client, once at start:
    {"type": "hello", "protocol": 2, "pid": int, "python": str, "torch": str,
     "triton": str, "device": "cuda"|"cpu", "gpu": str|null, "gpus": int, ...}
        (and the worker's environment: "selftest", "poison", "compilers" (torch.compile
        warmed up at start: "ok" | "not needed" | why not), "sandbox", ...)

client -> worker:
    {"type": "verify", "id": str, "op": OP, "source": str, "device": "cuda"|"cpu",
     "min_speedup": float, "suite": "gpu"|"cpu"|null, "seeds": [int]|null,
     "baselines": bool, "pipeline": bool, "early_stop": {...}|null, "known": {...}|null}
        "known" (pipelined): what the GPU's other workers measured (GpuFacts.known:
        rates, and per shape the reference's and the baselines' times with their age)
        OP is a built-in op name ("rmsnorm") or
        {"kernelbench": <problem file source>, "name": <problem file name>}
    {"type": "ping", "id": str}
    {"type": "shutdown"}
    {"type": "idle", "id": str}   (the worker goes to the keeper until the next run: it
        collects garbage and drops torch's cached GPU memory; answered "idled")
    {"type": "go", "id": str, "known": {...}}   (the GPU is this request's now: see
        "stage"; "known", on a timing's go only: as the request's, learned since)

worker -> client, while verifying (any number, in order):
    {"type": "progress", "id": str, "gate": str, "message": str}
    {"type": "stage", "id": str, "stage": "compile"|"correctness"|"speed",
     "gpu": "none"|"shared"|"exclusive"}
        only for a request with "pipeline": true. The worker enters a stage; for "shared"
        (correctness: beside other workers' correctness) or "exclusive" (timing: the GPU
        to itself) it waits for the client's "go" before touching the GPU. The client
        holds the GPU for it until the next stage line or the verdict.
worker -> client, once per verify:
    {"type": "verdict", "id": str, "verdict": <Verdict.to_dict()>, "recycle": bool,
     "retire": bool (optional)}
        recycle=true: the worker saw its own state altered by the candidate and will
        exit after this line; the client starts a fresh one for the next candidate.
        retire=true (a verdict of any kind): the candidate defined operators of its own;
        the worker answers the client's ping as after any verdict, then the client
        replaces it, so that the next candidate finds torch as it was.
    {"type": "pong", "id": str}
    {"type": "idled", "id": str}
    {"type": "error", "id": str|null, "message": str}   (a malformed request)

The client enforces the wall-clock timeout: when it passes, it kills the worker's whole
process group and returns a `timeout` verdict; EOF on stdout before the verdict line is
a `crash` verdict (exit code / signal and the last lines of stderr as evidence). Every
string that reaches the caller is scrubbed of the caller's secret values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PROTOCOL_VERSION = 2
WORKER_MODULE = "kernelladder.verifier.worker"


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, separators=(",", ":"), allow_nan=True) + "\n").encode()


def decode(line: bytes | str) -> dict[str, Any]:
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    obj = json.loads(line)
    if not isinstance(obj, dict) or "type" not in obj:
        raise ValueError("protocol line is not an object with a 'type'")
    return obj


def request_dict(request: Any) -> dict[str, Any]:
    """A verify request as a dict (accepts a dict or a VerifyRequest-like object)."""
    if isinstance(request, Mapping):
        return dict(request)
    keys = (
        "op", "source", "device", "min_speedup", "timeout_s", "suite", "baselines", "seeds",
        "paired_rounds", "pair_every_shape", "paired_min_rounds", "fresh_worker", "unseen_shapes", "unseen_seed",
        "pipeline", "early_stop",
    )  # fmt: skip
    return {k: getattr(request, k) for k in keys if hasattr(request, k)}
