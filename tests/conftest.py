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
# workers (verifier/keeper.py): a setting of theirs is not read, and the keeper's socket
# is this test process's own (a short path: unix socket paths are short).
os.environ.pop("KERNELLADDER_KEEP_WORKERS", None)
os.environ["KERNELLADDER_KEEPER_SOCKET"] = os.path.join(
    tempfile.gettempdir(), f"kl-tests-{os.getpid()}", "keeper", "keeper.sock"
)


@pytest.fixture
def keeper_socket(monkeypatch: pytest.MonkeyPatch):
    """A keeper socket path of the test's own (its directory made 0700 by whoever starts
    a keeper there); any keeper started there is stopped, its workers with it, after."""
    from kernelladder.verifier import keeper

    folder = Path(tempfile.mkdtemp(prefix="klk-", dir="/tmp"))
    path = str(folder / "keeper" / "keeper.sock")
    monkeypatch.setenv(keeper.SOCKET_ENV, path)
    yield path
    with contextlib.suppress(Exception):
        keeper.stop(path)
    shutil.rmtree(folder, ignore_errors=True)


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
