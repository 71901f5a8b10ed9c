"""Walls around a verifier worker: Linux Landlock through a small ctypes layer of our own.

Applied by the worker after torch, Triton and the ops are imported and before any
candidate code loads; Landlock domains are inherited by every child, so whatever a
candidate starts is walled too. What a walled worker may do:
- write only its scratch directory (its HOME, TMPDIR, cwd) and the compile caches
  (Triton's, inductor's) and a few device files (/dev/null, /dev/nvidia*, /dev/shm);
- read what Python, torch, Triton and CUDA need (the system trees, the interpreter's
  prefix and sys.path, the project, /sys, /proc's global entries and its own
  /proc/<pid>), but not the home directories, /root, /tmp, /run, the logs, /etc's
  secrets (shadow, ssh host keys, sudoers) nor any other process's /proc/<pid>;
- no TCP bind or connect (Landlock ABI 4+), no signals to or abstract unix sockets of
  processes outside the walls (ABI 6+), no new privileges, no core dumps.
Not walled by Landlock: UDP and other non-TCP sockets, chmod, and the GPU itself.

Why ctypes and not a binding: the verifier runs alone on a GPU box with only torch and
triton installed (stdlib otherwise), and the three syscalls and two structs needed fit
in a page that tests exercise here. Syscall numbers 444/445/446 are those of the
generic table, shared by x86-64, arm64 and every other architecture Linux added them
to after 5.13 (alpha and a few others differ: there the sandbox reports itself off).

`apply(policy)` returns a `SandboxState`; `describe_state` the one line every verdict
carries ("on (Landlock ABI 7: ...)" or "off (reason)"). `WallLog` is the worker's
audit hook: it notes a candidate's attempts to cross a wall so the verdict can name
the wall ("sandbox: write to .../gates.py denied") instead of a bare PermissionError.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import pwd
import resource
import socket
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

MODES = ("auto", "require", "off")
ENV_VAR = "KERNELLADDER_SANDBOX"  # the caller's choice; --sandbox sets it


def mode_from_env(environ: dict[str, str] | None = None) -> str:
    """The sandbox mode the caller asked for (KERNELLADDER_SANDBOX), default auto."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "").strip() or "auto"
    if value not in MODES:
        raise ValueError(f"{ENV_VAR}={value!r}: expected one of {', '.join(MODES)}")
    return value


# --- the kernel interface (include/uapi/linux/landlock.h) --------------------------------
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_GENERIC_TABLE_ARCHES = frozenset(
    {"x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x", "loongarch64"}
)
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# The filesystem rights of ABI 1 are bits 0-12: EXECUTE, WRITE_FILE, READ_FILE, READ_DIR,
# REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK,
# MAKE_SYM; those the policy names one by one are:
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
_FS_ABI_1 = (1 << 13) - 1
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
_DEVICE_RW = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV


def _fs_rights(abi: int) -> int:
    rights = _FS_ABI_1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _syscall(libc: ctypes.CDLL, name: str, number: int, *args: Any) -> int:
    """The syscall's result; OSError(errno, "name: what the kernel said") when it fails."""
    rc = libc.syscall(ctypes.c_long(number), *args)
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return rc


def landlock_abi() -> tuple[int, str]:
    """(ABI version, "") where Landlock is usable, else (0, why not)."""
    if sys.platform != "linux":
        return 0, f"Landlock is Linux-only (this is {sys.platform})"
    machine = platform.machine().lower()
    if machine not in _GENERIC_TABLE_ARCHES:
        return 0, f"no Landlock syscall numbers known for {machine}"
    try:
        libc = _libc()
        abi = libc.syscall(
            ctypes.c_long(_SYS_CREATE_RULESET),
            ctypes.c_void_p(None),
            ctypes.c_size_t(0),
            ctypes.c_uint32(_CREATE_RULESET_VERSION),
        )
    except (OSError, AttributeError) as exc:
        return 0, f"cannot call into libc: {exc}"
    if abi < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            return 0, "the kernel has no Landlock (ENOSYS; Linux < 5.13)"
        if err == errno.EOPNOTSUPP:
            return 0, "Landlock is disabled in this kernel (EOPNOTSUPP; add it to lsm=)"
        return 0, f"Landlock unavailable: {os.strerror(err)}"
    return int(abi), ""


