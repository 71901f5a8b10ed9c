"""The reference: torch's layer_norm, computed in fp32."""

import torch.nn.functional as F


def reference(x, weight, bias):
    n = x.shape[-1]
    return F.layer_norm(x.float(), (n,), weight.float(), bias.float(), 1e-5).to(x.dtype)
