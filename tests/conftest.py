"""Shared fixtures and how the suite is dealt to pytest-xdist's workers. The Triton
interpreter must be chosen before triton is imported."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU on CI machines

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
