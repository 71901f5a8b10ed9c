"""`kernelladder serve` as a person uses it: a real server process (textual-serve), a live
CPU run it starts in the background, and headless Chromium (tests/headless_chromium.py)
opening the page. The page shows the strategy graph, a key pauses the run (run_paused in
its log), the token keeps out a page and a websocket without it on a non-loopback bind,
and a read-only page ignores the steering keys. Then the run is stopped from the page
and resumed (`kernelladder serve --resume`): the page that was open follows the new
session and steers it. A screenshot of the page is taken (KL_UPDATE_SCREENSHOTS=1 also
writes it to docs/screenshots/serve.png)."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from headless_chromium import Chromium, chromium_path
from helpers import ROOT, Served, free_port, http_status, stop_owner, websocket_status

from kernelladder.engine.record import events as ev
from kernelladder.engine.record.log import read_log
from kernelladder.engine.run.control import read_owner

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(chromium_path() is None, reason="needs chromium (./dev/test installs it)"),
    pytest.mark.skipif(shutil.which("sh") is None, reason="textual-serve starts apps via sh"),
]


def kinds(run_dir: Path) -> list[str]:
    return [e.kind for e in read_log(run_dir).events]


async def wait_for_event(run_dir: Path, kind: str, timeout: float = 60, after: int = 0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while kind not in kinds(run_dir)[after:]:
        assert time.monotonic() < deadline, f"no {kind} in the run's log in {timeout}s"
        await asyncio.sleep(0.2)


async def test_a_browser_watches_pauses_stops_and_follows_the_resumed_run(tmp_path):
    run_dir = tmp_path / "run"
    port, ro_port, resumed_port = free_port(), free_port(), free_port()
    # an OP: serve starts the run in the background first; 0.0.0.0 is not loopback
    served = Served(
        "rmsnorm", "--device", "cpu", "--max-attempts", "40", "--branches", "2",
        "--no-confirm", "--run-dir", str(run_dir), "--host", "0.0.0.0", "--port", str(port),
        log=tmp_path / "serve.log",
    )  # fmt: skip
    servers = [served]
    try:
        url = served.url()
        token = url.split("#token=", 1)[1]
        assert len(token) >= 24 and url.startswith("http://") and f":{port}/#" in url
        local = f"http://127.0.0.1:{port}"
        origin = {"Origin": local}
        # without the token: the page opens and says so; its check and websocket refuse
        status, body = http_status(f"{local}/session", origin, data=b"{}")
        assert status == 403 and "A token is required here" in json.loads(body)["why"]
        assert websocket_status(f"{local}/ws/p1", origin) == 403
        wrong = {**origin, "Sec-WebSocket-Protocol": "kernelladder, kernelladder-token.nope"}
        assert websocket_status(f"{local}/ws/p1", wrong) == 403
        right = {**origin, "Sec-WebSocket-Protocol": f"kernelladder, kernelladder-token.{token}"}
        assert websocket_status(f"{local}/ws/p1", right) == 101

        async with Chromium(tmp_path / "chromium") as browser:
            await browser.open(f"{local}/")
            await browser.wait_for_body("A token is required here")
            await browser.open(f"{local}/#token={token}")
            await browser.wait_for_text("strategy graph")
            await browser.wait_for_text("b1")
            assert await browser.evaluate("location.href") == f"{local}/"  # not left in view
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
            servers.append(read_only)
            ro_url = read_only.url()
            assert ro_url == f"http://127.0.0.1:{ro_port}/"
            async with Chromium(tmp_path / "chromium-ro") as viewer:
                await viewer.open(ro_url)
                await viewer.wait_for_text("strategy graph")
                since = len(viewer.frames)
                before = kinds(run_dir)
                await viewer.press("p")  # would resume the paused run
                await viewer.wait_for_text("read-only view", since=since)
                time.sleep(2)
                after = kinds(run_dir)
                assert ev.RunResumed.kind not in after[len(before) :]
                assert after.count(ev.RunPaused.kind) == 1

            # stopped from the page, then resumed: the page that was open follows
            first_owner = read_owner(run_dir)
            await browser.press("s")
            await browser.wait_for_text("Stop the run?")
            await browser.press("y")
            await wait_for_event(run_dir, ev.RunFinished.kind)
            resumed = Served(
                "--resume", str(run_dir), "--port", str(resumed_port),
                log=tmp_path / "resumed.log",
            )  # fmt: skip
            servers.append(resumed)
            resumed.url()
            owner = read_owner(run_dir)
            assert owner is not None and owner.pid != first_owner.pid
            since = len(browser.frames)
            await browser.wait_for_text(f"attached to pid {owner.pid}", since=since)
            reopened = kinds(run_dir).index(ev.RunReopened.kind)
            await browser.press("p")  # steers the new session (resumes or pauses it)
            deadline = time.monotonic() + 60
            while not {ev.RunPaused.kind, ev.RunResumed.kind} & set(kinds(run_dir)[reopened:]):
                assert time.monotonic() < deadline, "the page did not steer the new session"
                time.sleep(0.2)
        output = served.output  # the terminal: the URL, and no page's comings and goings
        assert "detached" not in output and not re.search(r"\?\S*token", output)
    finally:
        for server in servers:
            server.stop()
        stop_owner(run_dir)  # the run serve started goes on after serving stops