# --- the policy: what a worker may read and write ------------------------------------------
@dataclass(frozen=True)
class Policy:
    """Paths a walled worker may write (everything beneath) and read."""

    writable: tuple[str, ...]
    readable: tuple[str, ...]  # whole trees
    readable_files: tuple[str, ...] = ()  # single files (or dirs without their listing)
    devices: tuple[str, ...] = ()  # device files opened read-write
    unreadable: tuple[str, ...] = ()  # what the policy keeps out (for the audit and doctor)
    own_pid: int = 0


# Trees kept out of a worker's reach even when their parent is readable; the real home
# and the caches' parents are added per worker.
_UNREADABLE = (
    "/home",
    "/root",
    "/proc",
    "/dev",
    "/tmp",
    "/var/tmp",
    "/run",
    "/var/run",
    "/var/log",
    "/var/mail",
    "/var/spool",
    "/var/lib",
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/lost+found",
)
# /proc entries that are not per process but still no business of a candidate's
_PROC_HIDDEN = frozenset(
    {
        "self",
        "thread-self",
        "kcore",
        "kmsg",
        "kallsyms",
        "kpagecount",
        "kpageflags",
        "kpagecgroup",
        "keys",
        "key-users",
        "sysrq-trigger",
        "timer_list",
        "sched_debug",
        "sys",  # read-only /proc/sys entries are added below (kernel, vm)
    }
)
_PROC_SYS = ("/proc/sys/kernel", "/proc/sys/vm", "/proc/sys/fs")
_DEVICE_NAMES = ("null", "zero", "full", "random", "urandom", "tty")


def real_home() -> str:
    """The user's home from the password database (the worker's $HOME is its scratch)."""
    with contextlib.suppress(KeyError, OSError):
        return pwd.getpwuid(os.getuid()).pw_dir or ""
    return ""


def _real(path: str) -> str:
    return os.path.realpath(path)


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _split_readable(top: str, keep_out: Sequence[str]) -> tuple[list[str], list[str]]:
    """(trees, files) covering `top` minus the `keep_out` trees: a directory holding a
    kept-out path is split into its entries (its own listing is not granted)."""
    if any(_beneath(top, k) for k in keep_out):
        return [], []
    if not any(_beneath(k, top) for k in keep_out):
        return [top], []
    trees: list[str] = []
    files: list[str] = []
    try:
        names = sorted(os.listdir(top))
    except OSError:
        return [], []
    for name in names:
        child = os.path.join(top, name)
        if any(_beneath(child, k) for k in keep_out):
            continue
        if os.path.islink(child):
            target = _real(child)
            if any(_beneath(target, k) for k in keep_out):
                continue
            child = target
        if os.path.isdir(child):
            sub_trees, sub_files = _split_readable(child, keep_out)
            trees += sub_trees
            files += sub_files
        elif os.path.exists(child):
            files.append(child)
    return trees, files


