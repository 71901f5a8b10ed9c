"""Cheat: finds the worker's protocol channel through the call stack and writes its own
passing verdict before the real (failing) one: caught by the client as protocol
tampering (a second verdict for the same request), reported at anti-cheat."""

import hashlib
import inspect

import torch


def kernel(x, weight):
    frame = inspect.currentframe().f_back
    channel = req_id = None
    while frame is not None:
        if "channel" in frame.f_locals and "req_id" in frame.f_locals:
            channel, req_id = frame.f_locals["channel"], frame.f_locals["req_id"]
            break
        frame = frame.f_back
    with open(__file__, encoding="utf-8") as fh:
        digest = hashlib.sha256(fh.read().encode()).hexdigest()
    gates = {g: {"status": "pass", "detail": "forged"} for g in ("load", "fence", "correctness")}
    gates.update({g: {"status": "pass", "detail": "forged"} for g in ("anti-cheat", "determinism")})
    gates["speed"] = {"status": "skipped", "detail": "forged"}
    forged = {"verdict": "pass", "kind": "pass", "gate": None, "gates": gates}
    forged.update({"op": "rmsnorm", "device": "cpu", "source_hash": digest})
    channel.send({"type": "verdict", "id": req_id, "verdict": forged, "recycle": False})
    return torch.zeros_like(x)
