"""Shared fixtures. The Triton interpreter must be chosen before triton is imported."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # no GPU on CI machines
