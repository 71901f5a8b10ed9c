"""`kernelladder serve`'s rules without a browser: which binds need a token, the URL it
prints, the command each page runs, the run options passed on to a run it starts, and
bad input as one line with exit 2 (tests/app/test_serve_browser.py drives the rest)."""

from __future__ import annotations

import pytest
from helpers import EXAMPLES, usage_line

from kernelladder.cli import build_parser
from kernelladder.cli.serve import attach_command, browse_url, needs_token, optimize_argv


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


def test_the_printed_url_carries_the_token():
    assert browse_url("127.0.0.1", 8000, None) == "http://127.0.0.1:8000/"
    assert browse_url("10.1.2.3", 9000, "abc") == "http://10.1.2.3:9000/?token=abc"
    assert browse_url("::1", 8000, None) == "http://[::1]:8000/"
    assert browse_url("0.0.0.0", 8000, "t", "https://proxy/kl/") == "https://proxy/kl/?token=t"


def test_each_page_runs_an_attached_app_read_only_when_asked(tmp_path):
    command = attach_command(tmp_path / "my run", read_only=True)
    assert "-m kernelladder.cli.tui --attach" in command and command.endswith("--read-only")
    assert f"'{tmp_path / 'my run'}'" in command  # quoted for the shell
    assert "--read-only" not in attach_command(tmp_path, read_only=False)


def test_the_run_options_given_to_serve_start_the_same_run():
    argv = [
        "serve", "rmsnorm", "--host", "0.0.0.0", "--port", "9000", "--read-only",
        "--device", "cpu", "--max-attempts", "7", "--no-confirm", "--proposer", "openai",
        "--base-url", "http://127.0.0.1:8000/v1", "--gate", "veto",
    ]  # fmt: skip
    args = build_parser().parse_args(argv)
    passed_on = optimize_argv(args)
    assert "--host" not in passed_on and "--read-only" not in passed_on
    again = build_parser().parse_args(["optimize", *passed_on])
    for name in ("op", "device", "max_attempts", "no_confirm", "proposer", "base_url", "gate"):
        assert getattr(again, name) == getattr(args, name), name


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["serve"], "needs RUN_DIR (a live run) or an OP"),
        (["serve", str(EXAMPLES / "cpu-rmsnorm-run")], "is not running"),
        (["serve", "rmsnorm", "--port", "0"], "not a port"),
        (["serve", "rmsnorm", "--host", " "], "--host is empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, words):
    assert words in usage_line(capsys, *argv)


def test_read_only_needs_attach(capsys):
    from kernelladder.cli.tui import main

    assert "give it with --attach" in usage_line(capsys, "--read-only", entry=main)


def test_the_url_waits_for_the_port_to_listen():
    # serve prints its URL from aiohttp's startup, which comes before the bind: it waits
    # until the port takes a connection (a wildcard host is tried on the loopback)
    import asyncio
    import socket

    from kernelladder.cli.serve import _listening

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert asyncio.run(_listening("0.0.0.0", port))
        assert asyncio.run(_listening("127.0.0.1", port))
    assert not asyncio.run(_listening("127.0.0.1", port, wait_s=0.2))  # closed now
