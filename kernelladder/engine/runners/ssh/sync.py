"""Sync the verifier and the ops to a GPU box over SFTP, by content hash.

Only what the worker imports travels: kernelladder/__init__.py, kernelladder/ops/**, and of
kernelladder/verifier/ its __init__.py, contract/** and worker/** (host/ stays here).
Layout under REMOTE_DIR:

    blobs/<sha256>               one file per distinct content (sent once, ever)
    trees/<tree>/kernelladder/   the package for one manifest, hard links to blobs
    trees/<tree>/.manifest.json  {path: sha256} of that tree
    .manifest.json               the tree synced last (what `doctor --remote` reports)

A tree directory is assembled under a temporary name and renamed into place when it is
complete, so a worker only ever starts from a whole tree; a second sync of unchanged
files sends nothing. Old trees beyond the newest few are removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import posixpath
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

import kernelladder

MANIFEST_NAME = ".manifest.json"
SYNC_SCHEMA = 1
KEEP_TREES = 6  # other runs on the same box may still be using a recent tree
_PARALLEL_SFTP = 8
_SYNCED_DIRS = ("ops", "verifier/contract", "verifier/worker")
_SKIPPED_PARTS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache"})


@dataclass(frozen=True)
class SyncResult:
    tree: str  # content id of the synced tree
    tree_path: str  # absolute path on the box: PYTHONPATH and cwd of the worker
    files_total: int
    files_sent: int  # files whose content was new to the box
    bytes_sent: int
    files_linked: int  # files placed from blobs already there
    elapsed_s: float


def package_root() -> Path:
    return Path(kernelladder.__file__).resolve().parent


def local_manifest(root: Path | None = None) -> dict[str, str]:
    """{posix path relative to the tree, e.g. "kernelladder/ops/spec.py": sha256}."""
    root = (root or package_root()).resolve()
    files = [root / "__init__.py", root / "verifier" / "__init__.py"]
    for sub in _SYNCED_DIRS:
        base = root / sub
        if base.is_dir():
            files.extend(
                p
                for p in base.rglob("*")
                if p.is_file()
                and not _SKIPPED_PARTS.intersection(p.relative_to(root).parts)
                and p.suffix not in (".pyc", ".pyo")
            )
    manifest = {}
    for path in sorted(files):
        rel = "kernelladder/" + path.relative_to(root).as_posix()
        manifest[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return manifest


def tree_id(manifest: dict[str, str]) -> str:
    blob = json.dumps(sorted(manifest.items()), separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def tree_path(remote_dir: str, tree: str) -> str:
    return posixpath.join(remote_dir, "trees", tree)


async def sync_tree(
    sftp: asyncssh.SFTPClient,
    remote_dir: str,
    *,
    root: Path | None = None,
    timeout_s: float = 60.0,
) -> SyncResult:
    """Make REMOTE_DIR/trees/<tree> hold exactly the local files. remote_dir is absolute.
    Raises TimeoutError past timeout_s and asyncssh.Error on SFTP failures."""
    started = time.monotonic()
    root = (root or package_root()).resolve()
    manifest = local_manifest(root)
    tree = tree_id(manifest)
    final = tree_path(remote_dir, tree)
    async with asyncio.timeout(timeout_s):
        if await sftp.isdir(final):
            await sftp.utime(final)  # recently used: spared by the pruning of old trees
            await _write_pointer(sftp, remote_dir, tree, manifest)
            return SyncResult(tree, final, len(manifest), 0, 0, 0, time.monotonic() - started)
        blobs_dir = posixpath.join(remote_dir, "blobs")
        trees_dir = posixpath.join(remote_dir, "trees")
        await sftp.makedirs(blobs_dir, exist_ok=True)
        await sftp.makedirs(trees_dir, exist_ok=True)
        present = set(await sftp.listdir(blobs_dir))
        missing = {sha: rel for rel, sha in manifest.items() if sha not in present}
        gate = asyncio.Semaphore(_PARALLEL_SFTP)

        async def send(sha: str, rel: str) -> int:
            async with gate:
                data = (root / rel.removeprefix("kernelladder/")).read_bytes()
                temp = posixpath.join(blobs_dir, f".tmp-{sha[:12]}-{secrets.token_hex(4)}")
                async with sftp.open(temp, "wb") as f:
                    await f.write(data)
                await _replace(sftp, temp, posixpath.join(blobs_dir, sha))
                return len(data)

        sent_bytes = sum(await asyncio.gather(*(send(s, r) for s, r in missing.items())))

        staging = posixpath.join(trees_dir, f".tmp-{tree}-{secrets.token_hex(4)}")
        dirs = sorted({posixpath.dirname(posixpath.join(staging, rel)) for rel in manifest})
        for d in dirs:  # parents first: sorted order puts a parent before its children
            await sftp.makedirs(d, exist_ok=True)

        copied: list[int] = []

        async def place(rel: str, sha: str) -> None:
            async with gate:
                dest = posixpath.join(staging, rel)
                try:
                    await sftp.link(posixpath.join(blobs_dir, sha), dest)
                except (asyncssh.SFTPOpUnsupported, asyncssh.SFTPFailure):
                    # no hard links there (server or filesystem): send the file itself
                    data = (root / rel.removeprefix("kernelladder/")).read_bytes()
                    async with sftp.open(dest, "wb") as f:
                        await f.write(data)
                    copied.append(len(data))

        await asyncio.gather(*(place(rel, sha) for rel, sha in manifest.items()))
        await _write_json(
            sftp, posixpath.join(staging, MANIFEST_NAME), _manifest_doc(tree, manifest)
        )
        try:
            await sftp.rename(staging, final)
        except asyncssh.SFTPError:
            if not await sftp.isdir(final):
                raise
            await _remove_tree(sftp, staging)  # another sync placed the same tree first
        await _write_pointer(sftp, remote_dir, tree, manifest)
        await _prune_trees(sftp, trees_dir, keep=tree)
    return SyncResult(
        tree=tree,
        tree_path=final,
        files_total=len(manifest),
        files_sent=len(missing),
        bytes_sent=sent_bytes + sum(copied),
        files_linked=len(manifest) - len(copied),
        elapsed_s=time.monotonic() - started,
    )


async def remote_state(
    sftp: asyncssh.SFTPClient, remote_dir: str, *, root: Path | None = None
) -> dict[str, Any]:
    """What `doctor --remote` shows: is the box's last tree the local one, and if not,
    how many files a sync would send."""
    manifest = local_manifest(root)
    tree = tree_id(manifest)
    state: dict[str, Any] = {"remote_dir": remote_dir, "local_tree": tree, "files": len(manifest)}
    if not await sftp.isdir(remote_dir):
        return {**state, "exists": False, "in_sync": False, "would_send": len(manifest)}
    state["exists"] = True
    state["in_sync"] = await sftp.isdir(tree_path(remote_dir, tree))
    pointer = posixpath.join(remote_dir, MANIFEST_NAME)
    if await sftp.isfile(pointer):
        async with sftp.open(pointer, "rb") as f:
            try:
                state["remote_tree"] = json.loads(await f.read()).get("tree")
            except ValueError:
                state["remote_tree"] = None
    blobs_dir = posixpath.join(remote_dir, "blobs")
    present = set(await sftp.listdir(blobs_dir)) if await sftp.isdir(blobs_dir) else set()
    state["would_send"] = 0 if state["in_sync"] else len(set(manifest.values()) - present)
    return state


def _manifest_doc(tree: str, manifest: dict[str, str]) -> dict[str, Any]:
    return {"schema": SYNC_SCHEMA, "tree": tree, "files": manifest}


async def _write_json(sftp: asyncssh.SFTPClient, path: str, doc: dict[str, Any]) -> None:
    async with sftp.open(path, "wb") as f:
        await f.write(json.dumps(doc, indent=1, sort_keys=True).encode())


async def _write_pointer(
    sftp: asyncssh.SFTPClient, remote_dir: str, tree: str, manifest: dict[str, str]
) -> None:
    pointer = posixpath.join(remote_dir, MANIFEST_NAME)
    if await sftp.isfile(pointer):
        try:
            async with sftp.open(pointer, "rb") as f:
                if json.loads(await f.read()).get("tree") == tree:
                    return
        except ValueError:
            pass
    temp = f"{pointer}.tmp-{secrets.token_hex(4)}"
    await _write_json(sftp, temp, _manifest_doc(tree, manifest))
    await _replace(sftp, temp, pointer)


async def _replace(sftp: asyncssh.SFTPClient, source: str, dest: str) -> None:
    """Atomic rename over an existing file (OpenSSH's posix-rename extension)."""
    try:
        await sftp.posix_rename(source, dest)
    except asyncssh.SFTPOpUnsupported:
        if await sftp.exists(dest):
            await sftp.remove(dest)
        await sftp.rename(source, dest)


async def _remove_tree(sftp: asyncssh.SFTPClient, path: str) -> None:
    try:
        await sftp.rmtree(path)
    except asyncssh.SFTPError:
        pass  # best effort: a leftover staging directory is harmless


async def _prune_trees(sftp: asyncssh.SFTPClient, trees_dir: str, *, keep: str) -> None:
    entries = [e for e in await sftp.readdir(trees_dir) if e.filename not in (".", "..")]
    stale_staging = [e for e in entries if e.filename.startswith(".tmp-") and _age(e) > 3600]
    trees = sorted(
        (e for e in entries if not e.filename.startswith(".") and e.filename != keep),
        key=lambda e: e.attrs.mtime or 0,
        reverse=True,
    )
    for e in stale_staging + trees[KEEP_TREES - 1 :]:
        await _remove_tree(sftp, posixpath.join(trees_dir, e.filename))


def _age(entry: asyncssh.SFTPName) -> float:
    return time.time() - (entry.attrs.mtime or time.time())
