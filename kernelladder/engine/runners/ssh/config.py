"""Where remote verification runs: SSH hosts, their GPUs, and how to start a worker there.

Settings come from, first match wins: a host's own entry in the config file, the
command-line option, the environment (KL_SSH_TARGET, KL_SSH_KEY, KL_SSH_KNOWN_HOSTS,
KL_CONTAINER, KL_REMOTE_PYTHON, KL_REMOTE_DIR, KL_REMOTE_CONFIG), the file's
[defaults] table, the built-in default. Every value is validated here; a bad one raises
RemoteConfigError with one line that names the setting.

A config file (TOML) lists the hosts of a pool:

    [defaults]
    key = "~/.ssh/kl_ed25519"
    python = "~/kl-venv/bin/python"

    [[host]]
    target = "me@gpu-a"
    gpus = [0, 1, 2, 3]

    [[host]]
    target = "me@gpu-b:2222"
    container = "kl-dev"
    python = "python3"
"""

from __future__ import annotations

import getpass
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

DEFAULT_REMOTE_PYTHON = "~/kl-venv/bin/python"
DEFAULT_CONTAINER_PYTHON = "python3"  # inside a container the venv path rarely applies
DEFAULT_REMOTE_DIR = "~/work/kernelladder"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_CONNECT_TIMEOUT_S = 15.0
DEFAULT_COMMAND_TIMEOUT_S = 60.0  # sftp and short exec calls; the verifier has its own
DEFAULT_WORKER_START_TIMEOUT_S = 180.0  # python start + torch import + CUDA context


@dataclass(frozen=True)
class RemoteSetting:
    """One remote setting, described once. The command-line options, the environment
    names, the messages that name a setting and what a run records (RunOptions.remote_config,
    keyed by `field`) are all read from REMOTE_SETTINGS."""

    field: str  # RemoteSettings field; the key in a pool file and in RunOptions.remote_config
    flag: str  # the command-line option
    dest: str  # its argparse name (what run logs before the settings table recorded)
    metavar: str
    text: str  # what it is, for --help
    env: str | None = None  # None: the option only (--gpus picks GPUs of one --ssh-target)
    default: str | None = None  # shown in --help
    note: str = ""  # one more clause for --help

    @property
    def help(self) -> str:
        env = [f"env {self.env}"] if self.env else []
        default = [f"default {self.default}"] if self.default else []
        return f"{self.text} ({'; '.join([*env, *filter(None, [self.note]), *default])})"


REMOTE_SETTINGS = (
    RemoteSetting("target", "--ssh-target", "ssh_target", "USER@HOST[:PORT]", "the GPU box",
                  env="KL_SSH_TARGET"),
    RemoteSetting("key", "--ssh-key", "ssh_key", "PATH", "private key file", env="KL_SSH_KEY",
                  note="key auth only"),
    RemoteSetting("known_hosts", "--known-hosts", "known_hosts", "PATH", "known_hosts file",
                  env="KL_SSH_KNOWN_HOSTS", default=DEFAULT_KNOWN_HOSTS),
    RemoteSetting("container", "--container", "container", "NAME",
                  "run the worker via `docker exec`", env="KL_CONTAINER"),
    RemoteSetting("python", "--remote-python", "remote_python", "PATH", "Python on the box",
                  env="KL_REMOTE_PYTHON", default=DEFAULT_REMOTE_PYTHON),
    RemoteSetting("remote_dir", "--remote-dir", "remote_dir", "PATH",
                  "where the verifier is synced on the box", env="KL_REMOTE_DIR",
                  default=DEFAULT_REMOTE_DIR),
    RemoteSetting("config", "--remote-config", "remote_config", "FILE",
                  "TOML file listing several hosts and their GPUs", env="KL_REMOTE_CONFIG"),
    RemoteSetting("gpus", "--gpus", "remote_gpus", "LIST", "GPU indices on the box, e.g. 0,1",
                  note="they index the box's own CUDA_VISIBLE_DEVICES when its login sets one",
                  default="0"),
)  # fmt: skip

# Settings read option first, then environment; for a pool file they fill in what a host
# and [defaults] leave out.
ENV_NAMES = {s.field: s.env for s in REMOTE_SETTINGS if s.env}
OPTION_NAMES = {s.field: s.flag for s in REMOTE_SETTINGS if s.env}  # for messages

_HOST_KEYS = frozenset(
    {
        "name",
        "target",
        "key",
        "known_hosts",
        "container",
        "python",
        "remote_dir",
        "gpus",
        "connect_timeout",
        "command_timeout",
    }
)
_USER_RE = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})")
_IPV6_RE = re.compile(r"[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?")
# docker's own rule for container names (ids are hex, which it also matches)
_CONTAINER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}")


class RemoteConfigError(ValueError):
    """A bad remote setting; the message is one line that names it."""


