"""`kernelladder serve` as a person uses it: a real server process (textual-serve), a live
CPU run it starts in the background, and headless Chromium (tests/headless_chromium.py)
opening the page. The page shows the strategy graph, a key pauses the run (run_paused in
its log), the token keeps out a request without it on a non-loopback bind, and a
read-only page ignores the steering keys. A screenshot of the page is taken
(KL_UPDATE_SCREENSHOTS=1 also writes it to docs/screenshots/serve.png)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from headless_chromium import Chromium, chromium_path
from helpers import ROOT

from kernelladder.engine import events as ev
from kernelladder.engine.control import live_owner
from kernelladder.engine.log import read_log

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(chromium_path() is None, reason="needs chromium (./dev/test installs it)"),
    pytest.mark.skipif(shutil.which("sh") is None, reason="textual-serve starts apps via sh"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`kernelladder serve ...` in its own process group (its per-page apps with it)."""

    def __init__(self, *args: str, log: Path):
        self.log = log
        self.out = open(log, "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kernelladder", "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def url(self, timeout: float = 180) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"open (http://\S+)", self.log.read_text(errors="replace"))
            if found:
                return found.group(1)
            assert self.process.poll() is None, self.log.read_text(errors="replace")[-2000:]
            time.sleep(0.1)
        raise AssertionError(f"serve printed no URL in {timeout}s")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)  # textual-serve's graceful exit
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        with _quiet():
            os.killpg(self.process.pid, signal.SIGKILL)  # an app a page left behind
        self.out.close()


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, *rest) -> bool:
        return kind is ProcessLookupError


def status_of(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def kinds(run_dir: Path) -> list[str]:
    return [e.kind for e in read_log(run_dir).events]


async def wait_for_event(run_dir: Path, kind: str, timeout: float = 60) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while kind not in kinds(run_dir):
        assert time.monotonic() < deadline, f"no {kind} in the run's log in {timeout}s"
        await asyncio.sleep(0.2)


async def test_a_browser_watches_pauses_and_a_read_only_page_cannot_steer(tmp_path):
    run_dir = tmp_path / "run"
    port, ro_port = free_port(), free_port()
    # an OP: serve starts the run in the background first; 0.0.0.0 is not loopback
    served = Served(
        "rmsnorm", "--device", "cpu", "--max-attempts", "40", "--branches", "2",
        "--no-confirm", "--run-dir", str(run_dir), "--host", "0.0.0.0", "--port", str(port),
        log=tmp_path / "serve.log",
    )  # fmt: skip
    read_only: Served | None = None
    try:
        url = served.url()
        token = url.split("?token=", 1)[1]
        assert len(token) >= 24 and url.startswith("http://") and f":{port}/" in url
        local = f"http://127.0.0.1:{port}"
        # refused without the token, on the page, its files and its websocket
        assert status_of(f"{local}/") == 403
        assert status_of(f"{local}/?token=not-the-token") == 403
        assert status_of(f"{local}/static/js/textual.js") == 403
        assert status_of(f"{local}/ws") == 403
        assert status_of(f"{local}/?token={token}") == 200

        async with Chromium(tmp_path / "chromium") as browser:
            await browser.open(f"{local}/?token={token}")
            await browser.wait_for_text("strategy graph")
            await browser.wait_for_text("b1")
            shot = await browser.screenshot(tmp_path / "serve.png")
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
            if os.environ.get("KL_UPDATE_SCREENSHOTS"):
                shutil.copyfile(shot, ROOT / "docs" / "screenshots" / "serve.png")
            assert ev.RunPaused.kind not in kinds(run_dir)
            await browser.press("p")
            await wait_for_event(run_dir, ev.RunPaused.kind)

        # the same run, read-only, on loopback: no token, and the steering keys are off
        read_only = Served(
            str(run_dir), "--read-only", "--port", str(ro_port), log=tmp_path / "ro.log"
        )
        ro_url = read_only.url()
        assert ro_url == f"http://127.0.0.1:{ro_port}/"
        async with Chromium(tmp_path / "chromium-ro") as browser:
            await browser.open(ro_url)
            await browser.wait_for_text("strategy graph")
            since = len(browser.frames)
            before = kinds(run_dir)
            await browser.press("p")  # would resume the paused run
            await browser.wait_for_text("read-only view", since=since)
            time.sleep(2)
            after = kinds(run_dir)
            assert ev.RunResumed.kind not in after[len(before) :]
            assert after.count(ev.RunPaused.kind) == 1
    finally:
        for server in (served, read_only):
            if server is not None:
                server.stop()
        try:  # the run serve started: stop it (it goes on after serving stops)
            os.kill(live_owner(run_dir).pid, signal.SIGTERM)
        except Exception:
            pass
