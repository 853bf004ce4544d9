"""A transformer's shapes read from its Hugging Face ``config.json``.

Why its own module: every figure a deployment needs (the weights each GPU reads per step,
the KV cache bytes per token, a step's FLOPs) follows from a dozen fields of the config,
and a deployment written by hand gets them wrong (a decode attention keyed on the wrong
context, a missing prefill). Llama-like dense models and Mixtral-like MoE models are read;
anything else is refused in one line naming the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import RunError, shortened

#: Bytes per element of each ``torch_dtype`` a serving engine runs weights and KV cache in.
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "half": 2, "fp16": 2, "bf16": 2, "float32": 4, "fp8": 1}


@dataclass(frozen=True)
class ModelShape:
    """The shapes that price a decoder-only transformer's serving step."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int        # the MLP's width (each expert's, for an MoE model)
    vocab: int
    experts: int = 0         # 0: a dense MLP
    experts_per_token: int = 0
    tied_embeddings: bool = False
    dtype_bytes: int = 2

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def attention_params_per_layer(self) -> int:
        q_out = self.heads * self.head_dim
        kv_out = 2 * self.kv_heads * self.head_dim
        return self.hidden * (q_out + kv_out) + q_out * self.hidden

    @property
    def mlp_params_per_layer(self) -> int:
        """Gate, up and down projections (of every expert) plus the router."""
        one = 3 * self.hidden * self.intermediate
        return one * self.experts + self.hidden * self.experts if self.moe else one

    @property
    def parameters(self) -> int:
        """Every parameter: embeddings, the LM head unless tied, layers with their two
        RMSNorm weights, and the final norm (what Hugging Face counts)."""
        per_layer = self.attention_params_per_layer + self.mlp_params_per_layer + 2 * self.hidden
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.vocab * self.hidden + head + self.layers * per_layer + self.hidden

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token, across all GPUs."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


def _field(config: dict[str, Any], where: str, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in config:
            value = config[key]
            if not isinstance(value, (int, bool)) and key not in ("torch_dtype",) and value is not None:
                raise RunError(f"{where}: key '{key}': expected an integer, got {value!r}")
            return value
    if default is None:
        raise RunError(f"{where}: key '{keys[0]}' is missing (a Llama- or Mixtral-like config.json has it)")
    return default


def model_shape(config: dict[str, Any], where: str = "config", dtype: str | None = None) -> ModelShape:
    """The shapes of a Hugging Face config dict (``where`` names it in errors)."""
    if not isinstance(config, dict):
        raise RunError(f"{where}: expected a JSON object (a model's config.json)")
    hidden = _field(config, where, "hidden_size", "d_model")
    heads = _field(config, where, "num_attention_heads")
    layers = _field(config, where, "num_hidden_layers")
    for key, value in (("hidden_size", hidden), ("num_attention_heads", heads), ("num_hidden_layers", layers)):
        if value <= 0:
            raise RunError(f"{where}: key '{key}': must be positive, got {value}")
    if hidden % heads:
        raise RunError(f"{where}: key 'hidden_size': {hidden} is not a multiple of num_attention_heads ({heads})")
    kv_heads = _field(config, where, "num_key_value_heads", default=heads)
    head_dim = config.get("head_dim") or hidden // heads
    experts = _field(config, where, "num_local_experts", "num_experts", default=0)
    per_token = _field(config, where, "num_experts_per_tok", default=2 if experts else 0)
    dtype = dtype or config.get("torch_dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise RunError(f"{where}: dtype {dtype!r} is not one of {', '.join(sorted(DTYPE_BYTES))}")
    return ModelShape(
        name=str(config.get("_name_or_path") or config.get("model_type") or where), layers=layers, hidden=hidden,
        heads=heads, kv_heads=kv_heads, head_dim=int(head_dim),
        intermediate=_field(config, where, "intermediate_size"), vocab=_field(config, where, "vocab_size"),
        experts=experts, experts_per_token=per_token,
        tied_embeddings=bool(config.get("tie_word_embeddings", False)), dtype_bytes=DTYPE_BYTES[dtype],
    )


def read_json_object(path: Path) -> Any:
    """A JSON file's value, or one :class:`RunError` line naming the file and the reason."""
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise RunError(f"{shortened(path)}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunError(f"{shortened(path)}: not JSON ({exc})") from None


def read_model_config(path: str | Path, dtype: str | None = None) -> ModelShape:
    """:func:`model_shape` of a ``config.json`` file."""
    path = Path(path)
    config = read_json_object(path)
    shape = model_shape(config, shortened(path), dtype)
    if not config.get("_name_or_path"):  # name it after its file (or folder, for a config.json)
        shape = replace(shape, name=path.parent.name if path.stem == "config" and path.parent.name else path.stem)
    return shape
