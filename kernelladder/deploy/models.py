"""The decoder models a kernel is deployed into: configs only (deploy/configs/*.json, no
weights), built with random weights through `transformers` under a fixed seed.

    choice = model_choice("llama-3-8b")          # a shipped config, or a config.json path
    config = sized_config(choice, tiny=False, layers=4)
    model = build_model(config, dtype=torch.bfloat16, device="cuda", seed=0)

`transformers` is an optional extra: a missing one is one line telling how to install it
(TransformersMissing). Nothing is downloaded: HF_HUB_OFFLINE is set before it is imported.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_MODEL = "llama-3-8b"
INSTALL_HINT = "pip install -e '.[deploy]' (or: pip install transformers)"
MISSING_TRANSFORMERS = f"kernelladder deploy needs the transformers library: {INSTALL_HINT}"
OLDEST_TRANSFORMERS = 5  # its attention and cache interfaces as deploy uses them

# A tiny config keeps the architecture (its layer kinds, GQA ratio, biases, eps, RoPE)
# and shrinks the sizes so Triton's interpreter runs it on the CPU in seconds.
TINY_HEAD_DIM = 16
TINY_VOCAB = 512
TINY_LAYERS = 2
TINY_MAX_POSITIONS = 4096
# RMSNorm / LayerNorm weights drawn around 1 (a freshly built model has them all 1.0, which
# a kernel that ignores the weight would match)
NORM_WEIGHT_SPREAD = 0.1


class DeployError(Exception):
    """Something a user must fix (an unknown model, a bad size): one line, exit 2."""


class TransformersMissing(DeployError):
    """transformers is not installed."""

    def __init__(self) -> None:
        super().__init__(MISSING_TRANSFORMERS)


@dataclass(frozen=True)
class ModelChoice:
    name: str  # "llama-3-8b", or the file's stem for a config given as a path
    about: str
    config: dict[str, Any] = field(repr=False)  # the Hugging Face config (config.json)
    path: str = ""


def model_names() -> tuple[str, ...]:
    """The shipped configs, by name (deploy/configs/*.json)."""
    return tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.json")))


def model_choice(name_or_path: str | None) -> ModelChoice:
    """A shipped config by name, or a config file (a Hugging Face config.json, or one of
    ours: {"name", "about", "config"}). DeployError (one line) when neither."""
    name = name_or_path or DEFAULT_MODEL
    shipped = CONFIG_DIR / f"{name}.json"
    path = shipped if shipped.is_file() else Path(name)
    if not path.is_file():
        known = ", ".join(model_names())
        raise DeployError(f"unknown model {name!r} (shipped: {known}; or a config.json path)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DeployError(f"cannot read model config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise DeployError(f"model config {path}: not a JSON object")
    config = data.get("config", data)
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise DeployError(f"model config {path}: no model_type (a Hugging Face config.json)")
    return ModelChoice(
        name=str(data.get("name") or path.stem),
        about=str(data.get("about") or f"{config['model_type']} config from {path}"),
        config=dict(config),
        path="" if path == shipped else str(path),
    )


# Hugging Face configs name the same sizes differently by family (GPT-2: n_embd, ...).
_KEYS = {
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "layers": ("num_hidden_layers", "n_layer"),
    "inner": ("intermediate_size", "n_inner"),
    "positions": ("max_position_embeddings", "n_positions"),
}


def config_value(config: dict[str, Any], what: str) -> Any:
    for key in _KEYS[what]:
        if config.get(key) is not None:
            return config[key]
    return None


def _set(config: dict[str, Any], what: str, value: Any) -> None:
    for key in _KEYS[what]:
        if key in config:
            config[key] = value
            return
    config[_KEYS[what][0]] = value


def sized_config(choice: ModelChoice, *, tiny: bool, layers: int | None) -> dict[str, Any]:
    """The config a deploy builds: the shipped one (or its tiny form), with `layers`
    decoder layers when given."""
    config = dict(choice.config)
    if tiny:
        config = tiny_config(config)
    if layers is not None:
        _set(config, "layers", int(layers))
        if "max_window_layers" in config:
            config["max_window_layers"] = int(layers)
    return config


def tiny_config(config: dict[str, Any]) -> dict[str, Any]:
    """The architecture at toy sizes: head dim 16, the GQA ratio kept (KV heads / 8, at
    least 1), the MLP's ratio to the hidden size kept, a 512-token vocabulary, 2 layers."""
    out = dict(config)
    hidden = int(config_value(config, "hidden") or 768)
    heads = int(config_value(config, "heads") or 12)
    kv = int(config.get("num_key_value_heads") or heads)
    group = max(1, heads // max(1, kv))
    tiny_kv = max(1, kv // 8) if kv != heads else max(1, min(4, heads))
    tiny_heads = tiny_kv * group if kv != heads else tiny_kv
    tiny_hidden = tiny_heads * TINY_HEAD_DIM
    inner = config_value(config, "inner")
    _set(out, "heads", tiny_heads)
    if "num_key_value_heads" in config:
        out["num_key_value_heads"] = tiny_kv
    if config.get("head_dim") is not None:
        out["head_dim"] = TINY_HEAD_DIM
    _set(out, "hidden", tiny_hidden)
    if inner is not None:
        ratio = float(inner) / hidden
        _set(out, "inner", max(16, int(math.ceil(tiny_hidden * ratio / 16)) * 16))
    _set(out, "layers", TINY_LAYERS)
    if "max_window_layers" in out:
        out["max_window_layers"] = TINY_LAYERS
    positions = config_value(config, "positions")
    if positions is not None:
        _set(out, "positions", min(int(positions), TINY_MAX_POSITIONS))
        if "n_ctx" in out:
            out["n_ctx"] = config_value(out, "positions")
    vocab = int(config.get("vocab_size") or TINY_VOCAB)
    out["vocab_size"] = min(vocab, TINY_VOCAB)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(out.get(key), int) and out[key] >= out["vocab_size"]:
            out[key] = out["vocab_size"] - 1
    return out


def describe_config(config: dict[str, Any]) -> dict[str, Any]:
    """The sizes a result names: layers, hidden, heads, KV heads, head dim, vocabulary."""
    hidden = config_value(config, "hidden")
    heads = config_value(config, "heads")
    head_dim = config.get("head_dim") or (hidden // heads if hidden and heads else None)
    return {
        "model_type": config.get("model_type"),
        "architecture": (config.get("architectures") or [None])[0],
        "layers": config_value(config, "layers"),
        "hidden": hidden,
        "heads": heads,
        "kv_heads": config.get("num_key_value_heads") or heads,
        "head_dim": head_dim,
        "vocab": config.get("vocab_size"),
        "max_positions": config_value(config, "positions"),
    }


def import_transformers() -> Any:
    """transformers, imported offline; TransformersMissing (one line) when absent."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        import transformers
    except ImportError:
        raise TransformersMissing() from None
    major = str(getattr(transformers, "__version__", "0")).split(".")[0]
    if not major.isdigit() or int(major) < OLDEST_TRANSFORMERS:
        raise DeployError(
            f"kernelladder deploy needs transformers {OLDEST_TRANSFORMERS}.0 or newer, this is "
            f"{transformers.__version__}: {INSTALL_HINT}"
        )
    transformers.logging.set_verbosity_error()
    return transformers


def build_model(config: dict[str, Any], *, dtype: Any, device: str, seed: int) -> Any:
    """The model for `config` with random weights drawn after torch.manual_seed(seed),
    built on `device`, in eval mode; its norm weights drawn around 1 (NORM_WEIGHT_SPREAD)."""
    import torch

    transformers = import_transformers()
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **{
        k: v for k, v in config.items() if k != "model_type"
    })  # fmt: skip
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype)
    except (ValueError, KeyError, TypeError) as exc:
        raise DeployError(
            f"transformers cannot build a causal LM from this config: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    model.eval()
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if "Norm" in type(module).__name__ and isinstance(weight, torch.nn.Parameter):
                spread = torch.randn(weight.shape, generator=gen) * NORM_WEIGHT_SPREAD + 1.0
                weight.copy_(spread.to(weight.device, weight.dtype))
    return model


def token_ids(batch: int, length: int, vocab: int, seed: int, device: str) -> Any:
    """The prompt: token ids drawn uniformly under `seed` (the same on every device)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed + 2)
    return torch.randint(0, vocab, (batch, length), generator=gen).to(device)