def build_policy(
    scratch: str,
    caches: Iterable[str] = (),
    *,
    extra_readable: Iterable[str] = (),
    home: str | None = None,
) -> Policy:
    """The walls for a worker whose scratch directory is `scratch`."""
    scratch = _real(scratch)
    writable = [scratch] + [_real(c) for c in caches if c]
    home = _real(home if home is not None else real_home()) if (home or real_home()) else ""
    keep_out = [_real(p) for p in _UNREADABLE]
    if home and home != "/":
        keep_out.append(home)
    trees, files = _split_readable("/", sorted(set(keep_out)))
    # what Python, the project and the libraries need, wherever they live (even in $HOME)
    needed = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)]
    needed += [p for p in sys.path if p]
    needed += list(extra_readable)
    for var in ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_HOME"):
        needed += [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    for path in needed:
        real = _real(path)
        if os.path.isdir(real) and real != "/" and not _beneath(scratch, real):
            trees.append(real)
    if os.path.isfile(sys.executable):
        files.append(_real(sys.executable))
    # /proc: its global entries and this process's own directory, no other pid's
    own = os.getpid()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit() or name in _PROC_HIDDEN:
                continue
            path = os.path.join("/proc", name)
            (trees if os.path.isdir(path) and not os.path.islink(path) else files).append(path)
    trees += [p for p in _PROC_SYS if os.path.isdir(p)]
    trees.append(f"/proc/{own}")
    devices = [f"/dev/{n}" for n in _DEVICE_NAMES if os.path.exists(f"/dev/{n}")]
    with contextlib.suppress(OSError):
        devices += [f"/dev/{n}" for n in sorted(os.listdir("/dev")) if n.startswith("nvidia")]
    for shared in ("/dev/shm",):
        if os.path.isdir(shared):
            writable.append(shared)
    unreadable = sorted({k for k in keep_out if os.path.lexists(k)} - {"/dev"})
    return Policy(
        writable=tuple(dict.fromkeys(writable)),
        readable=tuple(dict.fromkeys(trees)),
        readable_files=tuple(dict.fromkeys(files)),
        devices=tuple(dict.fromkeys(devices)),
        unreadable=tuple(unreadable),
        own_pid=own,
    )


# --- applying it -------------------------------------------------------------------------
@dataclass(frozen=True)
class SandboxState:
    on: bool
    abi: int = 0
    reason: str = ""  # why off (or "" when on)
    walls: tuple[str, ...] = ()  # what is walled, in words
    writable: tuple[str, ...] = ()
    mode: str = "auto"

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "walls": list(self.walls), "writable": list(self.writable)}


def describe_state(state: SandboxState) -> str:
    """The line a verdict, the header and doctor show."""
    if state.on:
        return f"on (Landlock ABI {state.abi}: {', '.join(state.walls)})"
    return f"off ({state.reason})"