@dataclass(frozen=True)
class SSHTarget:
    host: str
    user: str
    port: int = 22

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if self.port == 22 else f":{self.port}"
        return f"{self.user}@{host}{port}"


@dataclass(frozen=True)
class HostConfig:
    """One SSH host and how a worker is started on it. Remote paths may start with `~/`
    (the login user's home, resolved over SFTP once connected)."""

    target: SSHTarget
    name: str = ""  # a short label for slots and messages; default: the host name
    key: Path | None = None  # private key; None: the default keys in ~/.ssh
    known_hosts: Path = field(default_factory=lambda: Path(DEFAULT_KNOWN_HOSTS).expanduser())
    container: str | None = None  # run the worker through `docker exec` in it
    python: str = DEFAULT_REMOTE_PYTHON  # the interpreter on the box (or in the container)
    remote_dir: str = DEFAULT_REMOTE_DIR
    # CUDA device indices, one worker (slot) each; into the box's CUDA_VISIBLE_DEVICES
    # when its login environment sets one (physical_gpus), else physical
    gpus: tuple[int, ...] = (0,)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S
    worker_start_timeout_s: float = DEFAULT_WORKER_START_TIMEOUT_S

    @property
    def label(self) -> str:
        return self.name or self.target.host

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.label,
            "target": str(self.target),
            "key": str(self.key) if self.key else None,
            "known_hosts": str(self.known_hosts),
            "container": self.container,
            "python": self.python,
            "remote_dir": self.remote_dir,
            "gpus": list(self.gpus),
        }


@dataclass(frozen=True)
class RemoteConfig:
    hosts: tuple[HostConfig, ...]
    source: str = ""  # where the hosts came from: "KL_SSH_TARGET", "--ssh-target", a file

    @property
    def slots(self) -> int:
        return sum(len(h.gpus) for h in self.hosts)

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "hosts": [h.describe() for h in self.hosts]}


# --- validation of single values -------------------------------------------------------


def parse_target(text: str, *, setting: str = "KL_SSH_TARGET") -> SSHTarget:
    """`[user@]host[:port]`, with an IPv6 host in brackets: `user@[::1]:2222`."""
    text = text.strip()
    if not text:
        raise RemoteConfigError(f"{setting} is empty: expected user@host[:port]")
    user, sep, rest = text.rpartition("@")
    if not sep:
        user, rest = _local_user(), text
    if not _USER_RE.fullmatch(user):
        raise RemoteConfigError(f"{setting}: bad user name {user!r} in {text!r}")
    port_text = ""
    if rest.startswith("["):
        host, bracket, tail = rest[1:].partition("]")
        if not bracket or not _IPV6_RE.fullmatch(host):
            raise RemoteConfigError(f"{setting}: bad IPv6 host in {text!r}")
        if tail:
            if not tail.startswith(":"):
                raise RemoteConfigError(f"{setting}: expected :port after ] in {text!r}")
            port_text = tail[1:]
    else:
        host, colon, port_text = rest.partition(":")
        if not colon:
            port_text = ""
        elif not port_text:
            raise RemoteConfigError(f"{setting}: empty port in {text!r}")
        if not _HOSTNAME_RE.fullmatch(host) or ".." in host:
            raise RemoteConfigError(f"{setting}: bad host name {host!r} in {text!r}")
    port = 22
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise RemoteConfigError(f"{setting}: bad port {port_text!r} (1-65535) in {text!r}")
        port = int(port_text)
    return SSHTarget(host=host, user=user, port=port)


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers): the user must say
        return ""


def check_remote_path(value: str, *, setting: str) -> str:
    """A path on the box: absolute or `~/...`; any other character is allowed because
    every use is quoted, but control characters never are (they break logs and lines)."""
    if not isinstance(value, str) or not value.strip():
        raise RemoteConfigError(f"{setting} is empty")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise RemoteConfigError(f"{setting}: control characters are not allowed in {value!r}")
    if not (value.startswith("/") or value == "~" or value.startswith("~/")):
        raise RemoteConfigError(f"{setting}: {value!r} must be absolute or start with ~/")
    return value


