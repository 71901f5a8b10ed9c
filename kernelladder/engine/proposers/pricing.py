"""What a Messages API call cost: list prices in USD per million tokens (input, output),
from Anthropic's published model pages (Nov 2026). Cache writes (5 minutes) cost 1.25x
the input price and cache reads 0.1x. An unknown model costs 0 with a note, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# model id (without a -YYYYMMDD snapshot suffix) -> (input, output) USD per million tokens
PRICES: dict[str, tuple[float, float]] = {
    "claude-fable-5-1": (10.0, 50.0),
    "claude-fable-5": (10.0, 50.0),
    "claude-mythos-5": (10.0, 50.0),
    "claude-opus-5-5": (4.0, 20.0),
    "claude-opus-5": (5.0, 25.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-haiku-5-5": (0.10, 0.50),  # prompts up to 100k tokens (ours are far smaller)
    "claude-opus-4-6": (5.0, 25.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
}
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.10
_SNAPSHOT = re.compile(r"-\d{8}$")


@dataclass(frozen=True)
class Cost:
    """What one call cost (the api, code and openai proposers')."""

    usd: float
    tokens_in: int  # every input token: plain + cache writes + cache reads
    tokens_out: int
    note: str | None = None  # e.g. "no price known for model X: cost counted as 0"

    @property
    def known(self) -> bool:
        """False: no price for the model; usd is 0, not a guess."""
        return self.note is None


def tokens(usage: Any, name: str) -> int:
    """A token count of an SDK's usage object or dict; 0 where it is missing or not a number."""
    value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def price_of(model: str | None) -> tuple[float, float] | None:
    if not model:
        return None
    return PRICES.get(_SNAPSHOT.sub("", model.strip()))


def cost_of(model: str | None, usage: Any) -> Cost:
    """The cost of one call from its `usage` (an SDK Usage object or a dict)."""
    plain = tokens(usage, "input_tokens")
    written = tokens(usage, "cache_creation_input_tokens")
    read = tokens(usage, "cache_read_input_tokens")
    out = tokens(usage, "output_tokens")
    tokens_in = plain + written + read
    price = price_of(model)
    if price is None:
        return Cost(0.0, tokens_in, out, f"no price known for model {model}: cost counted as 0")
    per_in, per_out = price
    usd = (
        plain * per_in
        + written * per_in * CACHE_WRITE_FACTOR
        + read * per_in * CACHE_READ_FACTOR
        + out * per_out
    ) / 1e6
    return Cost(usd, tokens_in, out)
