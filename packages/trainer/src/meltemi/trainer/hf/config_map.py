"""Our ``ModelConfig`` as Hugging Face's ``LlamaConfig`` (``config.json``), and back.

The fields map one to one; what our model cannot represent (biases, another activation, a rope scaling
other than Llama 3's) is an ``HfFormatError`` naming the field, never silently dropped. Fields of our
config that Hugging Face does not have (kernels, remat, z-loss) come from ``base`` on import.

>>> from meltemi.trainer.config import ModelConfig
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2)
>>> fields = hf_config(config, dtype="float32")
>>> fields["num_key_value_heads"], fields["head_dim"]
(2, 8)
>>> model_config_from_hf(fields) == config
True
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from meltemi.trainer.config import ModelConfig, RopeScaling
from meltemi.trainer.errors import TrainerError

# Our ModelConfig's fields by their config.json names, to name the user's field in errors.
_HF_NAMES = {
    "vocab_size": "vocab_size",
    "hidden_dim": "hidden_size",
    "intermediate_dim": "intermediate_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "max_seq_len": "max_position_embeddings",
    "rope_theta": "rope_theta",
    "norm_eps": "rms_norm_eps",
    "tie_embeddings": "tie_word_embeddings",
    "init_std": "initializer_range",
}


class HfFormatError(TrainerError):
    """A Hugging Face directory our Llama cannot load or write: the message names the file and field."""


def hf_config(
    config: ModelConfig,
    *,
    dtype: str,
    bos_token_id: int | None = None,
    eos_token_id: int | list[int] | None = None,
) -> dict[str, Any]:
    """``config.json``'s fields for ``config``: LlamaConfig's names (rope scaling in its Llama 3 form)."""
    scaling = config.rope_scaling
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_dim,
        "intermediate_size": config.intermediate_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_size,
        "max_position_embeddings": config.max_seq_len,
        "rope_theta": config.rope_theta,
        "rope_scaling": None if scaling is None else {"rope_type": "llama3", **scaling.model_dump()},
        "rms_norm_eps": config.norm_eps,
        "tie_word_embeddings": config.tie_embeddings,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": config.init_std,
        "pretraining_tp": 1,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "torch_dtype": dtype,
        "use_cache": True,
    }


def _require(fields: dict[str, Any], name: str, where: str):
    if name not in fields:
        raise HfFormatError(f"{where}: the field {name!r} is missing")
    return fields[name]


def _rope(fields: dict[str, Any], where: str) -> tuple[float, RopeScaling | None]:
    """``(rope_theta, scaling)`` from the legacy fields or from transformers 5's ``rope_parameters``."""
    parameters = fields.get("rope_parameters") or {}
    theta = fields.get("rope_theta", parameters.get("rope_theta", 10000.0))
    scaling = fields.get("rope_scaling") or (parameters if parameters.get("rope_type") == "llama3" else None)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if parameters and parameters.get("rope_type", "default") not in ("default", "llama3"):
        kind = parameters["rope_type"]
    if scaling is None and kind is None:
        return float(theta), None
    if kind != "llama3":
        raise HfFormatError(f"{where}: rope scaling {kind!r} is not supported (only 'llama3' or none)")
    names = RopeScaling.model_fields
    return float(theta), RopeScaling(**{k: v for k, v in scaling.items() if k in names})


def model_config_from_hf(
    fields: dict[str, Any], base: ModelConfig | None = None, where: str = "config.json"
) -> ModelConfig:
    """The ``ModelConfig`` a ``config.json`` describes; other fields (kernels, remat) from ``base``."""
    if fields.get("model_type", "llama") != "llama":
        raise HfFormatError(f"{where}: model_type {fields['model_type']!r} is not a Llama")
    unsupported = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1}
    for name, wanted in unsupported.items():
        if fields.get(name, wanted) != wanted:
            raise HfFormatError(f"{where}: {name}={fields[name]!r} is not supported (ours: {wanted!r})")
    theta, scaling = _rope(fields, where)
    hidden, heads = _require(fields, "hidden_size", where), _require(fields, "num_attention_heads", where)
    head_dim = fields.get("head_dim") or hidden // heads
    shapes = {
        "vocab_size": _require(fields, "vocab_size", where),
        "hidden_dim": hidden,
        "intermediate_dim": _require(fields, "intermediate_size", where),
        "num_layers": _require(fields, "num_hidden_layers", where),
        "num_heads": heads,
        "num_kv_heads": fields.get("num_key_value_heads") or heads,
        "head_dim": None if head_dim * heads == hidden else head_dim,
        "max_seq_len": fields.get("max_position_embeddings", 4096),
        "rope_theta": theta,
        "rope_scaling": scaling,
        "norm_eps": fields.get("rms_norm_eps", 1e-6),
        "tie_embeddings": bool(fields.get("tie_word_embeddings", False)),
        "init_std": fields.get("initializer_range", 0.02),
    }
    base = base or ModelConfig()
    try:
        return ModelConfig(**{**base.model_dump(), **shapes})
    except ValidationError as error:
        first = error.errors()[0]
        ours = ".".join(str(p) for p in first["loc"])
        field = _HF_NAMES.get(ours, ours or "the model")
        raise HfFormatError(f"{where}: {field}: {first['msg']}") from None
