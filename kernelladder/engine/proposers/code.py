"""`code`: Claude through the Claude Code CLI in print mode.

Runs `claude -p --output-format json --tools "" --strict-mcp-config
--no-session-persistence [--model M]` with the prompt on stdin, in a fresh empty temporary
directory as its working directory: no tools, no MCP servers, no files to read or write,
nothing saved. The JSON result carries the reply text, the usage and total_cost_usd.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from typing import Any

from kernelladder.engine.proposers.api import strategies_for
from kernelladder.engine.proposers.extract import extract_reply
from kernelladder.engine.proposers.pricing import cost_of
from kernelladder.engine.proposers.prompt import build_prompt
from kernelladder.engine.protocols import Proposal, ProposalContext, ProposerBase, ProposerError

NAME = "code"
MISSING_CLI_MESSAGE = (
    "the claude CLI is not on PATH: install Claude Code or use --proposer api/search"
)
# Tools off: the empty --tools list disables every built-in tool, --strict-mcp-config
# ignores MCP servers configured anywhere but --mcp-config (none given).
TOOLS_OFF = ("--tools", "", "--strict-mcp-config")


def command(executable: str, model: str | None) -> list[str]:
    args = [executable, "-p", "--output-format", "json", *TOOLS_OFF, "--no-session-persistence"]
    if model:
        args += ["--model", model]
    return args


class CodeProposer(ProposerBase):
    name = NAME

    def __init__(
        self,
        *,
        model: str | None = None,
        executable: str = "claude",
        timeout_s: float = 900.0,
        **_: Any,
    ):
        self.model = model
        self.executable = executable
        self.timeout_s = timeout_s

    def strategies(self, op: dict[str, Any], k: int) -> list[str]:
        return strategies_for(op, k)

    def check_ready(self) -> None:
        """Raises the ProposerError a first proposal would (no CLI), before a run starts."""
        self._executable()

    def _executable(self) -> str:
        exe = shutil.which(self.executable)
        if exe is None:
            raise ProposerError(MISSING_CLI_MESSAGE, fatal=True)
        return exe

    async def propose(self, ctx: ProposalContext) -> Proposal:
        exe = self._executable()
        system, user = build_prompt(ctx)
        prompt = f"{system}\n\n{user}"
        with tempfile.TemporaryDirectory(prefix="kl-claude-") as cwd:
            out, err, rc = await self._run(command(exe, self.model), prompt, cwd)
        data = _parse(out)
        if data is None:
            first = (err.strip().splitlines() or out.strip().splitlines() or ["no output"])[0]
            raise ProposerError(
                f"claude -p gave no JSON result (exit {rc}): {first[:200]}", retryable=True
            )
        text = str(data.get("result") or "")
        model = self.model or _model_of(data)
        usage = data.get("usage") or {}
        estimate = cost_of(model, usage)
        cost = data.get("total_cost_usd")
        cost_usd = float(cost) if isinstance(cost, (int, float)) else estimate.usd
        spent = {"tokens_in": estimate.tokens_in, "tokens_out": estimate.tokens_out}
        if rc != 0 or data.get("is_error") or data.get("subtype", "success") != "success":
            why = " ".join(text.split())[:200] or data.get("subtype") or f"exit {rc}"
            error = ProposerError(f"claude -p failed: {why}", retryable=True)
            raise error.spent(**spent, cost_usd=cost_usd, model=model)
        try:
            extracted = extract_reply(text, ctx.op)
        except ProposerError as exc:
            raise exc.spent(**spent, cost_usd=cost_usd, model=model) from None
        meta: dict[str, Any] = {
            "session_id": data.get("session_id"),
            "num_turns": data.get("num_turns"),
        }
        if not isinstance(cost, (int, float)) and estimate.note:
            meta["cost_note"] = estimate.note
        return extracted.proposal(
            ctx,
            model=model,
            tokens_in=estimate.tokens_in,
            tokens_out=estimate.tokens_out,
            cost_usd=cost_usd,
            meta=meta,
        )

    async def _run(self, args: list[str], prompt: str, cwd: str) -> tuple[str, str, int]:
        proc = await asyncio.create_subprocess_exec(
            *args,
            cwd=cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(os.environ),
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(prompt.encode()), self.timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ProposerError(
                f"claude -p gave no answer within {self.timeout_s:.0f}s", retryable=True
            ) from None
        return out.decode(errors="replace"), err.decode(errors="replace"), proc.returncode or 0


def _parse(out: str) -> dict[str, Any] | None:
    text = out.strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # some versions print log lines first: take the last JSON object line
        for line in reversed(text.splitlines()):
            try:
                data = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
        else:
            return None
    if isinstance(data, list):  # a transcript: the result message is the last
        data = next(
            (d for d in reversed(data) if isinstance(d, dict) and d.get("type") == "result"), None
        )
    return data if isinstance(data, dict) else None


def _model_of(data: dict[str, Any]) -> str | None:
    usage = data.get("modelUsage")
    if isinstance(usage, dict) and usage:
        return max(
            usage,
            key=lambda m: (
                (usage[m] or {}).get("outputTokens", 0) if isinstance(usage[m], dict) else 0
            ),
        )
    return data.get("model") if isinstance(data.get("model"), str) else None
