"""The `code` proposer (`claude -p`). The real CLI needs an account and the network, so
these tests put a stand-in `claude` executable on PATH: it records its arguments, its
working directory and its stdin, and prints a JSON result the way `--output-format json`
does. The missing-CLI case runs for real."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import textwrap

import pytest

from kernelladder.engine.proposers import get_proposer
from kernelladder.engine.proposers.code import MISSING_CLI_MESSAGE, CodeProposer
from kernelladder.engine.protocols import ProposalContext, ProposerError
from kernelladder.ops.registry import get_op

OP = get_op("softmax").describe()
CODE = "import triton\nimport torch\n\n\ndef kernel(x):\n    return torch.empty_like(x)\n"

STAND_IN = textwrap.dedent(
    """\
    #!{python}
    # test double for the Claude Code CLI: records how it was called, answers from a script
    import json, os, sys, time
    prompt = sys.stdin.read()
    with open(os.environ["KL_FAKE_CLAUDE_RECORD"], "w") as fh:
        json.dump({{"argv": sys.argv[1:], "cwd": os.getcwd(), "cwd_entries": os.listdir("."),
                   "prompt": prompt}}, fh)
    mode = os.environ.get("KL_FAKE_CLAUDE_MODE", "ok")
    if mode == "sleep":
        time.sleep(30)
    if mode == "garbage":
        print("not json at all")
        sys.exit(1)
    text = os.environ.get("KL_FAKE_CLAUDE_TEXT", "")
    result = {{"type": "result", "subtype": "success", "is_error": mode == "error",
              "result": text, "num_turns": 1, "session_id": "s-1",
              "total_cost_usd": 0.0421,
              "usage": {{"input_tokens": 900, "cache_read_input_tokens": 100, "output_tokens": 400}},
              "modelUsage": {{"claude-sonnet-5-5": {{"outputTokens": 400}}}}}}
    print(json.dumps(result))
    sys.exit(1 if mode == "error" else 0)
    """
)


@pytest.fixture
def fake_claude(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "claude"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    record = tmp_path / "record.json"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("KL_FAKE_CLAUDE_RECORD", str(record))
    monkeypatch.setenv(
        "KL_FAKE_CLAUDE_TEXT",
        f"```python\n{CODE}```\nMOVE: online softmax in one read\nUNDO: medium new loop",
    )
    return record


def ctx() -> ProposalContext:
    return ProposalContext(
        op=OP,
        branch_id="b2",
        strategy="online",
        parent_attempt=None,
        parent_source="import triton\n\ndef kernel(x):\n    return PARENT_MARKER\n",
        parent_verdict=None,
        feedback={"expected": "", "saw": "", "fence": OP["fence"], "dead_ends": []},
        dead_ends=(),
        hints="HINT_MARKER",
        device="cpu",
    )


def test_missing_cli_is_one_fatal_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no claude anywhere
    with pytest.raises(ProposerError) as info:
        asyncio.run(get_proposer("code").propose(ctx()))
    assert info.value.fatal and str(info.value) == MISSING_CLI_MESSAGE


def test_the_cli_runs_tools_off_in_an_empty_directory_and_its_reply_is_extracted(fake_claude):
    proposal = asyncio.run(CodeProposer(model="claude-sonnet-5-5").propose(ctx()))
    assert proposal.source == CODE
    assert proposal.move == "online softmax in one read"
    assert proposal.undo_cost == "medium" and proposal.undo_reason == "new loop"
    assert proposal.cost_usd == pytest.approx(0.0421)  # the CLI's own total
    assert (proposal.tokens_in, proposal.tokens_out) == (1000, 400)
    assert proposal.model == "claude-sonnet-5-5" and proposal.strategy == "online"
    seen = json.loads(fake_claude.read_text())
    argv = seen["argv"]
    assert argv[0] == "-p"
    assert argv[argv.index("--output-format") + 1] == "json"
    assert argv[argv.index("--tools") + 1] == ""  # every built-in tool off
    assert "--strict-mcp-config" in argv and "--no-session-persistence" in argv
    assert argv[argv.index("--model") + 1] == "claude-sonnet-5-5"
    assert seen["cwd_entries"] == [] and os.path.basename(seen["cwd"]).startswith("kl-claude-")
    assert not os.path.exists(seen["cwd"])  # removed afterwards
    assert "PARENT_MARKER" in seen["prompt"] and "HINT_MARKER" in seen["prompt"]


def test_a_cli_error_is_retryable(fake_claude, monkeypatch):
    monkeypatch.setenv("KL_FAKE_CLAUDE_MODE", "error")
    monkeypatch.setenv("KL_FAKE_CLAUDE_TEXT", "Credit balance is too low")
    with pytest.raises(ProposerError) as info:
        asyncio.run(CodeProposer().propose(ctx()))
    assert info.value.retryable and "Credit balance is too low" in str(info.value)


def test_output_that_is_not_json_is_retryable(fake_claude, monkeypatch):
    monkeypatch.setenv("KL_FAKE_CLAUDE_MODE", "garbage")
    with pytest.raises(ProposerError, match="no JSON result") as info:
        asyncio.run(CodeProposer().propose(ctx()))
    assert info.value.retryable


def test_a_hung_cli_is_killed_at_the_timeout(fake_claude, monkeypatch):
    monkeypatch.setenv("KL_FAKE_CLAUDE_MODE", "sleep")
    with pytest.raises(ProposerError, match="no answer within") as info:
        asyncio.run(CodeProposer(timeout_s=1.0).propose(ctx()))
    assert info.value.retryable


def test_a_reply_without_code_is_retryable(fake_claude, monkeypatch):
    monkeypatch.setenv("KL_FAKE_CLAUDE_TEXT", "I cannot do that.")
    with pytest.raises(ProposerError, match="no ```python code block") as info:
        asyncio.run(CodeProposer().propose(ctx()))
    assert info.value.retryable and info.value.cost_usd == pytest.approx(0.0421)
