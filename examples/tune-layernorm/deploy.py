"""Where this LayerNorm kernel goes in a model, for `kernelladder deploy` (docs/DEPLOY.md):
the forward of every nn.LayerNorm with a weight, a bias and eps 1e-5 (GPT-2's ln_1, ln_2
and ln_f), its input flattened to rows."""

import torch

WHERE = "the forward of every nn.LayerNorm with weight, bias and eps 1e-5"
NOT_USED = "no nn.LayerNorm with weight, bias and eps 1e-5 (a Llama normalizes with RMSNorm)"


def sites(model):
    """(name, module) for each module whose forward the kernel replaces."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.LayerNorm)
        and module.weight is not None
        and module.bias is not None
        and module.eps == 1e-5
    ]


def forward(module, kernel, x):
    """The module's forward with the kernel: what LayerNorm.forward(x) returns."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    return kernel(rows, module.weight, module.bias).view(x.shape)
