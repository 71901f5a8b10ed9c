"""Whether a verdict line really came from the verifier: it names the candidate sent, a
worker that must be replaced does not pass it, and no second verdict for the same
request follows it; a forged one becomes a failing verdict at anti-cheat."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from kernelladder.verifier.contract.protocol import decode, encode
from kernelladder.verifier.contract.verdict import FAIL, Feedback, GateResult, Verdict
from kernelladder.verifier.host.transport import within

PONG_TIMEOUT_S = 15.0


def forgery(verdict: Verdict, digest: str, recycle: bool) -> str:
    """Why the verdict cannot be the verifier's, read from the line alone ("" if none)."""
    if verdict.source_hash != digest:
        return "the verdict names another candidate"
    if recycle and verdict.passed:
        return "a passing verdict from a worker that must recycle"
    return ""


async def quiet_after(transport: Any, req_id: str) -> str:
    """Ping; a second verdict for the same request before the pong means forgery ("" when
    the worker answered the ping and nothing else)."""
    ping_id = uuid.uuid4().hex
    try:
        transport.stdin.write(encode({"type": "ping", "id": ping_id}))
        await within(transport.stdin.drain(), PONG_TIMEOUT_S)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PONG_TIMEOUT_S
        while True:
            line = await within(transport.stdout.readline(), max(0.01, deadline - loop.time()))
            if not line:
                return "the worker exited right after its verdict"
            with contextlib.suppress(ValueError):
                msg = decode(line)
                if msg.get("id") == req_id:
                    return "a second verdict line for the same request (forged protocol output)"
                if msg.get("type") == "pong" and msg.get("id") == ping_id:
                    return ""
    except Exception:
        return "the worker stopped answering after its verdict"


def forged_verdict(v: Verdict, why: str, digest: str) -> Verdict:
    """The verdict given instead of a forged one: a failure at anti-cheat."""
    detail = f"protocol tampering: {why}"
    return Verdict(
        verdict=FAIL,
        kind=FAIL,
        gate="anti-cheat",
        gates={"anti-cheat": GateResult(FAIL, detail, {"claimed": v.verdict})},
        op=v.op,
        device=v.device,
        source_hash=digest,
        feedback=Feedback(
            expected="the verifier's verdict, untouched", saw=detail, fence=v.feedback.fence
        ),
        flags=("protocol-tampering",),
        environment=v.environment,
    )