def check_python(value: str, *, setting: str) -> str:
    """An interpreter: a remote path (absolute or ~/...) or a bare command name."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9._+-]+", value or ""):
        return value  # a command name found on the box's PATH, e.g. python3
    return check_remote_path(value, setting=setting)


def check_container(value: str, *, setting: str = "KL_CONTAINER") -> str:
    if not isinstance(value, str) or not _CONTAINER_RE.fullmatch(value):
        raise RemoteConfigError(
            f"{setting}: {value!r} is not a container name (letters, digits, _ . -)"
        )
    return value


def check_local_file(value: str | Path, *, setting: str, must_exist: bool = True) -> Path:
    text = str(value)
    if not text.strip():
        raise RemoteConfigError(f"{setting} is empty")
    path = Path(text).expanduser()
    if must_exist:
        if not path.exists():
            raise RemoteConfigError(f"{setting}: {path} does not exist")
        if not path.is_file():
            raise RemoteConfigError(f"{setting}: {path} is not a file")
        if not os.access(path, os.R_OK):
            raise RemoteConfigError(f"{setting}: {path} is not readable")
    # one that may be missing (known_hosts: it then trusts nothing, and trusting a key
    # creates it) is still refused now when it cannot be read, not when the run connects
    elif path.is_dir():
        raise RemoteConfigError(f"{setting}: {path} is a directory, not a file")
    elif path.exists() and not os.access(path, os.R_OK):
        raise RemoteConfigError(f"{setting}: {path} is not readable")
    return path


def check_gpus(value: Any, *, setting: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not all(p.isdigit() for p in parts):
            raise RemoteConfigError(f"{setting}: {value!r} is not a list of GPU indices")
        value = [int(p) for p in parts]
    if (
        not isinstance(value, list | tuple)
        or not value
        or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in value)
    ):
        raise RemoteConfigError(f"{setting}: expected a non-empty list of GPU indices like [0, 1]")
    if len(set(value)) != len(value):
        raise RemoteConfigError(f"{setting}: GPU indices repeat in {list(value)}")
    return tuple(value)


# Prints the box's own CUDA_VISIBLE_DEVICES (JSON; null when unset), run by the remote
# Python with the login environment (inside the container when one is set), as a worker.
VISIBLE_DEVICES_PROBE = 'import json, os; print(json.dumps(os.environ.get("CUDA_VISIBLE_DEVICES")))'


def physical_gpus(gpus: tuple[int, ...], visible: str | None, *, where: str) -> tuple[str, ...]:
    """The CUDA_VISIBLE_DEVICES value each worker gets for the configured GPU indices.

    When the box's login environment sets CUDA_VISIBLE_DEVICES (a shared box giving this
    user, say, 4,5,6,7), an index picks from that list, as torch's own numbering there
    would; without it an index is the physical device. RemoteConfigError (one line) for an
    index outside the list."""
    if visible is None:
        return tuple(str(g) for g in gpus)
    exposed = [part.strip() for part in visible.split(",") if part.strip()]
    outside = [g for g in gpus if g >= len(exposed)]
    if outside:
        which = f"GPU index {outside[0]} is" if len(outside) == 1 else f"GPU indices {outside} are"
        if not exposed:
            why = f"the box's CUDA_VISIBLE_DEVICES is {visible!r}: no GPU for this login"
        else:
            why = f"the box's CUDA_VISIBLE_DEVICES={visible} exposes 0-{len(exposed) - 1}"
        raise RemoteConfigError(f"{where}: {which} outside the GPUs this login may use ({why})")
    return tuple(exposed[g] for g in gpus)


def check_timeout(value: Any, *, setting: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
        raise RemoteConfigError(f"{setting}: expected seconds between 0 and 3600, got {value!r}")
    return float(value)


# --- assembling a config ---------------------------------------------------------------


@dataclass(frozen=True)
class RemoteSettings:
    """What the user gave on the command line (None: not given); one field per row of
    REMOTE_SETTINGS."""

    target: str | None = None
    key: str | None = None
    known_hosts: str | None = None
    container: str | None = None
    python: str | None = None
    remote_dir: str | None = None
    config: str | None = None
    gpus: str | None = None


def settings_from_record(record: Mapping[str, Any]) -> RemoteSettings:
    """RemoteSettings from what a run recorded (RunOptions.remote_config): keyed by field,
    or, in a run recorded before the settings table, by argparse name."""
    return RemoteSettings(
        **{s.field: record.get(s.field, record.get(s.dest)) for s in REMOTE_SETTINGS}
    )


def load_remote_config(
    settings: RemoteSettings | None = None, environ: Mapping[str, str] | None = None
) -> RemoteConfig:
    """The hosts to verify on. Raises RemoteConfigError (one line) for anything bad,
    including no host at all."""
    settings = settings or RemoteSettings()
    environ = os.environ if environ is None else environ

    def given(name: str) -> tuple[str | None, str]:
        """The option's value, else the environment's, with the setting's name."""
        value = getattr(settings, name)
        if value is not None:
            return value, OPTION_NAMES[name]
        env = environ.get(ENV_NAMES[name])
        if env is not None and env != "":
            return env, ENV_NAMES[name]
        return None, ENV_NAMES[name]

    config_path, config_setting = given("config")
    target_text, target_setting = given("target")
    if config_path is not None and settings.target is not None:
        raise RemoteConfigError("give either --ssh-target or --remote-config, not both")
    if config_path is not None:
        path = check_local_file(config_path, setting=config_setting)
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise RemoteConfigError(f"{path}: not valid TOML ({exc})") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RemoteConfigError(f"{path}: cannot read ({exc})") from None
        return _from_document(document, str(path), settings, environ, given)
    if target_text is None:
        raise RemoteConfigError(
            "--remote needs a host: set KL_SSH_TARGET=user@host[:port] "
            "(or --ssh-target, or a host list in --remote-config)"
        )
    host = _host_from({"target": target_text}, {}, target_setting, given)
    if settings.gpus is not None:
        host = replace(host, gpus=check_gpus(settings.gpus, setting="--gpus"))
    return RemoteConfig(hosts=(host,), source=target_setting)


