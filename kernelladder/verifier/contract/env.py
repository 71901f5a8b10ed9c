"""Keeping the caller's secrets out of the worker and out of everything it sends back.

Two layers, because a candidate can read the caller's environment through
/proc/<ppid>/environ whatever we pass it:
1. `worker_env`: the worker starts with a whitelisted environment (no API keys, tokens,
   passwords), its own HOME and TMPDIR.
2. `Redactor`: every string that comes back from a worker (verdict, progress, stderr) is
   scrubbed of the caller's secret values, and of simple encodings of them (reversed,
   hex, base64) and of long fragments (any 8 characters in a row).

Used by the local transport and by the SSH runner; stdlib only.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"

# Names that are never secrets and that the worker needs (exact names or prefixes).
_KEEP_EXACT = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "TRITON_INTERPRET",
        "USER",
        "LOGNAME",
    }
)
_KEEP_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")
MIN_SECRET_LEN = 6
_FRAGMENT = 8  # any run of this many characters of a secret is redacted


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS)


def secret_values(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Values of the variables whose names look secret (long enough to redact safely)."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if looks_secret(k) and len(v) >= MIN_SECRET_LEN}
    return tuple(sorted(values, key=len, reverse=True))


def scrub_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whitelisted subset of an environment, with every secret-looking name dropped."""
    env = os.environ if environ is None else environ
    kept = {}
    for name, value in env.items():
        if looks_secret(name):
            continue
        if name in _KEEP_EXACT or name.startswith(_KEEP_PREFIXES):
            kept[name] = value
    return kept


CALLER_HOME_VAR = "KERNELLADDER_CALLER_HOME"
# the workers' Triton cache manager (triton_cache.py), named here so this module imports
# no Triton
TRITON_CACHE_MANAGER = "kernelladder.verifier.worker.triton_cache:RelocatableCacheManager"
CACHE_SUBDIR = os.path.join("kernelladder", "compile")


def compile_cache_dirs(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where workers keep Triton's and inductor's caches: kernelladder's own directory
    under $XDG_CACHE_HOME (default ~/.cache), never the user's general ones, so a
    candidate that writes there cannot reach the caches of the user's other work."""
    env = os.environ if environ is None else environ
    home = env.get("HOME") or os.path.expanduser("~")
    base = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    root = os.path.join(base, CACHE_SUBDIR)
    return {
        "TRITON_CACHE_DIR": os.path.join(root, "triton"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor"),
    }


def worker_env(
    home: str, environ: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a worker starts with: scrubbed, HOME and TMPDIR in its own temp dir.

    Compile caches persist across workers (Triton kernels and inductor outputs would
    otherwise recompile in every fresh worker) in a directory of kernelladder's own, the
    only place outside its scratch a sandboxed worker may write (compile_cache_dirs);
    caches the caller named explicitly are kept. The caller's home goes along by name
    only (CALLER_HOME_VAR), so the sandbox keeps the worker out of it.
    """
    env = os.environ if environ is None else environ
    out = scrub_env(env)
    real_home = env.get("HOME") or os.path.expanduser("~")
    for name, path in compile_cache_dirs(env).items():
        out.setdefault(name, path)
    # torch.compile compiles in the worker itself: its pool of compile processes would
    # inherit the walls without a /proc entry of their own, and the baseline would fail
    out.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    # Triton's cache read from where it is, not from where it was built (triton_cache)
    out.setdefault("TRITON_CACHE_MANAGER", TRITON_CACHE_MANAGER)
    out[CALLER_HOME_VAR] = real_home
    out["HOME"] = home
    out["TMPDIR"] = home
    out["PYTHONUNBUFFERED"] = "1"
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    out.update(extra or {})
    return out


def _variants(secret: str) -> set[str]:
    raw = secret.encode("utf-8", errors="replace")
    forms = {secret, secret[::-1], raw.hex(), raw.hex().upper()}
    for shift in range(3):  # base64 of the secret at each alignment inside a longer text
        enc = base64.b64encode(raw[shift:]).decode().rstrip("=")
        forms.add(enc[: len(enc) - 2] if len(enc) > _FRAGMENT + 2 else enc)
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


class Redactor:
    """Replaces the caller's secret values (and long fragments of them) in any string."""

    def __init__(self, secrets: Iterable[str] = ()):
        self._forms = sorted({v for s in secrets if s for v in _variants(s)}, key=len, reverse=True)
        pieces: set[str] = set()
        for form in self._forms:
            if len(form) <= _FRAGMENT:
                pieces.add(form)
            else:
                pieces.update(form[i : i + _FRAGMENT] for i in range(len(form) - _FRAGMENT + 1))
        self._pattern = (
            re.compile("(?=(" + "|".join(re.escape(p) for p in sorted(pieces)) + "))")
            if pieces
            else None
        )

    def __bool__(self) -> bool:
        return self._pattern is not None

    def redact(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        spans: list[list[int]] = []
        for m in self._pattern.finditer(text):
            start, end = m.start(1), m.end(1)
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        if not spans:
            return text
        # Widen each span over neighbouring characters that continue a secret form, so
        # the short head or tail of a leaked secret does not survive either.
        for span in spans:
            head = text[span[0] : span[0] + _FRAGMENT]
            for form in self._forms:
                idx = form.find(head)
                if idx < 0:
                    continue
                lo, k = span[0], idx
                while lo > 0 and k > 0 and text[lo - 1] == form[k - 1]:
                    lo, k = lo - 1, k - 1
                hi, k = span[0], idx
                while hi < len(text) and k < len(form) and text[hi] == form[k]:
                    hi, k = hi + 1, k + 1
                span[0], span[1] = min(span[0], lo), max(span[1], hi)
        out, last = [], 0
        for start, end in sorted(spans):
            if start < last:
                start = last
            out.append(text[last:start])
            if end > start:
                out.append(REDACTED)
            last = max(last, end)
        out.append(text[last:])
        return "".join(out)

    def redact_obj(self, obj: Any) -> Any:
        """A copy of a JSON-like object with every string (keys too) redacted."""
        if self._pattern is None:
            return obj
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            return {self.redact_obj(k): self.redact_obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.redact_obj(v) for v in obj)
        return obj
