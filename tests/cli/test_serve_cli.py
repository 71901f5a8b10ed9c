"""`kernelladder serve`'s rules without a browser: which binds and requests need a token,
which names and origins the server answers to, the URL it prints, the command each page
runs, the run options passed on to a run it starts, a taken port found before anything
starts, and bad input as one line with exit 2 (tests/app/test_serve_browser.py and
test_serve_door.py drive the rest in Chromium)."""

from __future__ import annotations

import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers import usage_line

from kernelladder.app.web_server import Door, browse_url
from kernelladder.cli import build_parser
from kernelladder.cli.serve import attach_command, needs_token, optimize_argv


@pytest.mark.parametrize(
    ("host", "token"),
    [
        ("127.0.0.1", False), ("localhost", False), ("::1", False),
        ("127.0.0.2", False),  # all of 127.0.0.0/8 is this machine's loopback
        ("0.0.0.0", True), ("::", True), ("10.1.2.3", True), ("192.168.0.7", True),
        ("gpu-box.example", True),  # a name: others may reach what it resolves to
    ],
)  # fmt: skip
def test_a_token_is_needed_on_every_address_other_machines_can_reach(host, token):
    assert needs_token(host) is token
    assert needs_token(host, always=True)
    assert needs_token(host, public_url="https://proxy.example/kl/")  # a proxy in front


def request(headers: dict[str, str] | None = None, remote: str = "127.0.0.1"):
    return SimpleNamespace(headers=headers or {}, remote=remote)


def test_on_loopback_only_a_forwarded_request_needs_the_token():
    door = Door(host="127.0.0.1", port=8000, token="t")
    assert door.token_reason(request()) is None
    for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP", "Via", "X-Forwarded-Host"):
        why = door.token_reason(request({header: "x"}))
        assert why == f"the request came through a proxy (it carries {header})"
    assert "came from 10.0.0.9" in door.token_reason(request(remote="10.0.0.9"))
    behind = Door(host="127.0.0.1", port=8000, token="t", public_url="http://p.example:81/")
    assert behind.requires_token and behind.token_reason(request()) == (
        "it is served at http://p.example:81/"
    )
    assert door.token_ok("t") and not door.token_ok("u") and not door.token_ok(None)


def test_the_server_answers_only_to_the_names_it_was_bound_to_or_told():
    loop = Door(host="127.0.0.1", port=8000, token="t")
    for host in ("127.0.0.1:8000", "localhost:8000", "127.0.0.2:8000", "LOCALHOST"):
        assert loop.answers_to(host), host
    for host in ("evil.test:8000", "10.0.0.1:8000", "", "[::1]:8000x"):
        assert not loop.answers_to(host), host
    told = Door(host="127.0.0.1", port=8000, token="t", public_url="https://kl.example/run/")
    assert told.answers_to("kl.example") and told.answers_to("kl.example:443")
    assert not told.answers_to("evil.test")
    every = Door(host="0.0.0.0", port=8000, token="t")
    hostname = socket.gethostname()
    for host in ("192.0.2.7:8000", "[2001:db8::1]:8000", f"{hostname}:8000", "localhost"):
        assert every.answers_to(host), host
    assert not every.answers_to("evil.test:8000")


def test_a_page_of_another_origin_may_not_open_the_app():
    door = Door(host="127.0.0.1", port=8000, token="t")
    assert door.origin_refusal("http://127.0.0.1:8000", "127.0.0.1:8000") is None
    assert door.origin_refusal("http://localhost:8000", "localhost:8000") is None
    # another port's page (another service of this host), another site, no page at all
    assert door.origin_refusal("http://127.0.0.1:8199", "127.0.0.1:8000")
    assert door.origin_refusal("http://evil.test:8000", "evil.test:8000")
    assert door.origin_refusal(None, "127.0.0.1:8000")
    assert door.origin_refusal("null", "127.0.0.1:8000")
    # behind a proxy that rewrites Host: only the public URL's origin
    why = door.origin_refusal("http://192.0.2.2:8132", "127.0.0.1:8000")
    assert "--public-url http://192.0.2.2:8132/" in why
    told = Door(host="127.0.0.1", port=8000, token="t", public_url="http://192.0.2.2:8132/")
    assert told.origin_refusal("http://192.0.2.2:8132", "127.0.0.1:8000") is None


def test_the_printed_url_carries_the_token_after_the_hash():
    assert browse_url(Door(host="127.0.0.1", port=8000, token="t")) == "http://127.0.0.1:8000/"
    assert browse_url(Door(host="10.1.2.3", port=9000, token="abc")) == (
        "http://10.1.2.3:9000/#token=abc"
    )
    assert browse_url(Door(host="::1", port=8000, token="t")) == "http://[::1]:8000/"
    behind = Door(host="127.0.0.1", port=8000, token="t", public_url="https://proxy/kl/")
    assert browse_url(behind) == "https://proxy/kl/#token=t"
    always = Door(host="127.0.0.1", port=8000, token="t", token_always=True)
    assert browse_url(always) == "http://127.0.0.1:8000/#token=t"


def test_each_page_runs_an_attached_app_that_replays_a_run_not_running(tmp_path):
    command = attach_command(tmp_path / "my run", read_only=True)
    assert "-m kernelladder.cli.tui --attach" in command and command.endswith("--read-only")
    assert "--or-replay" in command
    assert f"'{tmp_path / 'my run'}'" in command  # quoted for the shell
    assert "--read-only" not in attach_command(tmp_path, read_only=False)


def test_the_run_options_given_to_serve_start_the_same_run():
    argv = [
        "serve", "rmsnorm", "--host", "0.0.0.0", "--port", "9000", "--read-only",
        "--device", "cpu", "--max-attempts", "7", "--no-confirm", "--proposer", "openai",
        "--base-url", "http://127.0.0.1:8000/v1", "--gate", "veto", "--request-timeout", "60",
    ]  # fmt: skip
    args = build_parser().parse_args(argv)
    passed_on = optimize_argv(args)
    assert "--host" not in passed_on and "--read-only" not in passed_on
    again = build_parser().parse_args(["optimize", *passed_on])
    names = ("op", "device", "max_attempts", "no_confirm", "proposer", "base_url", "gate")
    for name in (*names, "request_timeout"):
        assert getattr(again, name) == getattr(args, name), name


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["serve"], "needs RUN_DIR (a run) or an OP"),
        (["serve", "rmsnorm", "--port", "0"], "not a port"),
        (["serve", "rmsnorm", "--host", " "], "--host is empty"),
        (["serve", "rmsnorm", "--public-url", "proxy:8132"], "--public-url 'proxy:8132'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    assert words in usage_line(capsys, *argv)


def test_read_only_and_or_replay_need_attach(capsys):
    from kernelladder.cli.tui import main

    assert "give it with --attach" in usage_line(capsys, "--read-only", entry=main)
    assert "--or-replay: only with --attach" in usage_line(capsys, "--or-replay", entry=main)


def test_a_taken_port_is_one_line_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "kernelladder", "serve", "rmsnorm", "--device", "cpu",
             "--port", str(port), "--run-dir", str(tmp_path / "run")],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"kernelladder: error: cannot serve on 127.0.0.1:{port}: Address already in use"
    ]
    assert not (tmp_path / "run").exists()  # no run was started, none orphaned