def _from_document(
    document: dict[str, Any],
    source: str,
    settings: RemoteSettings,
    environ: Mapping[str, str],
    given: Any,
) -> RemoteConfig:
    unknown = set(document) - {"defaults", "host"}
    if unknown:
        raise RemoteConfigError(f"{source}: unknown table {sorted(unknown)[0]!r}")
    defaults = document.get("defaults", {})
    if not isinstance(defaults, dict):
        raise RemoteConfigError(f"{source}: [defaults] must be a table")
    bad = set(defaults) - (_HOST_KEYS - {"target", "name"})
    if bad:
        raise RemoteConfigError(f"{source}: unknown setting {sorted(bad)[0]!r} in [defaults]")
    entries = document.get("host", [])
    if not isinstance(entries, list) or not entries:
        raise RemoteConfigError(f"{source}: no [[host]] entries")
    hosts: list[HostConfig] = []
    for i, entry in enumerate(entries, 1):
        where = f"{source}: host {i}"
        if not isinstance(entry, dict):
            raise RemoteConfigError(f"{where}: must be a table")
        bad = set(entry) - _HOST_KEYS
        if bad:
            raise RemoteConfigError(f"{where}: unknown setting {sorted(bad)[0]!r}")
        if "target" not in entry:
            raise RemoteConfigError(f'{where}: missing target = "user@host[:port]"')
        hosts.append(_host_from(entry, defaults, where, given))
    labels = [h.label for h in hosts]
    for label in labels:
        if labels.count(label) > 1:
            raise RemoteConfigError(f"{source}: two hosts are named {label!r}; give each a name")
    return RemoteConfig(hosts=tuple(hosts), source=source)


def _host_from(
    entry: dict[str, Any], defaults: dict[str, Any], where: str, given: Any
) -> HostConfig:
    def pick(name: str) -> tuple[Any, str]:
        if name in entry:
            return entry[name], f"{where} {name}"
        value, setting = given(name) if name in OPTION_NAMES else (None, "")
        if value is not None:
            return value, setting
        if name in defaults:
            return defaults[name], f"[defaults] {name}"
        return None, name

    def text(name: str) -> tuple[str | None, str]:
        value, setting = pick(name)
        if value is not None and not isinstance(value, str):
            raise RemoteConfigError(f"{setting}: expected a string, got {value!r}")
        return value, setting

    target_text, target_setting = text("target")
    target = parse_target(target_text or "", setting=target_setting)
    key_text, key_setting = text("key")
    key = check_local_file(key_text, setting=key_setting) if key_text else None
    kh_text, kh_setting = text("known_hosts")
    known_hosts = check_local_file(
        kh_text or DEFAULT_KNOWN_HOSTS, setting=kh_setting, must_exist=False
    )
    container_text, container_setting = text("container")
    container = (
        check_container(container_text, setting=container_setting) if container_text else None
    )
    python_text, python_setting = text("python")
    if python_text is None:
        python_text = DEFAULT_CONTAINER_PYTHON if container else DEFAULT_REMOTE_PYTHON
    python = check_python(python_text, setting=python_setting)
    dir_text, dir_setting = text("remote_dir")
    remote_dir = check_remote_path(dir_text or DEFAULT_REMOTE_DIR, setting=dir_setting)
    gpus_value, gpus_setting = pick("gpus")
    gpus = check_gpus(gpus_value, setting=gpus_setting) if gpus_value is not None else (0,)
    name_value = entry.get("name", "")
    if name_value and (not isinstance(name_value, str) or not _NAME_RE.fullmatch(name_value)):
        raise RemoteConfigError(f"{where} name: {name_value!r} (letters, digits, _ . : @ -)")
    timeouts = {}
    for key_name, field_name in (
        ("connect_timeout", "connect_timeout_s"),
        ("command_timeout", "command_timeout_s"),
    ):
        value, setting = pick(key_name)
        if value is not None:
            timeouts[field_name] = check_timeout(value, setting=setting)
    return HostConfig(
        target=target,
        name=name_value,
        key=key,
        known_hosts=known_hosts,
        container=container,
        python=python,
        remote_dir=remote_dir,
        gpus=gpus,
        **timeouts,
    )
