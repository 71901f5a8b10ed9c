"""Shared fixtures and how the suite is dealt to pytest-xdist's workers. The Triton
interpreter must be chosen before triton is imported."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU on CI machines
# No test hands workers to, or takes them from, a person's own keeper of verifier
# workers (verifier/host/keeper.py): a setting of theirs is not read, and the keeper's socket
# is this test process's own (a short path: unix socket paths are short).
os.environ.pop("KERNELLADDER_KEEP_WORKERS", None)
os.environ["KERNELLADDER_KEEPER_SOCKET"] = os.path.join(
    tempfile.gettempdir(), f"kl-tests-{os.getpid()}", "keeper", "keeper.sock"
)


@pytest.fixture
def keeper_socket(monkeypatch: pytest.MonkeyPatch):
    """A keeper socket path of the test's own (its directory made 0700 by whoever starts
    a keeper there); any keeper started there is stopped, its workers with it, after."""
    from kernelladder.verifier.host import keeper

    folder = Path(tempfile.mkdtemp(prefix="klk-", dir="/tmp"))
    path = str(folder / "keeper" / "keeper.sock")
    monkeypatch.setenv(keeper.SOCKET_ENV, path)
    yield path
    with contextlib.suppress(Exception):
        keeper.stop(path)
    _stop_templates(os.path.dirname(path))
    shutil.rmtree(folder, ignore_errors=True)


def _stop_templates(folder: str) -> None:
    """The worker templates (verifier/host/worker_template.py) started in `folder` go."""
    from kernelladder.verifier.host import worker_template

    with contextlib.suppress(Exception):
        worker_template.stop_all(folder)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # the templates this test process's workers were forked from (beside its keeper socket)
    _stop_templates(os.path.dirname(os.environ["KERNELLADDER_KEEPER_SOCKET"]))


# Tests that share what they start once per worker (an sshd on loopback, a Ray cluster,
# tmux) run on one worker; every other test stays with its file's tests, so that a file's
# module-scoped fixtures (a verifier worker, ...) start once. With `--dist loadgroup`.
SHARED_GROUPS = ("ssh", "ray", "tmux")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--ran-under-py312",
        action="append",
        default=[],
        metavar="FILE",
        help="a test file the Python 3.12 pass already ran (./dev/test): its tests are "
        "left out, except those marked needs_torch (skipped there: 3.12 has no torch)",
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    covered = set(config.getoption("ran_under_py312"))
    if covered:
        kept, ran = [], []
        for item in items:
            done = _path(item) in covered and item.get_closest_marker("needs_torch") is None
            (ran if done else kept).append(item)
        if ran:
            config.hook.pytest_deselected(items=ran)
            items[:] = kept
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = next((g for g in SHARED_GROUPS if item.get_closest_marker(g)), _path(item))
            item.add_marker(pytest.mark.xdist_group(group))


def _path(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


# --- a hung test says where its asyncio tasks wait ------------------------------------------
HANG_DUMP_LEAD_S = 20.0  # before pytest-timeout ends the test


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    if marker is not None and "timeout" in marker.kwargs:
        return float(marker.kwargs["timeout"])
    return float(item.config.getini("timeout") or 0)


def _dump_asyncio_tasks(nodeid: str) -> None:
    """Every running event loop's tasks with their stacks, to the real stderr (pytest
    captures sys.stderr; the timeout's own dump shows threads, not tasks)."""
    import asyncio
    import gc
    import io
    import sys

    out = io.StringIO()
    out.write(f"\n=== {nodeid}: asyncio tasks {HANG_DUMP_LEAD_S:.0f} s before its timeout ===\n")
    loops = [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]
    for loop in (lp for lp in loops if lp.is_running()):
        for _ in range(3):  # the set may change under us: this is not the loop's thread
            try:
                tasks = list(asyncio.all_tasks(loop))
                break
            except RuntimeError:
                tasks = []
        for task in tasks:
            out.write(f"--- {task!r}\n")
            with contextlib.suppress(Exception):
                task.print_stack(file=out)
    sys.__stderr__.write(out.getvalue())
    sys.__stderr__.flush()


@pytest.fixture(autouse=True)
def _say_where_a_hung_test_waits(request: pytest.FixtureRequest):
    import threading

    limit = _timeout_of(request.node)
    if limit <= HANG_DUMP_LEAD_S:
        yield
        return
    timer = threading.Timer(
        limit - HANG_DUMP_LEAD_S, _dump_asyncio_tasks, args=(request.node.nodeid,)
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