def walls_for(abi: int) -> tuple[str, ...]:
    walls = ["writes only to scratch and compile caches", "no reading homes, /tmp or secrets"]
    walls.append("no other process's /proc")
    if abi >= 4:
        walls.append("no TCP bind/connect")
    if abi >= 6:
        walls.append("no signals or abstract sockets outside")
    walls += ["no new privileges", "no core dumps"]
    return tuple(walls)


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> bool:
    """Grant `rights` beneath `path`; False when the path cannot be opened (skipped)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
        if not is_dir:
            rights &= _FILE_RIGHTS  # the kernel refuses directory rights on a file
        attr = _PathBeneathAttr(rights, fd)
        _syscall(
            libc,
            f"landlock_add_rule({path})",
            _SYS_ADD_RULE,
            ctypes.c_int(ruleset),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
        return True
    finally:
        os.close(fd)


def set_limits(memory_limit: int | None) -> None:
    """A worker's process limits, set before its imports (between fork and exec for a
    spawned worker; in a worker template and each worker it forks): its address space
    capped when given, no core dumps."""
    if memory_limit:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _no_core_dumps() -> None:
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _no_new_privs(libc: ctypes.CDLL) -> None:
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")


def apply(policy: Policy, mode: str = "auto") -> SandboxState:
    """Wall this process (and its future children) in; never loosens existing limits.

    mode "off": no walls (core dumps still off); "auto": walls where Landlock exists;
    "require": raises RuntimeError where it does not.
    """
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, not {mode!r}")
    _no_core_dumps()
    if mode == "off":
        return SandboxState(False, reason="turned off (--sandbox off)", mode=mode)
    abi, why = landlock_abi()
    if abi <= 0:
        if mode == "require":
            raise RuntimeError(f"--sandbox require: {why}")
        return SandboxState(False, reason=why, mode=mode)
    libc = _libc()
    fs = _fs_rights(abi)
    attr = _RulesetAttr(fs, (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0, 0)
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    try:
        ruleset = _syscall(
            libc,
            "landlock_create_ruleset",
            _SYS_CREATE_RULESET,
            ctypes.byref(attr),
            ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        )
    except OSError as exc:
        if mode == "require":
            raise RuntimeError(f"--sandbox require: {exc.strerror}") from None
        return SandboxState(False, abi=abi, reason=exc.strerror, mode=mode)
    try:
        for path in policy.readable:
            _add_rule(libc, ruleset, path, _READ & fs)
        for path in policy.readable_files:
            _add_rule(libc, ruleset, path, (FS_READ_FILE | FS_EXECUTE) & fs)
        for path in policy.devices:
            _add_rule(libc, ruleset, path, _DEVICE_RW & fs)
        for path in policy.writable:
            _add_rule(libc, ruleset, path, fs)
        _no_new_privs(libc)
        _syscall(
            libc,
            "landlock_restrict_self",
            _SYS_RESTRICT_SELF,
            ctypes.c_int(ruleset),
            ctypes.c_uint32(0),
        )
    except OSError as exc:
        if mode == "require":
            raise RuntimeError(f"--sandbox require: {exc}") from None
        return SandboxState(False, abi=abi, reason=str(exc), mode=mode)
    finally:
        os.close(ruleset)
    return SandboxState(True, abi=abi, walls=walls_for(abi), writable=policy.writable, mode=mode)


# --- naming the wall a candidate ran into --------------------------------------------------
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PATH_EVENTS = {
    "os.remove": "removal of",
    "os.rename": "rename of",
    "os.mkdir": "directory made at",
    "os.rmdir": "removal of",
    "os.symlink": "link made at",
    "os.link": "link made at",
    "os.truncate": "truncation of",
    "shutil.rmtree": "removal of",
}


@dataclass
class WallLog:
    """An audit hook's record of a candidate's attempts to cross the walls.

    Only attempts made while `armed` (a candidate loading or running) count: the
    verifier's own file use is not the candidate's. Path checks mirror the policy:
    a write outside the writable trees, a read of a kept-out tree (unless also
    granted, like a site-packages under $HOME) or of another process's /proc entry,
    and any TCP connect or bind.
    """

    policy: Policy
    on: bool = False
    armed: bool = False
    hits: list[str] = field(default_factory=list)
    _busy: bool = False

    def install(self) -> None:
        sys.addaudithook(self._hook)

    def take(self) -> list[str]:
        hits, self.hits = self.hits, []
        return hits

    def _note(self, what: str) -> None:
        hit = f"{what} {'denied' if self.on else 'attempted (sandbox off)'}"
        if len(self.hits) < 20 and hit not in self.hits:
            self.hits.append(hit)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.armed or self._busy:
            return
        self._busy = True
        try:
            if event == "open":
                self._on_open(args)
            elif event in ("socket.connect", "socket.bind"):
                self._on_socket(event, args)
            elif event in _PATH_EVENTS and args and isinstance(args[0], (str, bytes)):
                path = _text(args[0])
                if not self._writable(path):
                    self._note(f"{_PATH_EVENTS[event]} {path}")
        except Exception:
            pass  # an audit hook that raises would break the caller's call
        finally:
            self._busy = False

    def _on_open(self, args: tuple) -> None:
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if not isinstance(path, (str, bytes)):
            return
        path = _text(path)
        writing = (isinstance(flags, int) and flags & _WRITE_FLAGS) or (
            isinstance(mode, str) and any(c in mode for c in "wax+")
        )
        if writing and not self._writable(path):
            self._note(f"write to {os.path.abspath(path)}")
        elif not writing and not self._readable(path):
            self._note(f"read of {os.path.abspath(path)}")

    def _on_socket(self, event: str, args: tuple) -> None:
        sock, address = (tuple(args) + (None, None))[:2]
        family = getattr(sock, "family", None)
        if family in (socket.AF_INET, socket.AF_INET6):
            verb = "connect to" if event == "socket.connect" else "bind to"
            where = f"{address[0]}:{address[1]}" if isinstance(address, tuple) else str(address)
            self._note(f"{verb} {where}")

    def _writable(self, path: str) -> bool:
        real = _real(path)
        return any(_beneath(real, w) for w in self.policy.writable + self.policy.devices)

    def _readable(self, path: str) -> bool:
        real = _real(path)
        if real.startswith("/proc/"):
            head = real.split("/")[2]
            return not head.isdigit() or int(head) == self.policy.own_pid
        if not any(_beneath(real, k) for k in self.policy.unreadable):
            return True
        granted = self.policy.readable + self.policy.readable_files + self.policy.writable
        return any(_beneath(real, g) for g in granted)


def _text(path: str | bytes) -> str:
    return os.fsdecode(path) if isinstance(path, bytes) else path
