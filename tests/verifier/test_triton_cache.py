"""The workers' Triton cache manager reads a moved or copied cache from where it is.

Triton's own compiled-kernel groups are written here through the real
`triton.runtime.cache` API (no GPU needed: the cache is files). On the H200 a copied
cache made every candidate fail at anti-cheat: Triton read the kernels from the copy's
origin, under /tmp, which the sandbox denies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from kernelladder.verifier.contract.env import TRITON_CACHE_MANAGER, worker_env  # noqa: E402
from kernelladder.verifier.worker.triton_cache import RelocatableCacheManager  # noqa: E402

KEY = "0123456789abcdef"


def _build(cache_dir, monkeypatch) -> dict[str, str]:
    """A compiled kernel's files and their group, as Triton's compiler puts them."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache_dir))
    manager = RelocatableCacheManager(KEY)
    group = {
        name: manager.put(data, name)
        for name, data in (("k.cubin", b"\x7fELF"), ("k.ptx", "// ptx"), ("k.json", "{}"))
    }
    manager.put_group("k.json", group)
    return group


def test_a_copied_cache_is_read_from_the_copy_not_from_where_it_was_built(tmp_path, monkeypatch):
    built, copy = tmp_path / "built", tmp_path / "copy"
    _build(built, monkeypatch)
    shutil.copytree(built, copy)
    (grp,) = (copy / KEY).glob("__grp__*")
    recorded = json.loads(grp.read_text())["child_paths"]
    assert all(p.startswith(str(built)) for p in recorded.values())  # the old place, by path

    monkeypatch.setenv("TRITON_CACHE_DIR", str(copy))
    found = RelocatableCacheManager(KEY).get_group("k.json")
    assert found is not None and set(found) == {"k.cubin", "k.ptx", "k.json"}
    assert all(p.startswith(str(copy / KEY) + os.sep) for p in found.values())
    assert Path(found["k.ptx"]).read_text() == "// ptx"


def test_a_moved_cache_still_hits_after_its_old_place_is_gone(tmp_path, monkeypatch):
    built, moved = tmp_path / "built", tmp_path / "moved"
    _build(built, monkeypatch)
    shutil.move(built, moved)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(moved))
    found = RelocatableCacheManager(KEY).get_group("k.json")
    assert found is not None and os.path.isfile(found["k.cubin"])


def test_a_missing_or_broken_group_is_a_miss(tmp_path, monkeypatch):
    group = _build(tmp_path / "c", monkeypatch)
    manager = RelocatableCacheManager(KEY)
    assert manager.get_group("other.json") is None
    os.remove(group["k.ptx"])
    assert manager.get_group("k.json") is None  # one file gone: compiled again
    (grp,) = (tmp_path / "c" / KEY).glob("__grp__*")
    grp.write_text("not json")
    assert manager.get_group("k.json") is None
    grp.write_text(json.dumps({"child_paths": ["k.ptx"]}))
    assert manager.get_group("k.json") is None


def test_workers_get_the_manager_and_triton_resolves_it(tmp_path):
    env = worker_env(str(tmp_path), {"PATH": os.environ.get("PATH", "/usr/bin")})
    assert env["TRITON_CACHE_MANAGER"] == TRITON_CACHE_MANAGER
    mine = worker_env(str(tmp_path), {"TRITON_CACHE_MANAGER": "my.cache:Manager"})
    assert mine["TRITON_CACHE_MANAGER"] == "my.cache:Manager"  # a caller's own is kept
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    probe = "from triton import knobs; print(knobs.cache.manager_class.__qualname__)"
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "RelocatableCacheManager"
