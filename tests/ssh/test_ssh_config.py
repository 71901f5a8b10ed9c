"""Remote configuration: env, options and a TOML host list; every bad value is one line."""

from __future__ import annotations

import pytest

from kernelladder.engine.runners.ssh.config import (
    DEFAULT_CONTAINER_PYTHON,
    DEFAULT_REMOTE_DIR,
    DEFAULT_REMOTE_PYTHON,
    RemoteConfigError,
    RemoteSettings,
    SSHTarget,
    load_remote_config,
    parse_target,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("me@gpu-box", SSHTarget("gpu-box", "me", 22)),
        ("me@gpu-box.lab:2222", SSHTarget("gpu-box.lab", "me", 2222)),
        ("me@10.0.0.7:22", SSHTarget("10.0.0.7", "me", 22)),
        ("me@[fe80::1]:2200", SSHTarget("fe80::1", "me", 2200)),
        ("me@[::1]", SSHTarget("::1", "me", 22)),
    ],
)
def test_targets_parse(text, expected):
    assert parse_target(text) == expected
    assert parse_target(str(expected)) == expected  # round trip


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("me@", "bad host"),
        ("me@host:0", "bad port"),
        ("me@host:99999", "bad port"),
        ("me@host:", "empty port"),
        ("me@host:22x", "bad port"),
        ("me@ho st", "bad host"),
        ("me@host;id", "bad host"),
        ("$(id)@host", "bad user"),
        ("me@-oProxyCommand=x", "bad host"),
        ("me@[::1", "bad IPv6"),
    ],
)
def test_bad_targets_are_one_line(text, fragment):
    with pytest.raises(RemoteConfigError) as info:
        parse_target(text)
    message = str(info.value)
    assert fragment in message and "\n" not in message and "KL_SSH_TARGET" in message


def test_env_gives_one_host_with_defaults(tmp_path):
    key = tmp_path / "id"
    key.write_text("x")
    config = load_remote_config(
        RemoteSettings(), {"KL_SSH_TARGET": "me@box:2200", "KL_SSH_KEY": str(key)}
    )
    (host,) = config.hosts
    assert host.target == SSHTarget("box", "me", 2200)
    assert host.key == key and host.python == DEFAULT_REMOTE_PYTHON
    assert host.remote_dir == DEFAULT_REMOTE_DIR and host.container is None
    assert host.gpus == (0,) and config.source == "KL_SSH_TARGET"


def test_options_win_over_env(tmp_path):
    config = load_remote_config(
        RemoteSettings(target="you@other", remote_dir="/srv/kl", container="kl-1", gpus="0,1"),
        {"KL_SSH_TARGET": "me@box", "KL_REMOTE_DIR": "/env/dir", "KL_CONTAINER": "envc"},
    )
    (host,) = config.hosts
    assert str(host.target) == "you@other" and host.remote_dir == "/srv/kl"
    # in a container the venv default rarely applies: python3 on the container's PATH
    assert host.container == "kl-1" and host.python == DEFAULT_CONTAINER_PYTHON
    assert host.gpus == (0, 1) and config.slots == 2


def test_no_host_is_a_clear_error():
    with pytest.raises(RemoteConfigError, match="KL_SSH_TARGET=user@host"):
        load_remote_config(RemoteSettings(), {})


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"KL_CONTAINER": "kl$(touch /tmp/pwned)"}, "not a container name"),
        ({"KL_CONTAINER": "a b"}, "not a container name"),
        ({"KL_REMOTE_DIR": "relative/dir"}, "must be absolute or start with ~/"),
        ({"KL_REMOTE_DIR": "/tmp/a\nb"}, "control characters"),
        ({"KL_REMOTE_PYTHON": "py thon"}, "must be absolute"),
        ({"KL_SSH_KEY": "/nonexistent/key"}, "does not exist"),
    ],
)
def test_bad_env_values_name_the_setting(env, fragment):
    with pytest.raises(RemoteConfigError) as info:
        load_remote_config(RemoteSettings(), {"KL_SSH_TARGET": "me@box", **env})
    message = str(info.value)
    assert fragment in message and next(iter(env)) in message and "\n" not in message


def test_shell_metacharacters_in_a_path_are_kept_literally():
    # legal in a path; every use is quoted (test_ssh_runner runs a worker from such a dir)
    config = load_remote_config(
        RemoteSettings(), {"KL_SSH_TARGET": "me@box", "KL_REMOTE_DIR": "/tmp/x; touch /tmp/pwned"}
    )
    assert config.hosts[0].remote_dir == "/tmp/x; touch /tmp/pwned"


def test_toml_pool(tmp_path):
    key = tmp_path / "kl_key"
    key.write_text("x")
    path = tmp_path / "hosts.toml"
    path.write_text(
        f"""
[defaults]
key = "{key}"
remote_dir = "/data/kl"
command_timeout = 20

[[host]]
target = "me@gpu-a"
gpus = [0, 1, 2, 3]

[[host]]
name = "b"
target = "me@gpu-b:2222"
container = "kl-dev"
gpus = [1]
remote_dir = "~/kl"
"""
    )
    config = load_remote_config(RemoteSettings(config=str(path)), {"KL_SSH_TARGET": "ignored@x"})
    a, b = config.hosts
    assert a.label == "gpu-a" and a.gpus == (0, 1, 2, 3) and a.remote_dir == "/data/kl"
    assert a.key == key and a.command_timeout_s == 20.0
    assert b.label == "b" and b.target.port == 2222 and b.container == "kl-dev"
    assert b.remote_dir == "~/kl" and b.python == DEFAULT_CONTAINER_PYTHON
    assert config.slots == 5 and config.source == str(path)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("[[host]]\ntarget = 'me@a'\ngpus = []\n", "non-empty list of GPU indices"),
        ("[[host]]\ntarget = 'me@a'\ngpus = [0, 0]\n", "repeat"),
        ("[[host]]\ntarget = 'me@a'\ncolour = 'red'\n", "unknown setting 'colour'"),
        ("[[host]]\ngpus = [0]\n", "missing target"),
        ("[defaults]\nkey = 3\n[[host]]\ntarget = 'me@a'\n", "expected a string"),
        ("[[host]]\ntarget = 'me@a'\n[[host]]\ntarget = 'you@a'\n", "two hosts are named"),
        ("[[host]]\ntarget = 'me@a'\nconnect_timeout = -1\n", "expected seconds"),
        ("this is not toml", "not valid TOML"),
        ("[defaults]\n", "no [[host]] entries"),
    ],
)
def test_bad_toml_is_one_line(tmp_path, body, fragment):
    path = tmp_path / "hosts.toml"
    path.write_text(body)
    with pytest.raises(RemoteConfigError) as info:
        load_remote_config(RemoteSettings(config=str(path)), {})
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_target_and_config_options_conflict(tmp_path):
    path = tmp_path / "hosts.toml"
    path.write_text("[[host]]\ntarget = 'me@a'\n")
    with pytest.raises(RemoteConfigError, match="not both"):
        load_remote_config(RemoteSettings(target="me@b", config=str(path)), {})
