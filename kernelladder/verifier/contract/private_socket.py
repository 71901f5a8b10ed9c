"""A unix socket only this user's processes that hold the token can talk to: the
directory it lives in (this user's own, mode 0700), the token beside it (0600), and its
wire (one JSON line each way, descriptors riding with the line as SCM_RIGHTS).

The keeper of warm workers (verifier/host/keeper.py) and the worker templates
(verifier/worker/template.py) listen on such sockets. Standard library only; Linux.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import secrets
import socket
import stat
import struct
from typing import Any

TOKEN_NAME = "token"
MAX_LINE = 4 * 1024 * 1024
MAX_SOCKET_PATH = 107  # bytes: sun_path's size on Linux, less its terminating NUL


class SocketError(Exception):
    """The socket refused a request, or answered nothing usable."""


class SocketUnreachable(SocketError):
    """Nothing listens (or it is exiting): one may be started."""


def private_dir(path: str, *, make: bool) -> str:
    """The socket's directory: this user's own, a real directory, closed to others (made
    so when missing and `make`); SocketError otherwise (it is never chmod-ed: it may be a
    shared directory someone named by mistake)."""
    folder = os.path.dirname(path)
    if make:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        raise SocketUnreachable(f"no directory {folder}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise SocketError(f"{folder} is not a directory of this user's")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise SocketError(f"{folder} is open to other users (mode {stat.S_IMODE(info.st_mode):o})")
    return folder


def own_token(folder: str) -> str:
    """The secret a request must carry: made once (the first maker's stands), 0600."""
    path = os.path.join(folder, TOKEN_NAME)
    with contextlib.suppress(FileNotFoundError):
        return _read_token(path)
    partial = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_hex(32).encode())
    finally:
        os.close(fd)
    try:
        os.link(partial, path)  # atomic: a reader never sees half a token
    except FileExistsError:
        pass
    finally:
        os.unlink(partial)
    return _read_token(path)


def _read_token(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise SocketError(f"{path} is not this user's private token")
        return f.read(128).decode("ascii", errors="replace").strip()


def check_supported(path: str) -> None:
    """SocketError where no such socket can be had: not Linux (SO_PEERCRED,
    MSG_CMSG_CLOEXEC), or a path longer than a unix socket's address holds."""
    if not (hasattr(socket, "SO_PEERCRED") and hasattr(socket, "MSG_CMSG_CLOEXEC")):
        raise SocketError("a private socket needs Linux (SO_PEERCRED)")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise SocketError(f"the socket path is too long for a unix socket: {path}")


def peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def send_line(
    sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()
) -> None:
    data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    sent = socket.send_fds(sock, [data], list(fds)) if fds else 0
    if sent < len(data):  # nothing more once the line is out: the peer may have closed
        sock.sendall(data[sent:])


def receive_line(sock: socket.socket, max_fds: int) -> tuple[dict[str, Any], list[int]]:
    """One JSON line and the descriptors that came with it (close-on-exec)."""
    data, fds = bytearray(), []
    ancillary = socket.CMSG_SPACE(max_fds * 4) if max_fds else 0
    try:
        while b"\n" not in data:
            chunk, anc, flags, _ = sock.recvmsg(65536, ancillary, socket.MSG_CMSG_CLOEXEC)
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                    fds.extend(got)
            if flags & socket.MSG_CTRUNC:
                raise SocketError("more descriptors came than were asked for")
            if not chunk:
                raise ConnectionResetError("the peer closed the connection")
            data += chunk
            if len(data) > MAX_LINE:
                raise SocketError("an over-long line")
        message = json.loads(bytes(data[: data.index(b"\n")]))
        if not isinstance(message, dict):
            raise SocketError("not a JSON object")
        return message, fds
    except BaseException:
        close_fds(fds)
        raise


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def request(
    path: str,
    message: dict[str, Any],
    fds: list[int] | tuple[int, ...] = (),
    *,
    max_fds: int = 0,
    timeout: float,
    who: str,
) -> tuple[dict[str, Any], list[int]]:
    """One request to the socket at `path` (the token added): its answer and the
    descriptors that came with it. SocketUnreachable when nothing listens; SocketError
    when it refuses or does not answer within `timeout` (per step). `who` names the
    listener in the messages."""
    check_supported(path)
    folder = private_dir(path, make=False)
    if not os.path.exists(path):
        raise SocketUnreachable(f"no {who} at {path}")
    token = own_token(folder)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            if peer_uid(sock) != os.getuid():
                raise SocketError(f"{path} is served by another user")
            send_line(sock, {**message, "token": token}, fds)
            answer, got = receive_line(sock, max_fds)
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
            raise SocketUnreachable(f"no {who} answers at {path}") from None
        except TimeoutError:
            raise SocketError(f"the {who} at {path} did not answer within {timeout:g}s") from None
        except (OSError, ValueError) as exc:
            raise SocketError(f"the {who} at {path}: {type(exc).__name__}: {exc}") from None
    if not answer.get("ok"):
        close_fds(got)
        error = str(answer.get("error") or "refused")
        raise (SocketUnreachable if answer.get("exiting") else SocketError)(error)
    return answer, got
