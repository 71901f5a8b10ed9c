"""`kernelladder optimize` with a model server that fails, as a user runs it: a real
subprocess, the real openai / anthropic SDK against a local stand-in
(tests/fake_openai_server.py, fake_messages_server.py), the real CPU worker. A server
that is down or is not an API stops the run before it starts (one line naming the URL,
exit 2, no run directory); one that fails every request stops it with a reason and a
non-zero exit; the tokens of replies rejected for having no code block are counted, so
--budget-tokens stops the run, and the finish line says them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from fake_messages_server import FakeMessagesServer, message
from fake_openai_server import FakeOpenAIServer, completion, error, html_page

from kernelladder.app.folding import build_view
from kernelladder.app.widgets.run_header import status_line
from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_log
from kernelladder.engine.record.state import fold


def optimize(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "kernelladder", "optimize", "rmsnorm", "--device", "cpu",
         "--no-confirm", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_that_is_down_or_not_an_api_is_one_line_and_exit_2(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    run_dir = tmp_path / "run"
    out = optimize("--proposer", "openai", "--base-url", url, "--run-dir", str(run_dir))
    assert out.returncode == 2 and out.stdout == "", out.stderr[-2000:]
    assert out.stderr.splitlines() == [
        f"kernelladder: error: cannot reach the server at {url}: Connection refused"
    ]
    assert not run_dir.exists()  # nothing was started, nothing to clean up
    with FakeOpenAIServer(models_reply=html_page()) as server:
        out = optimize("--proposer", "openai", "--base-url", server.base_url)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert f"the server at {server.base_url} answered with a page" in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "reply",
    [
        error(429, "rate limited", {"retry-after": "0.05"}),
        error(500, "internal error", {"retry-after": "0.05"}),  # the backoff: test_failing_servers
    ],
    ids=["429-forever", "500-forever"],
)
def test_a_server_that_fails_every_request_stops_the_run_with_a_reason(tmp_path, reply):
    # each proposal is retried 4 times (the server's retry-after as asked); three
    # branches ask at once; three proposals failed in a row stop the run
    with FakeOpenAIServer(prefix="/v1", default=reply) as server:
        out = optimize(
            "--proposer", "openai", "--base-url", server.base_url, "--model", "served-model",
            "--json", "--run-dir", str(tmp_path / "run"),
        )  # fmt: skip
        chats = len(server.chats)
    assert out.returncode == 1, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["stop_reason"] == ev.RULE_ERROR
    assert f"the server at {server.base_url} failed 5 times" in summary["stop_detail"]
    assert summary["stop_detail"].endswith("stopping: 3 proposals in a row failed")
    assert "kernelladder: the run ended on an error: proposer: the server at" in out.stderr
    assert chats == 15 and summary["attempts"]["total"] == 0
    assert "Traceback" not in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("proposer", ["openai", "api"])
def test_replies_without_code_count_their_tokens_against_the_budget(tmp_path, proposer):
    if proposer == "openai":
        server = FakeOpenAIServer(
            prefix="/v1", default=completion("No code.", tokens_in=3000, tokens_out=700)
        )
        args, env = ["--base-url", server.base_url], {}
    else:
        server = FakeMessagesServer(default=message("No code.", tokens_in=3000, tokens_out=700))
        args = []
        env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-test"}
    with server:
        out = optimize(
            "--proposer", proposer, "--budget-tokens", "5000", "--branches", "1",
            "--run-dir", str(tmp_path / "run"), *args, env=env,
        )  # fmt: skip
        calls = server.chats if proposer == "openai" else server.messages
    assert out.returncode == 0, out.stderr[-3000:]
    # 3,700 tokens, then 7,400 >= 5,000: the budget stops the run after the second reply
    assert len(calls) == 2
    events = read_log(tmp_path / "run").events
    failed = [e for e in events if isinstance(e, ev.ProposalFailed)]
    assert [(e.tokens_in, e.tokens_out) for e in failed] == [(3000, 700)] * 2
    finished = events[-1]
    assert isinstance(finished, ev.RunFinished) and finished.reason == ev.RULE_BUDGET_TOKENS
    # the tokens wherever the cost is said: the finish line, `replay`, the app's header
    finish = next(x for x in out.stdout.splitlines() if x.startswith("finished:"))
    assert finish.startswith("finished: budget-tokens (used 7,400 of 5,000 tokens); ")
    usd = "$0.00" if proposer == "openai" else "$0.03"  # unpriced; Sonnet's list price
    assert finish.endswith(f"; tokens 7,400 (6,000 in, 1,400 out), cost {usd}")
    replay = subprocess.run(
        [sys.executable, "-m", "kernelladder", "replay", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert f"cost {usd}  tokens 7,400/5,000" in replay.stdout, replay.stdout
    header = status_line(build_view(fold(events)), 30.0).plain
    assert f"cost {usd} · 7,400/5,000 tok" in header, header
