"""The worker's environment and the redaction of the caller's secrets (pure functions)."""

from __future__ import annotations

import base64

from kernelladder.verifier.contract.env import (
    REDACTED,
    Redactor,
    scrub_env,
    secret_values,
    worker_env,
)

CALLER = {
    "PATH": "/usr/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "CUDA_VISIBLE_DEVICES": "0",
    "TRITON_CACHE_DIR": "/cache/triton",
    "ANTHROPIC_API_KEY": "sk-ant-api03-abcdefghijklmnop",
    "GITHUB_TOKEN": "ghp_0123456789abcdefghij",
    "DB_PASSWORD": "hunter2hunter2",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
    "TRITON_AUTH_KEY": "not-a-triton-setting-123",
    "SHORT_KEY": "abc",
    "RANDOM_THING": "value",
}


def test_scrub_keeps_the_whitelist_and_drops_every_secret_name():
    env = scrub_env(CALLER)
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "0",
        "TRITON_CACHE_DIR": "/cache/triton",
    }


def test_worker_env_has_its_own_home_and_tmp_and_the_callers_caches():
    env = worker_env("/tmp/kl-w1", CALLER, {"PYTHONPATH": "/src"})
    assert env["HOME"] == env["TMPDIR"] == "/tmp/kl-w1"
    assert env["TRITON_CACHE_DIR"] == "/cache/triton" and env["PYTHONPATH"] == "/src"
    assert not any(v in env.values() for v in secret_values(CALLER))


def test_worker_env_has_torch_compile_compile_in_the_worker():
    """Inductor's pool of compile processes would inherit the walls without a /proc entry
    of its own (on the H200 torch.compile then failed at three of rmsnorm's five shapes)."""
    assert worker_env("/tmp/kl-w1", CALLER)["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    mine = worker_env("/tmp/kl-w1", {**CALLER, "TORCHINDUCTOR_COMPILE_THREADS": "8"})
    assert mine["TORCHINDUCTOR_COMPILE_THREADS"] == "8"  # a caller's own setting is kept


def test_secret_values_are_the_long_values_of_secret_names():
    values = set(secret_values(CALLER))
    assert "sk-ant-api03-abcdefghijklmnop" in values and "hunter2hunter2" in values
    assert "abc" not in values and "value" not in values and "/usr/bin" not in values


def test_redactor_catches_literal_partial_and_encoded_leaks():
    key = "sk-ant-api03-abcdefghijklmnop"
    r = Redactor([key])
    assert r.redact(f"key={key}!") == f"key={REDACTED}!"
    assert key[:-3] not in r.redact(f"x {key[:-3]} y")  # a truncated secret
    assert key[5:] not in r.redact(f"tail {key[5:]}")
    assert key[::-1] not in r.redact(key[::-1])
    assert key.encode().hex() not in r.redact(key.encode().hex())
    b64 = base64.b64encode(b"xx" + key.encode()).decode()
    assert "YW50LWFwaTAz" not in r.redact(b64)  # base64 of the middle of the key
    assert r.redact("nothing secret here, sk-ant- alone") == "nothing secret here, sk-ant- alone"


def test_redact_obj_walks_json_like_values():
    r = Redactor(["hunter2hunter2"])
    obj = {"a": ["pw hunter2hunter2", {"hunter2hunter2": 1}], "n": 3, "t": ("hunter2hunter2",)}
    assert r.redact_obj(obj) == {"a": [f"pw {REDACTED}", {REDACTED: 1}], "n": 3, "t": (REDACTED,)}
    assert Redactor([]).redact("anything") == "anything"
