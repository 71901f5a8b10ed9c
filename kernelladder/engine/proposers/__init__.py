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

from typing import Any

from kernelladder.engine.protocols import Proposer

PROPOSERS: tuple[str, ...] = ("search", "tune", "api", "openai", "code", "replay")


def get_proposer(name: str, **cfg: Any) -> Proposer:
    """A proposer by name; cfg: model, api_key, base_url (api, openai); price_in, price_out (openai); executable (code);
    run_dir or replay_from (replay). Unknown keys are ignored."""
    if name == "search":
        from kernelladder.engine.proposers.search import SearchProposer

        return SearchProposer(**cfg)
    if name == "tune":
        from kernelladder.engine.proposers.tune import TuneProposer

        return TuneProposer(**cfg)
    if name == "api":
        from kernelladder.engine.proposers.api import ApiProposer

        return ApiProposer(**cfg)
    if name == "openai":
        from kernelladder.engine.proposers.openai_chat import OpenAIChatProposer

        return OpenAIChatProposer(**cfg)
    if name == "code":
        from kernelladder.engine.proposers.code import CodeProposer

        return CodeProposer(**cfg)
    if name == "replay":
        from kernelladder.engine.proposers.replay import ReplayProposer

        return ReplayProposer(**cfg)
    raise ValueError(f"unknown proposer {name!r} (known: {', '.join(PROPOSERS)})")
