"""`kernelladder optimize --proposer openai` as a user runs it: a real subprocess, the
real openai SDK against a local OpenAI-compatible server (tests/fake_openai_server.py),
the real CPU worker (Triton interpreter). A 429 then 200, usage counted into tokens and
cost, every attempt judged, a clean stop on 401; the same run at a vLLM-style /v1 path."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fake_openai_server import FakeOpenAIServer, completion, error
from helpers import ROOT, usage_line

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_log

START = (ROOT / "kernelladder/ops/rmsnorm/start.py").read_text()


def reply(num_warps: int) -> str:
    """A model's reply: the starting kernel with another launch setting, MOVE and UNDO."""
    source = START.replace("num_warps = 4 if", f"num_warps = {num_warps} if")
    assert source != START
    return (
        f"Here is the next candidate.\n\n```python\n{source}```\n"
        f"MOVE: num_warps {num_warps} for short rows\nUNDO: low launch parameter only\n"
    )


def optimize(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kernelladder", "optimize", "rmsnorm", "--device", "cpu",
         "--proposer", "openai", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["/v1", ""], ids=["vllm-style-v1", "root"])
def test_a_cpu_run_judges_every_attempt_counts_tokens_and_cost_and_stops_on_401(tmp_path, prefix):
    with FakeOpenAIServer(prefix=prefix) as server:
        server.script(
            error(429, "rate limited", {"retry-after": "0"}),
            completion(reply(1), tokens_in=3000, tokens_out=800),
            completion(reply(2), tokens_in=3100, tokens_out=700),
            error(401, "Incorrect API key provided"),
        )
        out = optimize(
            "--base-url", server.base_url, "--model", "served-model", "--price-in", "1",
            "--price-out", "2", "--max-attempts", "5", "--branches", "1", "--json",
            "--run-dir", str(tmp_path / "run"),
        )  # fmt: skip
        chats = server.chats
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert [r.path for r in chats] == [f"{prefix}/chat/completions"] * 4  # 429, 200, 200, 401
    stopped = "rejected the key (401) for model served-model"
    assert stopped in out.stderr and server.base_url in out.stderr
    summary = json.loads(out.stdout)
    assert summary["proposer"] == "openai" and summary["model"] == "served-model"
    assert summary["stop_reason"] == ev.RULE_ERROR and stopped in summary["stop_detail"]
    assert summary["attempts"]["total"] == 2 and summary["attempts"]["judged"] == 2
    assert summary["attempts"]["passed"] == 2
    assert summary["cost"] == {"usd": pytest.approx(0.0091), "tokens_in": 6100, "tokens_out": 1500}
    events = read_log(tmp_path / "run").events
    received = [e for e in events if isinstance(e, ev.ProposalReceived)]
    judged = {e.attempt for e in events if isinstance(e, ev.VerdictReady)}
    assert [e.attempt for e in received] == [1, 2] and judged == {1, 2}
    assert received[0].meta["retries"] == 1  # the 429, retried
    # each reply's parent is the attempt its prompt showed: the start, then #1 (b1's best)
    assert [e.parent_attempt for e in received] == [None, 1]
    assert "# PARENT (attempt #1)" in chats[2].prompt  # the reply that became #2
    assert isinstance(events[-1], ev.RunFinished)


@pytest.mark.slow
def test_an_unpriced_model_counts_tokens_and_its_token_budget_stops_the_run(tmp_path):
    with FakeOpenAIServer(prefix="/v1", default=completion(reply(2), tokens_in=3000)) as server:
        out = optimize(
            "--base-url", server.base_url, "--budget-tokens", "6000", "--max-attempts", "5",
            "--branches", "1", "--json", "--run-dir", str(tmp_path / "run"),
        )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "cost not known for model (the server default): tokens are counted" in out.stderr
    summary = json.loads(out.stdout)
    assert summary["stop_reason"] == ev.RULE_BUDGET_TOKENS
    assert summary["cost"]["usd"] == 0 and summary["cost"]["tokens_in"] >= 6000
    received = [e for e in read_log(tmp_path / "run").events if isinstance(e, ev.ProposalReceived)]
    assert received[0].model == "served-model"  # no --model: the server's only model
    assert "cost not known for model served-model" in received[0].meta["cost_note"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model", "my-llm", "--budget-usd", "5"], "cost of model my-llm is not known"),
        (["--model", "my-llm", "--price-in", "1"], "give both --price-in and --price-out"),
    ],
)
def test_a_budget_that_cannot_be_kept_is_one_line_and_exit_2(args, words):
    out = optimize("--base-url", "http://127.0.0.1:9/v1", *args, timeout=120)
    assert out.returncode == 2 and words in out.stderr and out.stderr.count("\n") == 1


def test_openai_flags_without_the_openai_proposer_are_refused():
    out = subprocess.run(
        [sys.executable, "-m", "kernelladder", "optimize", "rmsnorm", "--device", "cpu",
         "--base-url", "http://127.0.0.1:9/v1"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 2 and "only with --proposer openai" in out.stderr


def test_doctor_base_url_needs_the_openai_proposer(capsys):
    assert "--base-url goes with --proposer openai" in usage_line(
        capsys, "doctor", "--base-url", "http://127.0.0.1:9/v1"
    )
