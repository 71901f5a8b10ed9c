"""Cheat: Imports a module that does not exist: rejected by the load gate."""

# ruff: noqa: E402  (cheats are written the way a cheater would)

import kernelladder_no_such_module  # noqa: F401
import torch


def kernel(x, weight):
    return torch.empty_like(x)
