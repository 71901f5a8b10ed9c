"""Proposers: who writes the next candidate (engine/protocols.py: Proposer).

search  built-in local search over kernel templates (no key, no network; default)
tune    a joint search over the launch parameters of any Triton kernel (no key; a
        workspace's default)
api     Claude through the Anthropic Messages API
openai  any model behind an OpenAI-compatible chat completions server (vLLM, OpenAI, ...)
code    Claude through the `claude -p` CLI, tools off, in an empty directory
replay  the sources of a saved run, again
"""

from __future__ import annotations

import importlib
from typing import Any

from kernelladder.engine.protocols import Proposer

# name -> (module, class)
_CLASSES: dict[str, tuple[str, str]] = {
    "search": ("search", "SearchProposer"),
    "tune": ("tune", "TuneProposer"),
    "api": ("api", "ApiProposer"),
    "openai": ("openai_chat", "OpenAIChatProposer"),
    "code": ("code", "CodeProposer"),
    "replay": ("replay", "ReplayProposer"),
}
PROPOSERS: tuple[str, ...] = tuple(_CLASSES)


def get_proposer(name: str, **cfg: Any) -> Proposer:
    """A proposer by name; cfg: model, api_key, base_url (api, openai); price_in,
    price_out (openai); executable (code); run_dir or replay_from (replay). Unknown keys
    are ignored. Its module is imported when it is asked for."""
    if name not in _CLASSES:
        raise ValueError(f"unknown proposer {name!r} (known: {', '.join(PROPOSERS)})")
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(**cfg)
